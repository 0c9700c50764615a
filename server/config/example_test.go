package config_test

import (
	"fmt"

	"github.com/floodgate-dev/floodgate/server/config"
)

func Example() {
	d, err := config.Parse("ratelimit.yaml", []byte(`
domain: edge
descriptors:
  - key: remote_address          # any address: 10 a second
    rate_limit:
      unit: second
      requests_per_unit: 10
  - key: remote_address
    value: 198.51.100.7          # this one: none
    rate_limit:
      unit: second
      requests_per_unit: 0
  - key: path
    value: /api/*                # floodgate's extension: GCRA with a burst
    rate_limit:
      unit: minute
      requests_per_unit: 600
      algorithm: gcra
      burst: 50
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, entries := range [][]config.Entry{
		{{Key: "remote_address", Value: "203.0.113.9"}},
		{{Key: "remote_address", Value: "198.51.100.7"}},
		{{Key: "path", Value: "/api/users"}},
		{{Key: "path", Value: "/health"}},
	} {
		if l := d.Match(entries); l != nil {
			fmt.Printf("%v: %s %d/%s %T%+v\n", entries, l.Path, l.RequestsPerUnit, l.Unit, l.Rule, l.Rule)
		} else {
			fmt.Printf("%v: no limit\n", entries)
		}
	}

	_, err = config.Parse("ratelimit.yaml", []byte("domain: edge\ndescriptors:\n  - key: path\n    rate_limit:\n      unit: minute\n      requests_per_unitt: 5\n"))
	fmt.Println(err)
	// Output:
	// [{remote_address 203.0.113.9}]: edge|remote_address 10/SECOND ratelimit.FixedWindow{Limit:10 Window:1s}
	// [{remote_address 198.51.100.7}]: edge|remote_address_198.51.100.7 0/SECOND ratelimit.FixedWindow{Limit:0 Window:1s}
	// [{path /api/users}]: edge|path_/api/* 600/MINUTE ratelimit.GCRA{Rate:600 Per:1m0s Burst:50}
	// [{path /health}]: no limit
	// ratelimit.yaml:6: unknown key "requests_per_unitt" in rate_limit (did you mean "requests_per_unit"?)
}

// A period of several units: 1,000 requests per 10 seconds, whatever the
// algorithm. Its fixed windows start at multiples of 10 s since the Unix
// epoch.
func ExampleLimit_Window() {
	d, err := config.Parse("ratelimit.yaml", []byte(`
domain: api
descriptors:
  - key: user
    rate_limit:
      unit: second
      unit_multiplier: 10
      requests_per_unit: 1000
  - key: tenant
    rate_limit:
      unit: minute
      unit_multiplier: 5
      requests_per_unit: 100000
      algorithm: token_bucket
      burst: 20000
`))
	if err != nil {
		fmt.Println(err)
		return
	}
	for _, l := range d.Limits() {
		fmt.Printf("%s: %d per %d %s = %v: %T%+v\n", l.Path, l.RequestsPerUnit, l.UnitMultiplier, l.Unit, l.Window(), l.Rule, l.Rule)
	}
	// Output:
	// api|user: 1000 per 10 SECOND = 10s: ratelimit.FixedWindow{Limit:1000 Window:10s}
	// api|tenant: 100000 per 5 MINUTE = 5m0s: ratelimit.TokenBucket{Capacity:20000 Refill:100000 Every:5m0s}
}
