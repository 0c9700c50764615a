package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/floodgate-dev/floodgate/internal/testenv"
)

// Tests of the per-second store: `floodgate serve --redis-persecond` and
// envoy's REDIS_PERSECOND variables, against two Redis servers of the
// test's own.

// redisKeys returns every key of r (a private server: the test's alone).
func redisKeys(t *testing.T, r *testenv.Redis) []string {
	t.Helper()
	reply, err := r.Do(t.Context(), "KEYS", "*")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, k := range reply.([]any) {
		out = append(out, fmt.Sprint(k))
	}
	slices.Sort(out)
	return out
}

// checkKeysIn checks that every key of r names one of want's descriptor
// keys ("|per_second|") and that each of want is named.
func checkKeysIn(t *testing.T, what string, r *testenv.Redis, want ...string) {
	t.Helper()
	keys := redisKeys(t, r)
	for _, w := range want {
		if !slices.ContainsFunc(keys, func(k string) bool { return strings.Contains(k, w) }) {
			t.Errorf("%s Redis: no key with %q in %q", what, w, keys)
		}
	}
	for _, k := range keys {
		if strings.HasSuffix(k, "{floodgate}:servers") {
			continue // the servers' heartbeats (--failure-mode degraded), in the main store
		}
		if !slices.ContainsFunc(want, func(w string) bool { return strings.Contains(k, w) }) {
			t.Errorf("%s Redis: key %q is not one of %q's", what, k, want)
		}
	}
}

func TestServePerSecondUsage(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "c.yaml")
	writeConfig(t, cfg, "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--redis-persecond", "redis://127.0.0.1:1"}, "--redis-persecond needs --redis"},
		{[]string{"--redis", "redis://127.0.0.1:1", "--redis-persecond", "memory://"}, "not the memory backend"},
		{[]string{"--redis", "redis://127.0.0.1:1", "--redis-persecond-tls-ca", "ca.pem"}, "no --redis-persecond URL"},
		{[]string{"--redis", "redis://127.0.0.1:1", "--redis-persecond-timeout", "1s"}, "no --redis-persecond URL"},
		{[]string{"--redis", "redis://127.0.0.1:1", "--redis-persecond", "redis://127.0.0.1:1", "--redis-persecond-timeout", "-1s"}, "must not be negative"},
	} {
		var stdout, stderr bytes.Buffer
		code := runServe(append([]string{"--config", cfg, "--compat", ""}, tc.args...), &stdout, &stderr)
		if code != exitUsage || !strings.Contains(stderr.String(), tc.want) {
			t.Errorf("%q: exit %d, %q; want %d and %q", tc.args, code, stderr.String(), exitUsage, tc.want)
		}
	}
	// A per-second Redis that is not there: start-up fails naming its flag.
	var stdout, stderr bytes.Buffer
	r := testenv.NewRedis(t)
	code := runServe([]string{"--config", cfg, "--compat", "", "--redis", "redis://" + r.Addr, "--redis-persecond", "redis://127.0.0.1:1",
		"--http-addr", "127.0.0.1:0", "--grpc-addr", ""}, &stdout, &stderr)
	if code != exitFailure || !strings.Contains(stderr.String(), "--redis-persecond redis://127.0.0.1:1") {
		t.Errorf("an unreachable per-second Redis: exit %d, %q", code, stderr.String())
	}
}

// TestServePerSecondRedis: with --redis-persecond the per-second limits'
// keys are in that Redis, the others in --redis's; its password comes from
// --redis-persecond-password-file.
func TestServePerSecondRedis(t *testing.T) {
	// The per-second Redis logs its connections (verbose), for the
	// failure message below.
	r, ps := testenv.NewRedis(t), testenv.NewRedis(t, testenv.WithArgs("--loglevel", "verbose"))
	const pass = "per-second-s3cret"
	if _, err := ps.Do(t.Context(), "CONFIG", "SET", "requirepass", pass); err != nil {
		t.Fatal(err)
	}
	passFile := filepath.Join(t.TempDir(), "pass")
	if err := os.WriteFile(passFile, []byte(pass+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(t.TempDir(), "c.yaml")
	writeConfig(t, cfg, `domain: ps
descriptors:
  - key: per_second
    rate_limit: {unit: second, requests_per_unit: 5, algorithm: gcra, burst: 5}
  - key: per_minute
    rate_limit: {unit: minute, requests_per_unit: 5, algorithm: sliding_window}
`)
	s := startServer(t, cfg, "--redis", "redis://"+r.Addr, "--redis-persecond", "redis://"+ps.Addr,
		"--redis-persecond-password-file", passFile, "--redis-persecond-timeout", "2s", "--timeout", "2s")
	// The per-second Redis needs the password: the test's client gives it.
	c := redis.NewClient(&redis.Options{Addr: ps.Addr, Password: pass})
	defer c.Close()
	// A second check only if the first met a store error (answered in
	// process under the degraded failure mode, nothing counted in that
	// store yet): a loaded CI machine once dropped the first connection.
	var keys []string
	made := 0
	for made < 2 && len(keys) == 0 {
		made++
		code, body := s.post("/v1/check", "", `{"domain":"ps","descriptors":[{"per_second":"a"},{"per_minute":"a"}]}`)
		if code != http.StatusOK || !strings.Contains(body, `"allowed":true`) {
			t.Fatalf("/v1/check: %d %s", code, body)
		}
		var err error
		if keys, err = c.Keys(t.Context(), "*").Result(); err != nil {
			t.Fatal(err)
		}
		if len(keys) == 0 {
			t.Logf("check %d counted nothing in the per-second Redis; server log:\n%s\nits log:\n%s", made, s.Logs(), ps.LogTail())
		}
	}
	checkKeysIn(t, "main", r, "|per_minute|")
	if len(keys) == 0 || slices.ContainsFunc(keys, func(k string) bool { return !strings.Contains(k, "|per_second|") }) {
		t.Errorf("per-second Redis keys %q: want per_second's only; its log:\n%s", keys, ps.LogTail())
	}
	if logs := s.Logs(); strings.Contains(logs, pass) {
		t.Errorf("the per-second password is in the log:\n%s", logs)
	}

	// The per-second Redis stopped: under the default failure mode (allow)
	// its descriptors are answered OK and the minute limit is still counted.
	if err := ps.Stop(); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		code, body := s.post("/v1/check", "", `{"domain":"ps","descriptors":[{"per_second":"a"},{"per_minute":"a"}]}`)
		var got struct {
			Allowed   bool
			Decisions []struct{ Remaining int64 }
		}
		if err := json.Unmarshal([]byte(body), &got); err != nil || code != http.StatusOK || !got.Allowed || len(got.Decisions) != 2 {
			t.Fatalf("/v1/check %d with the per-second Redis stopped: %d %s", i, code, body)
		}
		if want := int64(5 - made - 1 - i); got.Decisions[1].Remaining != want {
			t.Errorf("/v1/check %d: per_minute remaining %d, want %d (still counted)", i, got.Decisions[1].Remaining, want)
		}
	}
	if got := s.metric("", "floodgate_backend_errors_total", "store", "persecond"); got < 3 {
		t.Errorf("floodgate_backend_errors_total{store=persecond} = %v, want >= 3", got)
	}
}

// TestEnvoyCompatPerSecondRedis: REDIS_PERSECOND=true sends the limits
// whose unit is second to REDIS_PERSECOND_URL's Redis, as envoy does; each
// descriptor is counted on its own, the main Redis first (envoy's order);
// with the per-second Redis down, a request with a per-second limit fails
// as envoy's does, the others are decided, and /readyz and the metrics name
// the per-second store.
func TestEnvoyCompatPerSecondRedis(t *testing.T) {
	r, ps := testenv.NewRedis(t), testenv.NewRedis(t)
	s := startEnvoyCompat(t, r, envoyRuntime(t, envoyTestConfig),
		"REDIS_PERSECOND=true", "REDIS_PERSECOND_SOCKET_TYPE=tcp", "REDIS_PERSECOND_URL="+ps.Addr,
		"REDIS_PERSECOND_TIMEOUT=300ms", "REDIS_PERSECOND_POOL_SIZE=5")
	s.waitLog(10*time.Second, "REDIS_PERSECOND_POOL_SIZE", "ignored")
	avoidWindowEdge(time.Minute, 10*time.Second)
	// The per-second key expires when its second ends: decide well inside
	// one, so that it is still there when the keys are listed.
	avoidWindowEdge(time.Second, 500*time.Millisecond)
	resp := s.mustRL(request("envoy-compat", entries("per_second", "k"), entries("per_minute", "k")))
	checkResponse(t, "both", resp, ok(50, second, 49), ok(3, minute, 2))
	checkKeysIn(t, "main", r, "|per_minute|")
	checkKeysIn(t, "per-second", ps, "|per_second|")

	if err := ps.Stop(); err != nil {
		t.Fatal(err)
	}
	_, err := s.rl(request("envoy-compat", entries("per_second", "k"), entries("per_minute", "k")))
	if status.Code(err) != codes.Unknown {
		t.Errorf("the per-second Redis down: %v, want an error with code Unknown, as envoy's", err)
	}
	// envoy counted per_minute (its main pipeline runs first) before the
	// per-second Redis failed.
	checkResponse(t, "per_minute alone", s.mustRL(request("envoy-compat", entries("per_minute", "k"))), ok(3, minute, 0))
	for range 5 {
		s.rl(request("envoy-compat", entries("per_second", "k")))
	}
	code, body := s.get("/readyz", "")
	if code != http.StatusOK || !strings.Contains(body, "per-second store is failing") {
		t.Errorf("/readyz with the per-second Redis down: %d %q", code, body)
	}
	if got := s.metric("", "floodgate_breaker_open", "store", "persecond"); got != 1 {
		t.Errorf("floodgate_breaker_open{store=persecond} = %v, want 1", got)
	}
	if got := s.metric("", "floodgate_breaker_open", "store", "main"); got != 0 {
		t.Errorf("floodgate_breaker_open{store=main} = %v, want 0", got)
	}
	if got := s.metric("", "floodgate_backend_errors_total", "store", "persecond"); got < 5 {
		t.Errorf("floodgate_backend_errors_total{store=persecond} = %v, want >= 5", got)
	}
}

// TestEnvoyCompatPerSecondTLS: REDIS_PERSECOND_TLS=true with envoy's
// REDIS_TLS_* files reaches a per-second Redis that speaks TLS only and
// requires client certificates, while the main Redis stays plain
// (REDIS_TLS unset): envoy's one TLS configuration serves the Redis that
// speak TLS, and a plain one is not refused for having files.
func TestEnvoyCompatPerSecondTLS(t *testing.T) {
	r, ps := testenv.NewRedis(t), testenv.NewRedis(t, testenv.WithTLS(nil, true))
	kp, err := ps.TLS.CA.Issue("floodgate-persecond", testenv.CertOptions{Client: true})
	if err != nil {
		t.Fatal(err)
	}
	s := startEnvoyCompat(t, r, envoyRuntime(t, envoyTestConfig),
		"REDIS_PERSECOND=true", "REDIS_PERSECOND_SOCKET_TYPE=tcp", "REDIS_PERSECOND_URL="+ps.Addr, "REDIS_PERSECOND_TLS=true",
		"REDIS_TLS_CACERT="+ps.TLS.CA.CertFile, "REDIS_TLS_CLIENT_CERT="+kp.CertFile, "REDIS_TLS_CLIENT_KEY="+kp.KeyFile)
	avoidWindowEdge(time.Minute, 5*time.Second)
	resp := s.mustRL(request("envoy-compat", entries("per_second", "t"), entries("per_minute", "t")))
	checkResponse(t, "over TLS", resp, ok(50, second, 49), ok(3, minute, 2))
	checkKeysIn(t, "main", r, "|per_minute|")
	checkKeysIn(t, "per-second", ps, "|per_second|")
}
