package httplimit_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/httplimit"
	"github.com/floodgate-dev/floodgate/internal/testenv"
	"github.com/floodgate-dev/floodgate/ratelimit"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// t0 is on a minute boundary, so fixed windows start there.
var t0 = time.Unix(1_699_999_980, 0)

var prefixSeq atomic.Int64

// uniquePrefix keeps every test's Redis keys apart on the shared server.
func uniquePrefix() string {
	return fmt.Sprintf("hl%d_%d", os.Getpid(), prefixSeq.Add(1))
}

// newMemory returns a memory backend on clk, closed when the test ends.
func newMemory(t testing.TB, clk clock.Clock) *backend.Memory {
	m := backend.NewMemory(backend.WithClock(clk))
	t.Cleanup(func() { m.Close() })
	return m
}

// newRedis returns a backend on the shared Redis server with clk injected.
func newRedis(t testing.TB, clk clock.Clock) *backend.Redis {
	c := redis.NewClient(&redis.Options{Addr: testenv.SharedRedis(t).Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	b, err := backend.NewRedis(c, backend.WithPrefix(uniquePrefix()), backend.WithClock(clk))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func newLimiter(t testing.TB, b backend.Backend, rules ...ratelimit.Rule) *ratelimit.Limiter {
	t.Helper()
	l, err := ratelimit.New(b, rules...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func newMiddleware(t testing.TB, l *ratelimit.Limiter, opts ...httplimit.Option) *httplimit.Middleware {
	t.Helper()
	m, err := httplimit.New(l, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// ok is the handler behind the middleware in most tests; it counts its calls.
type ok struct{ calls atomic.Int64 }

func (h *ok) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.calls.Add(1)
	io.WriteString(w, "ok")
}

// get sends a GET from remote (a RemoteAddr) with the given header lines
// ("Name: value") and returns the recorded response.
func get(h http.Handler, remote string, header ...string) *httptest.ResponseRecorder {
	return send(context.Background(), h, remote, header...)
}

func send(ctx context.Context, h http.Handler, remote string, header ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequestWithContext(ctx, http.MethodGet, "http://example.com/", nil)
	r.RemoteAddr = remote
	for _, line := range header {
		name, value, _ := strings.Cut(line, ":")
		r.Header.Add(name, strings.TrimSpace(value))
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// rateHeaders lists the response's rate-limit fields and Retry-After as
// "Name: value" lines, sorted, so a test can compare them all at once.
func rateHeaders(w *httptest.ResponseRecorder) string {
	h := w.Result().Header
	var names []string
	for name := range h {
		if strings.Contains(name, "Ratelimit") || name == "Retry-After" {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	var out []string
	for _, name := range names {
		for _, v := range h[name] {
			out = append(out, name+": "+v)
		}
	}
	return strings.Join(out, "\n")
}

// step is one request of a scenario: advance the clock, send, and expect a
// status and exactly these rate-limit fields (see rateHeaders).
type step struct {
	advance time.Duration
	remote  string
	status  int
	headers string
}

func run(t *testing.T, clk *clock.Fake, h http.Handler, steps []step) {
	t.Helper()
	for i, s := range steps {
		clk.Advance(s.advance)
		remote := s.remote
		if remote == "" {
			remote = "192.0.2.1:1234"
		}
		w := get(h, remote)
		if w.Code != s.status {
			t.Errorf("step %d: status: exp %d, got %d (%s)", i, s.status, w.Code, w.Body)
		}
		if got := rateHeaders(w); got != s.headers {
			t.Errorf("step %d: headers:\nexp %s\ngot %s", i, s.headers, got)
		}
	}
}

// lines joins header lines for step.headers.
func lines(l ...string) string { return strings.Join(l, "\n") }
