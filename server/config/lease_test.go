package config_test

import (
	"os"
	"strings"
	"testing"

	"github.com/floodgate-dev/floodgate/server/config"
)

// TestLeaseKey: rate_limit's lease reads as LeaseOn, LeaseOff or (absent)
// LeaseDefault, and is refused, naming the line and the reason, where the
// limit cannot lease or the value is not a boolean.
func TestLeaseKey(t *testing.T) {
	d, err := config.Parse("l.yaml", []byte(`domain: d
descriptors:
  - key: on
    rate_limit: {unit: second, requests_per_unit: 10, lease: true}
  - key: off
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: gcra, lease: false}
  - key: unsaid
    rate_limit: {unit: second, requests_per_unit: 10}
  - key: nodelay
    rate_limit: {unit: second, requests_per_unit: 10, algorithm: leaky_bucket, burst: 5, delay: nodelay, lease: true}
`))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]config.Lease{"on": config.LeaseOn, "off": config.LeaseOff, "unsaid": config.LeaseDefault, "nodelay": config.LeaseOn}
	for key, lease := range want {
		l := d.Match([]config.Entry{{Key: key, Value: "x"}})
		if l == nil || l.Lease != lease {
			t.Errorf("%s: %+v, want Lease %v", key, l, lease)
		}
	}

	for _, c := range []struct{ rateLimit, want string }{
		{"{unit: second, requests_per_unit: 10, algorithm: sliding_log, lease: true}", "l.yaml:4: lease does not apply to algorithm sliding_log: SlidingLog keeps one entry per admitted unit"},
		{"{unit: second, requests_per_unit: 10, algorithm: leaky_bucket, burst: 5, lease: true}", "l.yaml:4: lease does not apply to algorithm leaky_bucket: LeakyBucket with a Delay shapes"},
		{"{unlimited: true, lease: true}", "l.yaml:4: lease does not apply to an unlimited rate_limit"},
		{"{unit: second, requests_per_unit: 10, lease: sometimes}", `l.yaml:4: lease must be true or false, got "sometimes"`},
	} {
		_, err := config.Parse("l.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: "+c.rateLimit+"\n"))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("rate_limit %s: error %v, want %q", c.rateLimit, err, c.want)
		}
	}
	// lease: false is accepted wherever the limit is valid: it asks for nothing.
	if _, err := config.Parse("l.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 10, algorithm: sliding_log, lease: false}\n")); err != nil {
		t.Errorf("lease: false on sliding_log: %v", err)
	}
}

// TestLeaseDocExample parses the YAML example of docs/server/leases.md.
func TestLeaseDocExample(t *testing.T) {
	doc, err := os.ReadFile("../../docs/server/leases.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(doc), "```yaml\n")
	yaml, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("docs/server/leases.md has no yaml example")
	}
	d, err := config.Parse("leases.md", []byte(yaml))
	if err != nil {
		t.Fatalf("the example does not parse: %v\n%s", err, yaml)
	}
	if l := d.Match([]config.Entry{{Key: "user", Value: "x"}}); l == nil || l.Lease != config.LeaseOff {
		t.Errorf("the example's user limit: %+v, want lease: false", l)
	}
}
