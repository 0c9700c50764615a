package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// writeFiles writes name → content into a new directory and returns it.
func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// The cases of envoyproxy/ratelimit's TestDomainMerge and
// TestDuplicateKeyDomainMerge (test/config/config_test.go, f2fb157): two
// files of one domain, each with a top-level descriptor of its own.
const (
	mergeKey1 = "domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n    rate_limit: {unit: minute, requests_per_unit: 10}\n"
	mergeKey2 = "domain: test-domain\ndescriptors:\n  - key: key2\n    value: value2\n    rate_limit: {unit: minute, requests_per_unit: 20}\n"
)

func TestLoadMergeDomains(t *testing.T) {
	dir := writeFiles(t, map[string]string{"merge_domain_key1.yaml": mergeKey1, "merge_domain_key2.yaml": mergeKey2})
	cfg, err := LoadWith(dir, LoadOptions{MergeDomains: true})
	if err != nil {
		t.Fatal(err)
	}
	if l := cfg.Match("foo_domain", nil)[0]; l != nil {
		t.Errorf("foo_domain: %v", l)
	}
	if l := cfg.Match("test-domain", nil)[0]; l != nil {
		t.Errorf("no entries: %v", l)
	}
	for _, c := range []struct {
		key, value string
		want       uint32
	}{{"key1", "value1", 10}, {"key2", "value2", 20}} {
		l := cfg.Match("test-domain", []Entry{{c.key, c.value}})[0]
		if l == nil || l.RequestsPerUnit != c.want {
			t.Errorf("%s=%s: %+v, want %d per unit", c.key, c.value, l, c.want)
		}
	}
	if d := cfg.Domains["test-domain"]; len(d.Limits()) != 2 || d.Descriptors() != 2 {
		t.Errorf("merged domain: %d limits, %d descriptors", len(d.Limits()), d.Descriptors())
	}

	// Without MERGE_DOMAIN_CONFIG, a domain in two files is an error, with
	// envoy's text in envoy mode (TestDuplicateDomain).
	if _, err := Load(dir); err == nil || !strings.Contains(err.Error(), `duplicate domain "test-domain"`) {
		t.Errorf("without merge: %v", err)
	}
	if _, err := LoadWith(dir, LoadOptions{Envoy: true}); err == nil || !strings.Contains(err.Error(), "duplicate domain 'test-domain' in config file") {
		t.Errorf("without merge, envoy: %v", err)
	}

	// TestDuplicateKeyDomainMerge: the same file twice.
	dup := writeFiles(t, map[string]string{"a.yaml": mergeKey1, "b.yaml": mergeKey1})
	_, err = LoadWith(dup, LoadOptions{MergeDomains: true, Envoy: true})
	if err == nil || !strings.Contains(err.Error(), "b.yaml:3: duplicate descriptor composite key 'test-domain.key1_value1'") {
		t.Errorf("duplicate key across merged files: %v", err)
	}

	// A replaces entry may name a rate_limit of another file of the domain;
	// an unknown name is still an error.
	named := "domain: test-domain\ndescriptors:\n  - key: k\n    rate_limit: {name: shared, unit: day, requests_per_unit: 1}\n"
	replacing := "domain: test-domain\ndescriptors:\n  - key: r\n    rate_limit: {unit: day, requests_per_unit: 1, replaces: [{name: shared}]}\n"
	if _, err := LoadWith(writeFiles(t, map[string]string{"a.yaml": named, "b.yaml": replacing}), LoadOptions{MergeDomains: true}); err != nil {
		t.Errorf("replaces across merged files: %v", err)
	}
	if _, err := LoadWith(writeFiles(t, map[string]string{"b.yaml": replacing, "c.yaml": mergeKey2}), LoadOptions{MergeDomains: true}); err == nil ||
		!strings.Contains(err.Error(), `b.yaml:4: replaces names "shared"`) {
		t.Errorf("unknown replaces name, merged: %v", err)
	}
}

// TestEnvoyErrorTexts: in envoy mode, each problem envoyproxy/ratelimit's
// test/config/config_test.go checks carries its expected text; floodgate's
// own mode keeps floodgate's.
func TestEnvoyErrorTexts(t *testing.T) {
	for _, c := range []struct {
		name, yaml, envoy, own string
	}{
		{"bad_limit_unit", "domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n    rate_limit:\n      unit: foo\n      requests_per_unit: 5\n",
			"invalid rate limit unit 'foo'", `invalid unit "foo"`},
		{"duplicate_key", "domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n\n  - key: key1\n    value: value1\n",
			"duplicate descriptor composite key 'test-domain.key1_value1'", `key "key1" value "value1" again at this level`},
		{"duplicate_nested_key", "domain: test-domain\ndescriptors:\n  - key: key1\n    descriptors:\n      - {key: sub, value: v}\n      - {key: sub, value: v}\n",
			"duplicate descriptor composite key 'test-domain.key1.sub_v'", "again at this level"},
		{"empty_key", "domain: test-domain\ndescriptors:\n  - value: value1\n",
			"descriptor has empty key", "descriptor has no key"},
		{"misspelled_key", "domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n    ratelimit:\n      unit: day\n      requests_per_unit: 5\n",
			"config error, unknown key 'ratelimit'", `unknown key "ratelimit"`},
		{"non_map_list", "domain: test-domain\ndescriptors:\n  - a\n  - b\n  - c\n",
			"config error, yaml file contains list of type other than map: a", "a descriptor must be a mapping"},
		{"non_string_key", "0.25: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n    rate_limit:\n      unit: day\n      requests_per_unit: 5\n",
			"config error, key is not of type string: 0.25", `unknown key "0.25"`},
		{"replaces_empty", "domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n    descriptors:\n      - key: subkey1\n        rate_limit:\n          name: self\n          replaces:\n            - name:\n          unit: second\n          requests_per_unit: 5\n",
			"should not have an empty replaces entry", "replaces entry has no name"},
		{"replaces_self", "domain: test-domain\ndescriptors:\n  - key: key1\n    value: value1\n    descriptors:\n      - key: subkey1\n        rate_limit:\n          name: self\n          replaces:\n            - name: self\n          unit: second\n          requests_per_unit: 5\n",
			"replaces should not contain name of same descriptor", `replaces names the rate_limit's own name "self"`},
		{"unlimited_with_unit", "domain: test-domain\ndescriptors:\n  - key: foo\n    rate_limit:\n      unlimited: true\n      unit: day\n      requests_per_unit: 25\n",
			"should not specify rate limit unit when unlimited", "unit must not be set when unlimited is true"},
		{"empty_domain", "descriptors:\n",
			"config file cannot have empty domain", "missing domain"},
		{"empty_domain_value", "domain: ''\ndescriptors:\n",
			"config file cannot have empty domain", "domain is empty"},
		{"bad_yaml", "domain: test-domain\ndescriptors:\n  - key: [\n",
			"error loading config file: yaml: line", "did not find expected node content"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := writeFiles(t, map[string]string{c.name + ".yaml": c.yaml})
			_, err := LoadWith(dir, LoadOptions{Envoy: true})
			if err == nil || !strings.Contains(err.Error(), c.envoy) || !strings.Contains(err.Error(), c.own) {
				t.Errorf("envoy mode: %v, want %q and %q", err, c.envoy, c.own)
			}
			_, err = Load(dir)
			if err == nil || strings.Contains(err.Error(), c.envoy) || !strings.Contains(err.Error(), c.own) {
				t.Errorf("floodgate's mode: %v, want %q without %q", err, c.own, c.envoy)
			}
		})
	}
}

// TestEnvoyModeFloodgateKeys: envoy mode reads floodgate's own rate_limit
// keys as floodgate's mode does, unit_multiplier as algorithm and lease:
// envoyproxy/ratelimit would report each as an unknown key, so a file with
// them is floodgate's own, and LoadOptions.Envoy changes only the texts of
// the problems envoy reports. A misplaced one is an unknown key, in envoy's
// words.
func TestEnvoyModeFloodgateKeys(t *testing.T) {
	const yaml = "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, unit_multiplier: 10, requests_per_unit: 1000, algorithm: gcra, lease: false}\n"
	for _, envoy := range []bool{false, true} {
		cfg, err := LoadWith(writeFiles(t, map[string]string{"d.yaml": yaml}), LoadOptions{Envoy: envoy})
		if err != nil {
			t.Fatalf("envoy %v: %v", envoy, err)
		}
		l := cfg.Match("d", []Entry{{"k", "v"}})[0]
		if l == nil || l.UnitMultiplier != 10 || l.Window() != 10*time.Second || l.Algorithm != "gcra" {
			t.Errorf("envoy %v: %+v", envoy, l)
		}
	}
	misplaced := "domain: d\ndescriptors:\n  - key: k\n    unit_multiplier: 10\n"
	_, err := LoadWith(writeFiles(t, map[string]string{"d.yaml": misplaced}), LoadOptions{Envoy: true})
	if err == nil || !strings.Contains(err.Error(), `d.yaml:4: config error, unknown key 'unit_multiplier' (unknown key "unit_multiplier" in descriptor (it belongs in rate_limit))`) {
		t.Errorf("misplaced, envoy mode: %v", err)
	}
}
