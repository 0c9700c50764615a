// Command stall measures what one floodgate serve --redis answers while its
// Redis stalls: the three figures of issue 27's "Done when". For each run it
// starts a private redis-server from PATH (internal/testenv's, as the
// tests do: a free loopback port, nothing kept on disk) and one floodgate serve on
// it, with defaults (plus -serve-args) and a configuration of one limit:
// domain stall, descriptor key k, a fixed window of -limit requests a second.
// -clients goroutines then call ShouldRateLimit (Envoy RLS v3 over gRPC, one
// connection, a 5 s deadline per call) for k=x in a closed loop. After -lead
// the redis-server process is stopped (SIGSTOP) for the pause, then resumed
// (SIGCONT), and the clients run -tail more. Every answer is recorded (send
// time, answer time, OK, OVER_LIMIT or error, and an OK's
// duration_until_reset). The run is not a test: nothing is asserted, the
// figures are reported.
//
// Build floodgate, then run from bench/:
//
//	go build -o /tmp/fg ./cmd/floodgate
//	cd bench && go run ./cmd/stall -floodgate /tmp/fg -pauses 100ms,2s -rounds 3
//	go run ./cmd/stall -floodgate /tmp/fg -pause 2s -serve-args '--leases --failure-mode allow'
//
// -rounds repeats every pause, interleaved (round 1: each pause, round 2: each
// pause, ...), each run with its own Redis and server. -json prints one JSON
// object per run instead of the lines below.
//
// The figures of each run:
//
//   - (a) admitted per one-second window: every OK answer is placed in the
//     window that ends at round(answer time + its duration_until_reset) to
//     the second (an OK without one, in the wall-clock second it was
//     answered in: counted as no_reset), and the counts are printed in order;
//     a count over 1.05×limit+2 is flagged "!", a window that overlaps the
//     pause is marked "p". The first and last windows are partial.
//   - (b) latency, answer time − send time as the client saw it, p50, p99
//     and max, of the calls sent during the pause (between SIGSTOP and
//     SIGCONT) and of the calls sent outside it. The server's store timeout
//     (--timeout in -serve-args, else floodgate's default of 50ms) is printed
//     beside it: the issue asks for the pause's p99 at most the timeout plus a
//     few ms.
//   - (c) recovery: how long after SIGCONT the store decides again. It is
//     read from the server's /metrics, polled every 5 ms from just before
//     SIGCONT until the end of the tail (at most 5 s): the sums over labels of
//     floodgate_backend_duration_seconds_count (every timed store call,
//     failed or not), floodgate_backend_errors_total (split into the calls
//     that were timed, and reason="breaker_open", refused without a call) and
//     floodgate_failure_mode_total. A poll interval holds a successful store
//     call when the timed calls grew by more than the timed errors; the
//     recovery time is the first poll after SIGCONT that ends such an interval
//     and after which neither the errors nor the failure-mode answers grow in
//     the next 50 ms (compared with the first poll at least 50 ms later). It
//     is reported in ms after SIGCONT, with a resolution of about 5 ms plus
//     one scrape (a poll's time is when its scrape was answered); "not seen"
//     when no poll qualified before the tail ended. The longest gap between
//     polls is printed with it: on a busy machine the poller itself can miss
//     its 5 ms. A store call needs a decision that asks the store: with quota
//     leases (the default), a key answered from its lease, or a window
//     already spent, may go without one until the next window, so (c) is
//     printed with its context: the store calls, store errors and
//     failure-mode answers during the pause (approximate at the edges: the
//     scrapes are taken just before SIGSTOP and SIGCONT), the first store
//     call after SIGCONT, and when the next one-second window began. A store
//     timeout after the resume (a busy machine can cause one) pushes (c)
//     past it: read the context before the figure.
//   - the answers: total, OK, OVER_LIMIT, errors (by gRPC code), and how many
//     were answered during the pause; and the failure-mode answers, the
//     growth of floodgate_failure_mode_total from before the clients start
//     to after they stop.
//
// The timings depend on the machine: the clients, floodgate and redis-server
// share its cores, and on a machine shared with other work they vary from run
// to run. Use -rounds and compare the runs' spread before reading much into
// one figure.
package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"github.com/floodgate-dev/floodgate/internal/testenv"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// defaultTimeout is floodgate serve's --timeout default (server.DefaultTimeout).
const defaultTimeout = 50 * time.Millisecond

const (
	callDeadline = 5 * time.Second       // each ShouldRateLimit's
	pollEvery    = 5 * time.Millisecond  // /metrics after SIGCONT
	pollFor      = 5 * time.Second       // at most
	quietFor     = 50 * time.Millisecond // no errors nor failure-mode answers after recovery
)

// durations is a repeatable flag of durations, each value one or a comma list.
type durations []time.Duration

func (d *durations) String() string {
	s := make([]string, len(*d))
	for i, v := range *d {
		s[i] = v.String()
	}
	return strings.Join(s, ",")
}

func (d *durations) Set(v string) error {
	for f := range strings.SplitSeq(v, ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		p, err := time.ParseDuration(f)
		if err != nil {
			return err
		}
		if p <= 0 {
			return fmt.Errorf("pause %s: not positive", f)
		}
		*d = append(*d, p)
	}
	return nil
}

type config struct {
	floodgate              string
	clients, limit, rounds int
	lead, tail             time.Duration
	serveArgs              []string
	json                   bool
}

func main() {
	var (
		c      config
		pauses durations
		sargs  string
	)
	flag.StringVar(&c.floodgate, "floodgate", "", "`path` of a built floodgate binary (required)")
	flag.Var(&pauses, "pause", "how long Redis is stopped (SIGSTOP) in a run; repeatable, or a comma list (default 100ms)")
	flag.Var(&pauses, "pauses", "same as -pause")
	flag.IntVar(&c.clients, "clients", 20, "closed-loop clients, each with one ShouldRateLimit in flight")
	flag.DurationVar(&c.lead, "lead", 1500*time.Millisecond, "how long the clients run before the pause")
	flag.DurationVar(&c.tail, "tail", 1500*time.Millisecond, "how long the clients run after Redis resumes")
	flag.IntVar(&c.limit, "limit", 100, "the limit, requests per second (a fixed window, on one key)")
	flag.IntVar(&c.rounds, "rounds", 1, "how many times to run every pause (interleaved)")
	flag.StringVar(&sargs, "serve-args", "", "extra `arguments` of floodgate serve, split at white space (no quoting), e.g. '--leases --failure-mode allow --timeout 50ms'")
	flag.BoolVar(&c.json, "json", false, "print one JSON object per run instead of text")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: stall -floodgate PATH [flags]\n\n"+
			"Measures one floodgate serve --redis while its Redis is paused (SIGSTOP/SIGCONT):\n"+
			"admitted decisions per one-second window, latency during and outside the pause,\n"+
			"failure-mode answers, and how soon after the resume the store decides again.\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if c.floodgate == "" || flag.NArg() > 0 || c.clients < 1 || c.limit < 1 || c.rounds < 1 || c.lead <= 0 || c.tail <= 0 {
		flag.Usage()
		os.Exit(2)
	}
	if len(pauses) == 0 {
		pauses = durations{100 * time.Millisecond}
	}
	c.serveArgs = strings.Fields(sargs)
	var err error
	if c.floodgate, err = exec.LookPath(c.floodgate); err != nil {
		fatal(err)
	}
	if c.floodgate, err = filepath.Abs(c.floodgate); err != nil {
		fatal(err)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	enc := json.NewEncoder(os.Stdout)
	n, total := 0, c.rounds*len(pauses)
	for range c.rounds {
		for _, p := range pauses {
			n++
			r, err := run(ctx, c, p)
			if err != nil {
				stop()
				fatal(fmt.Errorf("run %d/%d (pause %s): %w", n, total, p, err))
			}
			r.Run = n
			if c.json {
				if err := enc.Encode(r); err != nil {
					fatal(err)
				}
			} else {
				r.print(os.Stdout, total)
			}
		}
	}
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "stall:", err)
	os.Exit(1)
}

// answer is one ShouldRateLimit as a client saw it.
type answer struct {
	sent, done time.Time
	code       rls.RateLimitResponse_Code // OK or OVER_LIMIT when err is nil
	reset      time.Duration              // an OK's duration_until_reset; 0 without one
	err        error
}

// latency is a distribution's summary in ms.
type latency struct {
	N   int     `json:"n"`
	P50 float64 `json:"p50_ms"`
	P99 float64 `json:"p99_ms"`
	Max float64 `json:"max_ms"`
}

type window struct {
	End      int64 `json:"end_unix"` // the window's end, unix seconds
	Admitted int   `json:"admitted"`
	Over     bool  `json:"over_bound"`
	Pause    bool  `json:"overlaps_pause"`
}

// result is one run's figures.
type result struct {
	Run       int      `json:"run"`
	Pause     string   `json:"pause"`
	PauseMS   float64  `json:"pause_ms"` // measured, SIGSTOP to SIGCONT
	ServeArgs []string `json:"serve_args"`
	Clients   int      `json:"clients"`
	Limit     int      `json:"limit"`
	TimeoutMS float64  `json:"timeout_ms"` // the server's store timeout, for (b)

	Answers       int            `json:"answers"`
	OK            int            `json:"ok"`
	OverLimit     int            `json:"over_limit"`
	Errors        int            `json:"errors"`
	ErrorCodes    map[string]int `json:"error_codes,omitempty"`
	DuringPause   int            `json:"answered_during_pause"`
	FailureMode   float64        `json:"failure_mode_answers"`
	NoReset       int            `json:"ok_without_reset"`
	Bound         float64        `json:"window_bound"` // 1.05×limit+2
	Windows       []window       `json:"windows"`
	MaxAdmitted   int            `json:"max_admitted"`
	WindowsOver   int            `json:"windows_over_bound"`
	LatencyPause  latency        `json:"latency_sent_during_pause"`
	LatencyOther  latency        `json:"latency_sent_outside_pause"`
	RecoveryMS    *float64       `json:"recovery_ms"` // null: not seen
	RecoveryNote  string         `json:"recovery_note,omitempty"`
	RecoveryPolls int            `json:"recovery_polls"`
	// Context for (c), from /metrics: between the scrapes just before
	// SIGSTOP and just before SIGCONT, the timed store calls, the store
	// errors (all reasons), those refused by an open breaker, and the
	// failure-mode answers; and the first poll after SIGCONT that saw a
	// timed store call, failed or not (null: none).
	PauseCalls       float64  `json:"pause_store_calls"`
	PauseErrors      float64  `json:"pause_store_errors"`
	PauseRefused     float64  `json:"pause_breaker_refused"`
	PauseFailureMode float64  `json:"pause_failure_mode_answers"`
	FirstCallMS      *float64 `json:"first_store_call_ms"`
	// The longest gap between two polls (the resolution (c) actually had:
	// 5 ms plus a scrape, more when the machine is busy), and how long after
	// SIGCONT the next wall-clock second, a new fixed window, began.
	MaxPollGapMS float64 `json:"max_poll_gap_ms"`
	NextSecondMS float64 `json:"next_window_ms"`
}

func (r *result) print(w io.Writer, total int) {
	args := strings.Join(r.ServeArgs, " ")
	fmt.Fprintf(w, "run %d/%d: pause %s (measured %.1f ms), serve-args %q, %d clients, limit %d/s\n",
		r.Run, total, r.Pause, r.PauseMS, args, r.Clients, r.Limit)
	fmt.Fprintf(w, "  answers: %d (OK %d, OVER_LIMIT %d, errors %d", r.Answers, r.OK, r.OverLimit, r.Errors)
	if len(r.ErrorCodes) > 0 {
		keys := make([]string, 0, len(r.ErrorCodes))
		for k := range r.ErrorCodes {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for i, k := range keys {
			sep := ": "
			if i > 0 {
				sep = ", "
			}
			fmt.Fprintf(w, "%s%s %d", sep, k, r.ErrorCodes[k])
		}
	}
	fmt.Fprintf(w, "), %d answered during the pause\n", r.DuringPause)
	var b strings.Builder
	for _, win := range r.Windows {
		fmt.Fprintf(&b, " %d", win.Admitted)
		if win.Pause {
			b.WriteByte('p')
		}
		if win.Over {
			b.WriteByte('!')
		}
	}
	fmt.Fprintf(w, "  (a) admitted per 1 s window (p: overlaps the pause, !: over %.2f):%s\n", r.Bound, b.String())
	fmt.Fprintf(w, "      max %d, %d window(s) over the bound", r.MaxAdmitted, r.WindowsOver)
	if r.NoReset > 0 {
		fmt.Fprintf(w, ", %d OK without duration_until_reset (placed by answer time)", r.NoReset)
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "  (b) latency sent during the pause:  n %d, p50 %.2f ms, p99 %.2f ms, max %.2f ms (timeout %.0f ms)\n",
		r.LatencyPause.N, r.LatencyPause.P50, r.LatencyPause.P99, r.LatencyPause.Max, r.TimeoutMS)
	fmt.Fprintf(w, "      latency sent outside the pause: n %d, p50 %.2f ms, p99 %.2f ms, max %.2f ms\n",
		r.LatencyOther.N, r.LatencyOther.P50, r.LatencyOther.P99, r.LatencyOther.Max)
	if r.RecoveryMS != nil {
		fmt.Fprintf(w, "  (c) store decides again %.1f ms after SIGCONT (/metrics every 5 ms; %d polls, longest gap %.1f ms)\n", *r.RecoveryMS, r.RecoveryPolls, r.MaxPollGapMS)
	} else {
		fmt.Fprintf(w, "  (c) store decides again: not seen (%s; %d polls, longest gap %.1f ms)\n", r.RecoveryNote, r.RecoveryPolls, r.MaxPollGapMS)
	}
	first := "none seen"
	if r.FirstCallMS != nil {
		first = fmt.Sprintf("%.1f ms after SIGCONT", *r.FirstCallMS)
	}
	fmt.Fprintf(w, "      during the pause: %.0f store calls timed, %.0f store errors (%.0f refused by the breaker), %.0f failure-mode answers; first store call after SIGCONT: %s; next window began %.1f ms after SIGCONT\n",
		r.PauseCalls, r.PauseErrors, r.PauseRefused, r.PauseFailureMode, first, r.NextSecondMS)
	fmt.Fprintf(w, "  failure-mode answers (floodgate_failure_mode_total, over the run): %.0f\n", r.FailureMode)
}

// proc is a child process and its exit.
type proc struct {
	name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error // Wait's, once done is closed
}

func start(name, path string, args []string, dir string, out io.Writer) (*proc, error) {
	cmd := exec.Command(path, args...)
	cmd.Dir = dir
	cmd.Stdout, cmd.Stderr = out, out
	// Its own process group: a terminal's ^C reaches this program only,
	// which then stops the children in order.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	return p, nil
}

func (p *proc) signal(sig syscall.Signal) error { return p.cmd.Process.Signal(sig) }

// stop resumes p (it may be stopped), asks it to exit with SIGTERM, and
// kills it if it has not after grace.
func (p *proc) stop(grace time.Duration) {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.signal(syscall.SIGCONT)
	_ = p.signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// waitFor polls up until it is true, p exits, ctx ends or limit passes.
func waitFor(ctx context.Context, p *proc, log string, limit time.Duration, up func() bool) error {
	deadline := time.Now().Add(limit)
	for !up() {
		select {
		case <-p.done:
			return fmt.Errorf("%s exited (%v) before it was ready:\n%s", p.name, p.err, tail(log))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %s:\n%s", p.name, limit, tail(log))
		}
	}
	return nil
}

// tail is the end of the log file at path.
func tail(path string) string {
	b, _ := os.ReadFile(path)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

const configYAML = `domain: stall
descriptors:
  - key: k
    rate_limit:
      unit: second
      requests_per_unit: %d
`

// run is one run: its own Redis and server, the clients, one pause.
func run(ctx context.Context, c config, pause time.Duration) (res *result, err error) {
	dir, err := os.MkdirTemp("", "floodgate-stall-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	cfgPath := filepath.Join(dir, "stall.yaml")
	if err := os.WriteFile(cfgPath, fmt.Appendf(nil, configYAML, c.limit), 0o644); err != nil {
		return nil, err
	}
	ports := make([]int, 2)
	for i := range ports {
		if ports[i], err = freePort(); err != nil {
			return nil, err
		}
	}
	grpcAddr := fmt.Sprintf("127.0.0.1:%d", ports[0])
	httpAddr := fmt.Sprintf("127.0.0.1:%d", ports[1])

	// A private Redis, as the project's tests start theirs: a free port,
	// nothing kept on disk, Pause and Resume by SIGSTOP and SIGCONT.
	redis, err := testenv.StartRedis()
	if err != nil {
		return nil, err
	}
	defer redis.Close()
	redisAddr := redis.Addr

	serveLog := filepath.Join(dir, "floodgate.log")
	slog, err := os.Create(serveLog)
	if err != nil {
		return nil, err
	}
	defer slog.Close()
	args := append([]string{"serve", "--config", cfgPath, "--redis", "redis://" + redisAddr,
		"--grpc-addr", grpcAddr, "--http-addr", httpAddr, "--log-format", "json"}, c.serveArgs...)
	srv, err := start("floodgate serve", c.floodgate, args, dir, slog)
	if err != nil {
		return nil, err
	}
	defer srv.stop(15 * time.Second)
	hc := &http.Client{Timeout: 2 * time.Second}
	if err := waitFor(ctx, srv, serveLog, 20*time.Second, func() bool {
		resp, err := hc.Get("http://" + httpAddr + "/readyz")
		if err != nil {
			return false
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}); err != nil {
		return nil, err
	}
	metricsURL := "http://" + httpAddr + "/metrics"
	m0, err := scrape(hc, metricsURL)
	if err != nil {
		return nil, err
	}

	conn, err := grpc.NewClient(grpcAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	client := rls.NewRateLimitServiceClient(conn)
	req := &rls.RateLimitRequest{Domain: "stall", Descriptors: []*rlsv3.RateLimitDescriptor{
		{Entries: []*rlsv3.RateLimitDescriptor_Entry{{Key: "k", Value: "x"}}},
	}}

	// The clients: closed loops until halt, each call with its own deadline
	// (never cut short by halt).
	var (
		halt atomic.Bool
		wg   sync.WaitGroup
		recs = make([][]answer, c.clients)
	)
	for i := range c.clients {
		wg.Go(func() {
			for !halt.Load() {
				a := answer{sent: time.Now()}
				cctx, cancel := context.WithTimeout(context.Background(), callDeadline)
				resp, err := client.ShouldRateLimit(cctx, req)
				a.done = time.Now()
				cancel()
				if err != nil {
					a.err = err
				} else {
					a.code = resp.GetOverallCode()
					if sts := resp.GetStatuses(); a.code == rls.RateLimitResponse_OK && len(sts) > 0 {
						a.reset = sts[0].GetDurationUntilReset().AsDuration()
					}
				}
				recs[i] = append(recs[i], a)
			}
		})
	}
	stopClients := func() {
		halt.Store(true)
		wg.Wait()
	}
	clientsStopped := false
	defer func() {
		if !clientsStopped {
			stopClients()
		}
	}()

	if err := sleep(ctx, c.lead); err != nil {
		return nil, err
	}
	before, err := scrape(hc, metricsURL)
	if err != nil {
		return nil, err
	}
	if err := redis.Pause(); err != nil {
		return nil, fmt.Errorf("SIGSTOP redis-server: %w", err)
	}
	defer redis.Resume() // on an early return; harmless after
	stoppedAt := time.Now()
	if err := sleep(ctx, pause); err != nil {
		return nil, err
	}
	// The baseline of the recovery: just before SIGCONT (floodgate's HTTP
	// API does not wait for Redis).
	base, err := scrape(hc, metricsURL)
	if err != nil {
		return nil, err
	}
	if err := redis.Resume(); err != nil {
		return nil, fmt.Errorf("SIGCONT redis-server: %w", err)
	}
	resumedAt := time.Now()
	tailEnd := resumedAt.Add(c.tail)
	polls := []sample{base}
	pollEnd := resumedAt.Add(min(c.tail, pollFor))
	for next := resumedAt; ; {
		next = next.Add(pollEvery)
		if next.After(pollEnd) {
			break
		}
		if err := sleep(ctx, time.Until(next)); err != nil {
			return nil, err
		}
		s, err := scrape(hc, metricsURL)
		if err != nil {
			return nil, err
		}
		polls = append(polls, s)
	}
	if err := sleep(ctx, time.Until(tailEnd)); err != nil {
		return nil, err
	}
	stopClients()
	clientsStopped = true
	m1, err := scrape(hc, metricsURL)
	if err != nil {
		return nil, err
	}

	var all []answer
	for _, r := range recs {
		all = append(all, r...)
	}
	res = summarize(c, pause, all, stoppedAt, resumedAt)
	res.FailureMode = m1.failureMode - m0.failureMode
	res.RecoveryMS, res.RecoveryNote = recovery(polls, resumedAt)
	res.PauseCalls = base.calls - before.calls
	res.PauseErrors = base.errors - before.errors
	res.PauseRefused = base.refused - before.refused
	res.PauseFailureMode = base.failureMode - before.failureMode
	for _, p := range polls[1:] {
		if p.calls > base.calls {
			v := ms(p.at.Sub(resumedAt))
			res.FirstCallMS = &v
			break
		}
	}
	res.RecoveryPolls = len(polls) - 1
	for i := 1; i < len(polls); i++ {
		res.MaxPollGapMS = max(res.MaxPollGapMS, ms(polls[i].at.Sub(polls[i-1].at)))
	}
	res.NextSecondMS = ms(resumedAt.Truncate(time.Second).Add(time.Second).Sub(resumedAt))
	return res, nil
}

// sleep sleeps for d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// timeoutOf is the store timeout the server runs with: --timeout in args,
// else floodgate's default.
func timeoutOf(args []string) time.Duration {
	t := defaultTimeout
	for i, a := range args {
		name, val, hasVal := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if name != "timeout" || !strings.HasPrefix(a, "-") {
			continue
		}
		if !hasVal {
			if i+1 >= len(args) {
				continue
			}
			val = args[i+1]
		}
		if d, err := time.ParseDuration(val); err == nil {
			t = d
		}
	}
	return t
}

func summarize(c config, pause time.Duration, all []answer, stoppedAt, resumedAt time.Time) *result {
	r := &result{
		Pause:      pause.String(),
		PauseMS:    ms(resumedAt.Sub(stoppedAt)),
		ServeArgs:  c.serveArgs,
		Clients:    c.clients,
		Limit:      c.limit,
		TimeoutMS:  ms(timeoutOf(c.serveArgs)),
		Answers:    len(all),
		Bound:      1.05*float64(c.limit) + 2,
		ErrorCodes: map[string]int{},
	}
	if r.ServeArgs == nil {
		r.ServeArgs = []string{}
	}
	counts := map[int64]int{}
	var inPause, outside []time.Duration
	for _, a := range all {
		if !a.done.Before(stoppedAt) && a.done.Before(resumedAt) {
			r.DuringPause++
		}
		if !a.sent.Before(stoppedAt) && a.sent.Before(resumedAt) {
			inPause = append(inPause, a.done.Sub(a.sent))
		} else {
			outside = append(outside, a.done.Sub(a.sent))
		}
		switch {
		case a.err != nil:
			r.Errors++
			r.ErrorCodes[status.Code(a.err).String()]++
		case a.code == rls.RateLimitResponse_OK:
			r.OK++
			var end time.Time
			if a.reset > 0 {
				end = a.done.Add(a.reset).Round(time.Second)
			} else {
				r.NoReset++
				end = a.done.Truncate(time.Second).Add(time.Second)
			}
			counts[end.Unix()]++
		case a.code == rls.RateLimitResponse_OVER_LIMIT:
			r.OverLimit++
		default:
			r.Errors++
			r.ErrorCodes["code "+a.code.String()]++
		}
	}
	ends := make([]int64, 0, len(counts))
	for e := range counts {
		ends = append(ends, e)
	}
	slices.Sort(ends)
	for _, e := range ends {
		end := time.Unix(e, 0)
		w := window{End: e, Admitted: counts[e],
			Over:  float64(counts[e]) > r.Bound,
			Pause: end.After(stoppedAt) && end.Add(-time.Second).Before(resumedAt)}
		if w.Over {
			r.WindowsOver++
		}
		r.MaxAdmitted = max(r.MaxAdmitted, w.Admitted)
		r.Windows = append(r.Windows, w)
	}
	r.LatencyPause = summary(inPause)
	r.LatencyOther = summary(outside)
	return r
}

func ms(d time.Duration) float64 { return math.Round(float64(d)/1e3) / 1e3 }

// summary is ds's p50, p99 (nearest rank) and max.
func summary(ds []time.Duration) latency {
	if len(ds) == 0 {
		return latency{}
	}
	slices.Sort(ds)
	rank := func(p float64) time.Duration {
		i := int(math.Ceil(p*float64(len(ds)))) - 1
		return ds[max(i, 0)]
	}
	return latency{N: len(ds), P50: ms(rank(0.50)), P99: ms(rank(0.99)), Max: ms(ds[len(ds)-1])}
}

// sample is one scrape of /metrics: sums over labels, and when it was answered.
type sample struct {
	at          time.Time
	calls       float64 // floodgate_backend_duration_seconds_count
	errors      float64 // floodgate_backend_errors_total
	refused     float64 // its reason="breaker_open" (no call, not timed)
	failureMode float64 // floodgate_failure_mode_total
}

func scrape(hc *http.Client, url string) (sample, error) {
	resp, err := hc.Get(url)
	if err != nil {
		return sample{}, fmt.Errorf("scrape %s: %w", url, err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	s := sample{at: time.Now()}
	if err != nil {
		return s, fmt.Errorf("scrape %s: %w", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		return s, fmt.Errorf("scrape %s: %s", url, resp.Status)
	}
	for line := range bytes.Lines(body) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 || line[0] == '#' {
			continue
		}
		// name{labels} value [timestamp], or name value [timestamp]
		end := bytes.IndexAny(line, "{ ")
		if end < 0 {
			continue
		}
		name, labels := string(line[:end]), ""
		rest := line[end:]
		if rest[0] == '{' {
			rb := bytes.LastIndexByte(rest, '}')
			if rb < 0 {
				continue
			}
			labels, rest = string(rest[1:rb]), rest[rb+1:]
		}
		fields := bytes.Fields(rest)
		if len(fields) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(string(fields[0]), 64)
		if err != nil {
			continue
		}
		switch name {
		case "floodgate_backend_duration_seconds_count":
			s.calls += v
		case "floodgate_backend_errors_total":
			s.errors += v
			if strings.Contains(labels, `reason="breaker_open"`) {
				s.refused += v
			}
		case "floodgate_failure_mode_total":
			s.failureMode += v
		}
	}
	return s, nil
}

// recovery finds in polls (polls[0] taken just before SIGCONT, at
// resumedAt) the first poll that ends an interval holding a successful store
// call and after which, for quietFor, neither the store errors nor the
// failure-mode answers grow; its time after resumedAt in ms.
func recovery(polls []sample, resumedAt time.Time) (*float64, string) {
	for i := 1; i < len(polls); i++ {
		prev, cur := polls[i-1], polls[i]
		timedErrs := (cur.errors - cur.refused) - (prev.errors - prev.refused)
		if cur.calls-prev.calls <= timedErrs {
			continue // no successful store call in (prev, cur]
		}
		j := i + 1
		for j < len(polls) && polls[j].at.Sub(cur.at) < quietFor {
			j++
		}
		if j == len(polls) {
			return nil, fmt.Sprintf("a store call succeeded %.1f ms after SIGCONT, but the polls ended before %s of quiet could follow",
				ms(cur.at.Sub(resumedAt)), quietFor)
		}
		if later := polls[j]; later.errors == cur.errors && later.failureMode == cur.failureMode {
			v := ms(cur.at.Sub(resumedAt))
			return &v, ""
		}
	}
	if len(polls) < 2 {
		return nil, "no polls"
	}
	return nil, fmt.Sprintf("no store call followed by %s without store errors or failure-mode answers within %.0f ms of polling",
		quietFor, ms(polls[len(polls)-1].at.Sub(resumedAt)))
}
