package httplimit_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/httplimit"
	"github.com/floodgate-dev/floodgate/ratelimit"
)

// TestLongKeys is issue 27: a key longer than backend.MaxKeyLen (a JWT from a
// header, say) counted as no key, so that with PassWithoutKey a client
// escaped its limit by sending a long key (and got 400 without it). A long
// key is now limited like any other, PassWithoutKey or not, on memory and on
// Redis, by a Limiter and by a ConcurrencyLimiter; two long keys that share
// their first MaxKeyLen bytes (and more) get a budget each; and
// PassWithoutKey still serves a request whose key is missing.
func TestLongKeys(t *testing.T) {
	const limit = 2
	long := strings.Repeat("j", 1999)
	keyA, keyB := long+"A", long+"B" // 2,000 bytes, differing in the last
	if len(keyA) != 2000 || keyA[:backend.MaxKeyLen] != keyB[:backend.MaxKeyLen] {
		t.Fatal("bad keys")
	}
	backends := []struct {
		name string
		make func(t testing.TB, clk clock.Clock) backend.Backend
	}{
		{"memory", func(t testing.TB, clk clock.Clock) backend.Backend { return newMemory(t, clk) }},
		{"redis", func(t testing.TB, clk clock.Clock) backend.Backend { return newRedis(t, clk) }},
	}
	options := []struct {
		name   string
		opts   []httplimit.Option
		noKey  int // the status of a request without the header
		passes bool
	}{
		{"default", nil, 400, false},
		{"PassWithoutKey", []httplimit.Option{httplimit.PassWithoutKey()}, 200, true},
		{"PassWithoutKey FailClosed", []httplimit.Option{httplimit.PassWithoutKey(), httplimit.StoreFailure(httplimit.FailClosed)}, 200, true},
	}
	for _, bk := range backends {
		for _, o := range options {
			setup := func(t *testing.T) (backend.Backend, *[]error, []httplimit.Option) {
				errs := new([]error)
				opts := append([]httplimit.Option{
					httplimit.KeyByHeader("Authorization"),
					httplimit.OnError(func(_ *http.Request, err error) { *errs = append(*errs, err) }),
				}, o.opts...)
				return bk.make(t, clock.NewFake(t0)), errs, opts
			}
			checkErrs := func(t *testing.T, errs []error) {
				t.Helper()
				if len(errs) != 1 || !errors.Is(errs[0], httplimit.ErrNoKey) || !strings.Contains(errs[0].Error(), "key is empty") {
					t.Errorf("OnError: exp one ErrNoKey for the missing key, got %v", errs)
				}
			}

			t.Run(bk.name+"/"+o.name, func(t *testing.T) {
				b, errs, opts := setup(t)
				next := &ok{}
				h := newMiddleware(t, newLimiter(t, b, ratelimit.FixedWindow{Limit: limit, Window: time.Minute}), opts...).Handler(next)
				for _, key := range []string{keyA, keyB} {
					for i := range limit + 1 {
						w := get(h, "192.0.2.1:1", "Authorization: "+key)
						exp := 200
						if i == limit {
							exp = 429
						}
						if w.Code != exp {
							t.Fatalf("key %q..., request %d: exp %d, got %d %s", key[len(key)-1:], i, exp, w.Code, w.Body)
						}
						if w.Header().Get("Ratelimit") == "" {
							t.Errorf("key %q..., request %d: no RateLimit field: %v", key[len(key)-1:], i, w.Header())
						}
						if exp == 429 && w.Header().Get("Retry-After") == "" {
							t.Errorf("key %q..., request %d: 429 without Retry-After: %v", key[len(key)-1:], i, w.Header())
						}
					}
				}
				if w := get(h, "192.0.2.1:1"); w.Code != o.noKey {
					t.Errorf("no key: exp %d, got %d", o.noKey, w.Code)
				}
				exp := int64(2 * limit)
				if o.passes {
					exp++
				}
				if next.calls.Load() != exp {
					t.Errorf("handler calls: exp %d, got %d", exp, next.calls.Load())
				}
				checkErrs(t, *errs)
			})

			t.Run(bk.name+"/"+o.name+"/concurrency", func(t *testing.T) {
				b, errs, opts := setup(t)
				c, err := ratelimit.NewConcurrency(b, ratelimit.Concurrency{Limit: limit, Lease: time.Minute})
				if err != nil {
					t.Fatal(err)
				}
				m, err := httplimit.NewConcurrency(c, opts...)
				if err != nil {
					t.Fatal(err)
				}
				next := &ok{}
				h := m.Handler(next)
				// Hold every slot of keyA, as requests still being served
				// would.
				ctx := context.Background()
				var held []func(context.Context) error
				for range limit {
					release, res, err := c.Acquire(ctx, keyA)
					if err != nil || !res.Allowed {
						t.Fatalf("Acquire: %+v %v", res, err)
					}
					held = append(held, release)
				}
				if w := get(h, "192.0.2.1:1", "Authorization: "+keyA); w.Code != 429 {
					t.Errorf("keyA, its slots held: exp 429, got %d %s", w.Code, w.Body)
				}
				if w := get(h, "192.0.2.1:1", "Authorization: "+keyB); w.Code != 200 {
					t.Errorf("keyB: exp 200, got %d %s", w.Code, w.Body)
				}
				for _, release := range held {
					if err := release(ctx); err != nil {
						t.Fatal(err)
					}
				}
				if w := get(h, "192.0.2.1:1", "Authorization: "+keyA); w.Code != 200 {
					t.Errorf("keyA, its slots free: exp 200, got %d %s", w.Code, w.Body)
				}
				if w := get(h, "192.0.2.1:1"); w.Code != o.noKey {
					t.Errorf("no key: exp %d, got %d", o.noKey, w.Code)
				}
				exp := int64(2)
				if o.passes {
					exp++
				}
				if next.calls.Load() != exp {
					t.Errorf("handler calls: exp %d, got %d", exp, next.calls.Load())
				}
				checkErrs(t, *errs)
			})
		}
	}
}
