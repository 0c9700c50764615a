package config_test

import (
	"strings"
	"testing"

	"github.com/floodgate-dev/floodgate/server/config"
)

// TestChargeKey: a descriptor's charge: always sets Limit.Charge; every
// other value, and charge where nothing can be charged, is an error naming
// the line.
func TestChargeKey(t *testing.T) {
	d, err := config.Parse("c.yaml", []byte(`domain: d
descriptors:
  - key: tokens
    charge: always
    rate_limit: {unit: minute, requests_per_unit: 10000, algorithm: token_bucket, burst: 1000}
  - key: plain
    rate_limit: {unit: minute, requests_per_unit: 10}
`))
	if err != nil {
		t.Fatal(err)
	}
	for key, want := range map[string]bool{"tokens": true, "plain": false} {
		if l := d.Match([]config.Entry{{Key: key, Value: "x"}}); l == nil || l.Charge != want {
			t.Errorf("%s: %+v, want Charge %v", key, l, want)
		}
	}
	for _, c := range []struct{ descriptor, want string }{
		{"charge: sometimes\n    rate_limit: {unit: second, requests_per_unit: 10}", `c.yaml:4: charge must be always (usage reported for this limit is recorded whatever the answer), got "sometimes"`},
		{"charge: true\n    rate_limit: {unit: second, requests_per_unit: 10}", `charge must be always`},
		{"charge: always", "c.yaml:4: charge: always needs a rate_limit in the same descriptor"},
		{"charge: always\n    rate_limit: {unlimited: true}", "c.yaml:4: charge: always on an unlimited limit"},
		{"charge: always\n    rate_limit: {unit: second, requests_per_unit: 10, lease: true}", "c.yaml:4: charge: always and lease: true"},
		{"rate_limit: {unit: second, requests_per_unit: 10, charge: always}", "charge"},
	} {
		_, err := config.Parse("c.yaml", []byte("domain: d\ndescriptors:\n  - key: k\n    "+c.descriptor+"\n"))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want an error with %q", c.descriptor, err, c.want)
		}
	}
}
