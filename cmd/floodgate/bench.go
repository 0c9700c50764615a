package main

import (
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"text/tabwriter"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"
	gproto "google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

const benchUsage = `Usage: floodgate bench --domain DOMAIN [flags] DESCRIPTOR...

Measures a running floodgate (or any Envoy rate limit service): it sends
rate limit requests from --concurrency workers for --duration, or until
--requests have been sent, and reports decisions per second, the answers
(OK, OVER_LIMIT, errors by kind) and latency percentiles.

Requests go over gRPC (Envoy RLS v3 ShouldRateLimit) to --addr, or over HTTP
to --http: a URL whose path ends in /json gets Envoy's protojson, any other
(/v1/check when the URL has no path) floodgate's friendly JSON. Each
DESCRIPTOR is written as for 'floodgate check' (key=value,key2=value2, in
order); {n} in it is replaced, per request, by a number drawn uniformly from
0 to K-1 where K is --keys: --keys 1 (the default) is one hot key, --keys
10000 spreads the load over 10,000 keys.

The load is a closed loop by default: each worker sends its next request as
soon as the last one is answered, so decisions/s is what the server sustains
at that concurrency. --rate R makes it an open loop: requests are due on a
fixed schedule of R a second whatever the answers do, and latency is counted
from when each request was due, not from when it was sent, so a server that
stalls cannot hide the stall by slowing the load down (coordinated omission).
The report then adds the service time (from the send) and the send lag (how
late the workers were, when all of them were busy).

Over gRPC, --client h2 (the default without --tls) is floodgate's own lean
client: gRPC over cleartext HTTP/2 spoken directly, the calls of a
connection's workers sharing write syscalls and one reader decoding its
answers, with no goroutine per call. Envoy, the real client of a rate limit
service, calls it through such a lean C++ HTTP/2 client. grpc-go (--client
grpc-go, the default with --tls) costs more CPU per call, several times more
under a heavy load; on a machine shared with the server, that CPU is taken
from the server being measured, and a saturated client shows up as latency.
The h2 client dials host:port, unix:PATH or unix:///PATH.

Before the run, a request with cost 0 (it consumes nothing) on each gRPC
connection, or one over HTTP, checks that the server answers. Progress goes
to stderr: a bar with the live rate when stderr is a terminal, else a line a
second. The report goes to stdout. When client and server run on one
machine, they share its cores: the client's work is part of the numbers.

Exit status: 0 when every request was answered, 1 when the server cannot be
reached or some requests failed, 2 on a usage error.

Flags:
%s
Examples:
  floodgate bench --domain api user=alice                     # gRPC, 64 workers, 10s, one hot key
  floodgate bench --domain api --keys 10000 'user=user{n}'    # 10,000 distinct users
  floodgate bench --domain api --rate 20000 --keys 1000 'user=user{n}'   # open loop: p99 at 20,000/s
  floodgate bench --http http://localhost:8080 --domain api --requests 100000 user=alice
  floodgate bench --http http://localhost:8080/json --domain api --json 'user=u{n}' path=/upload
`

// benchConfig is a checked bench command line.
type benchConfig struct {
	api      string // "grpc", "check" (POST /v1/check) or "json" (POST /json)
	client   string // for gRPC: "h2" (benchH2) or "grpc-go" (benchGRPC)
	target   string // gRPC address or HTTP URL
	domain   string
	args     []string                         // the descriptor arguments, as given
	descs    []*rlscommon.RateLimitDescriptor // parsed from args, {n} not replaced
	keys     int
	cost     uint64
	workers  int
	conns    int
	duration time.Duration // 0: until requests are sent
	requests int64         // 0: until duration has passed
	rate     float64       // decisions/s; 0: closed loop
	timeout  time.Duration
	tlsConf  *tls.Config // gRPC over TLS, or an https URL's settings
	token    string
	asJSON   bool
	quiet    bool
}

func runBench(args []string, stdout, stderr io.Writer) int {
	const name = "floodgate bench"
	fs := newFlagSet(name)
	var (
		addr     = fs.String("addr", "localhost:8081", "gRPC `address` of the server: host:port or unix:PATH")
		clientFl = fs.String("client", "", "gRPC `client`: h2 (lean; the default) or grpc-go (the default with --tls)")
		httpURL  = fs.String("http", "", "send over HTTP to this `URL` instead of gRPC (http://host:8080, .../v1/check or .../json)")
		domain   = fs.String("domain", "", "rate limit `domain` (required)")
		workers  = fs.Int("concurrency", 64, "concurrent `workers`, each with one request in flight")
		conns    = fs.Int("conns", 0, "connections the workers share; 0: one per 16 workers over gRPC, one per worker over HTTP")
		duration = fs.Duration("duration", 10*time.Second, "how long to send (without --requests)")
		requests = fs.Int64("requests", 0, "send this many requests, then stop (bounded by --duration only when it is given)")
		rate     = fs.Float64("rate", 0, "open loop: send this many `requests/s` on a fixed schedule; 0: closed loop")
		keys     = fs.Int("keys", 1, "distinct values of {n} in the descriptors, drawn uniformly per request")
		cost     = fs.Uint64("cost", 1, "units each descriptor consumes (hits_addend); 0 peeks")
		timeout  = fs.Duration("timeout", 5*time.Second, "per-request timeout; a request that takes longer counts as an error")
		useTLS   = fs.Bool("tls", false, "gRPC over TLS (for HTTP, give an https:// URL)")
		insecTLS = fs.Bool("tls-skip-verify", false, "do not verify the server's TLS certificate")
		token    = fs.String("token", "", "bearer `token` to send")
		asJSON   = fs.Bool("json", false, "print the report as JSON")
		quiet    = fs.Bool("quiet", false, "no progress on stderr")
	)
	help := fmt.Sprintf(benchUsage, flagDefaults(fs))
	rest, code, done := parse(fs, args, true, help, stdout, stderr)
	if done {
		return code
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })

	cfg := &benchConfig{
		api: "grpc", target: *addr, domain: *domain, args: rest, keys: *keys, cost: *cost,
		workers: *workers, conns: *conns, duration: *duration, requests: *requests, rate: *rate,
		timeout: *timeout, token: *token, asJSON: *asJSON, quiet: *quiet,
	}
	bad := func(format string, a ...any) int { return usageError(stderr, name, fmt.Sprintf(format, a...)) }
	switch {
	case *domain == "":
		return bad("--domain is required")
	case len(rest) == 0:
		return bad("give at least one descriptor, such as user=alice or 'user=user{n}'")
	case *workers < 1:
		return bad("--concurrency must be at least 1, got %d", *workers)
	case *conns < 0:
		return bad("--conns must be 0 (automatic) or more, got %d", *conns)
	case *keys < 1:
		return bad("--keys must be at least 1, got %d", *keys)
	case *requests < 0:
		return bad("--requests must be 0 (no limit) or more, got %d", *requests)
	case *rate < 0 || math.IsNaN(*rate) || math.IsInf(*rate, 0):
		return bad("--rate must be 0 (closed loop) or a positive number of requests/s, got %v", *rate)
	case *timeout <= 0:
		return bad("--timeout must be positive, got %v", *timeout)
	case given["duration"] && *duration <= 0:
		return bad("--duration must be positive, got %v", *duration)
	case given["http"] && given["addr"]:
		return bad("--addr (gRPC) and --http exclude each other: give one")
	case given["http"] && *useTLS:
		return bad("--tls is for gRPC; for HTTPS give --http an https:// URL")
	case given["http"] && given["client"]:
		return bad("--client is for gRPC (--addr); --http sends over HTTP/1.1")
	case *clientFl != "" && *clientFl != "h2" && *clientFl != "grpc-go":
		return bad("--client %q: want h2 or grpc-go", *clientFl)
	case *clientFl == "h2" && *useTLS:
		return bad("--client h2 speaks cleartext HTTP/2 only; with --tls use --client grpc-go")
	}
	cfg.client = *clientFl
	if cfg.client == "" {
		cfg.client = "h2"
		if *useTLS {
			cfg.client = "grpc-go"
		}
	}
	if *requests > 0 && !given["duration"] {
		cfg.duration = 0 // until the requests are sent
	}
	for i, arg := range rest {
		d, err := parseDescriptor(arg)
		if err != nil {
			return bad("descriptor %d %q: %v", i+1, arg, err)
		}
		cfg.descs = append(cfg.descs, d)
	}
	if *keys > 1 && !strings.Contains(strings.Join(rest, " "), "{n}") {
		return bad("--keys %d: no descriptor contains {n} to put the key number in (for example 'user=user{n}')", *keys)
	}
	if given["http"] {
		u, err := url.Parse(*httpURL)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return bad("--http %q: want an http:// or https:// URL, such as http://localhost:8080", *httpURL)
		}
		switch {
		case u.Path == "" || u.Path == "/":
			u.Path, cfg.api = "/v1/check", "check"
		case strings.HasSuffix(u.Path, "/json"):
			cfg.api = "json"
		case strings.HasSuffix(u.Path, "/v1/check"):
			cfg.api = "check"
		default:
			return bad("--http %q: the path must end in /v1/check or /json (none means /v1/check)", *httpURL)
		}
		cfg.target = u.String()
		if u.Scheme == "https" {
			cfg.tlsConf = &tls.Config{InsecureSkipVerify: *insecTLS, MinVersion: tls.VersionTLS12}
		}
	} else if *useTLS {
		cfg.tlsConf = &tls.Config{InsecureSkipVerify: *insecTLS, MinVersion: tls.VersionTLS12}
	}
	if cfg.conns == 0 {
		cfg.conns = cfg.workers
		if cfg.api == "grpc" {
			cfg.conns = (cfg.workers + 15) / 16
		}
	}
	cfg.conns = min(cfg.conns, cfg.workers)

	var client benchClient
	switch {
	case cfg.api != "grpc":
		client = newBenchHTTP(cfg)
	case cfg.client == "h2":
		h, err := newBenchH2(cfg)
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", name, err)
			return exitFailure
		}
		client = h
	default:
		g, err := newBenchGRPC(cfg)
		if err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", name, err)
			return exitFailure
		}
		client = g
	}
	defer client.close()

	// The probe: every gRPC connection (for HTTP, the server) answers a
	// request that consumes nothing.
	probes := cfg.conns
	if cfg.api != "grpc" {
		probes = 1
	}
	for i := range probes {
		if _, err := client.caller(i, 0)(0); err != nil {
			where := "--addr sets the address"
			if cfg.api != "grpc" {
				where = "--http sets the URL"
			}
			fmt.Fprintf(stderr, "%s: %s %s: %v\nIs 'floodgate serve' running there, and does it know domain %q? %s.\n",
				name, benchAPIName(cfg.api), cfg.target, benchErrText(err), cfg.domain, where)
			return exitFailure
		}
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	r := newBenchRun(cfg)
	var progress sync.WaitGroup
	progressDone := make(chan struct{})
	r.run(ctx, client, func() {
		if !cfg.quiet {
			progress.Go(func() { r.progress(stderr, benchIsTerminal(stderr), progressDone) })
		}
	})
	close(progressDone)
	progress.Wait()

	rep := r.report()
	if cfg.asJSON {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		enc.Encode(rep)
	} else {
		rep.print(stdout)
	}
	if rep.Errors > 0 {
		return exitFailure
	}
	return exitOK
}

// benchAPIName names an API in messages.
func benchAPIName(api string) string {
	switch api {
	case "check":
		return "HTTP POST"
	case "json":
		return "HTTP POST (Envoy protojson)"
	}
	return "gRPC"
}

// benchIsTerminal reports whether w is a terminal that can redraw a line.
func benchIsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok || os.Getenv("TERM") == "dumb" {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// A benchClient sends the requests of a run.
type benchClient interface {
	// caller returns the function worker w calls for each request, each
	// descriptor consuming cost. Each worker has its own; a caller is not
	// safe for concurrent use.
	caller(w int, cost uint64) benchCall
	close()
}

// A benchCall sends one request with key number n (put in place of {n})
// and returns the overall code of the answer.
type benchCall func(n int) (rls.RateLimitResponse_Code, error)

// benchGRPC sends ShouldRateLimit over cfg.conns gRPC connections.
type benchGRPC struct {
	cfg   *benchConfig
	conns []*grpc.ClientConn
}

func newBenchGRPC(cfg *benchConfig) (*benchGRPC, error) {
	creds := insecure.NewCredentials()
	if cfg.tlsConf != nil {
		creds = credentials.NewTLS(cfg.tlsConf)
	}
	g := &benchGRPC{cfg: cfg}
	for range cfg.conns {
		// Each ClientConn is a connection of its own (HTTP/2 multiplexes the
		// requests of its workers).
		c, err := grpc.NewClient(cfg.target, grpc.WithTransportCredentials(creds))
		if err != nil {
			g.close()
			return nil, fmt.Errorf("--addr %s: %w", cfg.target, err)
		}
		c.Connect()
		g.conns = append(g.conns, c)
	}
	return g, nil
}

func (g *benchGRPC) close() {
	for _, c := range g.conns {
		c.Close()
	}
}

func (g *benchGRPC) caller(w int, cost uint64) benchCall {
	client := rls.NewRateLimitServiceClient(g.conns[w%len(g.conns)])
	req := &rls.RateLimitRequest{Domain: g.cfg.domain}
	type slot struct {
		e          *rlscommon.RateLimitDescriptor_Entry
		key, value string
	}
	var slots []slot // the entries with {n}
	for _, d := range g.cfg.descs {
		d := gproto.Clone(d).(*rlscommon.RateLimitDescriptor)
		d.HitsAddend = wrapperspb.UInt64(cost)
		for _, e := range d.Entries {
			if strings.Contains(e.Key, "{n}") || strings.Contains(e.Value, "{n}") {
				slots = append(slots, slot{e, e.Key, e.Value})
			}
		}
		req.Descriptors = append(req.Descriptors, d)
	}
	base := context.Background()
	if g.cfg.token != "" {
		base = metadata.AppendToOutgoingContext(base, "authorization", "Bearer "+g.cfg.token)
	}
	timeout := g.cfg.timeout
	return func(n int) (rls.RateLimitResponse_Code, error) {
		if len(slots) > 0 {
			s := strconv.Itoa(n)
			for _, sl := range slots {
				sl.e.Key = strings.ReplaceAll(sl.key, "{n}", s)
				sl.e.Value = strings.ReplaceAll(sl.value, "{n}", s)
			}
		}
		ctx, cancel := context.WithTimeout(base, timeout)
		resp, err := client.ShouldRateLimit(ctx, req)
		cancel()
		if err != nil {
			return 0, err
		}
		return resp.GetOverallCode(), nil
	}
}

// benchHTTP sends POST /v1/check or POST /json over a shared transport.
type benchHTTP struct {
	cfg    *benchConfig
	client *http.Client
}

func newBenchHTTP(cfg *benchConfig) *benchHTTP {
	// One connection per in-flight request (HTTP/1.1), kept alive and reused:
	// no proxies from the environment, no compression, no HTTP/2.
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: cfg.timeout, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        cfg.conns,
		MaxIdleConnsPerHost: cfg.conns,
		MaxConnsPerHost:     cfg.conns,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true,
		TLSClientConfig:     cfg.tlsConf,
		TLSHandshakeTimeout: cfg.timeout,
	}
	return &benchHTTP{cfg: cfg, client: &http.Client{Transport: tr}}
}

func (h *benchHTTP) close() { h.client.CloseIdleConnections() }

// body returns the request body with {n} still in the descriptors (and
// nowhere else: a { of the domain is escaped).
func (h *benchHTTP) body(cost uint64) string {
	q := func(s string) string {
		b, _ := json.Marshal(s)
		return string(b)
	}
	var b strings.Builder
	b.WriteString(`{"domain":`)
	b.WriteString(strings.ReplaceAll(q(h.cfg.domain), "{", `\u007b`))
	b.WriteString(`,"descriptors":[`)
	for i, d := range h.cfg.descs {
		if i > 0 {
			b.WriteByte(',')
		}
		if h.cfg.api == "json" {
			b.WriteString(`{"entries":[`)
			for j, e := range d.Entries {
				if j > 0 {
					b.WriteByte(',')
				}
				fmt.Fprintf(&b, `{"key":%s,"value":%s}`, q(e.Key), q(e.Value))
			}
			fmt.Fprintf(&b, `],"hitsAddend":"%d"}`, cost)
			continue
		}
		b.WriteByte('{')
		for j, e := range d.Entries {
			if j > 0 {
				b.WriteByte(',')
			}
			fmt.Fprintf(&b, `%s:%s`, q(e.Key), q(e.Value))
		}
		b.WriteByte('}')
	}
	b.WriteByte(']')
	if h.cfg.api == "check" {
		fmt.Fprintf(&b, `,"cost":%d`, cost)
	}
	b.WriteByte('}')
	return b.String()
}

func (h *benchHTTP) caller(_ int, cost uint64) benchCall {
	body := h.body(cost)
	templated := strings.Contains(body, "{n}")
	auth := ""
	if h.cfg.token != "" {
		auth = "Bearer " + h.cfg.token
	}
	return func(n int) (rls.RateLimitResponse_Code, error) {
		b := body
		if templated {
			b = strings.ReplaceAll(body, "{n}", strconv.Itoa(n))
		}
		ctx, cancel := context.WithTimeout(context.Background(), h.cfg.timeout)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.cfg.target, strings.NewReader(b))
		if err != nil {
			return 0, err
		}
		req.Header.Set("Content-Type", "application/json")
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := h.client.Do(req)
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusOK, http.StatusTooManyRequests:
			// Read to the end, so that the connection is reused.
			if _, err := io.Copy(io.Discard, resp.Body); err != nil {
				return 0, err
			}
			if resp.StatusCode == http.StatusOK {
				return rls.RateLimitResponse_OK, nil
			}
			return rls.RateLimitResponse_OVER_LIMIT, nil
		}
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 300))
		io.Copy(io.Discard, resp.Body)
		return 0, &benchHTTPError{status: resp.StatusCode, msg: strings.TrimSpace(string(msg))}
	}
}

// benchHTTPError is an HTTP answer other than 200 and 429.
type benchHTTPError struct {
	status int
	msg    string
}

func (e *benchHTTPError) Error() string {
	return fmt.Sprintf("HTTP %d %s: %s", e.status, http.StatusText(e.status), e.msg)
}

// errUnknownCode is an answer whose overall code is neither OK nor OVER_LIMIT.
var errUnknownCode = errors.New("the answer's overall code is UNKNOWN")

// benchErrKind classifies a failed request for the report: a gRPC code name,
// "HTTP 503", "timeout", "connection refused", ...
func benchErrKind(err error) string {
	var he *benchHTTPError
	switch {
	case errors.As(err, &he):
		return "HTTP " + strconv.Itoa(he.status)
	case errors.Is(err, errUnknownCode):
		return "code UNKNOWN"
	}
	if s, ok := grpcstatus.FromError(err); ok {
		return s.Code().String()
	}
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused"
	case errors.Is(err, syscall.ECONNRESET):
		return "connection reset"
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return "connection closed"
	}
	return "transport"
}

// benchErrText is an error's message, with a gRPC status shown as
// "Code: message".
func benchErrText(err error) string {
	if s, ok := grpcstatus.FromError(err); ok {
		return s.Code().String() + ": " + s.Message()
	}
	return err.Error()
}

// maxErrKinds bounds the error kinds a worker tells apart; the rest are
// counted as "other".
const maxErrKinds = 16

// benchWorker is one worker's tally. The counters are read live by the
// progress display; the rest only after the worker has stopped.
type benchWorker struct {
	ok, over, failed atomic.Int64
	lat, svc, lag    benchHist // svc and lag in an open loop only
	errs             map[string]*benchErrCount
	_                [64]byte // keeps the next worker's counters off this cache line
}

type benchErrCount struct {
	Kind    string `json:"kind"`
	Count   int64  `json:"count"`
	Example string `json:"example"` // the first error of the kind
}

func (w *benchWorker) fail(err error) {
	w.failed.Add(1)
	kind := benchErrKind(err)
	c := w.errs[kind]
	if c == nil {
		if len(w.errs) >= maxErrKinds {
			kind = "other"
		}
		if c = w.errs[kind]; c == nil {
			c = &benchErrCount{Kind: kind, Example: benchErrText(err)}
			w.errs[kind] = c
		}
	}
	c.Count++
}

// benchRun is one run of the load.
type benchRun struct {
	cfg      *benchConfig
	workers  []*benchWorker
	tickets  atomic.Int64  // requests taken by the workers
	stop     chan struct{} // closed when no more requests are to be sent
	stopOnce sync.Once

	start, end  time.Time
	deadline    time.Time // zero: none
	interrupted atomic.Bool
}

func newBenchRun(cfg *benchConfig) *benchRun {
	r := &benchRun{cfg: cfg, stop: make(chan struct{})}
	for range cfg.workers {
		r.workers = append(r.workers, &benchWorker{errs: map[string]*benchErrCount{}})
	}
	return r
}

func (r *benchRun) halt() { r.stopOnce.Do(func() { close(r.stop) }) }

// run sends the load until the duration has passed, the requests are sent or
// ctx ends, and waits for the answers in flight. started is called once the
// start time is set, before the first request.
func (r *benchRun) run(ctx context.Context, client benchClient, started func()) {
	calls := make([]benchCall, len(r.workers))
	for i := range calls {
		calls[i] = client.caller(i, r.cfg.cost)
	}
	var wg sync.WaitGroup
	r.start = time.Now()
	if r.cfg.duration > 0 {
		r.deadline = r.start.Add(r.cfg.duration)
		t := time.AfterFunc(r.cfg.duration, r.halt)
		defer t.Stop()
	}
	started()
	go func() {
		select {
		case <-ctx.Done():
			r.interrupted.Store(true)
			r.halt()
		case <-r.stop:
		}
	}()
	for i, w := range r.workers {
		wg.Go(func() { r.work(w, calls[i]) })
	}
	wg.Wait()
	r.end = time.Now()
	r.halt()
}

// work is one worker's loop.
func (r *benchRun) work(w *benchWorker, call benchCall) {
	var (
		keys     = r.cfg.keys
		interval = 0.0 // ns between requests in an open loop
		timer    *time.Timer
	)
	if r.cfg.rate > 0 {
		interval = 1e9 / r.cfg.rate
	}
	for {
		select {
		case <-r.stop:
			return
		default:
		}
		i := r.tickets.Add(1) - 1
		if r.cfg.requests > 0 && i >= r.cfg.requests {
			return
		}
		n := 0
		if keys > 1 {
			n = rand.IntN(keys)
		}
		var due time.Time
		if interval > 0 {
			due = r.start.Add(time.Duration(float64(i) * interval))
			if !r.deadline.IsZero() && !due.Before(r.deadline) {
				return
			}
			if d := time.Until(due); d > 0 {
				if timer == nil {
					timer = time.NewTimer(d)
				} else {
					timer.Reset(d)
				}
				select {
				case <-timer.C:
				case <-r.stop:
					return
				}
			}
		}
		sent := time.Now()
		code, err := call(n)
		end := time.Now()
		if err == nil && code != rls.RateLimitResponse_OK && code != rls.RateLimitResponse_OVER_LIMIT {
			err = errUnknownCode
		}
		if err != nil {
			w.fail(err)
			continue
		}
		if interval > 0 {
			w.lat.record(end.Sub(due))
			w.svc.record(end.Sub(sent))
			w.lag.record(sent.Sub(due))
		} else {
			w.lat.record(end.Sub(sent))
		}
		if code == rls.RateLimitResponse_OK {
			w.ok.Add(1)
		} else {
			w.over.Add(1)
		}
	}
}

// counts sums the workers' live counters.
func (r *benchRun) counts() (ok, over, failed int64) {
	for _, w := range r.workers {
		ok += w.ok.Load()
		over += w.over.Load()
		failed += w.failed.Load()
	}
	return ok, over, failed
}

// progress shows the run on w until done is closed: on a terminal a bar
// redrawn four times a second, else a line a second.
func (r *benchRun) progress(w io.Writer, tty bool, done <-chan struct{}) {
	every := time.Second
	if tty {
		every = 250 * time.Millisecond
	}
	t := time.NewTicker(every)
	defer t.Stop()
	type sample struct {
		at      time.Time
		decided int64
	}
	hist := []sample{{r.start, 0}}
	for {
		select {
		case <-done:
			if tty {
				io.WriteString(w, "\r\x1b[K")
			}
			return
		case now := <-t.C:
			ok, over, failed := r.counts()
			hist = append(hist, sample{now, ok + over})
			if len(hist) > 5 { // the rate over the last second
				hist = hist[len(hist)-5:]
			}
			first := hist[0]
			rate := 0.0
			if dt := now.Sub(first.at).Seconds(); dt > 0 {
				rate = float64(ok+over-first.decided) / dt
			}
			line := r.progressLine(now, ok, over, failed, rate, tty)
			if tty {
				io.WriteString(w, "\r"+line+"\x1b[K")
			} else {
				io.WriteString(w, line+"\n")
			}
		}
	}
}

// progressLine is one progress report: with a bar when bar is set.
func (r *benchRun) progressLine(now time.Time, ok, over, failed int64, rate float64, bar bool) string {
	elapsed := now.Sub(r.start)
	frac := 0.0
	total := ""
	if r.cfg.duration > 0 {
		frac = elapsed.Seconds() / r.cfg.duration.Seconds()
		total = fmt.Sprintf("%s/%s", benchSeconds(elapsed), benchSeconds(r.cfg.duration))
	}
	if r.cfg.requests > 0 {
		done := ok + over + failed
		if f := float64(done) / float64(r.cfg.requests); f > frac || r.cfg.duration == 0 {
			frac = f
			total = fmt.Sprintf("%s/%s", benchCount(done), benchCount(r.cfg.requests))
		}
	}
	frac = min(max(frac, 0), 1)
	if !bar {
		return fmt.Sprintf("floodgate bench: %s  %s decisions/s  OK %s  OVER_LIMIT %s  errors %s",
			total, benchCount(int64(rate)), benchCount(ok), benchCount(over), benchCount(failed))
	}
	// Short enough for an 80-column terminal, where a longer line would wrap
	// and the carriage return would no longer redraw it.
	const width = 20
	full := int(frac * width)
	b := strings.Repeat("=", full)
	if full < width {
		b += ">" + strings.Repeat(" ", width-full-1)
	}
	line := fmt.Sprintf("[%s] %3.0f%%  %s  %s/s  ok %s  over %s  err %s",
		b, frac*100, total, benchCount(int64(rate)), benchCount(ok), benchCount(over), benchCount(failed))
	if len(line) > 79 {
		line = line[:79]
	}
	return line
}

// benchSeconds formats an elapsed time for the progress line: 4.2s, 1m30s.
func benchSeconds(d time.Duration) string {
	if d < time.Minute {
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + "s"
	}
	return d.Round(time.Second).String()
}

// benchCount formats n with thousands separators: 1,234,567.
func benchCount(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// benchReport is the outcome of a run; --json prints it as it is.
type benchReport struct {
	API         string           `json:"api"`              // grpc, http-check or http-json
	Client      string           `json:"client,omitempty"` // gRPC: h2 or grpc-go
	Target      string           `json:"target"`
	Domain      string           `json:"domain"`
	Descriptors []string         `json:"descriptors"`
	Keys        int              `json:"keys"`
	Cost        uint64           `json:"cost"`
	Concurrency int              `json:"concurrency"`
	Connections int              `json:"connections"`
	Loop        string           `json:"loop"`                  // closed or open
	Rate        float64          `json:"rate,omitempty"`        // open loop: requests/s scheduled
	Scheduled   int64            `json:"scheduled,omitempty"`   // open loop: requests due before the end
	Interrupted bool             `json:"interrupted,omitempty"` // stopped by a signal
	ElapsedS    float64          `json:"elapsed_s"`
	Requests    int64            `json:"requests"` // OK + OVER_LIMIT + errors
	DecisionsPS float64          `json:"decisions_per_s"`
	OK          int64            `json:"ok"`
	OverLimit   int64            `json:"over_limit"`
	Errors      int64            `json:"errors"`
	ErrorKinds  []*benchErrCount `json:"error_kinds,omitempty"`
	Latency     benchLatency     `json:"latency_us"`                // of the answered requests; from the due time in an open loop
	ServiceTime *benchLatency    `json:"service_time_us,omitempty"` // open loop: from the send
	SendLag     *benchLatency    `json:"send_lag_us,omitempty"`     // open loop: send time - due time
}

// benchLatency are quantiles of a latency, in microseconds.
type benchLatency struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p999"`
	Max  float64 `json:"max"`
	Mean float64 `json:"mean"`
}

func latencyOf(h *benchHist) benchLatency {
	us := func(d time.Duration) float64 { return math.Round(float64(d)/1e2) / 10 }
	return benchLatency{
		P50: us(h.quantile(0.50)), P90: us(h.quantile(0.90)), P99: us(h.quantile(0.99)),
		P999: us(h.quantile(0.999)), Max: us(time.Duration(h.max)), Mean: us(h.mean()),
	}
}

// report sums the workers up; call it after run.
func (r *benchRun) report() *benchReport {
	cfg := r.cfg
	rep := &benchReport{
		API: cfg.api, Target: cfg.target, Domain: cfg.domain, Descriptors: cfg.args, Keys: cfg.keys,
		Cost: cfg.cost, Concurrency: cfg.workers, Connections: cfg.conns, Loop: "closed",
		Interrupted: r.interrupted.Load(),
	}
	if cfg.api == "grpc" {
		rep.Client = cfg.client
	} else {
		rep.API = "http-" + cfg.api
	}
	elapsed := r.end.Sub(r.start)
	rep.ElapsedS = math.Round(elapsed.Seconds()*1000) / 1000
	var lat, svc, lag benchHist
	kinds := map[string]*benchErrCount{}
	for _, w := range r.workers {
		rep.OK += w.ok.Load()
		rep.OverLimit += w.over.Load()
		rep.Errors += w.failed.Load()
		lat.merge(&w.lat)
		svc.merge(&w.svc)
		lag.merge(&w.lag)
		for k, c := range w.errs {
			if all := kinds[k]; all != nil {
				all.Count += c.Count
			} else {
				cc := *c
				kinds[k] = &cc
			}
		}
	}
	for _, c := range kinds {
		rep.ErrorKinds = append(rep.ErrorKinds, c)
	}
	slices.SortFunc(rep.ErrorKinds, func(a, b *benchErrCount) int {
		return cmp.Or(cmp.Compare(b.Count, a.Count), strings.Compare(a.Kind, b.Kind))
	})
	rep.Requests = rep.OK + rep.OverLimit + rep.Errors
	if s := elapsed.Seconds(); s > 0 {
		rep.DecisionsPS = math.Round(float64(rep.OK+rep.OverLimit)/s*10) / 10
	}
	rep.Latency = latencyOf(&lat)
	if cfg.rate > 0 {
		rep.Loop, rep.Rate = "open", cfg.rate
		sched := elapsed
		if !r.deadline.IsZero() {
			sched = r.deadline.Sub(r.start)
		}
		rep.Scheduled = int64(math.Ceil(sched.Seconds() * cfg.rate))
		if cfg.requests > 0 {
			rep.Scheduled = min(rep.Scheduled, cfg.requests)
		}
		s, l := latencyOf(&svc), latencyOf(&lag)
		rep.ServiceTime, rep.SendLag = &s, &l
	}
	return rep
}

// print writes the report as a table.
func (rep *benchReport) print(w io.Writer) {
	keys := ""
	if rep.Keys > 1 {
		keys = fmt.Sprintf(" over %s keys", benchCount(int64(rep.Keys)))
	}
	client := ""
	if rep.Client != "" {
		client = " (" + rep.Client + " client)"
	}
	fmt.Fprintf(w, "%s %s%s, domain %q, %s%s\n", benchAPIName(strings.TrimPrefix(rep.API, "http-")),
		rep.Target, client, rep.Domain, strings.Join(rep.Descriptors, " "), keys)
	loop := "closed loop"
	if rep.Loop == "open" {
		loop = fmt.Sprintf("open loop at %s/s", benchCount(int64(math.Round(rep.Rate))))
	}
	conns := "connections"
	if rep.Connections == 1 {
		conns = "connection"
	}
	fmt.Fprintf(w, "%s, %d workers on %d %s, %s", loop, rep.Concurrency, rep.Connections, conns,
		strconv.FormatFloat(rep.ElapsedS, 'f', 2, 64)+"s")
	if rep.Interrupted {
		fmt.Fprint(w, " (interrupted)")
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w)

	pct := func(n int64) string {
		if rep.Requests == 0 {
			return ""
		}
		return strconv.FormatFloat(100*float64(n)/float64(rep.Requests), 'f', 2, 64) + "%"
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "requests\t%s\n", benchCount(rep.Requests))
	fmt.Fprintf(tw, "decisions/s\t%s\n", benchCount(int64(math.Round(rep.DecisionsPS))))
	fmt.Fprintf(tw, "OK\t%s\t%s\n", benchCount(rep.OK), pct(rep.OK))
	fmt.Fprintf(tw, "OVER_LIMIT\t%s\t%s\n", benchCount(rep.OverLimit), pct(rep.OverLimit))
	fmt.Fprintf(tw, "errors\t%s\t%s\n", benchCount(rep.Errors), pct(rep.Errors))
	for _, c := range rep.ErrorKinds {
		ex := c.Example
		if len(ex) > 100 {
			ex = ex[:100] + "..."
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", c.Kind, benchCount(c.Count), ex)
	}
	tw.Flush()
	fmt.Fprintln(w)

	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\tp50\tp90\tp99\tp99.9\tmax\tmean")
	row := func(name string, l *benchLatency) {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", name, benchDur(l.P50), benchDur(l.P90),
			benchDur(l.P99), benchDur(l.P999), benchDur(l.Max), benchDur(l.Mean))
	}
	if rep.Loop == "open" {
		row("latency (from due time)", &rep.Latency)
		row("service time (from send)", rep.ServiceTime)
		row("send lag", rep.SendLag)
	} else {
		row("latency", &rep.Latency)
	}
	tw.Flush()
	if rep.Loop == "open" && !rep.Interrupted && rep.Requests < rep.Scheduled*99/100 {
		fmt.Fprintf(w, "\nThe load fell behind its schedule: %s of %s requests were sent. Latency counts the delay;\n"+
			"for a higher rate, raise --concurrency.\n", benchCount(rep.Requests), benchCount(rep.Scheduled))
	}
}

// benchDur formats microseconds with three significant digits: 412µs, 1.21ms.
func benchDur(us float64) string {
	switch {
	case us < 10:
		return strconv.FormatFloat(us, 'f', 1, 64) + "µs"
	case us < 1000:
		return strconv.FormatFloat(us, 'f', 0, 64) + "µs"
	case us < 10_000:
		return strconv.FormatFloat(us/1000, 'f', 2, 64) + "ms"
	case us < 100_000:
		return strconv.FormatFloat(us/1000, 'f', 1, 64) + "ms"
	case us < 10_000_000:
		return strconv.FormatFloat(us/1000, 'f', 0, 64) + "ms"
	}
	return strconv.FormatFloat(us/1e6, 'f', 1, 64) + "s"
}
