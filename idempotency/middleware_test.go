package idempotency_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/idempotency"
	"github.com/floodgate-dev/floodgate/internal/backendtest"
)

// orders is a handler that creates an order per request it runs: 201 with
// headers, a cookie and a body echoing the request body.
type orders struct {
	runs    atomic.Int64
	block   chan struct{} // if not nil, requests wait on it
	entered chan struct{}
}

func (o *orders) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := o.runs.Add(1)
	if o.block != nil {
		o.entered <- struct{}{}
		<-o.block
	}
	body, _ := io.ReadAll(r.Body)
	w.Header().Set("Location", fmt.Sprintf("/orders/%d", n))
	w.Header().Add("X-Trace", "a")
	w.Header().Add("X-Trace", "b")
	http.SetCookie(w, &http.Cookie{Name: "order", Value: fmt.Sprint(n)})
	w.Header().Set("Content-Type", "text/plain")
	w.WriteHeader(http.StatusCreated)
	fmt.Fprintf(w, "order %d for %s", n, body)
}

func post(h http.Handler, path, key, body string, extra ...string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, path, strings.NewReader(body))
	if key != "" {
		r.Header.Set("Idempotency-Key", key)
	}
	for i := 0; i+1 < len(extra); i += 2 {
		r.Header.Add(extra[i], extra[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

func newMiddleware(t *testing.T, s *idempotency.Store, next http.Handler, opts ...idempotency.MiddlewareOption) http.Handler {
	t.Helper()
	mw, err := idempotency.NewMiddleware(s, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return mw(next)
}

func isProblem(t *testing.T, w *httptest.ResponseRecorder, status int) {
	t.Helper()
	if w.Code != status {
		t.Fatalf("status %d, want %d; body %s", w.Code, status, w.Body)
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("Content-Type %q, want application/problem+json", ct)
	}
	if !strings.Contains(w.Body.String(), fmt.Sprintf(`"status":%d`, status)) {
		t.Errorf("problem body %s", w.Body)
	}
}

func TestMiddleware(t *testing.T) {
	for _, bk := range coreBackends() {
		t.Run(bk.Name, func(t *testing.T) {
			t.Parallel()
			b := bk.Make(t, nil)
			s := newStore(t, b)

			t.Run("replay equals the original", func(t *testing.T) {
				o := &orders{}
				h := newMiddleware(t, s, o)
				first := post(h, "/orders", "k-replay", `{"sku":1}`)
				if first.Code != http.StatusCreated || first.Body.String() != `order 1 for {"sku":1}` {
					t.Fatalf("first: %d %q", first.Code, first.Body)
				}
				if first.Header().Get(idempotency.ReplayedHeader) != "" {
					t.Error("first response marked as replayed")
				}
				again := post(h, "/orders", "k-replay", `{"sku":1}`)
				if again.Code != first.Code || again.Body.String() != first.Body.String() {
					t.Errorf("replay: %d %q, want %d %q", again.Code, again.Body, first.Code, first.Body)
				}
				if got := again.Header().Get(idempotency.ReplayedHeader); got != "true" {
					t.Errorf("%s = %q, want true", idempotency.ReplayedHeader, got)
				}
				again.Header().Del(idempotency.ReplayedHeader)
				if fmt.Sprint(again.Header()) != fmt.Sprint(first.Header()) {
					t.Errorf("replayed headers:\n %v\nwant\n %v", again.Header(), first.Header())
				}
				if o.runs.Load() != 1 {
					t.Errorf("handler ran %d times", o.runs.Load())
				}
				// The quoted Structured Field form is the same key.
				if q := post(h, "/orders", `"k-replay"`, `{"sku":1}`); q.Header().Get(idempotency.ReplayedHeader) != "true" {
					t.Errorf("quoted key was not the same key: %d %q", q.Code, q.Body)
				}
			})

			t.Run("different request with the key: 422", func(t *testing.T) {
				o := &orders{}
				h := newMiddleware(t, s, o)
				post(h, "/orders", "k-fp", "a")
				isProblem(t, post(h, "/orders", "k-fp", "b"), http.StatusUnprocessableEntity)
				isProblem(t, post(h, "/carts", "k-fp", "a"), http.StatusUnprocessableEntity)
				isProblem(t, post(h, "/orders?x=1", "k-fp", "a"), http.StatusUnprocessableEntity)
				r := httptest.NewRequest(http.MethodPut, "/orders", strings.NewReader("a"))
				r.Header.Set("Idempotency-Key", "k-fp")
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				isProblem(t, w, http.StatusUnprocessableEntity)
				if o.runs.Load() != 1 {
					t.Errorf("handler ran %d times", o.runs.Load())
				}
			})

			t.Run("in flight: 409", func(t *testing.T) {
				o := &orders{block: make(chan struct{}), entered: make(chan struct{}, 1)}
				h := newMiddleware(t, s, o)
				first := make(chan *httptest.ResponseRecorder)
				go func() { first <- post(h, "/orders", "k-busy", "x") }()
				<-o.entered
				w := post(h, "/orders", "k-busy", "x")
				isProblem(t, w, http.StatusConflict)
				if w.Header().Get("Retry-After") == "" {
					t.Error("409 without Retry-After")
				}
				close(o.block)
				if w := <-first; w.Code != http.StatusCreated {
					t.Errorf("first: %d", w.Code)
				}
				if w := post(h, "/orders", "k-busy", "x"); w.Header().Get(idempotency.ReplayedHeader) != "true" {
					t.Errorf("after the first finished: %d %v", w.Code, w.Header())
				}
			})

			t.Run("bad keys: 400", func(t *testing.T) {
				o := &orders{}
				h := newMiddleware(t, s, o)
				isProblem(t, post(h, "/orders", strings.Repeat("k", 256), "x"), http.StatusBadRequest)
				if w := post(h, "/orders", strings.Repeat("k", 255), "x"); w.Code != http.StatusCreated {
					t.Errorf("255-byte key: %d", w.Code)
				}
				isProblem(t, post(h, "/orders", `"unterminated`, "x"), http.StatusBadRequest)
				isProblem(t, post(h, "/orders", `""`, "x"), http.StatusBadRequest)
				isProblem(t, post(h, "/orders", "a b", "x"), http.StatusBadRequest)
				isProblem(t, post(h, "/orders", "one", "x", "Idempotency-Key", "two"), http.StatusBadRequest)
				if o.runs.Load() != 1 {
					t.Errorf("handler ran %d times", o.runs.Load())
				}
			})

			t.Run("without a key", func(t *testing.T) {
				o := &orders{}
				h := newMiddleware(t, s, o)
				post(h, "/orders", "", "x")
				post(h, "/orders", "", "x")
				if o.runs.Load() != 2 {
					t.Errorf("requests without a key: handler ran %d times, want 2", o.runs.Load())
				}
				req := newMiddleware(t, s, o, idempotency.RequireKey())
				isProblem(t, post(req, "/orders", "", "x"), http.StatusBadRequest)
				w := httptest.NewRecorder()
				req.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/orders", nil))
				if w.Code != http.StatusCreated || o.runs.Load() != 3 {
					t.Errorf("GET under RequireKey: %d, runs %d", w.Code, o.runs.Load())
				}
				// Safe methods pass through even with a key.
				for range 2 {
					r := httptest.NewRequest(http.MethodGet, "/orders", nil)
					r.Header.Set("Idempotency-Key", "k-get")
					req.ServeHTTP(httptest.NewRecorder(), r)
				}
				if o.runs.Load() != 5 {
					t.Errorf("GET with a key: runs %d, want 5", o.runs.Load())
				}
			})

			t.Run("5xx is not stored", func(t *testing.T) {
				var runs atomic.Int64
				h := newMiddleware(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if runs.Add(1) == 1 {
						http.Error(w, "database down", http.StatusServiceUnavailable)
						return
					}
					w.WriteHeader(http.StatusCreated)
				}))
				if w := post(h, "/orders", "k-5xx", "x"); w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), "database down") {
					t.Fatalf("first: %d %q", w.Code, w.Body)
				}
				if w := post(h, "/orders", "k-5xx", "x"); w.Code != http.StatusCreated || w.Header().Get(idempotency.ReplayedHeader) != "" {
					t.Fatalf("retry: %d %v", w.Code, w.Header())
				}
				if w := post(h, "/orders", "k-5xx", "x"); w.Code != http.StatusCreated || w.Header().Get(idempotency.ReplayedHeader) != "true" {
					t.Fatalf("replay: %d %v", w.Code, w.Header())
				}
				if runs.Load() != 2 {
					t.Errorf("handler ran %d times, want 2", runs.Load())
				}
			})

			t.Run("body limit: 413", func(t *testing.T) {
				o := &orders{}
				h := newMiddleware(t, s, o, idempotency.MaxBody(10))
				isProblem(t, post(h, "/orders", "k-big", strings.Repeat("x", 11)), http.StatusRequestEntityTooLarge)
				r := httptest.NewRequest(http.MethodPost, "/orders", io.NopCloser(strings.NewReader(strings.Repeat("x", 11))))
				r.ContentLength = -1 // unknown length: found while reading
				r.Header.Set("Idempotency-Key", "k-big")
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				isProblem(t, w, http.StatusRequestEntityTooLarge)
				if w := post(h, "/orders", "k-big", strings.Repeat("x", 10)); w.Code != http.StatusCreated || !strings.HasSuffix(w.Body.String(), strings.Repeat("x", 10)) {
					t.Errorf("10-byte body: %d %q", w.Code, w.Body)
				}
			})

			t.Run("scope per user", func(t *testing.T) {
				o := &orders{}
				h := newMiddleware(t, s, o, idempotency.Scope(func(r *http.Request) string { return r.Header.Get("X-User") }))
				alice := post(h, "/orders", "k-user", "x", "X-User", "alice")
				bob := post(h, "/orders", "k-user", "x", "X-User", "bob")
				if alice.Body.String() == bob.Body.String() || o.runs.Load() != 2 {
					t.Errorf("users shared a key: %q %q", alice.Body, bob.Body)
				}
				if again := post(h, "/orders", "k-user", "x", "X-User", "alice"); again.Body.String() != alice.Body.String() {
					t.Errorf("alice's replay: %q, want %q", again.Body, alice.Body)
				}
			})

			t.Run("handler sees the request context of the lease", func(t *testing.T) {
				var sawValue atomic.Bool
				h := newMiddleware(t, s, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					sawValue.Store(r.Context().Value(ctxKey{}) == "request value")
					io.WriteString(w, "ok")
				}))
				r := httptest.NewRequest(http.MethodPost, "/orders", nil)
				r = r.WithContext(context.WithValue(r.Context(), ctxKey{}, "request value"))
				r.Header.Set("Idempotency-Key", "k-ctx")
				w := httptest.NewRecorder()
				h.ServeHTTP(w, r)
				if w.Code != http.StatusOK || !sawValue.Load() {
					t.Errorf("handler context lost the request's values: %d", w.Code)
				}
			})
		})
	}
}

type ctxKey struct{}

func TestMiddlewareStoreDown(t *testing.T) {
	// A Redis nobody listens on.
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", ContextTimeoutEnabled: true, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	defer c.Close()
	s := newStore(t, backendtest.NewRedis(t, c))
	o := &orders{}
	isProblem(t, post(newMiddleware(t, s, o), "/orders", "k", "x"), http.StatusServiceUnavailable)
	if o.runs.Load() != 0 {
		t.Fatal("fail-closed ran the handler")
	}
	w := post(newMiddleware(t, s, o, idempotency.FailOpen()), "/orders", "k", "body")
	if w.Code != http.StatusCreated || w.Body.String() != "order 1 for body" {
		t.Fatalf("fail-open: %d %q", w.Code, w.Body)
	}
}
