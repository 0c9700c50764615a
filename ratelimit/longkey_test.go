package ratelimit_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/internal/longkey"
	"github.com/floodgate-dev/floodgate/internal/testenv"
	"github.com/floodgate-dev/floodgate/ratelimit"
)

// longKeys returns keys of 5,000 bytes that share their first 4,999, a key
// of MaxKeyLen bytes and one of MaxKeyLen+1 with the same start.
func longKeys(t *testing.T) (a, b, atMax, pastMax string) {
	long := strings.Repeat("j", 4999)
	a, b = long+"A", long+"B"
	atMax, pastMax = long[:backend.MaxKeyLen], long[:backend.MaxKeyLen+1]
	if len(a) != 5000 || longkey.Key(a) == longkey.Key(b) {
		t.Fatal("bad keys")
	}
	return
}

// TestLongKeys: a key longer than backend.MaxKeyLen is limited like any other
// (it used to be refused with backend.ErrKeyTooLong, which a caller failing
// open turned into no limit, issue 27) by Limiter, AllowAll, Reset, Leased
// and ConcurrencyLimiter, on every backend: the same long key is one state
// whichever call decides it, and keys that differ only past MaxKeyLen, or
// only in their length around it, are counted apart.
func TestLongKeys(t *testing.T) {
	ctx := context.Background()
	keyA, keyB, atMax, pastMax := longKeys(t)
	const limit = 2
	for _, bk := range allBackends() {
		t.Run(bk.name, func(t *testing.T) {
			b := bk.make(t, clock.NewFake(t0))
			// A SlidingLog rule too, whose state is a second Redis key.
			lim, err := ratelimit.New(b, ratelimit.FixedWindow{Limit: limit, Window: time.Minute},
				ratelimit.SlidingLog{Limit: 10, Window: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			spend := func(what, key string) {
				t.Helper()
				for i := range limit + 1 {
					r, err := lim.Allow(ctx, key)
					if err != nil {
						t.Fatalf("%s, call %d: %v", what, i, err)
					}
					if r.Allowed != (i < limit) {
						t.Fatalf("%s, call %d: %+v", what, i, r)
					}
				}
			}
			spend("keyA", keyA)
			spend("keyB, keyA's first 4,999 bytes", keyB)
			spend("MaxKeyLen", atMax)
			spend("MaxKeyLen+1", pastMax)
			// The state of a long key is that of its digest.
			if r := allowN(t, lim, longkey.Key(keyA), 0); r.Remaining != 0 {
				t.Errorf("keyA's digest: %+v", r)
			}

			// AllowAll decides a long key on its state, and leaves the
			// caller's requests as they were.
			reqs := []ratelimit.Request{{Limiter: lim, Key: keyA, N: 1}}
			res := make([]ratelimit.Result, 1)
			if ok, err := ratelimit.AllowAll(ctx, reqs, res); ok || err != nil || res[0].RetryAfter <= 0 {
				t.Errorf("AllowAll of spent keyA: %v %v %+v", ok, err, res[0])
			}
			if reqs[0].Key != keyA {
				t.Errorf("AllowAll changed the caller's key to %q", reqs[0].Key)
			}
			keyC := keyA + "C"
			reqs = []ratelimit.Request{{Limiter: lim, Key: keyC, N: 1}, {Limiter: lim, Key: "short", N: 1}}
			res = make([]ratelimit.Result, 2)
			if ok, err := ratelimit.AllowAll(ctx, reqs, res); !ok || err != nil {
				t.Errorf("AllowAll of keyC: %v %v %+v", ok, err, res)
			}
			if r := allowN(t, lim, keyC, 0); r.Remaining != limit-1 {
				t.Errorf("keyC after AllowAll: %+v", r)
			}

			// Reset forgets a long key's state, and no other's.
			if err := lim.Reset(ctx, keyA); err != nil {
				t.Fatal(err)
			}
			if r := allowN(t, lim, keyA, 0); r.Remaining != limit {
				t.Errorf("keyA after Reset: %+v", r)
			}
			if r := allowN(t, lim, keyB, 0); r.Remaining != 0 {
				t.Errorf("keyB after keyA's Reset: %+v", r)
			}

			// Leased: its leases come from the key's state. (A Leased
			// takes no SlidingLog rule.)
			fixed, err := ratelimit.New(b, ratelimit.FixedWindow{Limit: limit, Window: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			l, err := ratelimit.NewLeased(fixed)
			if err != nil {
				t.Fatal(err)
			}
			keyD := keyA + "D"
			admitted := 0
			for range 2 * limit {
				r, err := l.Allow(ctx, keyD)
				if err != nil {
					t.Fatal(err)
				}
				if r.Allowed {
					admitted++
				}
			}
			if admitted != limit {
				t.Errorf("Leased admitted %d of keyD, want %d", admitted, limit)
			}
			if err := l.Release(ctx, keyD); err != nil {
				t.Errorf("Leased.Release: %v", err)
			}
			if r := allowN(t, fixed, keyD, 0); r.Remaining != 0 {
				t.Errorf("keyD after Leased: %+v", r)
			}
			if r, err := l.Allow(ctx, keyD+"E"); err != nil || !r.Allowed {
				t.Errorf("Leased, another long key: %+v %v", r, err)
			}

			// ConcurrencyLimiter: the slots of a long key are its own.
			c, err := ratelimit.NewConcurrency(b, ratelimit.Concurrency{Limit: 1, Lease: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			release, r, err := c.Acquire(ctx, keyA)
			if err != nil || !r.Allowed {
				t.Fatalf("Acquire keyA: %+v %v", r, err)
			}
			if _, r, err := c.Acquire(ctx, keyA); err != nil || r.Allowed {
				t.Errorf("Acquire keyA, its slot held: %+v %v", r, err)
			}
			relB, r, err := c.Acquire(ctx, keyB)
			if err != nil || !r.Allowed {
				t.Errorf("Acquire keyB: %+v %v", r, err)
			}
			if err := relB(ctx); err != nil {
				t.Error(err)
			}
			if err := release(ctx); err != nil {
				t.Error(err)
			}
			if rel, r, err := c.Acquire(ctx, keyA); err != nil || !r.Allowed {
				t.Errorf("Acquire keyA, released: %+v %v", r, err)
			} else if err := rel(ctx); err != nil {
				t.Error(err)
			}
		})
	}
}

// TestLongKeysInRedis: what a long key leaves in Redis is named by its
// digest: no Redis key holds the long key, and none is longer than the
// prefix, the digest and the suffix.
func TestLongKeysInRedis(t *testing.T) {
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: testenv.SharedRedis(t).Addr})
	t.Cleanup(func() { c.Close() })
	prefix := uniquePrefix(t)
	b, err := backend.NewRedis(c, backend.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	keyA, keyB, _, _ := longKeys(t)
	lim, err := ratelimit.New(b, ratelimit.FixedWindow{Limit: 1, Window: time.Minute}, ratelimit.SlidingLog{Limit: 5, Window: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	conc, err := ratelimit.NewConcurrency(b, ratelimit.Concurrency{Limit: 1, Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{keyA, keyB} {
		if r, err := lim.Allow(ctx, k); err != nil || !r.Allowed {
			t.Fatalf("Allow: %+v %v", r, err)
		}
		if _, r, err := conc.Acquire(ctx, k); err != nil || !r.Allowed {
			t.Fatalf("Acquire: %+v %v", r, err)
		}
	}
	keys, err := c.Keys(ctx, prefix+":*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 6 { // per long key: the limiter's state and log, the leases
		t.Errorf("Redis keys: %d, want 6: %q", len(keys), keys)
	}
	for _, k := range keys {
		if len(k) > len(prefix)+longkey.DigestLen+64 || !strings.Contains(k, longkey.Sep) {
			t.Errorf("Redis key of %d bytes: %.80q...", len(k), k)
		}
	}
}
