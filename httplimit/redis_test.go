package httplimit_test

import (
	"errors"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/httplimit"
	"github.com/floodgate-dev/floodgate/internal/testenv"
	"github.com/floodgate-dev/floodgate/ratelimit"
)

// TestStoreFailure stops a private Redis and checks each failure policy:
// FailOpen serves without fields, FailClosed answers 503, DryRun serves; all
// report the error.
func TestStoreFailure(t *testing.T) {
	srv := testenv.NewRedis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, MaxRetries: -1, DialerRetries: 1,
		DialTimeout: time.Second, ReadTimeout: time.Second, WriteTimeout: time.Second})
	t.Cleanup(func() { c.Close() })
	b, err := backend.NewRedis(c, backend.WithPrefix(uniquePrefix())) // Redis's own clock
	if err != nil {
		t.Fatal(err)
	}
	l := newLimiter(t, b, ratelimit.FixedWindow{Limit: 100, Window: time.Hour})
	conc, err := ratelimit.NewConcurrency(b, ratelimit.Concurrency{Limit: 100, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu   sync.Mutex
		errs []error
	)
	onError := httplimit.OnError(func(_ *http.Request, err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	})
	type handler struct {
		name   string
		h      http.Handler
		next   *ok
		status int // once Redis is down
	}
	var hs []handler
	must := func(m *httplimit.Middleware, err error) *httplimit.Middleware {
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	add := func(name string, status int, m *httplimit.Middleware) {
		next := &ok{}
		hs = append(hs, handler{name, m.Handler(next), next, status})
	}
	add("default", 200, must(httplimit.New(l, onError)))
	add("fail open", 200, must(httplimit.New(l, onError, httplimit.StoreFailure(httplimit.FailOpen))))
	add("fail closed", 503, must(httplimit.New(l, onError, httplimit.StoreFailure(httplimit.FailClosed))))
	add("dry run fail closed", 200, must(httplimit.New(l, onError, httplimit.StoreFailure(httplimit.FailClosed), httplimit.DryRun())))
	add("concurrency fail closed", 503, must(httplimit.NewConcurrency(conc, onError, httplimit.StoreFailure(httplimit.FailClosed))))
	add("concurrency fail open", 200, must(httplimit.NewConcurrency(conc, onError)))

	for _, h := range hs {
		if w := get(h.h, "192.0.2.1:1"); w.Code != 200 || w.Header().Get("Ratelimit") == "" {
			t.Fatalf("%s, Redis up: %d %v", h.name, w.Code, w.Header())
		}
	}
	if len(errs) != 0 {
		t.Fatalf("errors with Redis up: %v", errs)
	}
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, h := range hs {
		w := get(h.h, "192.0.2.1:1")
		if w.Code != h.status || w.Header().Get("Ratelimit") != "" {
			t.Errorf("%s, Redis down: exp %d, got %d %v", h.name, h.status, w.Code, w.Header())
		}
		if h.status == 503 && w.Body.String() != "Service Unavailable\n" {
			t.Errorf("%s: body %q", h.name, w.Body)
		}
		exp := int64(1) // the request while Redis was up
		if h.status == 200 {
			exp++
		}
		if h.next.calls.Load() != exp {
			t.Errorf("%s: handler calls: exp %d, got %d", h.name, exp, h.next.calls.Load())
		}
	}
	if len(errs) != len(hs) {
		t.Fatalf("OnError: exp %d errors, got %v", len(hs), errs)
	}
	for _, err := range errs {
		if errors.Is(err, httplimit.ErrNoKey) {
			t.Errorf("store error reported as ErrNoKey: %v", err)
		}
	}
}
