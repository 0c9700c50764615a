package httplimit_test

import (
	"net/http"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/httplimit"
	"github.com/floodgate-dev/floodgate/ratelimit"
)

func newConcurrency(t testing.TB, limit int64, opts ...httplimit.Option) *httplimit.Middleware {
	t.Helper()
	c, err := ratelimit.NewConcurrency(newMemory(t, clock.NewFake(t0)), ratelimit.Concurrency{Limit: limit, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	m, err := httplimit.NewConcurrency(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestConcurrency(t *testing.T) {
	m := newConcurrency(t, 1, httplimit.HeaderStyle(httplimit.IETF|httplimit.Draft03))
	entered, leave := make(chan struct{}), make(chan struct{})
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/slow" {
			close(entered)
			<-leave
		}
	}))
	const policy = `Ratelimit-Policy: "default";q=1;qu="concurrent-requests"`
	done := make(chan string)
	go func() {
		w := serve(h, httptestRequest("/slow"))
		done <- rateHeaders(w)
	}()
	<-entered
	w := serve(h, httptestRequest("/"))
	exp := lines(`Ratelimit: "default";r=0`, "Ratelimit-Limit: 1", policy, "Ratelimit-Remaining: 0")
	if w.Code != 429 || rateHeaders(w) != exp {
		t.Errorf("while held: %d\n%s\nexp\n%s", w.Code, rateHeaders(w), exp)
	}
	// Another key has its own slot.
	r := httptestRequest("/")
	r.RemoteAddr = "192.0.2.2:1"
	if w := serve(h, r); w.Code != 200 {
		t.Errorf("other key: %d", w.Code)
	}
	close(leave)
	if got := <-done; got != exp {
		t.Errorf("holder's fields:\n%s", got)
	}
	// Released when the handler returned.
	if w := serve(h, httptestRequest("/")); w.Code != 200 || rateHeaders(w) != exp {
		t.Errorf("after release: %d\n%s", w.Code, rateHeaders(w))
	}
}

// TestConcurrencyPanic checks that the slot is given back when the handler
// panics, and that the panic goes on up.
func TestConcurrencyPanic(t *testing.T) {
	m := newConcurrency(t, 1)
	h := m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/panic" {
			panic(http.ErrAbortHandler)
		}
	}))
	for i := range 3 {
		func() {
			defer func() {
				if p := recover(); p != http.ErrAbortHandler {
					t.Errorf("panic %d: recovered %v", i, p)
				}
			}()
			serve(h, httptestRequest("/panic"))
		}()
		if w := serve(h, httptestRequest("/")); w.Code != 200 {
			t.Fatalf("after panic %d: %d: the slot was not released", i, w.Code)
		}
	}
}

func TestConcurrencyDryRun(t *testing.T) {
	var denied int
	m := newConcurrency(t, 0, httplimit.DryRun(), httplimit.OnDecision(func(_ *http.Request, res ratelimit.Result) {
		if !res.Allowed {
			denied++
		}
	}))
	next := &ok{}
	for range 2 {
		if w := serve(m.Handler(next), httptestRequest("/")); w.Code != 200 {
			t.Errorf("dry run: %d", w.Code)
		}
	}
	if denied != 2 || next.calls.Load() != 2 {
		t.Errorf("denied %d, calls %d", denied, next.calls.Load())
	}
}
