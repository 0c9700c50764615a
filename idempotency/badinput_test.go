package idempotency_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/idempotency"
)

func TestBadOptions(t *testing.T) {
	m := backend.NewMemory()
	defer m.Close()
	cases := []struct {
		opts []idempotency.Option
		want string
	}{
		{[]idempotency.Option{idempotency.TTL(0)}, "idempotency: TTL must be between 1ms and 87600h0m0s, got 0s"},
		{[]idempotency.Option{idempotency.TTL(87601 * time.Hour)}, "idempotency: TTL must be between 1ms and 87600h0m0s, got 87601h0m0s"},
		{[]idempotency.Option{idempotency.Lease(-time.Second)}, "idempotency: Lease must be between 1ms and 87600h0m0s, got -1s"},
		{[]idempotency.Option{idempotency.Lease(time.Microsecond)}, "idempotency: Lease must be between 1ms and 87600h0m0s, got 1µs"},
		{[]idempotency.Option{idempotency.WaitForResult(-time.Second)}, "idempotency: WaitForResult must be >= 0, got -1s"},
		{[]idempotency.Option{idempotency.MaxPoll(0)}, "idempotency: MaxPoll must be >= 1ms, got 0s"},
		{[]idempotency.Option{idempotency.Namespace(strings.Repeat("n", 129))}, "idempotency: Namespace must be at most 128 bytes, got 129"},
	}
	for _, c := range cases {
		if _, err := idempotency.New(m, c.opts...); err == nil || err.Error() != c.want {
			t.Errorf("got %v\nwant %s", err, c.want)
		}
	}
	if _, err := idempotency.New(nil); err == nil || err.Error() != "idempotency: backend is nil" {
		t.Errorf("nil backend: %v", err)
	}
}

func TestBadCalls(t *testing.T) {
	m := backend.NewMemory()
	defer m.Close()
	s := newStore(t, m)
	ctx := context.Background()
	fn := func(context.Context) ([]byte, error) { t.Error("fn ran on bad input"); return nil, nil }
	if _, _, err := s.Do(ctx, "", fn); !errors.Is(err, backend.ErrEmptyKey) || err.Error() != "idempotency: key is empty" {
		t.Errorf("empty key: %v", err)
	}
	// A long key is a key like any other (TestLongKeys).
	long := strings.Repeat("k", backend.MaxKeyLen+1)
	if res, replayed, err := s.Do(ctx, long, func(context.Context) ([]byte, error) { return []byte("x"), nil }); err != nil || replayed || string(res) != "x" {
		t.Errorf("key of MaxKeyLen+1 bytes: %q %v %v", res, replayed, err)
	}
	if _, _, err := s.Do(ctx, "k", nil); err == nil || err.Error() != "idempotency: fn is nil" {
		t.Errorf("nil fn: %v", err)
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, _, err := s.Do(cctx, "k", fn); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled ctx: %v", err)
	}
	if _, err := s.IssueToken(cctx); !errors.Is(err, context.Canceled) {
		t.Errorf("IssueToken with cancelled ctx: %v", err)
	}
	if ok, err := s.ConsumeToken(ctx, ""); ok || err == nil || err.Error() != "idempotency: token is empty" {
		t.Errorf("empty token: %v %v", ok, err)
	}
	// A key used by the middleware is not Do's.
	h := newMiddleware(t, s, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	post(h, "/x", "shared", "")
	if _, _, err := s.Do(ctx, "shared", fn); !errors.Is(err, idempotency.ErrMismatch) {
		t.Errorf("Do on a middleware key: %v, want ErrMismatch", err)
	}
}

func TestBadMiddlewareOptions(t *testing.T) {
	m := backend.NewMemory()
	defer m.Close()
	s := newStore(t, m)
	cases := []struct {
		opts []idempotency.MiddlewareOption
		want string
	}{
		{[]idempotency.MiddlewareOption{idempotency.MaxBody(0)}, "idempotency: MaxBody must be > 0, got 0"},
		{[]idempotency.MiddlewareOption{idempotency.KeyHeader("")}, `idempotency: KeyHeader must be a valid header name, got ""`},
		{[]idempotency.MiddlewareOption{idempotency.KeyHeader("Bad Header")}, `idempotency: KeyHeader must be a valid header name, got "Bad Header"`},
		{[]idempotency.MiddlewareOption{idempotency.Methods()}, "idempotency: Methods needs at least one method"},
		{[]idempotency.MiddlewareOption{idempotency.Methods("POST", "")}, `idempotency: Methods: invalid method ""`},
		{[]idempotency.MiddlewareOption{idempotency.Scope(nil)}, "idempotency: Scope function is nil"},
		{[]idempotency.MiddlewareOption{idempotency.StoreStatus(nil)}, "idempotency: StoreStatus function is nil"},
	}
	for _, c := range cases {
		if _, err := idempotency.NewMiddleware(s, c.opts...); err == nil || err.Error() != c.want {
			t.Errorf("got %v\nwant %s", err, c.want)
		}
	}
	if _, err := idempotency.NewMiddleware(nil); err == nil || err.Error() != "idempotency: Middleware: store is nil" {
		t.Errorf("nil store: %v", err)
	}
	// Middleware reports a bad configuration on every request instead.
	h := idempotency.Middleware(s, idempotency.MaxBody(-1))(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {
		t.Error("handler ran under a misconfigured middleware")
	}))
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/", nil))
	if w.Code != http.StatusInternalServerError || !strings.Contains(w.Body.String(), "MaxBody must be > 0, got -1") {
		t.Errorf("misconfigured: %d %s", w.Code, w.Body)
	}
}

func TestMiddlewareOptions(t *testing.T) {
	m := backend.NewMemory()
	defer m.Close()
	s := newStore(t, m)
	o := &orders{}
	h := newMiddleware(t, s, o, idempotency.KeyHeader("X-Request-Id"), idempotency.Methods(http.MethodPost),
		idempotency.StoreStatus(func(status int) bool { return status == http.StatusCreated }))
	for range 2 {
		post(h, "/orders", "", "x", "X-Request-Id", "r1")
	}
	if o.runs.Load() != 1 {
		t.Errorf("KeyHeader: handler ran %d times, want 1", o.runs.Load())
	}
	for range 2 {
		r := httptest.NewRequest(http.MethodPatch, "/orders", nil)
		r.Header.Set("X-Request-Id", "r2")
		h.ServeHTTP(httptest.NewRecorder(), r)
	}
	if o.runs.Load() != 3 {
		t.Errorf("Methods(POST): PATCH was handled; runs %d, want 3", o.runs.Load())
	}
}
