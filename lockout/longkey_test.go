package lockout_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/internal/backendtest"
	"github.com/floodgate-dev/floodgate/internal/longkey"
	"github.com/floodgate-dev/floodgate/internal/testenv"
	"github.com/floodgate-dev/floodgate/lockout"
)

// longKeys returns two keys of 2,000 bytes that share their first 1,999, a
// key of MaxKeyLen bytes and one of MaxKeyLen+1 with the same start.
func longKeys(t *testing.T) (a, b, atMax, pastMax string) {
	long := strings.Repeat("u", 1999)
	a, b = long+"A", long+"B"
	atMax, pastMax = long[:backend.MaxKeyLen], long[:backend.MaxKeyLen+1]
	if len(a) != 2000 || longkey.Key(a) == longkey.Key(b) || longkey.Key(atMax) != atMax {
		t.Fatal("bad keys")
	}
	return
}

// TestLongUsernameLockedOut: a login handler that fails open on an error of
// the Guard, as lockout's doc leaves to the caller, and a username of 2,000
// bytes. The username used to be refused with backend.ErrKeyTooLong, so such
// a handler verified every guess and the account was never locked (issue
// 27): now it is banned at the MaxFailures-th failure like any other.
func TestLongUsernameLockedOut(t *testing.T) {
	ctx := context.Background()
	username := strings.Repeat("a", 2000)
	const maxFailures = 3
	for _, bk := range allBackends() {
		t.Run(bk.Name, func(t *testing.T) {
			g, err := lockout.New(bk.Make(t, clock.NewFake(t0)), lockout.Policy{MaxFailures: maxFailures, Window: time.Hour, BanFor: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			key := username + "|203.0.113.7"
			verified, errs := 0, 0
			for range 20 {
				st, err := g.Check(ctx, key)
				if err != nil {
					errs++ // fail open: the login proceeds
				} else if st.Banned {
					continue // refused without verifying the password
				}
				verified++ // a wrong password
				if _, err := g.Fail(ctx, key); err != nil {
					errs++
				}
			}
			if errs != 0 || verified != maxFailures {
				t.Fatalf("%d passwords verified for a long username (%d errors), want %d and the username locked out", verified, errs, maxFailures)
			}
			st, err := g.Check(ctx, key)
			if err != nil || !st.Banned || st.RetryAfter != time.Hour {
				t.Errorf("Check after the ban: %+v, %v", st, err)
			}
		})
	}
}

// TestLongKeys: every method of a Guard takes a key longer than
// backend.MaxKeyLen as any other, on every backend: the same long key is one
// state for Check, Fail, Succeed and Reset, and keys that differ only past
// their 1,999th byte, or around MaxKeyLen, are apart.
func TestLongKeys(t *testing.T) {
	ctx := context.Background()
	keyA, keyB, atMax, pastMax := longKeys(t)
	for _, bk := range allBackends() {
		t.Run(bk.Name, func(t *testing.T) {
			g, err := lockout.New(bk.Make(t, clock.NewFake(t0)), p3)
			if err != nil {
				t.Fatal(err)
			}
			want := func(what, key string, w lockout.Status) {
				t.Helper()
				if st, err := g.Check(ctx, key); err != nil || st != w {
					t.Errorf("%s: Check = %+v, %v; want %+v", what, st, err, w)
				}
			}
			ban := func(what, key string) {
				t.Helper()
				for i := range 3 {
					st, err := g.Fail(ctx, key)
					if err != nil || st.Banned != (i == 2) {
						t.Fatalf("%s, failure %d: %+v, %v", what, i+1, st, err)
					}
				}
				want(what+", banned", key, banned(time.Minute))
			}
			want("keyA", keyA, open(3))
			ban("keyA", keyA)
			want("keyB, keyA's first 1,999 bytes", keyB, open(3))
			ban("keyB", keyB)
			// Exactly MaxKeyLen and one byte more: two keys, two states.
			want("MaxKeyLen", atMax, open(3))
			ban("MaxKeyLen", atMax)
			want("MaxKeyLen+1, after MaxKeyLen's ban", pastMax, open(3))
			ban("MaxKeyLen+1", pastMax)
			// The state of a long key is that of its digest.
			want("keyA's digest", longkey.Key(keyA), banned(time.Minute))

			// Reset lifts the ban of a long key, and no other's.
			if err := g.Reset(ctx, keyA); err != nil {
				t.Fatal(err)
			}
			want("keyA after Reset", keyA, open(3))
			want("keyB after keyA's Reset", keyB, banned(time.Minute))
			// Succeed clears the failures of a long key, and no other's.
			keyC, keyD := keyA+"C", keyA+"D"
			for _, k := range []string{keyC, keyC, keyD} {
				if _, err := g.Fail(ctx, k); err != nil {
					t.Fatal(err)
				}
			}
			if err := g.Succeed(ctx, keyC); err != nil {
				t.Fatal(err)
			}
			want("keyC after Succeed", keyC, open(3))
			want("keyD after keyC's Succeed", keyD, open(2))
		})
	}
}

// TestLongKeysInRedis: what a long key leaves in Redis is named by its
// digest: no Redis key holds the long key.
func TestLongKeysInRedis(t *testing.T) {
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: testenv.SharedRedis(t).Addr})
	t.Cleanup(func() { c.Close() })
	prefix := backendtest.UniquePrefix()
	b := backendtest.NewRedis(t, c, backend.WithPrefix(prefix))
	g, err := lockout.New(b, p3)
	if err != nil {
		t.Fatal(err)
	}
	keyA, keyB, _, _ := longKeys(t)
	for _, k := range []string{keyA, keyB} {
		if _, err := g.Fail(ctx, k); err != nil {
			t.Fatal(err)
		}
	}
	keys, err := c.Keys(ctx, prefix+":*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 2 { // a failure log per key
		t.Errorf("Redis keys: %d, want 2: %.80q", len(keys), keys)
	}
	for _, k := range keys {
		if len(k) > len(prefix)+longkey.DigestLen+64 || !strings.Contains(k, longkey.Sep) {
			t.Errorf("Redis key of %d bytes: %.80q...", len(k), k)
		}
	}
}
