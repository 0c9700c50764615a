package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/internal/testenv"
)

// Tests of `floodgate serve --compat envoy` with MERGE_DOMAIN_CONFIG,
// RESPONSE_DYNAMIC_METADATA and envoy's configuration error texts; the
// expected values are envoyproxy/ratelimit's (f2fb157): test/config and
// test/service/ratelimit_test.go.

const (
	envoyMergeKey1 = "domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n    rate_limit: {unit: minute, requests_per_unit: 10}\n    metadata: {name: service_1}\n"
	envoyMergeKey2 = "domain: test-domain\ndescriptors:\n  - key: key2\n    value: value2\n    rate_limit: {unit: minute, requests_per_unit: 20}\n"
)

// addRuntimeFile writes one more file to the runtime directory root (as
// envoyRuntime lays it out).
func addRuntimeFile(t *testing.T, root, name, content string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(root, "ratelimit", "config", name), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestEnvoyCompatMergeDomainAndDynamicMetadata(t *testing.T) {
	r := testenv.NewRedis(t)
	root := envoyRuntime(t, envoyMergeKey1)
	addRuntimeFile(t, root, "config2.yaml", envoyMergeKey2)
	s := startEnvoyCompat(t, r, root, "MERGE_DOMAIN_CONFIG=true", "RESPONSE_DYNAMIC_METADATA=true")
	avoidWindowEdge(time.Minute, 3*time.Second)
	// TestDomainMerge: both files' limits serve test-domain.
	resp := s.mustRL(request("test-domain", entries("key1", "value1"), entries("key2", "value2")))
	checkResponse(t, "merged", resp, ok(10, minute, 9), ok(20, minute, 19))
	// dynamic_metadata: domain, descriptors, the passed limits' metadata.
	md := resp.GetDynamicMetadata().AsMap()
	if md["domain"] != "test-domain" {
		t.Errorf("dynamic_metadata domain: %v", md)
	}
	if m, _ := md["metadata"].(map[string]any); m["name"] != "service_1" {
		t.Errorf("dynamic_metadata metadata: %v", md)
	}
	if ds, _ := md["descriptors"].([]any); len(ds) != 2 {
		t.Errorf("dynamic_metadata descriptors: %v", md)
	}
}

func TestEnvoyCompatDuplicateDomain(t *testing.T) {
	r := testenv.NewRedis(t)
	root := envoyRuntime(t, envoyMergeKey1)
	addRuntimeFile(t, root, "config2.yaml", envoyMergeKey2)
	// Without MERGE_DOMAIN_CONFIG: envoy's error, and envoy starts without
	// a configuration.
	s := startEnvoyCompat(t, r, root)
	s.waitLog(10*time.Second, "duplicate domain 'test-domain' in config file")
	if _, err := s.rl(request("test-domain", entries("key1", "value1"))); err == nil || !strings.Contains(err.Error(), "no rate limit configuration loaded") {
		t.Errorf("duplicate domain: %v, want no configuration", err)
	}

	// MERGE_DOMAIN_CONFIG with one key in both files
	// (TestDuplicateKeyDomainMerge).
	root2 := envoyRuntime(t, envoyMergeKey1)
	addRuntimeFile(t, root2, "config2.yaml", envoyMergeKey1)
	s2 := startEnvoyCompat(t, r, root2, "MERGE_DOMAIN_CONFIG=true")
	s2.waitLog(10*time.Second, "duplicate descriptor composite key 'test-domain.key1_value1'")
}

// TestReadEnvoySentinelAuth: REDIS_SENTINEL_AUTH is read as envoy's
// driver_impl.go (createDialer) reads it: "user:password" is split at the
// first ':', the user an ACL user of the Sentinels (?sentinel_username= on
// the URL), the password theirs; without ':', all of it is the password.
func TestReadEnvoySentinelAuth(t *testing.T) {
	for auth, want := range map[string][2]string{
		"s3cret":           {"", "s3cret"},
		"sentinel:s3cret":  {"sentinel", "s3cret"},
		"sentinel:s3:cret": {"sentinel", "s3:cret"},
		":s3cret":          {"", "s3cret"},
		"a b&c:pw":         {"a+b%26c", "pw"},
	} {
		es, err := readEnvoyEnv(lookupOf(map[string]string{
			"REDIS_TYPE": "sentinel", "REDIS_URL": "mymaster,127.0.0.1:26379", "REDIS_SENTINEL_AUTH": auth}))
		if err != nil {
			t.Fatal(err)
		}
		wantURL := "redis+sentinel://127.0.0.1:26379/mymaster"
		if want[0] != "" {
			wantURL += "?sentinel_username=" + want[0]
		}
		if es.sentinelPassword != want[1] || es.flags["redis"] != wantURL {
			t.Errorf("REDIS_SENTINEL_AUTH=%q: --redis %q, Sentinel password %q; want %q, %q", auth, es.flags["redis"], es.sentinelPassword, wantURL, want[1])
		}
	}
	// Not a Sentinel: the URL is left alone (envoy uses the value only
	// with REDIS_TYPE=sentinel).
	es, err := readEnvoyEnv(lookupOf(map[string]string{"REDIS_SOCKET_TYPE": "tcp", "REDIS_URL": "127.0.0.1:6379", "REDIS_SENTINEL_AUTH": "u:p"}))
	if err != nil {
		t.Fatal(err)
	}
	if es.flags["redis"] != "redis://127.0.0.1:6379" {
		t.Errorf("REDIS_SENTINEL_AUTH with REDIS_TYPE=single: --redis %q", es.flags["redis"])
	}
}
