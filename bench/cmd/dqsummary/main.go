// Command dqsummary turns the output of BenchmarkDelayQueue (a `go test
// -bench` text file holding one or more rounds, as bench/delayqueue.sh writes
// it) into the Markdown tables of results/delayqueue.md: per case and
// library, the median over the rounds of every metric, except dup, lost and
// enq-over-ms, which show the largest value of any round (one round that lost
// jobs must not be hidden by a median).
//
//	go run ./cmd/dqsummary results/delayqueue-latest.txt
package main

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: dqsummary RESULTS.txt")
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
		fmt.Fprintf(os.Stderr, "%s: %v\n", os.Args[1], err)
		os.Exit(1)
	}
	if len(r.order) == 0 {
		fmt.Fprintf(os.Stderr, "%s: no BenchmarkDelayQueue results\n", os.Args[1])
		os.Exit(1)
	}
	r.write(os.Stdout)
}

// results are the runs of each sub-benchmark, in the order of first
// appearance.
type results struct {
	config []string                        // "key: value" lines (floodgate, go, redis, cores, ...)
	order  []string                        // sub-benchmark names without the -GOMAXPROCS suffix
	runs   map[string]map[string][]float64 // name → unit → values
}

var procSuffix = regexp.MustCompile(`-\d+$`)

const prefix = "BenchmarkDelayQueue/"

func parse(in io.Reader) (*results, error) {
	r := &results{runs: map[string]map[string][]float64{}}
	seen := map[string]bool{}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		fields := strings.Fields(line)
		if len(fields) >= 4 && strings.HasPrefix(fields[0], prefix) {
			if _, err := strconv.Atoi(fields[1]); err != nil {
				continue
			}
			name := strings.TrimPrefix(procSuffix.ReplaceAllString(fields[0], ""), prefix)
			if r.runs[name] == nil {
				r.runs[name] = map[string][]float64{}
				r.order = append(r.order, name)
			}
			for i := 2; i+1 < len(fields); i += 2 {
				v, err := strconv.ParseFloat(fields[i], 64)
				if err != nil {
					return nil, fmt.Errorf("%s: %v", fields[0], err)
				}
				r.runs[name][fields[i+1]] = append(r.runs[name][fields[i+1]], v)
			}
			continue
		}
		// Configuration lines of benchfmt: "key: value", key without spaces.
		if k, _, ok := strings.Cut(line, ": "); ok && k != "" && !strings.ContainsAny(k, " \t") && !seen[line] {
			seen[line] = true
			r.config = append(r.config, strings.TrimSpace(line))
		}
	}
	return r, sc.Err()
}

// worst are the metrics shown as their largest value over the rounds.
var worst = map[string]bool{"dup": true, "lost": true, "enq-over-ms": true}

// value is the median of a metric over the rounds (or the largest, for the
// metrics of worst), and whether any round reported it.
func (r *results) value(name, unit string) (float64, bool) {
	vs := slices.Clone(r.runs[name][unit])
	if len(vs) == 0 {
		return 0, false
	}
	slices.Sort(vs)
	if worst[unit] {
		return vs[len(vs)-1], true
	}
	if len(vs)%2 == 1 {
		return vs[len(vs)/2], true
	}
	return (vs[len(vs)/2-1] + vs[len(vs)/2]) / 2, true
}

func (r *results) cell(name, unit string) string {
	v, ok := r.value(name, unit)
	switch {
	case !ok:
		return "–"
	case unit == "dup" || unit == "lost":
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return num(v)
}

// num prints three significant digits or so, whole numbers from 100 up.
func num(v float64) string {
	switch a := math.Abs(v); {
	case a >= 100 || v == 0:
		return strconv.FormatFloat(v, 'f', 0, 64)
	case a >= 10:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'f', 2, 64)
	}
}

// labels splits a name such as lateness/rate=2000/consumers=1x16/lib=asynq
// into its case (lateness) and its key=value parts.
func labels(name string) (kind string, kv map[string]string) {
	parts := strings.Split(name, "/")
	kv = map[string]string{}
	for _, p := range parts[1:] {
		k, v, _ := strings.Cut(p, "=")
		kv[k] = v
	}
	return parts[0], kv
}

type column struct{ head, unit string }

var costColumns = []column{
	{"scripts/job", "scripts/job"},
	{"cmds/job", "cmds/job"},
	{"Redis CPU µs/job", "cpu-µs/job"},
	{"client CPU µs/job", "client-cpu-µs/job"},
}

func (r *results) write(w io.Writer) {
	rounds := 0
	for _, n := range r.order {
		rounds = max(rounds, len(r.runs[n]["ns/op"]))
	}
	fmt.Fprintf(w, "BenchmarkDelayQueue, medians of %d round(s); dup, lost and enqueue over: the largest of any round.\n\n", rounds)
	if len(r.config) > 0 {
		fmt.Fprintf(w, "%s\n\n", strings.Join(r.config, "; "))
	}
	r.table(w, "lateness", "Lateness (delivery − due time, ms; early: % delivered before due)",
		[]column{{"due/s", "rate"}, {"consumers", "consumers"}, {"library", "lib"}},
		append([]column{
			{"p50", "p50-ms"}, {"p99", "p99-ms"}, {"max", "max-ms"}, {"early %", "early-%"},
			{"dup", "dup"}, {"lost", "lost"},
		}, append(slices.Clone(costColumns), column{"enqueue over ms", "enq-over-ms"})...))
	r.table(w, "drain", "Drain (jobs already due, enqueued before the consumer starts)",
		[]column{{"consumers", "consumers"}, {"library", "lib"}},
		append([]column{{"jobs/s", "jobs/s"}, {"enqueue/s", "enq/s"}, {"dup", "dup"}, {"lost", "lost"}}, costColumns...))
	r.table(w, "enqueue", "Enqueue (producers alone, 64 goroutines; batch100: EnqueueBatch of 100 jobs)",
		[]column{{"library", "lib"}},
		append([]column{{"enqueue/s", "enq/s"}}, costColumns...))
}

// table writes the rows of one case: keys are the name's labels, metrics
// the units.
func (r *results) table(w io.Writer, kind, title string, keys, metrics []column) {
	var rows []string
	for _, n := range r.order {
		if k, _ := labels(n); k == kind {
			rows = append(rows, n)
		}
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(w, "%s\n\n|", title)
	align := "|"
	for _, c := range keys {
		fmt.Fprintf(w, " %s |", c.head)
		align += " --- |"
	}
	for _, c := range metrics {
		fmt.Fprintf(w, " %s |", c.head)
		align += " ---: |"
	}
	fmt.Fprintf(w, "\n%s\n", align)
	for _, n := range rows {
		_, kv := labels(n)
		fmt.Fprint(w, "|")
		for _, c := range keys {
			fmt.Fprintf(w, " %s |", kv[c.unit])
		}
		for _, c := range metrics {
			fmt.Fprintf(w, " %s |", r.cell(n, c.unit))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)
}
