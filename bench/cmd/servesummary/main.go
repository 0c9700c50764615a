// Command servesummary turns the JSON lines of serve.sh (one per run of
// floodgate bench against floodgate serve) into the Markdown tables of
// results/server.md: for each case, the median over the runs of
// decisions/s, latency quantiles and the server's CPU per decision, with
// the range of p99 over the runs; and, when the runs include envoyproxy/ratelimit
// (cases envoy-grpc, compat-grpc), floodgate beside it with the ratios of
// each round.
//
//	go run ./cmd/servesummary results/serve-latest.jsonl
package main

import (
	"bufio"
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: servesummary RESULTS.jsonl")
		os.Exit(2)
	}
	f, err := os.Open(os.Args[1])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer f.Close()
	runs, err := parse(f)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
	write(os.Stdout, runs)
}

// run is one line of serve.sh's output.
type run struct {
	Case       string  `json:"case"`
	Server     string  `json:"server"`
	Store      string  `json:"store"`
	Round      int     `json:"round"`
	Pin        int     `json:"pin"`
	Client     string  `json:"client"`
	ServerCPUS float64 `json:"server_cpu_s"`
	RedisCPUS  float64 `json:"redis_cpu_s"`
	Bench      struct {
		API         string   `json:"api"`
		Keys        int      `json:"keys"`
		Loop        string   `json:"loop"`
		Rate        float64  `json:"rate"`
		Scheduled   int64    `json:"scheduled"`
		Requests    int64    `json:"requests"`
		DecisionsPS float64  `json:"decisions_per_s"`
		Errors      int64    `json:"errors"`
		Latency     quantile `json:"latency_us"`
		ServiceTime quantile `json:"service_time_us"`
		SendLag     quantile `json:"send_lag_us"`
	} `json:"bench"`
}

type quantile struct {
	P50, P90, P99, P999, Max float64
}

func parse(r io.Reader) ([]run, error) {
	var runs []run
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for line := 1; sc.Scan(); line++ {
		if strings.TrimSpace(sc.Text()) == "" {
			continue
		}
		var r run
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			return nil, fmt.Errorf("line %d: %v", line, err)
		}
		runs = append(runs, r)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(runs) == 0 {
		return nil, fmt.Errorf("no runs")
	}
	return runs, nil
}

// key identifies a case; its runs are summarized together.
type key struct {
	store, api, loop string
	keys             int
	rate             float64
}

func write(w io.Writer, all []run) {
	var runs []run
	for _, r := range all {
		if !envoyCase[r.Case] {
			runs = append(runs, r)
		}
	}
	r0 := all[0]
	fmt.Fprintf(w, "Load generator: floodgate bench --client %s; pinned: %v. Medians over the runs; p99 range in brackets.\n\n", r0.Client, r0.Pin == 1)
	writeCases(w, runs)
	writeEnvoy(w, all)
}

// envoyCase are the cases of the comparison with envoyproxy/ratelimit, shown
// apart: they share store, API and load with redis-grpc.
var envoyCase = map[string]bool{"envoy-grpc": true, "envoy-pipelined-grpc": true, "compat-grpc": true}

func writeCases(w io.Writer, runs []run) {
	if len(runs) == 0 {
		return
	}
	groups := map[key][]run{}
	var order []key
	for _, r := range runs {
		k := key{r.Store, r.Bench.API, r.Bench.Loop, r.Bench.Keys, r.Bench.Rate}
		if _, ok := groups[k]; !ok {
			order = append(order, k)
		}
		groups[k] = append(groups[k], r)
	}
	slices.SortStableFunc(order, func(a, b key) int {
		if c := strings.Compare(a.loop, b.loop); c != 0 {
			return c
		}
		if c := storeRank[a.store] - storeRank[b.store]; c != 0 {
			return c
		}
		if c := strings.Compare(a.api, b.api); c != 0 {
			return c
		}
		if a.keys != b.keys {
			return a.keys - b.keys
		}
		return int(a.rate - b.rate)
	})
	header := func(loop, title, cols string) bool {
		for _, k := range order {
			if k.loop == loop {
				fmt.Fprintf(w, "%s\n\n%s\n", title, cols)
				return true
			}
		}
		return false
	}
	closed := header("closed", "Closed loop, 64 workers (store floor: cmd/rlsfloor, grpc-go answering OK without deciding; API library: cmd/libload):",
		"| store | API | keys | runs | decisions/s | p50 ms | p99 ms (range) | p99.9 ms | server CPU µs/decision | Redis CPU µs/decision | errors |\n"+
			"|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, k := range order {
		if k.loop != "closed" {
			continue
		}
		g := groups[k]
		fmt.Fprintf(w, "| %s | %s | %d | %d | %s | %s | %s | %s | %s | %s | %d |\n", k.store, k.api, k.keys, len(g),
			count(median(g, func(r run) float64 { return r.Bench.DecisionsPS })),
			ms(median(g, func(r run) float64 { return r.Bench.Latency.P50 })),
			p99(g, func(r run) float64 { return r.Bench.Latency.P99 }),
			ms(median(g, func(r run) float64 { return r.Bench.Latency.P999 })),
			cpu(g, func(r run) float64 { return r.ServerCPUS }),
			redisCPU(k, g), errors(g))
	}
	if closed {
		fmt.Fprintln(w)
	}
	writeRatios(w, runs)
	open := header("open", "Open loop, 64 workers, 10,000 keys; latency from when each request was due:",
		"| store | API | rate/s | runs | sent/scheduled | p50 ms | p90 ms | p99 ms (range) | p99.9 ms | service p99 ms | send lag p99 ms | server CPU µs/decision | errors |\n"+
			"|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, k := range order {
		if k.loop != "open" {
			continue
		}
		g := groups[k]
		fmt.Fprintf(w, "| %s | %s | %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %d |\n", k.store, k.api, count(k.rate), len(g),
			sent(g),
			ms(median(g, func(r run) float64 { return r.Bench.Latency.P50 })),
			ms(median(g, func(r run) float64 { return r.Bench.Latency.P90 })),
			p99(g, func(r run) float64 { return r.Bench.Latency.P99 }),
			ms(median(g, func(r run) float64 { return r.Bench.Latency.P999 })),
			ms(median(g, func(r run) float64 { return r.Bench.ServiceTime.P99 })),
			ms(median(g, func(r run) float64 { return r.Bench.SendLag.P99 })),
			cpu(g, func(r run) float64 { return r.ServerCPUS }), errors(g))
	}
	if open {
		fmt.Fprintln(w)
	}
}

var storeRank = map[string]int{"memory": 0, "floor": 1, "redis": 2}

// writeRatios compares the server with the library on Redis, per round.
func writeRatios(w io.Writer, runs []run) {
	type rk struct {
		round, keys int
		api         string
	}
	dps := map[rk]float64{}
	for _, r := range runs {
		if r.Store == "redis" && r.Bench.Loop == "closed" {
			dps[rk{r.Round, r.Bench.Keys, r.Bench.API}] = r.Bench.DecisionsPS
		}
	}
	var rows []string
	for _, keys := range []int{1, 10000} {
		for _, api := range []string{"grpc", "http-check"} {
			var v []float64
			for k, d := range dps {
				if k.keys != keys || k.api != api {
					continue
				}
				if lib := dps[rk{k.round, keys, "library"}]; lib > 0 {
					v = append(v, d/lib)
				}
			}
			if len(v) == 0 {
				continue
			}
			slices.Sort(v)
			rows = append(rows, fmt.Sprintf("| %d | %s | **%.2f** | %.2f–%.2f |\n", keys, api, v[len(v)/2], v[0], v[len(v)-1]))
		}
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(w, "Redis, the server against the library in the same round (decisions/s of the server over the library's, median of the rounds, range):")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| keys | API | ratio to the library | range |")
	fmt.Fprintln(w, "|---:|---|---:|---|")
	for _, r := range rows {
		fmt.Fprint(w, r)
	}
	fmt.Fprintln(w)
}

// load is one load of the comparison with envoyproxy/ratelimit: a closed
// loop over keys, or an open loop at rate.
type load struct {
	loop string
	keys int
	rate float64
}

func (l load) String() string {
	keys := count(float64(l.keys)) + " keys"
	if l.keys == 1 {
		keys = "1 key"
	}
	if l.loop == "open" {
		return fmt.Sprintf("open loop %s/s, %s", count(l.rate), keys)
	}
	return "closed loop, " + keys
}

// envoyOrder is the order of the servers in the comparison.
var envoyOrder = []string{"envoy-grpc", "envoy-pipelined-grpc", "compat-grpc", "redis-grpc"}

// envoyBase are the envoyproxy/ratelimit cases floodgate's are compared with.
var envoyBase = []string{"envoy-grpc", "envoy-pipelined-grpc"}

// writeEnvoy puts floodgate beside envoyproxy/ratelimit: every server's
// figures, then floodgate's over envoy's taken per round (the servers of a
// round run one after the other on the same Redis, so a busy minute on a
// shared machine weighs on all of them) with the median and range of the
// rounds.
func writeEnvoy(w io.Writer, runs []run) {
	type sk struct {
		cas string
		l   load
	}
	type rk struct {
		sk
		round int
	}
	groups := map[sk][]run{}
	byRound := map[rk]run{}
	var loads []load
	names := map[string]string{}
	for _, r := range runs {
		if r.Store != "redis" || r.Bench.API != "grpc" || !slices.Contains(envoyOrder, r.Case) {
			continue
		}
		l := load{r.Bench.Loop, r.Bench.Keys, r.Bench.Rate}
		if !slices.Contains(loads, l) {
			loads = append(loads, l)
		}
		k := sk{r.Case, l}
		groups[k] = append(groups[k], r)
		byRound[rk{k, r.Round}] = r
		if r.Server != "" {
			names[r.Case] = r.Server
		}
	}
	if !hasCase(runs, "envoy-grpc") && !hasCase(runs, "envoy-pipelined-grpc") {
		return
	}
	slices.SortStableFunc(loads, func(a, b load) int {
		if c := strings.Compare(a.loop, b.loop); c != 0 {
			return c
		}
		if a.keys != b.keys {
			return a.keys - b.keys
		}
		return int(a.rate - b.rate)
	})
	name := func(c string) string {
		return map[string]string{"envoy-grpc": "envoyproxy/ratelimit", "envoy-pipelined-grpc": "envoyproxy/ratelimit, pipelined",
			"compat-grpc": "floodgate --compat envoy", "redis-grpc": "floodgate --redis"}[c]
	}
	fmt.Fprintf(w, "floodgate beside %s (pipelined: %s): the same configuration on the same Redis, the same gRPC load (64 workers, 4 connections); medians over the runs, p99 range in brackets:\n\n",
		cmp.Or(names["envoy-grpc"], "envoyproxy/ratelimit"), cmp.Or(names["envoy-pipelined-grpc"], "not run"))
	fmt.Fprintln(w, "| load | server | runs | decisions/s | p50 ms | p99 ms (range) | p99.9 ms | server CPU µs/decision | Redis CPU µs/decision | errors |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, l := range loads {
		for _, c := range envoyOrder {
			g := groups[sk{c, l}]
			if len(g) == 0 {
				continue
			}
			fmt.Fprintf(w, "| %s | %s | %d | %s | %s | %s | %s | %s | %s | %d |\n", l, name(c), len(g),
				count(median(g, func(r run) float64 { return r.Bench.DecisionsPS })),
				ms(median(g, func(r run) float64 { return r.Bench.Latency.P50 })),
				p99(g, func(r run) float64 { return r.Bench.Latency.P99 }),
				ms(median(g, func(r run) float64 { return r.Bench.Latency.P999 })),
				cpu(g, func(r run) float64 { return r.ServerCPUS }),
				cpu(g, func(r run) float64 { return r.RedisCPUS }), errors(g))
		}
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "floodgate ÷ envoyproxy/ratelimit in the same round, median of the rounds (range). Above 1 is better for decisions/s, below 1 for latency and CPU:")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| load | floodgate | ÷ | rounds | decisions/s | p50 | p99 | server CPU per decision | Redis CPU per decision |")
	fmt.Fprintln(w, "|---|---|---|---:|---:|---:|---:|---:|---:|")
	for _, base := range envoyBase {
		for _, l := range loads {
			for _, c := range []string{"compat-grpc", "redis-grpc"} {
				var rounds []int
				for k := range byRound {
					if k.cas == c && k.l == l {
						if _, ok := byRound[rk{sk{base, l}, k.round}]; ok {
							rounds = append(rounds, k.round)
						}
					}
				}
				if len(rounds) == 0 {
					continue
				}
				ratio := func(f func(run) float64) string {
					var v []float64
					for _, n := range rounds {
						if d := f(byRound[rk{sk{base, l}, n}]); d > 0 {
							v = append(v, f(byRound[rk{sk{c, l}, n}])/d)
						}
					}
					return ratioCell(v)
				}
				fmt.Fprintf(w, "| %s | %s | %s | %d | %s | %s | %s | %s | %s |\n", l, name(c), name(base), len(rounds),
					ratio(func(r run) float64 { return r.Bench.DecisionsPS }),
					ratio(func(r run) float64 { return r.Bench.Latency.P50 }),
					ratio(func(r run) float64 { return r.Bench.Latency.P99 }),
					ratio(func(r run) float64 { return r.ServerCPUS / float64(max(r.Bench.Requests, 1)) }),
					ratio(func(r run) float64 { return r.RedisCPUS / float64(max(r.Bench.Requests, 1)) }))
			}
		}
	}
	fmt.Fprintln(w)
}

// ratioCell is the median of v in bold, with its range.
func ratioCell(v []float64) string {
	if len(v) == 0 {
		return "–"
	}
	slices.Sort(v)
	m := v[len(v)/2]
	if len(v)%2 == 0 {
		m = (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	if len(v) == 1 {
		return fmt.Sprintf("**%.2f**", m)
	}
	return fmt.Sprintf("**%.2f** (%.2f–%.2f)", m, v[0], v[len(v)-1])
}

func hasCase(runs []run, c string) bool {
	for _, r := range runs {
		if r.Case == c {
			return true
		}
	}
	return false
}

func median(g []run, f func(run) float64) float64 {
	v := make([]float64, len(g))
	for i, r := range g {
		v[i] = f(r)
	}
	slices.Sort(v)
	if n := len(v); n%2 == 0 {
		return (v[n/2-1] + v[n/2]) / 2
	}
	return v[len(v)/2]
}

// p99 is the median p99 with the range over the runs.
func p99(g []run, f func(run) float64) string {
	lo, hi := f(g[0]), f(g[0])
	for _, r := range g {
		lo, hi = min(lo, f(r)), max(hi, f(r))
	}
	s := "**" + ms(median(g, f)) + "**"
	if len(g) > 1 {
		s += " (" + ms(lo) + "–" + ms(hi) + ")"
	}
	return s
}

// cpu is a process's CPU per answered request, in µs, median over the runs.
func cpu(g []run, f func(run) float64) string {
	return fmt.Sprintf("%.0f", median(g, func(r run) float64 {
		if r.Bench.Requests == 0 {
			return 0
		}
		return f(r) * 1e6 / float64(r.Bench.Requests)
	}))
}

func redisCPU(k key, g []run) string {
	if k.store != "redis" {
		return "–"
	}
	return cpu(g, func(r run) float64 { return r.RedisCPUS })
}

func sent(g []run) string {
	var s, d int64
	for _, r := range g {
		s += r.Bench.Requests
		d += r.Bench.Scheduled
	}
	if d == 0 {
		return "–"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(s)/float64(d))
}

func errors(g []run) int64 {
	var n int64
	for _, r := range g {
		n += r.Bench.Errors
	}
	return n
}

// ms formats microseconds as milliseconds.
func ms(us float64) string {
	switch {
	case us >= 100_000:
		return fmt.Sprintf("%.0f", us/1000)
	case us >= 10_000:
		return fmt.Sprintf("%.1f", us/1000)
	}
	return fmt.Sprintf("%.2f", us/1000)
}

func count(v float64) string {
	s := fmt.Sprintf("%.0f", v)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
