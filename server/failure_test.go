package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/floodgate-dev/floodgate/internal/backendtest"
	"github.com/floodgate-dev/floodgate/internal/testenv"
	"github.com/floodgate-dev/floodgate/server/storeurl"
)

// TestFailureModes pauses a private Redis (SIGSTOP) and checks that every
// answer follows the failure mode, comes within the timeout (not the client's
// own, longer one), that the breaker then fails calls fast, and that service
// comes back by itself once Redis does.
func TestFailureModes(t *testing.T) {
	r := testenv.NewRedis(t)

	for _, mode := range []FailureMode{FailOpen, FailClosed, FailError} {
		t.Run(mode.String(), func(t *testing.T) {
			// The client's own timeouts (10 s) are far longer than the
			// service's (50 ms): answers within seconds are the service's.
			b, c, err := storeurl.Open("redis://"+r.Addr, backendtest.UniquePrefix(), 10*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			warmStore(t, b)
			s := newService(t, b, Options{
				FailureMode: mode,
				Timeout:     50 * time.Millisecond,
				Breaker:     BreakerOptions{Failures: 3, Cooldown: 200 * time.Millisecond},
				Metrics:     NewMetrics(),
			})
			if got := decide(t, s, desc(1, "user", "u1")); got.Code != CodeOK || got.Failed {
				t.Fatalf("healthy: %+v", got)
			}
			if err := r.Pause(); err != nil {
				t.Fatal(err)
			}
			resumed := false
			defer func() {
				if !resumed {
					r.Resume()
				}
			}()
			for i := range 6 {
				start := time.Now()
				got, err := s.Decide(context.Background(), &Request{Domain: "api", Descriptors: []Descriptor{desc(1, "user", "u1"), desc(1, "nomatch", "x")}})
				if took := time.Since(start); took > 5*time.Second {
					t.Fatalf("request %d took %v with Redis paused: the client's timeout, not the service's", i, took)
				}
				switch mode {
				case FailError:
					if !errors.Is(err, ErrUnavailable) {
						t.Fatalf("request %d: err %v, want ErrUnavailable", i, err)
					}
				case FailOpen:
					if err != nil || !got.Failed || got.Code != CodeOK || got.Statuses[0].ResetAfter <= 0 {
						t.Fatalf("request %d: %+v %v (want the limit's reset time too)", i, got, err)
					}
				case FailClosed:
					if err != nil || !got.Failed || got.Code != CodeOverLimit || got.Statuses[0].Code != CodeOverLimit || got.Statuses[1].Code != CodeOK ||
						got.Statuses[0].ResetAfter <= 0 || got.Statuses[0].RetryAfter != got.Statuses[0].ResetAfter {
						t.Fatalf("request %d: %+v %v (want the limit's reset and retry times too)", i, got, err)
					}
				}
			}
			if !s.main.breakers.AllOpen() || s.Ready() {
				t.Fatal("breaker still closed after repeated failures")
			}
			if err := r.Resume(); err != nil {
				t.Fatal(err)
			}
			resumed = true
			deadline := time.Now().Add(10 * time.Second)
			for {
				got, err := s.Decide(context.Background(), &Request{Domain: "api", Descriptors: []Descriptor{desc(1, "user", "u2")}})
				if err == nil && !got.Failed && got.Code == CodeOK {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("no recovery after Redis resumed: %+v %v", got, err)
				}
				time.Sleep(50 * time.Millisecond)
			}
			if !s.Ready() {
				t.Fatal("not ready after recovery")
			}
		})
	}
}

// TestCallerDeadlineShorterThanTimeout is issue 12's blind breaker: with
// Redis paused and every caller at Envoy's default 20 ms deadline (shorter
// than the 50 ms store timeout), the stalled calls must still count as store
// timeouts: the breaker opens, the service is not ready, the metrics and the
// (rate-limited) log say so, and later calls are answered by the failure mode
// in a few milliseconds instead of running into the caller's deadline.
func TestCallerDeadlineShorterThanTimeout(t *testing.T) {
	r := testenv.NewRedis(t)
	b, c, err := storeurl.Open("redis://"+r.Addr, backendtest.UniquePrefix(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	warmStore(t, b)
	var logs lockedBuffer
	m := NewMetrics()
	s := newService(t, b, Options{
		FailureMode: FailClosed,
		Timeout:     DefaultTimeout,
		Breaker:     BreakerOptions{Failures: 3, Cooldown: time.Minute},
		Metrics:     m,
		Logger:      slog.New(slog.NewTextHandler(&logs, nil)),
	})
	h := NewHTTPHandler(s, HTTPOptions{})
	callAt := func(d time.Duration) (*Response, error) {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		return s.Decide(ctx, &Request{Domain: "api", Descriptors: []Descriptor{desc(1, "user", "u1")}})
	}
	if got, err := callAt(5 * time.Second); err != nil || got.Failed {
		t.Fatalf("healthy: %+v %v", got, err)
	}
	if err := r.Pause(); err != nil {
		t.Fatal(err)
	}
	defer r.Resume()

	for i := range 3 {
		got, err := callAt(20 * time.Millisecond)
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("stalled call %d: err %v, want the caller's DeadlineExceeded (got %+v, logs %s)", i, err, got, logs.String())
		}
	}
	if !s.main.breakers.AllOpen() || s.Ready() {
		t.Fatal("breaker still closed after three stalled calls ended by the caller's deadline")
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
	if rec.Code != http.StatusServiceUnavailable {
		t.Fatalf("/readyz: %d %q, want 503", rec.Code, rec.Body)
	}
	if got := counterValue(t, m.backendErrors.WithLabelValues("timeout", storeMain)); got != 3 {
		t.Fatalf("backend timeouts counted: %v, want 3", got)
	}
	// Answered by the failure mode, not by the caller's deadline (which
	// would be an error): the breaker fails them without asking the store.
	for i := range 20 {
		got, err := callAt(20 * time.Millisecond)
		if err != nil || !got.Failed || got.Code != CodeOverLimit {
			t.Fatalf("call %d with the breaker open: %+v %v, want the deny failure mode", i, got, err)
		}
	}
	// Three timeouts normally fall within one second: one line. On a
	// loaded machine they may straddle two.
	if n := strings.Count(logs.String(), "rate limit store failed"); n < 1 || n > 2 {
		t.Fatalf("%d log lines for three timeouts, want 1 or 2 (rate-limited to one a second):\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "caller's deadline") {
		t.Fatalf("the log does not say whose deadline ended:\n%s", logs.String())
	}
}

// TestCallerCancelIsNotAStoreFailure: callers that go away while a healthy
// store answers do not open the breaker.
func TestCallerCancelIsNotAStoreFailure(t *testing.T) {
	r := testenv.NewRedis(t)
	b, c, err := storeurl.Open("redis://"+r.Addr, backendtest.UniquePrefix(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s := newService(t, b, Options{Breaker: BreakerOptions{Failures: 2, Cooldown: time.Minute}})
	for i := range 10 {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := s.Decide(ctx, &Request{Domain: "api", Descriptors: []Descriptor{desc(1, "user", fmt.Sprint("c", i))}}); !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled call %d: %v", i, err)
		}
	}
	if s.main.breakers.AllOpen() {
		t.Fatal("cancelled callers opened the breaker")
	}
}

// lockedBuffer is a bytes.Buffer safe for a logger and a test to share.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// counterValue reads a Prometheus counter.
func counterValue(t *testing.T, c interface{ Write(*dto.Metric) error }) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
