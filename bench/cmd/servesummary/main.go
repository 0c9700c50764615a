// Command servesummary turns the JSON lines of serve.sh (one per run of
// floodgate bench against floodgate serve) into the Markdown tables of
// results/server.md: for each case, the median over the runs of
// decisions/s, latency quantiles and the server's CPU per decision, with
// the range of p99 over the runs.
//
//	go run ./cmd/servesummary results/serve-latest.jsonl
package main

import (
	"bufio"
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

func write(w io.Writer, runs []run) {
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
	r0 := runs[0]
	fmt.Fprintf(w, "Load generator: floodgate bench --client %s; pinned: %v. Medians over the runs; p99 range in brackets.\n\n", r0.Client, r0.Pin == 1)

	fmt.Fprintln(w, "Closed loop, 64 workers (store floor: cmd/rlsfloor, grpc-go answering OK without deciding; API library: cmd/libload):")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| store | API | keys | runs | decisions/s | p50 ms | p99 ms (range) | p99.9 ms | server CPU µs/decision | Redis CPU µs/decision | errors |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
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
	fmt.Fprintln(w)
	writeRatios(w, runs)
	fmt.Fprintln(w, "Open loop, 64 workers, 10,000 keys; latency from when each request was due:")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| store | API | rate/s | runs | sent/scheduled | p50 ms | p90 ms | p99 ms (range) | p99.9 ms | service p99 ms | send lag p99 ms | server CPU µs/decision | errors |")
	fmt.Fprintln(w, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
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
	fmt.Fprintln(w, "Redis, the server against the library in the same round (decisions/s of the server over the library's, median of the rounds, range):")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| keys | API | ratio to the library | range |")
	fmt.Fprintln(w, "|---:|---|---:|---|")
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
			fmt.Fprintf(w, "| %d | %s | **%.2f** | %.2f–%.2f |\n", keys, api, v[len(v)/2], v[0], v[len(v)-1])
		}
	}
	fmt.Fprintln(w)
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
