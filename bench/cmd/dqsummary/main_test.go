package main

import (
	"strings"
	"testing"
)

const sample = `floodgate: abc123
cores: 2
goos: linux
BenchmarkDelayQueue/lateness/rate=2000/consumers=1x16/lib=asynq-tuned-2   1  2491796410 ns/op  22.16 cmds/job  0 dup  90.15 early-%  0 lost  -416.0 p50-ms  81.18 p99-ms
--- BENCH: BenchmarkDelayQueue/lateness/rate=2000/consumers=1x16/lib=asynq-tuned-2
    delayqueue_test.go:1: commands per job: evalsha 3.0
BenchmarkDelayQueue/drain/consumers=1x16/lib=asynq-2   1  491414223 ns/op  10175 jobs/s  2 lost
goos: linux
BenchmarkDelayQueue/lateness/rate=2000/consumers=1x16/lib=asynq-tuned-2   1  2491796410 ns/op  22.20 cmds/job  0 dup  80.15 early-%  3 lost  -400.0 p50-ms  85.00 p99-ms
BenchmarkDelayQueue/lateness/rate=2000/consumers=1x16/lib=asynq-tuned-2   1  2491796410 ns/op  22.30 cmds/job  0 dup  70.15 early-%  1 lost  -300.0 p50-ms  90.00 p99-ms
BenchmarkDelayQueue/drain/consumers=1x16/lib=asynq-2   1  491414223 ns/op  9000 jobs/s  0 lost
`

func TestSummary(t *testing.T) {
	r, err := parse(strings.NewReader(sample))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(r.config, "; "); got != "floodgate: abc123; cores: 2; goos: linux" {
		t.Errorf("config %q", got)
	}
	var b strings.Builder
	r.write(&b)
	out := b.String()
	for _, want := range []string{
		"medians of 3 round(s)",
		"| 2000 | 1x16 | asynq-tuned | -400 | 85.0 | – | 80.2 | 0 | 3 | – | 22.2 |", // lost: the largest
		"| 1x16 | asynq | 9588 | – | – | 2 |",                                       // median of two
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
}
