package httplimit_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/httplimit"
	"github.com/floodgate-dev/floodgate/ratelimit"
)

// TestDeniedHeaders runs a fixed window of 2 per minute on memory and on a
// real Redis, on a fake clock: exact status, IETF fields and Retry-After.
func TestDeniedHeaders(t *testing.T) {
	for _, bk := range []struct {
		name string
		make func(testing.TB, clock.Clock) backend.Backend
	}{
		{"memory", func(t testing.TB, c clock.Clock) backend.Backend { return newMemory(t, c) }},
		{"redis", func(t testing.TB, c clock.Clock) backend.Backend { return newRedis(t, c) }},
	} {
		t.Run(bk.name, func(t *testing.T) {
			clk := clock.NewFake(t0)
			rule := ratelimit.FixedWindow{Limit: 2, Window: time.Minute}
			l := newLimiter(t, bk.make(t, clk), ratelimit.Named("permin", rule))
			next := &ok{}
			h := newMiddleware(t, l, httplimit.PolicyWindow(httplimit.WindowOf(rule))).Handler(next)
			const policy = `Ratelimit-Policy: "permin";q=2;w=60`
			run(t, clk, h, []step{
				{advance: 15 * time.Second, status: 200, headers: lines(`Ratelimit: "permin";r=1;t=45`, policy)},
				{status: 200, headers: lines(`Ratelimit: "permin";r=0;t=45`, policy)},
				{status: 429, headers: lines(`Ratelimit: "permin";r=0;t=45`, policy, "Retry-After: 45")},
				// 0.5s before the window ends: both round up to 1.
				{advance: 44500 * time.Millisecond, status: 429, headers: lines(`Ratelimit: "permin";r=0;t=1`, policy, "Retry-After: 1")},
				// Another client has its own budget.
				{remote: "192.0.2.2:1234", status: 200, headers: lines(`Ratelimit: "permin";r=1;t=1`, policy)},
				{advance: 500 * time.Millisecond, status: 200, headers: lines(`Ratelimit: "permin";r=1;t=60`, policy)},
			})
			if got := next.calls.Load(); got != 4 {
				t.Errorf("handler calls: exp 4, got %d", got)
			}
			get(h, "192.0.2.1:1234")
			w := get(h, "192.0.2.1:1234")
			if w.Code != 429 || w.Body.String() != "Too Many Requests\n" || w.Header().Get("Content-Type") != "text/plain; charset=utf-8" {
				t.Errorf("denied response: %d %q %q", w.Code, w.Header().Get("Content-Type"), w.Body)
			}
		})
	}
}

func TestRetryAfterRounding(t *testing.T) {
	clk := clock.NewFake(t0)
	// One token per 1.5s.
	l := newLimiter(t, newMemory(t, clk), ratelimit.TokenBucket{Capacity: 1, Refill: 2, Every: 3 * time.Second})
	h := newMiddleware(t, l).Handler(&ok{})
	const policy = `Ratelimit-Policy: "default";q=1` // no PolicyWindow: no w
	run(t, clk, h, []step{
		{status: 200, headers: lines(`Ratelimit: "default";r=0;t=2`, policy)},
		{status: 429, headers: lines(`Ratelimit: "default";r=0;t=2`, policy, "Retry-After: 2")},
		{advance: 1400 * time.Millisecond, status: 429, headers: lines(`Ratelimit: "default";r=0;t=1`, policy, "Retry-After: 1")},
		{advance: 99 * time.Millisecond, status: 429, headers: lines(`Ratelimit: "default";r=0;t=1`, policy, "Retry-After: 1")},
		{advance: time.Millisecond, status: 200, headers: lines(`Ratelimit: "default";r=0;t=2`, policy)},
	})

	// A request that can never be admitted gets no Retry-After.
	never := newLimiter(t, newMemory(t, clk), ratelimit.FixedWindow{Limit: 0, Window: time.Second})
	h = newMiddleware(t, never).Handler(&ok{})
	run(t, clk, h, []step{
		{status: 429, headers: lines(`Ratelimit: "default";r=0;t=0`, `Ratelimit-Policy: "default";q=0`)},
	})
}

func TestHeaderStyles(t *testing.T) {
	for _, c := range []struct {
		style httplimit.HeaderSet
		exp   string
	}{
		{httplimit.IETF, lines(`Ratelimit: "default";r=4;t=60`, `Ratelimit-Policy: "default";q=5;w=60`)},
		{httplimit.Draft03, lines("Ratelimit-Limit: 5", "Ratelimit-Remaining: 4", "Ratelimit-Reset: 60")},
		{httplimit.XRateLimit, lines("X-Ratelimit-Limit: 5", "X-Ratelimit-Remaining: 4", "X-Ratelimit-Reset: 60")},
		{httplimit.IETF | httplimit.XRateLimit, lines(`Ratelimit: "default";r=4;t=60`, `Ratelimit-Policy: "default";q=5;w=60`,
			"X-Ratelimit-Limit: 5", "X-Ratelimit-Remaining: 4", "X-Ratelimit-Reset: 60")},
		{0, ""},
	} {
		clk := clock.NewFake(t0)
		l := newLimiter(t, newMemory(t, clk), ratelimit.FixedWindow{Limit: 5, Window: time.Minute})
		h := newMiddleware(t, l, httplimit.HeaderStyle(c.style), httplimit.PolicyWindow(time.Minute)).Handler(&ok{})
		if got := rateHeaders(get(h, "192.0.2.1:1")); got != c.exp {
			t.Errorf("HeaderStyle(%d):\nexp %s\ngot %s", c.style, c.exp, got)
		}
	}
}

// TestMultiRule checks that the fields describe the binding rule, with the
// window of each rule from PolicyWindows, and the problem+json body.
func TestMultiRule(t *testing.T) {
	clk := clock.NewFake(t0)
	persec := ratelimit.FixedWindow{Limit: 2, Window: time.Second}
	permin := ratelimit.FixedWindow{Limit: 3, Window: time.Minute}
	l := newLimiter(t, newMemory(t, clk), ratelimit.Named("persec", persec), ratelimit.Named(`per"min`, permin))
	h := newMiddleware(t, l, httplimit.ProblemJSON(),
		httplimit.PolicyWindows(httplimit.WindowOf(persec), httplimit.WindowOf(permin))).Handler(&ok{})
	const sec, min = `Ratelimit-Policy: "persec";q=2;w=1`, `Ratelimit-Policy: "per\"min";q=3;w=60`
	run(t, clk, h, []step{
		{status: 200, headers: lines(`Ratelimit: "persec";r=1;t=1`, sec)},
		{status: 200, headers: lines(`Ratelimit: "persec";r=0;t=1`, sec)},
		{status: 429, headers: lines(`Ratelimit: "persec";r=0;t=1`, sec, "Retry-After: 1")},
		{advance: time.Second, status: 200, headers: lines(`Ratelimit: "per\"min";r=0;t=59`, min)},
	})
	w := get(h, "192.0.2.1:1")
	const body = `{"type":"https://iana.org/assignments/http-problem-types#quota-exceeded",` +
		`"title":"Request cannot be satisfied as assigned quota has been exceeded","status":429,"violated-policies":["per\"min"]}` + "\n"
	if w.Code != 429 || w.Body.String() != body || w.Header().Get("Content-Type") != "application/problem+json" {
		t.Errorf("denied response: %d %q\n%s", w.Code, w.Header().Get("Content-Type"), w.Body)
	}
	if got := w.Header().Get("Retry-After"); got != "59" {
		t.Errorf("Retry-After: exp 59, got %q", got)
	}
}

func TestDenyWith(t *testing.T) {
	clk := clock.NewFake(t0)
	l := newLimiter(t, newMemory(t, clk), ratelimit.FixedWindow{Limit: 0, Window: time.Second})
	var seen ratelimit.Result
	h := newMiddleware(t, l, httplimit.DenyWith(func(w http.ResponseWriter, r *http.Request, res ratelimit.Result) {
		seen = res
		w.WriteHeader(http.StatusServiceUnavailable)
		w.Write([]byte("slow down"))
	})).Handler(&ok{})
	w := get(h, "192.0.2.1:1")
	if w.Code != 503 || w.Body.String() != "slow down" || w.Header().Get("Ratelimit") == "" {
		t.Errorf("got %d %q, headers %v", w.Code, w.Body, w.Header())
	}
	if seen.Allowed || seen.RetryAfter >= 0 {
		t.Errorf("DenyWith got %+v", seen)
	}
}

// TestForwardedForSpoofing: an untrusted peer's X-Forwarded-For is ignored,
// a trusted proxy's is honoured.
func TestForwardedForSpoofing(t *testing.T) {
	clk := clock.NewFake(t0)
	l := newLimiter(t, newMemory(t, clk), ratelimit.FixedWindow{Limit: 1, Window: time.Minute})
	h := newMiddleware(t, l, httplimit.KeyByIP(httplimit.TrustedProxies("10.0.0.0/8"))).Handler(&ok{})
	for i, c := range []struct {
		remote, xff string
		status      int
	}{
		{"192.0.2.1:1000", "X-Forwarded-For: 198.51.100.1", 200},
		{"192.0.2.1:1001", "X-Forwarded-For: 198.51.100.2", 429}, // same peer, spoofed header ignored
		{"10.0.0.1:1000", "X-Forwarded-For: 198.51.100.1", 200},
		{"10.0.0.1:1001", "X-Forwarded-For: 198.51.100.2", 200},
		{"10.0.0.2:1000", "X-Forwarded-For: 198.51.100.1", 429}, // another proxy, same client
		{"10.0.0.1:1002", "X-Forwarded-For: 198.51.100.3, 198.51.100.2", 429},
		{"10.0.0.1:1003", "X-Forwarded-For: 198.51.100.4, 10.9.9.9", 200},
		{"10.0.0.1:1004", "X-Forwarded-For: 192.0.2.1", 429}, // the direct client from before
	} {
		if w := get(h, c.remote, c.xff); w.Code != c.status {
			t.Errorf("request %d from %s with %q: exp %d, got %d", i, c.remote, c.xff, c.status, w.Code)
		}
	}
}

func TestIPv6Grouping(t *testing.T) {
	for _, c := range []struct {
		opts   []httplimit.IPOption
		remote []string
		status []int
	}{
		{nil, []string{"[2001:db8:1:2::1]:1", "[2001:db8:1:2:ffff::9]:1", "[2001:db8:1:3::1]:1"}, []int{200, 429, 200}},
		{[]httplimit.IPOption{httplimit.IPv6Prefix(128)}, []string{"[2001:db8:1:2::1]:1", "[2001:db8:1:2::2]:1", "[2001:db8:1:2::1]:2"}, []int{200, 200, 429}},
		{[]httplimit.IPOption{httplimit.IPv6Prefix(48)}, []string{"[2001:db8:1:2::1]:1", "[2001:db8:1:ffff::1]:1", "[2001:db8:2::1]:1"}, []int{200, 429, 200}},
		{nil, []string{"192.0.2.1:1", "192.0.2.2:1", "[::ffff:192.0.2.1]:2"}, []int{200, 200, 429}},
		{[]httplimit.IPOption{httplimit.IPv4Prefix(24)}, []string{"192.0.2.1:1", "192.0.2.200:1", "192.0.3.1:1"}, []int{200, 429, 200}},
	} {
		clk := clock.NewFake(t0)
		l := newLimiter(t, newMemory(t, clk), ratelimit.FixedWindow{Limit: 1, Window: time.Minute})
		h := newMiddleware(t, l, httplimit.KeyByIP(c.opts...)).Handler(&ok{})
		for i, remote := range c.remote {
			if w := get(h, remote); w.Code != c.status[i] {
				t.Errorf("%d options, %s: exp %d, got %d", len(c.opts), remote, c.status[i], w.Code)
			}
		}
	}
}

func TestKeys(t *testing.T) {
	clk := clock.NewFake(t0)
	rule := ratelimit.FixedWindow{Limit: 1, Window: time.Minute}
	errDB := errors.New("session store down")
	var errs []error
	onError := httplimit.OnError(func(_ *http.Request, err error) { errs = append(errs, err) })

	t.Run("header", func(t *testing.T) {
		errs = nil
		h := newMiddleware(t, newLimiter(t, newMemory(t, clk), rule), httplimit.KeyByHeader("x-api-key"), onError).Handler(&ok{})
		for i, c := range []struct {
			header string
			status int
		}{
			{"X-Api-Key: alice", 200},
			{"X-Api-Key: alice", 429},
			{"X-Api-Key: bob", 200},
			{"", 400},
			{"X-Api-Key: " + strings.Repeat("k", backend.MaxKeyLen+1), 200}, // limited by its digest (TestLongKeys)
			{"X-Api-Key: " + strings.Repeat("k", backend.MaxKeyLen+1), 429},
			{"X-Api-Key: " + strings.Repeat("k", backend.MaxKeyLen), 200},
			{"X-Api-Key: " + strings.Repeat("k", backend.MaxKeyLen), 429},
		} {
			var hdr []string
			if c.header != "" {
				hdr = append(hdr, c.header)
			}
			w := get(h, "192.0.2.1:1", hdr...)
			if w.Code != c.status {
				t.Errorf("request %d: exp %d, got %d", i, c.status, w.Code)
			}
			if c.status == 400 && (w.Body.String() != "Bad Request\n" || w.Header().Get("Ratelimit") != "") {
				t.Errorf("request %d: 400 response: %q %v", i, w.Body, w.Header())
			}
		}
		if len(errs) != 1 || !errors.Is(errs[0], httplimit.ErrNoKey) {
			t.Errorf("OnError got %v", errs)
		}
	})

	t.Run("func", func(t *testing.T) {
		errs = nil
		key := httplimit.KeyFunc(func(r *http.Request) (string, error) {
			if u := r.URL.Query().Get("user"); u != "db" {
				return u, nil
			}
			return "", errDB
		})
		next := &ok{}
		h := newMiddleware(t, newLimiter(t, newMemory(t, clk), rule), key, onError, httplimit.ProblemJSON()).Handler(next)
		w := get(h, "192.0.2.1:1")
		if w.Code != 400 || w.Header().Get("Content-Type") != "application/problem+json" ||
			w.Body.String() != `{"type":"about:blank","title":"Bad Request","status":400,"detail":"the request has no rate-limit key"}`+"\n" {
			t.Errorf("empty key: %d %s", w.Code, w.Body)
		}
		r := httptestRequest("/?user=db")
		w = serve(h, r)
		if w.Code != 400 || len(errs) != 2 || !errors.Is(errs[1], httplimit.ErrNoKey) || !errors.Is(errs[1], errDB) {
			t.Errorf("key error: %d, OnError got %v", w.Code, errs)
		}
		if w := serve(h, httptestRequest("/?user=carol")); w.Code != 200 {
			t.Errorf("carol: %d", w.Code)
		}
		if next.calls.Load() != 1 {
			t.Errorf("handler calls: %d", next.calls.Load())
		}
	})

	t.Run("pass without key", func(t *testing.T) {
		next := &ok{}
		h := newMiddleware(t, newLimiter(t, newMemory(t, clk), rule), httplimit.KeyByHeader("X-Api-Key"), httplimit.PassWithoutKey()).Handler(next)
		for range 3 {
			if w := get(h, "192.0.2.1:1"); w.Code != 200 || w.Header().Get("Ratelimit") != "" {
				t.Errorf("keyless: %d %v", w.Code, w.Header())
			}
		}
		if next.calls.Load() != 3 {
			t.Errorf("handler calls: %d", next.calls.Load())
		}
	})

	t.Run("unix socket peer", func(t *testing.T) {
		errs = nil
		h := newMiddleware(t, newLimiter(t, newMemory(t, clk), rule), onError).Handler(&ok{})
		if w := get(h, "@"); w.Code != 400 || len(errs) != 1 || !strings.Contains(errs[0].Error(), `RemoteAddr "@" is not an IP address`) {
			t.Errorf("got %d, errors %v", w.Code, errs)
		}
	})
}

func httptestRequest(target string) *http.Request {
	r, _ := http.NewRequest(http.MethodGet, "http://example.com"+target, nil)
	r.RemoteAddr = "192.0.2.1:1"
	return r
}

func serve(h http.Handler, r *http.Request) *httptest.ResponseRecorder {
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func TestSkip(t *testing.T) {
	clk := clock.NewFake(t0)
	l := newLimiter(t, newMemory(t, clk), ratelimit.FixedWindow{Limit: 0, Window: time.Minute})
	h := newMiddleware(t, l, httplimit.Skip(func(r *http.Request) bool { return r.URL.Path == "/healthz" })).Handler(&ok{})
	if w := serve(h, httptestRequest("/healthz")); w.Code != 200 || w.Header().Get("Ratelimit") != "" {
		t.Errorf("skipped: %d %v", w.Code, w.Header())
	}
	if w := serve(h, httptestRequest("/")); w.Code != 429 {
		t.Errorf("limited: %d", w.Code)
	}
}

// TestDelay checks that a LeakyBucket's delay is applied through the sleep
// hook with exactly Result.Delay, and that the handler runs after it.
func TestDelay(t *testing.T) {
	clk := clock.NewFake(t0)
	rule := ratelimit.LeakyBucket{Rate: 1, Per: time.Second, Burst: 2}
	l := newLimiter(t, newMemory(t, clk), rule)
	var (
		slept     []time.Duration
		decisions []time.Duration
	)
	next := &ok{}
	m := newMiddleware(t, l, httplimit.OnDecision(func(_ *http.Request, res ratelimit.Result) { decisions = append(decisions, res.Delay) }))
	httplimit.SetSleep(m, func(ctx context.Context, d time.Duration) error {
		if next.calls.Load() != int64(len(slept)+1) {
			t.Errorf("the handler ran before the delay")
		}
		slept = append(slept, d)
		return nil
	})
	h := m.Handler(next)
	for i, exp := range []int{200, 200, 200, 429} {
		if w := get(h, "192.0.2.1:1"); w.Code != exp {
			t.Errorf("request %d: exp %d, got %d", i, exp, w.Code)
		}
	}
	if got, exp := slept, []time.Duration{time.Second, 2 * time.Second}; !equal(got, exp) {
		t.Errorf("slept %v, exp %v (decisions %v)", got, exp, decisions)
	}
	if next.calls.Load() != 3 {
		t.Errorf("handler calls: %d", next.calls.Load())
	}

	// NoDelay serves the burst at once; so does DryRun.
	for _, c := range []struct {
		rule ratelimit.LeakyBucket
		opts []httplimit.Option
	}{
		{ratelimit.LeakyBucket{Rate: 1, Per: time.Second, Burst: 2, Delay: ratelimit.NoDelay}, nil},
		{rule, []httplimit.Option{httplimit.DryRun()}},
	} {
		m := newMiddleware(t, newLimiter(t, newMemory(t, clk), c.rule), c.opts...)
		httplimit.SetSleep(m, func(context.Context, time.Duration) error {
			t.Errorf("slept with %+v %d options", c.rule, len(c.opts))
			return nil
		})
		for range 3 {
			if w := get(m.Handler(&ok{}), "192.0.2.1:1"); w.Code != 200 {
				t.Errorf("%+v: %d", c.rule, w.Code)
			}
		}
	}
}

// TestDelayCancelled uses the real timer: a request whose context ends
// during its delay, or whose deadline is before the delay's end, is not
// served.
func TestDelayCancelled(t *testing.T) {
	clk := clock.NewFake(t0)
	// Every request after the first waits an hour.
	l := newLimiter(t, newMemory(t, clk), ratelimit.LeakyBucket{Rate: 1, Per: time.Hour, Burst: 5})
	var errs []error
	ctx, cancel := context.WithCancel(context.Background())
	next := &ok{}
	h := newMiddleware(t, l,
		httplimit.OnError(func(_ *http.Request, err error) { errs = append(errs, err) }),
		httplimit.OnDecision(func(_ *http.Request, res ratelimit.Result) {
			if res.Delay > 0 {
				cancel()
			}
		})).Handler(next)
	if w := send(ctx, h, "192.0.2.1:1"); w.Code != 200 {
		t.Fatalf("first: %d", w.Code)
	}
	w := send(ctx, h, "192.0.2.1:1")
	if w.Code != 503 || next.calls.Load() != 1 || len(errs) != 1 || !errors.Is(errs[0], context.Canceled) {
		t.Errorf("cancelled during delay: %d, calls %d, errors %v", w.Code, next.calls.Load(), errs)
	}
	if w.Header().Get("Ratelimit") == "" {
		t.Errorf("no rate-limit fields on the 503")
	}

	dctx, dcancel := context.WithTimeout(context.Background(), time.Minute)
	defer dcancel()
	w = send(dctx, h, "192.0.2.1:1")
	if w.Code != 503 || next.calls.Load() != 1 || len(errs) != 2 || !errors.Is(errs[1], context.DeadlineExceeded) {
		t.Errorf("deadline before the delay's end: %d, calls %d, errors %v", w.Code, next.calls.Load(), errs)
	}

	// The default sleep returns at once when its context ends.
	if err := httplimit.Sleep(ctx, time.Hour); !errors.Is(err, context.Canceled) {
		t.Errorf("Sleep on a cancelled context: %v", err)
	}
	if err := httplimit.Sleep(context.Background(), time.Microsecond); err != nil {
		t.Errorf("Sleep: %v", err)
	}
}

func equal(a, b []time.Duration) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestDryRun(t *testing.T) {
	clk := clock.NewFake(t0)
	l := newLimiter(t, newMemory(t, clk), ratelimit.FixedWindow{Limit: 1, Window: time.Minute})
	var allowed []bool
	next := &ok{}
	h := newMiddleware(t, l, httplimit.DryRun(), httplimit.KeyByHeader("X-User"),
		httplimit.OnDecision(func(_ *http.Request, res ratelimit.Result) { allowed = append(allowed, res.Allowed) })).Handler(next)
	for i := range 3 {
		w := get(h, "192.0.2.1:1", "X-User: alice")
		exp := lines(`Ratelimit: "default";r=0;t=60`, `Ratelimit-Policy: "default";q=1`)
		if w.Code != 200 || rateHeaders(w) != exp {
			t.Errorf("request %d: %d\n%s", i, w.Code, rateHeaders(w))
		}
	}
	if w := get(h, "192.0.2.1:1"); w.Code != 200 { // no key
		t.Errorf("keyless: %d", w.Code)
	}
	if len(allowed) != 3 || !allowed[0] || allowed[1] || allowed[2] {
		t.Errorf("decisions: %v", allowed)
	}
	if next.calls.Load() != 4 {
		t.Errorf("handler calls: %d", next.calls.Load())
	}
}

func TestStoreErrorWithEndedContext(t *testing.T) {
	clk := clock.NewFake(t0)
	l := newLimiter(t, newMemory(t, clk), ratelimit.FixedWindow{Limit: 1, Window: time.Minute})
	var errs []error
	next := &ok{}
	h := newMiddleware(t, l, httplimit.OnError(func(_ *http.Request, err error) { errs = append(errs, err) })).Handler(next)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if w := send(ctx, h, "192.0.2.1:1"); w.Code != 503 || next.calls.Load() != 0 || len(errs) != 1 || !errors.Is(errs[0], context.Canceled) {
		t.Errorf("got %d, calls %d, errors %v", w.Code, next.calls.Load(), errs)
	}
}

func TestConfigErrors(t *testing.T) {
	clk := clock.NewFake(t0)
	l := newLimiter(t, newMemory(t, clk), ratelimit.FixedWindow{Limit: 1, Window: time.Minute})
	for _, c := range []struct {
		opts []httplimit.Option
		exp  string
	}{
		{[]httplimit.Option{httplimit.HeaderStyle(8)}, "httplimit: HeaderStyle: unknown header set 0x8"},
		{[]httplimit.Option{httplimit.PolicyWindow(-time.Second)}, "httplimit: PolicyWindow must be >= 0, got -1s"},
		{[]httplimit.Option{httplimit.PolicyWindows(time.Second, -1)}, "httplimit: PolicyWindows[1] must be >= 0, got -1ns"},
		{[]httplimit.Option{httplimit.PolicyWindows(time.Second, time.Minute)}, "httplimit: PolicyWindows has 2 entries for 1 rules"},
		{[]httplimit.Option{httplimit.DenyWith(nil)}, "httplimit: DenyWith function is nil"},
		{[]httplimit.Option{httplimit.StoreFailure(7)}, "httplimit: StoreFailure must be FailOpen or FailClosed, got FailurePolicy(7)"},
		{[]httplimit.Option{httplimit.OnError(nil)}, "httplimit: OnError function is nil"},
		{[]httplimit.Option{httplimit.OnDecision(nil)}, "httplimit: OnDecision function is nil"},
		{[]httplimit.Option{httplimit.Skip(nil)}, "httplimit: Skip function is nil"},
		{[]httplimit.Option{httplimit.ReleaseTimeout(0)}, "httplimit: ReleaseTimeout must be > 0, got 0s"},
		{[]httplimit.Option{httplimit.KeyFunc(nil)}, "httplimit: KeyFunc function is nil"},
		{[]httplimit.Option{httplimit.KeyByHeader("X Key")}, `httplimit: KeyByHeader: invalid header name "X Key"`},
		{[]httplimit.Option{httplimit.KeyByIP(httplimit.TrustedProxies("10.0.0.0/33"))}, `httplimit: TrustedProxies: "10.0.0.0/33" is not an IP address or CIDR prefix`},
		{[]httplimit.Option{httplimit.KeyByIP(httplimit.TrustedProxies("fe80::1%eth0"))}, `httplimit: TrustedProxies: "fe80::1%eth0" is not an IP address or CIDR prefix`},
		{[]httplimit.Option{httplimit.KeyByIP(httplimit.IPv6Prefix(0))}, "httplimit: IPv6Prefix must be between 1 and 128, got 0"},
		{[]httplimit.Option{httplimit.KeyByIP(httplimit.IPv4Prefix(33))}, "httplimit: IPv4Prefix must be between 1 and 32, got 33"},
		{[]httplimit.Option{httplimit.KeyByIP(httplimit.ForwardedHeader(""))}, `httplimit: ForwardedHeader: invalid header name ""`},
		// The first error wins.
		{[]httplimit.Option{httplimit.Skip(nil), httplimit.OnError(nil)}, "httplimit: Skip function is nil"},
	} {
		if _, err := httplimit.New(l, c.opts...); err == nil || err.Error() != c.exp {
			t.Errorf("exp %q, got %v", c.exp, err)
		}
	}
	if _, err := httplimit.New(nil); err == nil || err.Error() != "httplimit: New: Limiter is nil" {
		t.Errorf("nil Limiter: %v", err)
	}
	if _, err := httplimit.NewConcurrency(nil); err == nil || err.Error() != "httplimit: NewConcurrency: ConcurrencyLimiter is nil" {
		t.Errorf("nil ConcurrencyLimiter: %v", err)
	}
	// Nil options are ignored.
	if _, err := httplimit.New(l, nil); err != nil {
		t.Errorf("nil option: %v", err)
	}

	// Limit reports the error on every request instead of panicking.
	h := httplimit.Limit(l, httplimit.ReleaseTimeout(-1))(&ok{})
	w := get(h, "192.0.2.1:1")
	if w.Code != 500 || w.Body.String() != "rate limiter misconfigured: httplimit: ReleaseTimeout must be > 0, got -1ns\n" {
		t.Errorf("Limit with a bad option: %d %q", w.Code, w.Body)
	}
	h = httplimit.LimitConcurrency(nil)(&ok{})
	if w := get(h, "192.0.2.1:1"); w.Code != 500 {
		t.Errorf("LimitConcurrency(nil): %d", w.Code)
	}
	if w := get(httplimit.Limit(l)(&ok{}), "192.0.2.1:1"); w.Code != 200 {
		t.Errorf("Limit: %d", w.Code)
	}
}

func TestWindowOf(t *testing.T) {
	for _, c := range []struct {
		rule ratelimit.Rule
		exp  time.Duration
	}{
		{ratelimit.FixedWindow{Limit: 5, Window: time.Minute}, time.Minute},
		{&ratelimit.FixedWindow{Limit: 5, Window: time.Minute}, time.Minute},
		{ratelimit.SlidingWindow{Limit: 5, Window: time.Hour}, time.Hour},
		{ratelimit.SlidingLog{Limit: 5, Window: time.Second}, time.Second},
		{ratelimit.TokenBucket{Capacity: 10, Refill: 2, Every: time.Second}, 5 * time.Second},
		{ratelimit.GCRA{Rate: 10, Per: time.Second, Burst: 20}, 2 * time.Second},
		{ratelimit.LeakyBucket{Rate: 2, Per: time.Second, Burst: 9}, 5 * time.Second},
		{&ratelimit.LeakyBucket{Rate: 2, Per: time.Second, Burst: 9}, 5 * time.Second},
		{ratelimit.TokenBucket{Capacity: 1 << 52, Refill: 1, Every: ratelimit.MaxPeriod}, 1<<63 - 1},
		{ratelimit.TokenBucket{Capacity: 10, Refill: 0, Every: time.Second}, 0},
		{ratelimit.Named("x", ratelimit.FixedWindow{Limit: 5, Window: time.Minute}), 0},
		{nil, 0},
	} {
		if got := httplimit.WindowOf(c.rule); got != c.exp {
			t.Errorf("WindowOf(%#v): exp %v, got %v", c.rule, c.exp, got)
		}
	}
}
