package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/server"
)

// benchConfigYAML has token buckets of a day: no window edge falls inside a
// test, and a day's refill adds less than one unit while it runs, so exactly
// the capacity is admitted per key.
const benchConfigYAML = `domain: bench
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: 100, algorithm: token_bucket}
  - key: team
    rate_limit: {unit: day, requests_per_unit: 5, algorithm: token_bucket}
`

// startBenchServer runs the real server in process on the memory backend,
// on free loopback ports, until the test ends.
func startBenchServer(t *testing.T, token string) (grpcAddr, httpURL string) {
	t.Helper()
	path := writeFile(t, t.TempDir(), "bench.yaml", benchConfigYAML)
	srv, _ := serveInProcess(t, server.Config{
		ConfigPath: path, HTTPAddr: "127.0.0.1:0", GRPCAddr: "127.0.0.1:0", Token: token, ReloadInterval: -1,
	})
	return srv.GRPCAddr(), "http://" + srv.HTTPAddr()
}

// serveInProcess runs a server of c on a memory backend of its own until
// stop is called or the test ends. stop shuts it down (GOAWAY, then the
// drain) and can be called more than once.
func serveInProcess(tb testing.TB, c server.Config) (srv *server.Server, stop func()) {
	tb.Helper()
	mem := backend.NewMemory()
	c.Backend = mem
	srv, err := server.New(c)
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				tb.Errorf("Serve: %v", err)
			}
			mem.Close()
		})
	}
	tb.Cleanup(stop)
	return srv, stop
}

// benchJSON runs floodgate bench with --json --quiet and decodes the report.
func benchJSON(t *testing.T, args ...string) *benchReport {
	t.Helper()
	code, out, errOut := floodgate(t, append([]string{"bench", "--json", "--quiet"}, args...)...)
	if code != 0 || errOut != "" {
		t.Fatalf("floodgate bench %v: exit %d, stderr %q, stdout:\n%s", args, code, errOut, out)
	}
	var rep benchReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatalf("the report is not JSON: %v\n%s", err, out)
	}
	if got := rep.OK + rep.OverLimit + rep.Errors; got != rep.Requests {
		t.Errorf("OK %d + OVER_LIMIT %d + errors %d = %d, want requests %d", rep.OK, rep.OverLimit, rep.Errors, got, rep.Requests)
	}
	return &rep
}

type benchWant struct {
	requests, ok, over int64
	api, loop          string
}

func (w benchWant) check(t *testing.T, rep *benchReport) {
	t.Helper()
	if rep.Requests != w.requests || rep.OK != w.ok || rep.OverLimit != w.over || rep.Errors != 0 ||
		rep.API != w.api || rep.Loop != w.loop {
		t.Errorf("got requests %d, OK %d, OVER_LIMIT %d, errors %d (%v), api %s, loop %s\nwant requests %d, OK %d, OVER_LIMIT %d, errors 0, api %s, loop %s",
			rep.Requests, rep.OK, rep.OverLimit, rep.Errors, rep.ErrorKinds, rep.API, rep.Loop,
			w.requests, w.ok, w.over, w.api, w.loop)
	}
}

func TestBenchCounts(t *testing.T) {
	grpcAddr, httpURL := startBenchServer(t, "")
	for _, tc := range []struct {
		name string
		args []string
		want benchWant
	}{
		// One hot key: the probe (cost 0) consumes nothing, so exactly the
		// bucket's 100 are admitted.
		{"grpc/one key", []string{"--addr", grpcAddr, "user=grpc"}, benchWant{500, 100, 400, "grpc", "closed"}},
		// Ten keys of 5 each: every key is drawn far more than 5 times in 500
		// requests (the chance that one is not is below 1e-14).
		{"grpc/keys", []string{"--addr", grpcAddr, "--keys", "10", "team=grpc{n}"}, benchWant{500, 50, 450, "grpc", "closed"}},
		{"http-check/one key", []string{"--http", httpURL, "user=check"}, benchWant{500, 100, 400, "http-check", "closed"}},
		{"http-check/keys", []string{"--http", httpURL + "/v1/check", "--keys", "10", "team=check{n}"}, benchWant{500, 50, 450, "http-check", "closed"}},
		{"http-json/one key", []string{"--http", httpURL + "/json", "user=json"}, benchWant{500, 100, 400, "http-json", "closed"}},
		{"http-json/keys", []string{"--http", httpURL + "/json", "--keys", "10", "team=json{n}"}, benchWant{500, 50, 450, "http-json", "closed"}},
		// Two descriptors are decided together: a request over the team's
		// limit consumes nothing from the user's.
		{"grpc/two descriptors", []string{"--addr", grpcAddr, "user=two", "team=two"}, benchWant{500, 5, 495, "grpc", "closed"}},
		{"http-json/two descriptors", []string{"--http", httpURL + "/json", "user=two-json", "team=two-json"}, benchWant{500, 5, 495, "http-json", "closed"}},
		// Cost 0 peeks: nothing is consumed, everything is OK.
		{"grpc/peek", []string{"--addr", grpcAddr, "--cost", "0", "team=peek"}, benchWant{500, 500, 0, "grpc", "closed"}},
		{"http-check/cost", []string{"--http", httpURL, "--cost", "10", "user=cost"}, benchWant{500, 10, 490, "http-check", "closed"}},
		// Open loop: requests on a schedule; the report adds service time
		// and send lag.
		{"grpc/open loop", []string{"--addr", grpcAddr, "--rate", "20000", "user=open"}, benchWant{500, 100, 400, "grpc", "open"}},
		{"http-check/open loop", []string{"--http", httpURL, "--rate", "20000", "user=open-http"}, benchWant{500, 100, 400, "http-check", "open"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append([]string{"--domain", "bench", "--requests", "500", "--concurrency", "8"}, tc.args...)
			rep := benchJSON(t, args...)
			tc.want.check(t, rep)
			if rep.Concurrency != 8 || rep.Domain != "bench" || rep.Latency.Max <= 0 || rep.Latency.P50 > rep.Latency.P99 || rep.Latency.P99 > rep.Latency.Max {
				t.Errorf("report: %+v", rep)
			}
			if open := tc.want.loop == "open"; open != (rep.ServiceTime != nil && rep.SendLag != nil) || open && (rep.Rate != 20000 || rep.Scheduled != 500) {
				t.Errorf("loop %s: rate %v, scheduled %d, service time %v, send lag %v", rep.Loop, rep.Rate, rep.Scheduled, rep.ServiceTime, rep.SendLag)
			}
		})
	}
}

func TestBenchText(t *testing.T) {
	grpcAddr, _ := startBenchServer(t, "")
	code, out, errOut := floodgate(t, "bench", "--addr", grpcAddr, "--domain", "bench", "--requests", "30",
		"--concurrency", "4", "--conns", "2", "--keys", "3", "user=text{n}")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	// Each of the three keys admits 100: all 30 are OK. The run is shorter
	// than a second, so stderr (not a terminal) gets no progress line.
	fields := map[string][]string{}
	for line := range strings.Lines(out) {
		if f := strings.Fields(line); len(f) > 1 {
			fields[f[0]] = f[1:]
		}
	}
	for _, want := range [][]string{
		{"requests", "30"},
		{"OK", "30", "100.00%"},
		{"OVER_LIMIT", "0", "0.00%"},
		{"errors", "0", "0.00%"},
		{"p50", "p90", "p99", "p99.9", "max", "mean"},
	} {
		if got := fields[want[0]]; strings.Join(got, " ") != strings.Join(want[1:], " ") {
			t.Errorf("line %q: got %q, want %q\n%s", want[0], got, want[1:], out)
		}
	}
	for _, want := range []string{
		"gRPC " + grpcAddr + ` (h2 client), domain "bench", user=text{n} over 3 keys` + "\n",
		"closed loop, 4 workers on 2 connections, ",
		"\nlatency ",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in\n%s", want, out)
		}
	}
	if len(fields["latency"]) != 6 {
		t.Errorf("latency line: %q", fields["latency"])
	}
	if errOut != "" {
		t.Errorf("stderr %q", errOut)
	}
}

func TestBenchToken(t *testing.T) {
	grpcAddr, httpURL := startBenchServer(t, "s3cret")
	for _, target := range [][]string{{"--addr", grpcAddr}, {"--http", httpURL}} {
		args := append([]string{"bench", "--domain", "bench", "--requests", "10", "--quiet"}, target...)
		code, out, errOut := floodgate(t, append(args, "user=token")...)
		if code != 1 || out != "" || !strings.Contains(errOut, "missing or wrong bearer token") || !strings.Contains(errOut, "Is 'floodgate serve' running there") {
			t.Errorf("%v without a token: exit %d, stdout %q, stderr %q", target, code, out, errOut)
		}
		rep := benchJSON(t, append(append([]string{"--domain", "bench", "--requests", "10", "--token", "s3cret"}, target...), "user=token")...)
		if rep.OK != 10 {
			t.Errorf("%v with the token: %+v", target, rep)
		}
	}
}

func TestBenchUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	for _, target := range [][]string{{"--addr", addr}, {"--http", "http://" + addr}} {
		args := append([]string{"bench", "--domain", "bench", "--timeout", "2s"}, target...)
		code, out, errOut := floodgate(t, append(args, "user=alice")...)
		if code != 1 || out != "" || !strings.Contains(errOut, addr) || !strings.Contains(errOut, "Is 'floodgate serve' running there") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q", target, code, out, errOut)
		}
	}
}

func TestBenchUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // in stderr
	}{
		{[]string{"user=a"}, "--domain is required"},
		{[]string{"--domain", "d"}, "give at least one descriptor"},
		{[]string{"--domain", "d", "user"}, `descriptor 1 "user": entry "user" is not key=value`},
		{[]string{"--domain", "d", "--concurrency", "0", "user=a"}, "--concurrency must be at least 1, got 0"},
		{[]string{"--domain", "d", "--conns", "-1", "user=a"}, "--conns must be 0 (automatic) or more, got -1"},
		{[]string{"--domain", "d", "--keys", "0", "user=a"}, "--keys must be at least 1, got 0"},
		{[]string{"--domain", "d", "--keys", "100", "user=a"}, "--keys 100: no descriptor contains {n}"},
		{[]string{"--domain", "d", "--requests", "-5", "user=a"}, "--requests must be 0 (no limit) or more, got -5"},
		{[]string{"--domain", "d", "--rate", "-1", "user=a"}, "--rate must be 0 (closed loop) or a positive number"},
		{[]string{"--domain", "d", "--rate", "NaN", "user=a"}, "--rate must be 0"},
		{[]string{"--domain", "d", "--duration", "0s", "user=a"}, "--duration must be positive, got 0s"},
		{[]string{"--domain", "d", "--duration", "soon", "user=a"}, `invalid value "soon" for flag -duration`},
		{[]string{"--domain", "d", "--timeout", "0s", "user=a"}, "--timeout must be positive, got 0s"},
		{[]string{"--domain", "d", "--concurrency", "many", "user=a"}, `invalid value "many" for flag -concurrency`},
		{[]string{"--domain", "d", "--addr", "x:1", "--http", "http://x", "user=a"}, "--addr (gRPC) and --http exclude each other"},
		{[]string{"--domain", "d", "--http", "ftp://x", "user=a"}, `--http "ftp://x": want an http:// or https:// URL`},
		{[]string{"--domain", "d", "--http", "localhost:8080", "user=a"}, `--http "localhost:8080": want an http:// or https:// URL`},
		{[]string{"--domain", "d", "--http", "http://x/v2/decide", "user=a"}, "the path must end in /v1/check or /json"},
		{[]string{"--domain", "d", "--http", "https://x", "--tls", "user=a"}, "--tls is for gRPC"},
		{[]string{"--domain", "d", "--bogus", "user=a"}, "flag provided but not defined: -bogus"},
	} {
		code, out, errOut := floodgate(t, append([]string{"bench"}, tc.args...)...)
		if code != 2 || out != "" || !strings.Contains(errOut, tc.want) || !strings.HasPrefix(errOut, "floodgate bench: ") ||
			!strings.HasSuffix(errOut, "Run 'floodgate bench --help' for usage.\n") {
			t.Errorf("floodgate bench %v: exit %d, stdout %q, stderr %q, want %q", tc.args, code, out, errOut, tc.want)
		}
	}
	code, out, _ := floodgate(t, "bench", "--help")
	if code != 0 || !strings.Contains(out, "Examples:\n  floodgate bench --domain api user=alice") || !strings.Contains(out, "-concurrency workers") {
		t.Errorf("bench --help: exit %d\n%s", code, out)
	}
}

func TestBenchHTTPBody(t *testing.T) {
	cfg := &benchConfig{api: "check", domain: `a{n}"b`, args: []string{"user=u{n},path=/x", "team=t"}}
	for _, a := range cfg.args {
		d, err := parseDescriptor(a)
		if err != nil {
			t.Fatal(err)
		}
		cfg.descs = append(cfg.descs, d)
	}
	h := &benchHTTP{cfg: cfg}
	// The domain's {n} is escaped, so only the descriptors' is replaced.
	if got, want := h.body(3), `{"domain":"a\u007bn}\"b","descriptors":[{"user":"u{n}","path":"/x"},{"team":"t"}],"cost":3}`; got != want {
		t.Errorf("check body\n got %s\nwant %s", got, want)
	}
	cfg.api = "json"
	if got, want := h.body(0), `{"domain":"a\u007bn}\"b","descriptors":[{"entries":[{"key":"user","value":"u{n}"},{"key":"path","value":"/x"}],"hitsAddend":"0"},{"entries":[{"key":"team","value":"t"}],"hitsAddend":"0"}]}`; got != want {
		t.Errorf("json body\n got %s\nwant %s", got, want)
	}
}

func TestBenchErrKinds(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{grpcstatus.Error(codes.Unavailable, "connection refused"), "Unavailable"},
		{grpcstatus.Error(codes.DeadlineExceeded, "too slow"), "DeadlineExceeded"},
		{&benchHTTPError{status: 503, msg: "store down"}, "HTTP 503"},
		{fmt.Errorf("post: %w", context.DeadlineExceeded), "timeout"},
		{fmt.Errorf("dial: %w", syscall.ECONNREFUSED), "connection refused"},
		{fmt.Errorf("read: %w", syscall.ECONNRESET), "connection reset"},
		{errUnknownCode, "code UNKNOWN"},
		{errors.New("something else"), "transport"},
	} {
		if got := benchErrKind(tc.err); got != tc.want {
			t.Errorf("benchErrKind(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
	// A worker tells at most maxErrKinds kinds apart.
	w := &benchWorker{errs: map[string]*benchErrCount{}}
	for i := range maxErrKinds + 5 {
		w.fail(&benchHTTPError{status: 500 + i})
		w.fail(&benchHTTPError{status: 500 + i})
	}
	if len(w.errs) != maxErrKinds+1 || w.errs["other"].Count != 10 || w.errs["HTTP 500"].Count != 2 || w.failed.Load() != 2*(maxErrKinds+5) {
		t.Errorf("%d kinds, other %+v, failed %d", len(w.errs), w.errs["other"], w.failed.Load())
	}
}

func TestBenchHist(t *testing.T) {
	for _, ns := range []uint64{0, 1, 255, 256, 257, 1000, 12345, 1e6, 987654321, 1 << 39} {
		got := histValue(histBucket(ns))
		if diff := max(got, ns) - min(got, ns); diff > ns/200+1 {
			t.Errorf("histValue(histBucket(%d)) = %d: more than 0.5%% off", ns, got)
		}
	}
	var a, b benchHist
	for i := 1; i <= 1000; i++ {
		h := &a
		if i%2 == 0 {
			h = &b
		}
		h.record(time.Duration(i) * time.Microsecond)
	}
	var h benchHist
	h.merge(&a)
	h.merge(&b)
	h.merge(&benchHist{})
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 500 * time.Microsecond}, {0.9, 900 * time.Microsecond}, {0.99, 990 * time.Microsecond}, {0.999, 999 * time.Microsecond}, {1, time.Millisecond}} {
		got := h.quantile(tc.q)
		if d := got - tc.want; d < -tc.want/200 || d > tc.want/200 {
			t.Errorf("quantile(%v) = %v, want %v within 0.5%%", tc.q, got, tc.want)
		}
	}
	if h.n != 1000 || h.max != int64(time.Millisecond) || h.mean() != 500500*time.Nanosecond {
		t.Errorf("n %d, max %d, mean %v", h.n, h.max, h.mean())
	}
	if got := h.quantile(1); got != time.Millisecond {
		t.Errorf("quantile(1) = %v, want the exact maximum", got)
	}
	var empty benchHist
	if empty.quantile(0.99) != 0 || empty.mean() != 0 {
		t.Error("an empty histogram's quantiles are not 0")
	}
}

func TestBenchProgressLine(t *testing.T) {
	start := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	r := &benchRun{cfg: &benchConfig{duration: 10 * time.Second}, start: start}
	now := start.Add(4200 * time.Millisecond)
	if got, want := r.progressLine(now, 84211, 3, 0, 20134.7, true),
		"[========>           ]  42%  4.2s/10.0s  20,134/s  ok 84,211  over 3  err 0"; got != want {
		t.Errorf("bar\n got %q\nwant %q", got, want)
	}
	if got, want := r.progressLine(now, 84211, 3, 0, 20134.7, false),
		"floodgate bench: 4.2s/10.0s  20,134 decisions/s  OK 84,211  OVER_LIMIT 3  errors 0"; got != want {
		t.Errorf("line\n got %q\nwant %q", got, want)
	}
	r.cfg = &benchConfig{requests: 1000}
	if got, want := r.progressLine(now, 1000, 0, 0, 0, true),
		"[====================] 100%  1,000/1,000  0/s  ok 1,000  over 0  err 0"; got != want {
		t.Errorf("requests bar\n got %q\nwant %q", got, want)
	}
}

func TestBenchFormat(t *testing.T) {
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", 1234567: "1,234,567", -20000: "-20,000"} {
		if got := benchCount(n); got != want {
			t.Errorf("benchCount(%d) = %q, want %q", n, got, want)
		}
	}
	for us, want := range map[float64]string{3.25: "3.2µs", 412.4: "412µs", 1210: "1.21ms", 31000: "31.0ms", 250000: "250ms", 12e6: "12.0s"} {
		if got := benchDur(us); got != want {
			t.Errorf("benchDur(%v) = %q, want %q", us, got, want)
		}
	}
}
