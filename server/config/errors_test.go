package config

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/ratelimit"
)

// TestErrors checks the message of every kind of problem: file, line and what
// is wrong. Each config is a domain "d" unless it says otherwise.
func TestErrors(t *testing.T) {
	for _, tc := range []struct {
		name, yaml string
		want       string // the whole error, lines joined by "\n"
	}{
		// The file as a whole.
		{"empty", "", "rules.yaml:1: missing domain: the file is empty"},
		{"comments only", "# nothing\n", "rules.yaml:1: missing domain: the file is empty"},
		{"null document", "---\n~\n", "rules.yaml:2: missing domain: the file is empty"},
		{"not a mapping", "- domain: d\n", "rules.yaml:1: the file must be a mapping with domain and descriptors, got a list"},
		{"syntax", "domain: d\ndescriptors:\n  - key: a\n    value: b: c\n", "rules.yaml:4: mapping values are not allowed in this context"},
		{"syntax at the end", "domain: d\ndescriptors:\n  - key: a\n    value: \"b\n", "rules.yaml:4: found unexpected end of stream"},
		{"tab", "domain: d\n\tdescriptors: x\n", "rules.yaml:2: found a tab character that violates indentation"},
		{"two documents", "domain: a\n---\ndomain: b\n", "rules.yaml:2: a second YAML document: a file holds one domain"},
		{"missing domain", "descriptors: []\n", "rules.yaml:1: missing domain"},
		{"empty domain", "# x\ndomain: \"\"\n", "rules.yaml:2: domain is empty"},
		{"null domain", "domain:\n", "rules.yaml:1: domain is empty"},
		{"domain not a string", "domain: {a: b}\n", "rules.yaml:1: domain must be a string, got a mapping"},

		// Keys.
		{"unknown top-level key", "domain: d\ndescriptor: []\n",
			`rules.yaml:2: unknown key "descriptor" at the top level (did you mean "descriptors"?)`},
		{"unknown key in rate_limit", `domain: d
descriptors:
  - key: a
    rate_limit:
      unit: second
      requests_per_unitt: 5
`, `rules.yaml:6: unknown key "requests_per_unitt" in rate_limit (did you mean "requests_per_unit"?)`},
		{"unknown key in descriptor", "domain: d\ndescriptors:\n  - key: a\n    limit: 5\n",
			`rules.yaml:4: unknown key "limit" in descriptor`},
		{"misplaced key", `domain: d
descriptors:
  - key: a
    rate_limit:
      unit: second
      requests_per_unit: 5
      shadow_mode: true
`, `rules.yaml:7: unknown key "shadow_mode" in rate_limit (it belongs in a descriptor)`},
		{"misplaced rate_limit key", "domain: d\ndescriptors:\n  - key: a\n    unit: second\n",
			`rules.yaml:4: unknown key "unit" in descriptor (it belongs in rate_limit)`},
		{"misplaced top-level key", "domain: d\ndescriptors:\n  - key: a\n    domain: x\n",
			`rules.yaml:4: unknown key "domain" in descriptor (it belongs at the top level)`},
		{"unknown key in replaces", `domain: d
descriptors:
  - key: a
    rate_limit: {name: x, unit: second, requests_per_unit: 1}
  - key: b
    rate_limit:
      unit: second
      requests_per_unit: 5
      replaces:
        - nam: x
`, "rules.yaml:10: unknown key \"nam\" in replaces entry (did you mean \"name\"?)\nrules.yaml:10: replaces entry has no name"},
		{"duplicate key", "domain: d\ndescriptors:\n  - key: a\n    key: b\n",
			`rules.yaml:4: duplicate key "key" in descriptor (first at line 3)`},
		{"non-string key", "domain: d\n[a]: b\n", "rules.yaml:2: a key must be a string, got a list at the top level"},

		// Descriptors.
		{"descriptors not a list", "domain: d\ndescriptors: {key: a}\n", "rules.yaml:2: descriptors must be a list, got a mapping"},
		{"descriptor not a mapping", "domain: d\ndescriptors:\n  - a\n", `rules.yaml:3: a descriptor must be a mapping with a key, got "a"`},
		{"no key", "domain: d\ndescriptors:\n  - value: a\n", "rules.yaml:3: descriptor has no key"},
		{"duplicate key and value", `domain: d
descriptors:
  - key: a
    value: b
  - key: c
  - key: a
    value: b
`, `rules.yaml:6: duplicate descriptor: key "a" value "b" again at this level (first at line 3)`},
		{"duplicate default", "domain: d\ndescriptors:\n  - key: a\n  - key: a\n",
			`rules.yaml:4: duplicate descriptor: key "a" without value again at this level (first at line 3)`},
		{"duplicate once joined", "domain: d\ndescriptors:\n  - key: a_b\n    value: c\n  - key: a\n    value: b_c\n",
			`rules.yaml:5: duplicate descriptor: key "a" value "b_c" is key "a_b" value "c" of line 3 once joined with '_', as envoyproxy/ratelimit does`},
		{"duplicate at a nested level", `domain: d
descriptors:
  - key: a
    descriptors:
      - key: b
      - key: b
  - key: c
    descriptors:
      - key: b
`, `rules.yaml:6: duplicate descriptor: key "b" without value again at this level (first at line 5)`},
		{"key not a string", "domain: d\ndescriptors:\n  - key: [a]\n", "rules.yaml:3: key must be a string, got a list\nrules.yaml:3: descriptor has no key"},
		{"bad boolean", "domain: d\ndescriptors:\n  - key: a\n    shadow_mode: maybe\n", `rules.yaml:4: shadow_mode must be true or false, got "maybe"`},
		{"quoted yes is no boolean", "domain: d\ndescriptors:\n  - key: a\n    detailed_metric: \"yes\"\n", `rules.yaml:4: detailed_metric must be true or false, got "yes"`},
		{"share_threshold without wildcard", "domain: d\ndescriptors:\n  - key: a\n    value: b\n    share_threshold: true\n",
			`rules.yaml:5: share_threshold needs a value with '*', got "b"`},
		{"metadata not a mapping", "domain: d\ndescriptors:\n  - key: a\n    metadata: [x]\n", "rules.yaml:4: metadata must be a mapping, got a list"},

		// rate_limit.
		{"rate_limit not a mapping", "domain: d\ndescriptors:\n  - key: a\n    rate_limit: 5\n", "rules.yaml:4: rate_limit must be a mapping, got a number"},
		{"bad unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 5\n",
			`rules.yaml:5: invalid unit "fortnight" (want second, minute, hour, day, week, month or year)`},
		{"unit unknown", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: unknown\n",
			`rules.yaml:5: invalid unit "unknown" (want second, minute, hour, day, week, month or year)`},
		{"no unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      requests_per_unit: 5\n",
			"rules.yaml:4: rate_limit has no unit (want second, minute, hour, day, week, month or year)"},
		{"negative rpu", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: -1\n",
			"rules.yaml:6: requests_per_unit must be between 0 and 4294967295, got -1"},
		{"rpu too large", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: 4294967296\n",
			"rules.yaml:6: requests_per_unit must be between 0 and 4294967295, got 4294967296"},
		{"rpu out of int64", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: 99999999999999999999\n",
			"rules.yaml:6: requests_per_unit must be a whole number, got a number"},
		{"rpu fraction", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: 1.5\n",
			"rules.yaml:6: requests_per_unit must be a whole number, got a number"},
		{"rpu quoted", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: \"5\"\n",
			`rules.yaml:6: requests_per_unit must be a whole number, got "5"`},
		{"unlimited with unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unlimited: true\n      unit: second\n",
			"rules.yaml:6: unit must not be set when unlimited is true"},
		{"unlimited with algorithm", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unlimited: true\n      algorithm: gcra\n      burst: 3\n",
			"rules.yaml:6: algorithm does not apply to an unlimited rate_limit\nrules.yaml:7: burst does not apply to an unlimited rate_limit"},

		// unit_multiplier.
		{"unit_multiplier 0", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      unit_multiplier: 0\n      requests_per_unit: 5\n",
			"rules.yaml:6: unit_multiplier must be a whole number >= 1 (the units in the period), got 0"},
		{"negative unit_multiplier", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      unit_multiplier: -10\n      requests_per_unit: 5\n",
			"rules.yaml:6: unit_multiplier must be a whole number >= 1 (the units in the period), got -10"},
		{"unit_multiplier fraction", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      unit_multiplier: 2.5\n      requests_per_unit: 5\n",
			"rules.yaml:6: unit_multiplier must be a whole number, got a number"},
		{"unit_multiplier quoted", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      unit_multiplier: \"10\"\n      requests_per_unit: 5\n",
			`rules.yaml:6: unit_multiplier must be a whole number, got "10"`},
		{"unit_multiplier a duration", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      unit_multiplier: 10s\n      requests_per_unit: 5\n",
			`rules.yaml:6: unit_multiplier must be a whole number, got "10s"`},
		{"unit_multiplier out of int64", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      unit_multiplier: 99999999999999999999\n      requests_per_unit: 5\n",
			"rules.yaml:6: unit_multiplier must be a whole number, got a number"},
		{"period over ten years", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: year\n      unit_multiplier: 11\n      requests_per_unit: 5\n",
			"rules.yaml:6: unit_multiplier 11 makes a period of 11 years, longer than ratelimit.MaxPeriod (87600h0m0s, ten years); with unit year it must be at most 10"},
		{"period over ten years in seconds", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      unit_multiplier: 315360001\n      requests_per_unit: 5\n",
			"rules.yaml:6: unit_multiplier 315360001 makes a period of 315360001 seconds, longer than ratelimit.MaxPeriod (87600h0m0s, ten years); with unit second it must be at most 315360000"},
		{"period overflowing a duration", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: month\n      unit_multiplier: 9223372036854775807\n      requests_per_unit: 5\n",
			"rules.yaml:6: unit_multiplier 9223372036854775807 makes a period of 9223372036854775807 months, longer than ratelimit.MaxPeriod (87600h0m0s, ten years); with unit month it must be at most 121"},
		{"unit_multiplier without a unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit_multiplier: 0\n      requests_per_unit: 5\n",
			"rules.yaml:4: rate_limit has no unit (want second, minute, hour, day, week, month or year)\n" +
				"rules.yaml:5: unit_multiplier must be a whole number >= 1 (the units in the period), got 0"},
		{"unlimited with unit_multiplier", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unlimited: true\n      unit_multiplier: 10\n",
			"rules.yaml:6: unit_multiplier does not apply to an unlimited rate_limit"},
		{"misplaced unit_multiplier", "domain: d\ndescriptors:\n  - key: a\n    unit_multiplier: 10\n",
			`rules.yaml:4: unknown key "unit_multiplier" in descriptor (it belongs in rate_limit)`},
		{"misspelt unit_multiplier", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      unit_multiplyer: 10\n",
			`rules.yaml:6: unknown key "unit_multiplyer" in rate_limit (did you mean "unit_multiplier"?)`},
		{"sliding_window buckets not dividing the period", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      unit_multiplier: 3\n      requests_per_unit: 5\n      algorithm: sliding_window\n      buckets: 7\n",
			"rules.yaml:5: invalid rate_limit for algorithm sliding_window: ratelimit: SlidingWindow.Window must be a whole multiple of Buckets (7) microseconds, got 3s (Window is unit × unit_multiplier)"},
		{"token_bucket too large for its period", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: year\n      unit_multiplier: 10\n      requests_per_unit: 5\n      algorithm: token_bucket\n      burst: 400000000\n",
			"rules.yaml:4: invalid rate_limit for algorithm token_bucket: ratelimit: TokenBucket: Capacity (400000000) × Every (315360000000000µs) and Refill (5) must each stay below 2^52"},

		// replaces.
		{"replaces unknown name", `domain: d
descriptors:
  - key: a
    rate_limit:
      unit: second
      requests_per_unit: 5
      replaces:
        - name: nobody
`, `rules.yaml:8: replaces names "nobody", but no rate_limit of domain "d" has that name`},
		{"replaces itself", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      name: x\n      unit: second\n      replaces: [{name: x}]\n",
			`rules.yaml:7: replaces names the rate_limit's own name "x"`},
		{"replaces empty name", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      replaces:\n        - name: \"\"\n",
			"rules.yaml:7: replaces entry has no name"},
		{"replaces not a list", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      replaces: x\n",
			`rules.yaml:6: replaces must be a list of {name: ...}, got "x"`},
		{"replaces entry not a mapping", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      replaces: [x]\n",
			`rules.yaml:6: a replaces entry must be a mapping with a name, got "x"`},

		// Algorithms.
		{"unknown algorithm", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      algorithm: random_drop\n",
			`rules.yaml:6: unknown algorithm "random_drop" (want fixed_window, sliding_window, sliding_log, token_bucket, leaky_bucket or gcra)`},
		{"burst on the default algorithm", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: 5\n      burst: 10\n",
			"rules.yaml:7: burst does not apply to algorithm fixed_window (the default); token_bucket, leaky_bucket and gcra take it"},
		{"delay on gcra", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: 5\n      algorithm: gcra\n      delay: 2\n",
			"rules.yaml:8: delay does not apply to algorithm gcra; leaky_bucket takes it"},
		{"buckets on token_bucket", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: 5\n      algorithm: token_bucket\n      buckets: 2\n",
			"rules.yaml:8: buckets does not apply to algorithm token_bucket; sliding_window takes it"},
		{"negative burst", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: 5\n      algorithm: gcra\n      burst: -2\n",
			"rules.yaml:8: burst must be >= 0, got -2"},
		{"bad delay", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: 5\n      algorithm: leaky_bucket\n      delay: later\n",
			`rules.yaml:8: delay must be a whole number, got "later"`},
		{"negative delay", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: 5\n      algorithm: leaky_bucket\n      delay: -3\n",
			`rules.yaml:8: delay must be a number of requests >= 0 or "nodelay", got -3`},
		{"buckets out of range", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: 5\n      algorithm: sliding_window\n      buckets: 5000\n",
			"rules.yaml:8: buckets must be between 1 and 1000 (0 or absent for 10), got 5000"},

		// ratelimit.New's validation, as configuration errors.
		{"token_bucket with rpu 0", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: 0\n      algorithm: token_bucket\n      burst: 5\n",
			"rules.yaml:6: invalid rate_limit for algorithm token_bucket: ratelimit: TokenBucket.Refill must be > 0, got 0 (Refill is requests_per_unit)"},
		{"sliding_window buckets not dividing the unit", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: second\n      requests_per_unit: 5\n      algorithm: sliding_window\n      buckets: 7\n",
			"rules.yaml:5: invalid rate_limit for algorithm sliding_window: ratelimit: SlidingWindow.Window must be a whole multiple of Buckets (7) microseconds, got 1s (Window is unit)"},
		{"sliding_log too large", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: day\n      requests_per_unit: 1000000\n      algorithm: sliding_log\n",
			"rules.yaml:6: invalid rate_limit for algorithm sliding_log: ratelimit: SlidingLog.Limit must be between 0 and 100000, got 1000000 (Limit is requests_per_unit)"},
		{"gcra rpu 0 without burst", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: minute\n      algorithm: gcra\n",
			"rules.yaml:4: invalid rate_limit for algorithm gcra: ratelimit: GCRA.Rate must be > 0, got 0 (Rate is requests_per_unit)"},
		{"token_bucket too large", "domain: d\ndescriptors:\n  - key: a\n    rate_limit:\n      unit: year\n      requests_per_unit: 5\n      algorithm: token_bucket\n      burst: 4000000000\n",
			"rules.yaml:4: invalid rate_limit for algorithm token_bucket: ratelimit: TokenBucket: Capacity (4000000000) × Every (31536000000000µs) and Refill (5) must each stay below 2^52"},

		// Several problems are all reported, in line order.
		{"several", `domain: d
descriptors:
  - key: a
    rate_limit:
      unit: eon
      requests_per_unit: -5
  - value: x
  - key: b
    rate_limit:
      unit: second
      algorithm: gcra
      delay: 1
`, "rules.yaml:5: invalid unit \"eon\" (want second, minute, hour, day, week, month or year)\n" +
			"rules.yaml:6: requests_per_unit must be between 0 and 4294967295, got -5\n" +
			"rules.yaml:7: descriptor has no key\n" +
			"rules.yaml:12: delay does not apply to algorithm gcra; leaky_bucket takes it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, err := Parse("rules.yaml", []byte(tc.yaml))
			if err == nil {
				t.Fatalf("no error; got domain %q", d.Name)
			}
			if d != nil {
				t.Errorf("a domain with the error")
			}
			if err.Error() != tc.want {
				t.Errorf("got  %s\nwant %s", err, tc.want)
			}
			var list ErrorList
			if !errors.As(err, &list) || len(list) != strings.Count(tc.want, "\n")+1 {
				t.Errorf("ErrorList %v", list)
			}
			for _, e := range list {
				if e.File != "rules.yaml" || e.Line < 1 {
					t.Errorf("error without file and line: %+v", e)
				}
			}
		})
	}
}

func TestRecursiveAlias(t *testing.T) {
	_, err := Parse("rules.yaml", []byte("domain: d\ndescriptors: &x [{key: a, descriptors: *x}]\n"))
	if err == nil || err.Error() != "rules.yaml:2: descriptors nested more than 64 levels deep (an alias that contains itself?)" {
		t.Fatalf("got %v", err)
	}
}

func TestTooManyErrors(t *testing.T) {
	var b strings.Builder
	b.WriteString("domain: d\ndescriptors:\n")
	for range 40 {
		b.WriteString("  - value: x\n")
	}
	_, err := Parse("rules.yaml", []byte(b.String()))
	var list ErrorList
	if !errors.As(err, &list) || len(list) != maxErrors+1 || list[maxErrors].Msg != "too many errors" {
		t.Fatalf("got %d errors, last %v", len(list), list[len(list)-1])
	}
}

func TestAliasBomb(t *testing.T) {
	defer func(n int) { maxNodes = n }(maxNodes)
	maxNodes = 50_000
	// Each level doubles the descriptors an alias expands to: 2^25 once expanded.
	var b strings.Builder
	b.WriteString("domain: d\ndescriptors:\n  - key: k0\n    descriptors: &a0 [{key: leaf}]\n")
	for i := 1; i <= 25; i++ {
		fmt.Fprintf(&b, "  - key: k%d\n    descriptors: &a%d [{key: x, descriptors: *a%d}, {key: y, descriptors: *a%d}]\n", i, i, i-1, i-1)
	}
	_, err := Parse("bomb.yaml", []byte(b.String()))
	if err == nil || !strings.Contains(err.Error(), "too large") {
		t.Fatalf("got %v", err)
	}
}

// TestEnvoyCompatibility checks forms that envoyproxy/ratelimit (yaml.v2)
// accepts and that are easy to get wrong with yaml.v3.
func TestEnvoyCompatibility(t *testing.T) {
	d, err := Parse("compat.yaml", []byte(`domain: 1234
descriptors:
  - key: 42
    value: true
    shadow_mode: on
    detailed_metric: No
    rate_limit:
      unit: ſecond
      requests_per_unit: 5.0
  - key: x
    rate_limit:
  - key: y
    rate_limit:
      unlimited: true
      unit: bogus
      requests_per_unit: 3
  - key: z
    value: ~
    descriptors:
  - key: w
    rate_limit:
      unit: second
      requests_per_unit:
  - key: base
    rate_limit: &base
      unit: minute
      requests_per_unit: 10
  - key: merged
    rate_limit:
      <<: *base
      requests_per_unit: 20
  - key: merged2
    rate_limit:
      <<: [{algorithm: gcra, burst: 4}, *base]
`))
	if err != nil {
		t.Fatal(err)
	}
	if d.Name != "1234" {
		t.Errorf("domain %q", d.Name)
	}
	l := d.Match(e("42", "true"))
	if l == nil || !l.ShadowMode || l.DetailedMetric || l.Unit != UnitSecond || l.RequestsPerUnit != 5 {
		t.Errorf("limit %+v", l)
	}
	if l := d.Match(e("x", "1")); l != nil {
		t.Errorf("a null rate_limit is no limit, got %+v", l)
	}
	if l := d.Match(e("y", "1")); l == nil || !l.Unlimited || l.Unit != UnitUnknown || l.Rule != nil {
		t.Errorf("unlimited with an invalid unit: %+v", l)
	}
	if l := d.Match(e("w", "1")); l == nil || l.RequestsPerUnit != 0 {
		t.Errorf("a null requests_per_unit is 0: %+v", l)
	}
	if l := d.Match(e("merged", "1")); l == nil || l.RequestsPerUnit != 20 || l.Unit != UnitMinute {
		t.Errorf("merge key: %+v", l)
	}
	if l := d.Match(e("merged2", "1")); l == nil || l.Rule != (ratelimit.GCRA{Rate: 10, Per: time.Minute, Burst: 4}) {
		t.Errorf("merge of a list: %+v", l)
	}
	_, err = Parse("rules.yaml", []byte("domain: d\ndescriptors:\n  - key: a\n    <<: 5\n"))
	if err == nil || err.Error() != "rules.yaml:4: << must merge a mapping or a list of mappings, got a number" {
		t.Errorf("merge of a number: %v", err)
	}
}
