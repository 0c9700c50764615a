package bench

import (
	"context"
	"encoding/csv"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// BenchmarkServerCeiling runs redis-benchmark (from redis-tools) against the
// same private Redis, with EVALSHA of gcra.lua at the throughput limits: the
// server-side ceiling, what one Redis process on this machine does when the
// client costs next to nothing. It reports redis-benchmark's requests per
// second as decisions/s and its p50 latency. Each run measures once, whatever
// b.N; ns/op is suppressed. -short sends 50,000 requests instead of 500,000.
func BenchmarkServerCeiling(b *testing.B) {
	bin, err := exec.LookPath("redis-benchmark")
	if err != nil {
		b.Skip("redis-benchmark not on PATH (apt-get install redis-tools)")
	}
	c := redisClients(b)
	args := gcraArgs(throughput)
	for _, cfg := range []struct{ pipeline, clients int }{{16, 50}, {1, 50}} {
		for _, nk := range keySpaces {
			name := fmt.Sprintf("tool=redis-benchmark/alg=gcra/keys=%d/P=%d/c=%d", nk, cfg.pipeline, cfg.clients)
			b.Run(name, func(b *testing.B) {
				n := 500_000
				if cfg.pipeline == 1 {
					n = 200_000
				}
				if testing.Short() {
					n = 50_000
				}
				key := "raw:{user:0}"
				cmd := []string{"-h", "127.0.0.1", "-p", strconv.Itoa(c.srv.Port),
					"-P", strconv.Itoa(cfg.pipeline), "-c", strconv.Itoa(cfg.clients), "-n", strconv.Itoa(n), "--csv"}
				if nk > 1 {
					key = "raw:{user:__rand_int__}"
					cmd = append(cmd, "-r", strconv.Itoa(nk))
				}
				c.flush(b)
				cmd = append(cmd, "EVALSHA", c.sha, "1", key, args[0], args[1])
				out, err := exec.CommandContext(context.Background(), bin, cmd...).Output()
				if err != nil {
					b.Fatalf("redis-benchmark: %v\n%s", err, out)
				}
				rps, p50, err := parseRedisBenchmarkCSV(out)
				if err != nil {
					b.Fatalf("%v\n%s", err, out)
				}
				b.ReportMetric(0, "ns/op")
				b.ReportMetric(rps, "decisions/s")
				b.ReportMetric(p50*1000, "p50-µs")
				b.Logf("redis-benchmark -P %d -c %d -n %d EVALSHA gcra.lua (%s): %.0f requests/s, p50 %.3f ms",
					cfg.pipeline, cfg.clients, n, key, rps, p50)
			})
		}
	}
}

// parseRedisBenchmarkCSV reads redis-benchmark --csv output:
// "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms",...
func parseRedisBenchmarkCSV(out []byte) (rps, p50ms float64, err error) {
	recs, err := csv.NewReader(strings.NewReader(string(out))).ReadAll()
	if err != nil {
		return 0, 0, fmt.Errorf("redis-benchmark output: %w", err)
	}
	if len(recs) < 2 {
		return 0, 0, fmt.Errorf("redis-benchmark printed %d CSV rows, want 2", len(recs))
	}
	col := map[string]int{}
	for i, h := range recs[0] {
		col[h] = i
	}
	ri, ok1 := col["rps"]
	pi, ok2 := col["p50_latency_ms"]
	if !ok1 || !ok2 {
		return 0, 0, fmt.Errorf("redis-benchmark CSV header %v lacks rps or p50_latency_ms", recs[0])
	}
	last := recs[len(recs)-1]
	if rps, err = strconv.ParseFloat(last[ri], 64); err != nil {
		return 0, 0, err
	}
	if p50ms, err = strconv.ParseFloat(last[pi], 64); err != nil {
		return 0, 0, err
	}
	return rps, p50ms, nil
}
