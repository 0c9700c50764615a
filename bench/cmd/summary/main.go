// Command summary turns the output of the bench module's benchmarks (a
// `go test -bench` text file, -count runs of each) into the Markdown tables of
// results/README.md: medians of each metric, ratios to the ceilings and
// peers, and the floodgate targets met or missed.
//
//	go run ./cmd/summary results/latest.txt
package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: summary RESULTS.txt")
		os.Exit(2)
	}
	f, err := os.Open(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer f.Close()
	r, err := parse(f)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	r.write(os.Stdout)
}

// results maps a benchmark name (without the -GOMAXPROCS suffix) to its
// metrics, each the list of values of every run.
type results map[string]map[string][]float64

var procSuffix = regexp.MustCompile(`-\d+$`)

func parse(in io.Reader) (results, error) {
	r := results{}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 4 || !strings.HasPrefix(fields[0], "Benchmark") {
			continue
		}
		if _, err := strconv.Atoi(fields[1]); err != nil {
			continue
		}
		name := procSuffix.ReplaceAllString(fields[0], "")
		if r[name] == nil {
			r[name] = map[string][]float64{}
		}
		for i := 2; i+1 < len(fields); i += 2 {
			v, err := strconv.ParseFloat(fields[i], 64)
			if err != nil {
				return nil, fmt.Errorf("%s: %v", fields[0], err)
			}
			r[name][fields[i+1]] = append(r[name][fields[i+1]], v)
		}
	}
	return r, sc.Err()
}

// get returns the median of a metric, or NaN-free ok=false when absent.
func (r results) get(name, unit string) (float64, bool) {
	vs := slices.Clone(r[name][unit])
	if len(vs) == 0 {
		return 0, false
	}
	slices.Sort(vs)
	if len(vs)%2 == 1 {
		return vs[len(vs)/2], true
	}
	return (vs[len(vs)/2-1] + vs[len(vs)/2]) / 2, true
}

type libAlg struct{ lib, alg string }

var redisRows = []libAlg{
	{"raw-rueidis", "gcra"}, {"floodgate-rueidis", "gcra"}, {"floodgate-rueidis", "gcra+daily"},
	{"floodgate-rueidis", "tokenbucket"}, {"floodgate-rueidis", "fixedwindow"}, {"floodgate-rueidis", "slidingwindow"},
	{"raw-goredis", "gcra"}, {"raw-goredis-ap", "gcra"}, {"floodgate-goredis", "gcra"}, {"floodgate-goredis", "gcra+daily"},
	{"floodgate-goredis", "tokenbucket"}, {"floodgate-goredis", "fixedwindow"}, {"floodgate-goredis", "slidingwindow"},
	{"floodgate-goredis-noap", "gcra"},
	{"redis_rate", "gcra"}, {"ulule", "fixedwindow"}, {"mennanov", "tokenbucket"}, {"mennanov", "slidingwindow"},
}

// ceilingOf is the client-side ceiling of a library: the raw EVALSHA loop of
// its Redis client.
func ceilingOf(lib string) string {
	if strings.HasSuffix(lib, "rueidis") {
		return "raw-rueidis"
	}
	return "raw-goredis"
}

// floodgatePeer is the floodgate case a peer is compared with.
func floodgatePeer(x libAlg) (libAlg, bool) {
	switch x.lib {
	case "redis_rate", "ulule", "mennanov":
		return libAlg{"floodgate-goredis", x.alg}, true
	}
	return libAlg{}, false
}

func redisName(x libAlg, keys, g int) string {
	return fmt.Sprintf("BenchmarkRedis/lib=%s/alg=%s/keys=%d/g=%d", x.lib, x.alg, keys, g)
}

func si(v float64) string {
	switch {
	case v >= 1e6:
		return fmt.Sprintf("%.2fM", v/1e6)
	case v >= 1e3:
		return fmt.Sprintf("%.1fk", v/1e3)
	}
	return fmt.Sprintf("%.0f", v)
}

var gs = []int{1, 16, 64, 256}

func (r results) write(w io.Writer) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	n := 0
	for name := range r {
		if m, ok := r[name]["decisions/s"]; ok {
			n = max(n, len(m))
		}
	}
	p("Medians of %d runs each (for the footprints: one).\n\n", n)

	p("### Redis: decisions/s (ratio to the client's raw EVALSHA GCRA loop at the same keys and g)\n\n")
	for _, keys := range []int{1, 100000} {
		p("keys=%d\n\n| lib | alg |", keys)
		for _, g := range gs {
			p(" g=%d |", g)
		}
		p("\n|---|---|")
		for range gs {
			p("---:|")
		}
		p("\n")
		for _, x := range redisRows {
			p("| %s | %s |", x.lib, x.alg)
			for _, g := range gs {
				v, ok := r.get(redisName(x, keys, g), "decisions/s")
				if !ok {
					p(" – |")
					continue
				}
				c, _ := r.get(redisName(libAlg{ceilingOf(x.lib), "gcra"}, keys, g), "decisions/s")
				if strings.HasPrefix(x.lib, "raw-") || c == 0 {
					p(" %s |", si(v))
				} else {
					p(" %s (%.2fx) |", si(v), v/c)
				}
			}
			p("\n")
		}
		p("\n")
	}

	p("### Redis at g=64: latency per call, allocations, and floodgate against each peer\n\n")
	p("server µs/op is the CPU time of Redis's main thread per decision; server busy is that time over the wall time (near 1: Redis is the bottleneck); script µs/call is the time Redis spent in each EVALSHA/EVAL (INFO commandstats; – when the library runs no script).\n\n")
	p("| lib | alg | keys | decisions/s | p50 µs | p99 µs | server µs/op | server busy | script µs/call | allocs/op | B/op | floodgate-goredis ÷ peer |\n")
	p("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, keys := range []int{1, 100000} {
		for _, x := range redisRows {
			name := redisName(x, keys, 64)
			v, ok := r.get(name, "decisions/s")
			if !ok {
				continue
			}
			p50, _ := r.get(name, "p50-µs")
			p99, _ := r.get(name, "p99-µs")
			al, _ := r.get(name, "allocs/op")
			bop, _ := r.get(name, "B/op")
			scpu, _ := r.get(name, "server-µs/op")
			busy, _ := r.get(name, "server-busy")
			script := "–"
			if sc, ok := r.get(name, "script-µs/op"); ok {
				script = fmt.Sprintf("%.2f", sc)
			}
			peer := ""
			if fp, ok := floodgatePeer(x); ok {
				if fv, ok := r.get(redisName(fp, keys, 64), "decisions/s"); ok {
					peer = fmt.Sprintf("%.2fx", fv/v)
				}
			}
			p("| %s | %s | %d | %s | %.0f | %.0f | %.2f | %.2f | %s | %.0f | %.0f | %s |\n", x.lib, x.alg, keys, si(v), p50, p99, scpu, busy, script, al, bop, peer)
		}
	}
	p("\n")

	p("### Server ceiling: redis-benchmark, EVALSHA of gcra.lua\n\n| keys | pipeline | clients | requests/s | p50 µs |\n|---:|---:|---:|---:|---:|\n")
	for _, pc := range [][2]int{{16, 50}, {1, 50}} {
		for _, keys := range []int{1, 100000} {
			name := fmt.Sprintf("BenchmarkServerCeiling/tool=redis-benchmark/alg=gcra/keys=%d/P=%d/c=%d", keys, pc[0], pc[1])
			if v, ok := r.get(name, "decisions/s"); ok {
				p50, _ := r.get(name, "p50-µs")
				p("| %d | %d | %d | %s | %.0f |\n", keys, pc[0], pc[1], si(v), p50)
			}
		}
	}
	p("\n")

	p("### In process: ns/op (ratio to x/time/rate at the same keys and g), allocs/op\n\n")
	p("| lib | alg | keys=1 g=1 | keys=1 g=64 | keys=100000 g=1 | keys=100000 g=64 | allocs/op (max) |\n|---|---|---:|---:|---:|---:|---:|\n")
	for _, x := range []libAlg{{"xrate", "tokenbucket"}, {"floodgate-memory", "gcra"}, {"floodgate-memory", "tokenbucket"}, {"sethvargo", "tokenbucket"}} {
		p("| %s | %s |", x.lib, x.alg)
		var allocs float64
		for _, kg := range [][2]int{{1, 1}, {1, 64}, {100000, 1}, {100000, 64}} {
			name := fmt.Sprintf("BenchmarkMemory/lib=%s/alg=%s/keys=%d/g=%d", x.lib, x.alg, kg[0], kg[1])
			v, ok := r.get(name, "ns/op")
			if !ok {
				p(" – |")
				continue
			}
			a, _ := r.get(name, "allocs/op")
			allocs = max(allocs, a)
			base, _ := r.get(fmt.Sprintf("BenchmarkMemory/lib=xrate/alg=tokenbucket/keys=%d/g=%d", kg[0], kg[1]), "ns/op")
			if x.lib == "xrate" || base == 0 {
				p(" %.1f |", v)
			} else {
				p(" %.1f (%.2fx) |", v, v/base)
			}
		}
		p(" %.0f |\n", allocs)
	}
	p("\n")

	p("### Redis memory per user key (100,000 distinct 16-byte user keys, one call each)\n\n| lib | alg | B/key | Redis keys per user key |\n|---|---|---:|---:|\n")
	for _, x := range []libAlg{{"raw", "gcra"}, {"floodgate", "gcra"}, {"floodgate", "gcra+daily"}, {"floodgate", "tokenbucket"}, {"floodgate", "fixedwindow"},
		{"floodgate", "slidingwindow"}, {"floodgate", "slidingwindow-full"}, {"redis_rate", "gcra"}, {"ulule", "fixedwindow"}, {"mennanov", "tokenbucket"}, {"mennanov", "slidingwindow"}} {
		name := fmt.Sprintf("BenchmarkRedisFootprint/lib=%s/alg=%s/keys=100000", x.lib, x.alg)
		if v, ok := r.get(name, "B/key"); ok {
			k, _ := r.get(name, "redis-keys/key")
			p("| %s | %s | %.1f | %.0f |\n", x.lib, x.alg, v, k)
		}
	}
	p("\n")

	p("### In-process memory per idle key (1,000,000 keys)\n\n| lib | alg | B/key idle | B/key after expiry + Sweep |\n|---|---|---:|---:|\n")
	for _, x := range []libAlg{{"floodgate-memory", "gcra"}, {"floodgate-memory", "tokenbucket"}, {"xrate", "tokenbucket"}, {"sethvargo", "tokenbucket"}} {
		name := fmt.Sprintf("BenchmarkMemoryFootprint/lib=%s/alg=%s/keys=1000000", x.lib, x.alg)
		if v, ok := r.get(name, "B/key"); ok {
			s := "–"
			if sw, ok := r.get(name, "B/key-swept"); ok {
				s = fmt.Sprintf("%.1f", sw)
			}
			p("| %s | %s | %.1f | %s |\n", x.lib, x.alg, v, s)
		}
	}
	p("\n")
	r.targets(w)
}

func (r results) targets(w io.Writer) {
	p := func(format string, a ...any) { fmt.Fprintf(w, format, a...) }
	mark := func(ok bool) string {
		if ok {
			return "met"
		}
		return "**missed**"
	}
	p("### Targets\n\n| target | measured | |\n|---|---|---|\n")
	// absent prints a target whose benchmarks are not in the results.
	absent := func(target string) { p("| %s | not measured | **missed** |\n", target) }
	// Issue 15: floodgate on go-redis (autopipelined) against the raw
	// go-redis loop, the raw loop through go-redis's AsyncAutoPipeline, and
	// redis_rate.
	fg := libAlg{"floodgate-goredis", "gcra"}
	for _, c := range []struct {
		peer libAlg
		want float64
	}{{libAlg{"raw-goredis", "gcra"}, 1.0}, {libAlg{"raw-goredis-ap", "gcra"}, 0.9}, {libAlg{"redis_rate", "gcra"}, 1.5}} {
		for _, keys := range []int{1, 100000} {
			for _, g := range []int{16, 64, 256} {
				target := fmt.Sprintf("%s %s keys=%d g=%d >= %.2fx %s", fg.lib, fg.alg, keys, g, c.want, c.peer.lib)
				v, ok1 := r.get(redisName(fg, keys, g), "decisions/s")
				base, ok2 := r.get(redisName(c.peer, keys, g), "decisions/s")
				if !ok1 || !ok2 {
					absent(target)
					continue
				}
				p("| %s | %.2fx (%s vs %s) | %s |\n", target, v/base, si(v), si(base), mark(v/base >= c.want))
			}
		}
	}
	// floodgate on rueidis against the raw rueidis loop at g=64; the Redis
	// CPU per decision, steadier than the rate under other load, beside it.
	fr, rr := libAlg{"floodgate-rueidis", "gcra"}, libAlg{"raw-rueidis", "gcra"}
	for _, keys := range []int{1, 100000} {
		target := fmt.Sprintf("%s %s keys=%d g=64 >= 0.90x %s", fr.lib, fr.alg, keys, rr.lib)
		v, ok1 := r.get(redisName(fr, keys, 64), "decisions/s")
		base, ok2 := r.get(redisName(rr, keys, 64), "decisions/s")
		if !ok1 || !ok2 {
			absent(target)
			continue
		}
		sf, _ := r.get(redisName(fr, keys, 64), "server-µs/op")
		sb, _ := r.get(redisName(rr, keys, 64), "server-µs/op")
		p("| %s | %.2fx (%s vs %s); Redis CPU per decision %.2f vs %.2f µs | %s |\n",
			target, v/base, si(v), si(base), sf, sb, mark(v/base >= 0.9))
	}
	// ... and against the server ceiling: redis-benchmark -P 16 running the
	// minimal script (BenchmarkServerCeiling) on the same key space.
	for _, keys := range []int{1, 100000} {
		target := fmt.Sprintf("%s %s keys=%d g=256 >= 0.75x redis-benchmark -P 16 (minimal script)", fr.lib, fr.alg, keys)
		v, ok1 := r.get(redisName(fr, keys, 256), "decisions/s")
		base, ok2 := r.get(fmt.Sprintf("BenchmarkServerCeiling/tool=redis-benchmark/alg=gcra/keys=%d/P=16/c=50", keys), "decisions/s")
		if !ok1 || !ok2 {
			absent(target)
			continue
		}
		p("| %s | %.2fx (%s vs %s) | %s |\n", target, v/base, si(v), si(base), mark(v/base >= 0.75))
	}
	// Lean scripts: Redis's time per script call (INFO commandstats), at
	// 100,000 keys and g=64.
	script := func(x libAlg) (float64, bool) { return r.get(redisName(x, 100000, 64), "script-µs/op") }
	for _, c := range []struct {
		x, base libAlg
		want    float64
	}{
		{libAlg{"floodgate-rueidis", "gcra"}, rr, 1.15},
		{libAlg{"floodgate-rueidis", "tokenbucket"}, rr, 1.15},
		{libAlg{"floodgate-rueidis", "fixedwindow"}, rr, 1.15},
		{libAlg{"floodgate-rueidis", "gcra+daily"}, fr, 1.35},
	} {
		target := fmt.Sprintf("%s %s script µs/call keys=100000 g=64 <= %.2fx %s %s", c.x.lib, c.x.alg, c.want, c.base.lib, c.base.alg)
		v, ok1 := script(c.x)
		base, ok2 := script(c.base)
		if !ok1 || !ok2 {
			absent(target)
			continue
		}
		p("| %s | %.2fx (%.2f vs %.2f µs) | %s |\n", target, v/base, v, base, mark(v/base <= c.want))
	}
	base, ok := r.get("BenchmarkMemory/lib=xrate/alg=tokenbucket/keys=1/g=1", "ns/op")
	for _, alg := range []string{"gcra", "tokenbucket"} {
		name := "BenchmarkMemory/lib=floodgate-memory/alg=" + alg + "/keys=1/g=1"
		v, ok2 := r.get(name, "ns/op")
		a, _ := r.get(name, "allocs/op")
		if ok && ok2 {
			p("| memory %s one key g=1 <= 1.5x x/time/rate ns/op, 0 allocs | %.2fx (%.1f vs %.1f ns/op), %.0f allocs/op | %s |\n",
				alg, v/base, v, base, a, mark(v/base <= 1.5 && a == 0))
		}
	}
	for _, alg := range []string{"gcra", "tokenbucket"} {
		if v, ok := r.get("BenchmarkMemoryFootprint/lib=floodgate-memory/alg="+alg+"/keys=1000000", "B/key"); ok {
			p("| memory %s 1e6 idle keys < 150 B/key | %.1f B/key | %s |\n", alg, v, mark(v < 150))
		}
	}
	// Redis memory per user key: floodgate's single-rule keys no larger than
	// the minimal script's, a Limiter of GCRA and a daily window within 1.4x
	// of GCRA alone.
	footprint := func(lib, alg string) (float64, bool) {
		return r.get("BenchmarkRedisFootprint/lib="+lib+"/alg="+alg+"/keys=100000", "B/key")
	}
	for _, c := range []struct {
		alg, baseLib, baseAlg string
		want                  float64
	}{{"gcra", "raw", "gcra", 1}, {"tokenbucket", "raw", "gcra", 1}, {"fixedwindow", "raw", "gcra", 1}, {"gcra+daily", "floodgate", "gcra", 1.4}} {
		target := fmt.Sprintf("Redis floodgate %s B/key <= %.1fx %s %s", c.alg, c.want, c.baseLib, c.baseAlg)
		v, ok1 := footprint("floodgate", c.alg)
		base, ok2 := footprint(c.baseLib, c.baseAlg)
		if !ok1 || !ok2 {
			absent(target)
			continue
		}
		p("| %s | %.1f vs %.1f B/key (%.2fx) | %s |\n", target, v, base, v/base, mark(v <= c.want*base))
	}
	for _, c := range []struct {
		alg   string
		limit float64
	}{{"slidingwindow", 100 + 16*10}, {"slidingwindow-full", 100 + 16*10}} {
		if v, ok := footprint("floodgate", c.alg); ok {
			p("| Redis %s < %.0f B/key | %.1f B/key | %s |\n", c.alg, c.limit, v, mark(v < c.limit))
		}
	}
	p("\n")
}
