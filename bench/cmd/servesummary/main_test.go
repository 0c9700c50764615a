package main

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
)

// line is one JSON line of serve.sh for a 10 s closed loop on Redis, over
// gRPC but in case redis-lib.
func line(cas string, round int, dps float64, serverCPU float64) string {
	api := "grpc"
	if cas == "redis-lib" {
		api = "library"
	}
	return fmt.Sprintf(`{"case":%q,"server":"s","store":"redis","round":%d,"pin":1,"client":"h2","server_cpu_s":%g,"redis_cpu_s":1,`+
		`"bench":{"api":%q,"keys":1,"loop":"closed","requests":%d,"decisions_per_s":%g,"errors":0,"latency_us":{"p50":1000,"p99":4000}}}`,
		cas, round, serverCPU, api, int64(dps*10), dps)
}

// TestEnvoyRatios checks that floodgate's figures are divided by envoy's of
// the same round, and that the comparison's runs stay out of the other
// tables (they share store, API and load with redis-grpc).
func TestEnvoyRatios(t *testing.T) {
	in := strings.Join([]string{
		line("envoy-grpc", 1, 10000, 8),  // 80 µs per decision
		line("compat-grpc", 1, 20000, 7), // 35 µs: 0.44 of envoy's
		line("redis-grpc", 1, 30000, 9),
		line("envoy-grpc", 2, 5000, 4),
		line("compat-grpc", 2, 5000, 2),
		line("redis-grpc", 2, 20000, 6),
		line("redis-lib", 2, 40000, 0),
	}, "\n")
	runs, err := parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	write(&b, runs)
	out := b.String()
	for _, want := range []string{
		// decisions/s: compat 2 and 1, own 3 and 4; medians of 2 are means
		"| closed loop, 1 key | floodgate --compat envoy | envoyproxy/ratelimit | 2 | **1.50** (1.00–2.00) |",
		"| closed loop, 1 key | floodgate --redis | envoyproxy/ratelimit | 2 | **3.50** (3.00–4.00) |",
		// the redis-grpc rows of the main table have only redis-grpc's runs
		"| redis | grpc | 1 | 2 | 25,000 |",
		// and the library ratio only redis-grpc's round 2: 20,000 / 40,000
		"| 1 | grpc | **0.50** | 0.50–0.50 |",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the output lacks %q:\n%s", want, out)
		}
	}
}
