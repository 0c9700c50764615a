package counter_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/counter"
	"github.com/floodgate-dev/floodgate/internal/backendtest"
	"github.com/floodgate-dev/floodgate/internal/longkey"
	"github.com/floodgate-dev/floodgate/internal/testenv"
)

// longKeys returns two keys of 2,000 bytes that share their first 1,999, a
// key of MaxKeyLen bytes and one of MaxKeyLen+1 with the same start.
func longKeys(t *testing.T) (a, b, atMax, pastMax string) {
	long := strings.Repeat("c", 1999)
	a, b = long+"A", long+"B"
	atMax, pastMax = long[:backend.MaxKeyLen], long[:backend.MaxKeyLen+1]
	if len(a) != 2000 || longkey.Key(a) == longkey.Key(b) || longkey.Key(atMax) != atMax {
		t.Fatal("bad keys")
	}
	return
}

// TestLongKeys: a key longer than backend.MaxKeyLen is counted like any
// other (it used to be refused with backend.ErrKeyTooLong, issue 27) by Add,
// Get, Inspect, Reset and Batched, on every backend and in every mode: the
// same long key is one counter whichever call reaches it, and keys that
// differ only past their 1,999th byte, or around MaxKeyLen, are apart.
func TestLongKeys(t *testing.T) {
	ctx := context.Background()
	keyA, keyB, atMax, pastMax := longKeys(t)
	modes := []struct {
		name string
		opts []counter.Option
	}{
		{"plain", nil},
		{"ttl", []counter.Option{counter.TTL(time.Hour)}},
		{"window", []counter.Option{counter.Window(24 * time.Hour)}},
	}
	for _, bk := range allBackends() {
		t.Run(bk.Name, func(t *testing.T) {
			b := bk.Make(t, clock.NewFake(t0))
			for _, m := range modes {
				c, err := counter.New(b, m.name, m.opts...)
				if err != nil {
					t.Fatal(err)
				}
				add := func(key string, delta, want int64) {
					t.Helper()
					if v, err := c.Add(ctx, key, delta); err != nil || v != want {
						t.Errorf("%s: Add(%d bytes, %d) = %d, %v; want %d", m.name, len(key), delta, v, err, want)
					}
				}
				get := func(what, key string, want int64) {
					t.Helper()
					if v, err := c.Get(ctx, key); err != nil || v != want {
						t.Errorf("%s: Get(%s) = %d, %v; want %d", m.name, what, v, err, want)
					}
				}
				add(keyA, 1, 1)
				add(keyA, 2, 3)
				add(keyB, 5, 5)
				add(atMax, 7, 7)
				add(pastMax, 11, 11)
				get("keyA", keyA, 3)
				get("keyB", keyB, 5)
				get("MaxKeyLen", atMax, 7)
				get("MaxKeyLen+1", pastMax, 11)
				get("keyA's digest", longkey.Key(keyA), 3)
				in, err := c.Inspect(ctx, keyA)
				if err != nil || in.Value != 3 || (m.opts != nil) != (in.ResetAfter > 0) {
					t.Errorf("%s: Inspect(keyA) = %+v, %v", m.name, in, err)
				}

				// Reset deletes a long key's counter, and no other's.
				if err := c.Reset(ctx, keyA); err != nil {
					t.Fatal(err)
				}
				get("keyA after Reset", keyA, 0)
				get("keyB after keyA's Reset", keyB, 5)
				add(keyA, 1, 1)

				// Batched sums long keys apart and flushes them into the
				// counters Add uses.
				bt, err := counter.NewBatched(c, time.Hour)
				if err != nil {
					t.Fatal(err)
				}
				for _, a := range []struct {
					key   string
					delta int64
				}{{keyA, 10}, {keyB, 100}, {keyA, 20}, {pastMax, 1000}} {
					if err := bt.Add(a.key, a.delta); err != nil {
						t.Fatalf("%s: Batched.Add(%d bytes): %v", m.name, len(a.key), err)
					}
				}
				if n := bt.Pending(); n != 3 {
					t.Errorf("%s: Batched.Pending = %d, want 3", m.name, n)
				}
				if err := bt.Close(ctx); err != nil {
					t.Fatal(err)
				}
				get("keyA after Batched", keyA, 31)
				get("keyB after Batched", keyB, 105)
				get("MaxKeyLen after Batched", atMax, 7)
				get("MaxKeyLen+1 after Batched", pastMax, 1011)
			}
		})
	}
}

// TestLongKeysInRedis: what a long key leaves in Redis is named by its
// digest: no Redis key holds the long key, neither the counter nor the
// replay record of its Add.
func TestLongKeysInRedis(t *testing.T) {
	ctx := context.Background()
	rc := redis.NewClient(&redis.Options{Addr: testenv.SharedRedis(t).Addr})
	t.Cleanup(func() { rc.Close() })
	prefix := backendtest.UniquePrefix()
	b := backendtest.NewRedis(t, rc, backend.WithPrefix(prefix))
	c, err := counter.New(b, "n", counter.TTL(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	keyA, keyB, _, _ := longKeys(t)
	for _, k := range []string{keyA, keyB} {
		if _, err := c.Add(ctx, k, 1); err != nil {
			t.Fatal(err)
		}
	}
	keys, err := rc.Keys(ctx, prefix+":*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 4 { // per long key: the counter and the Add's replay record
		t.Errorf("Redis keys: %d, want 4: %.80q", len(keys), keys)
	}
	for _, k := range keys {
		if len(k) > len(prefix)+longkey.DigestLen+64 || !strings.Contains(k, longkey.Sep) {
			t.Errorf("Redis key of %d bytes: %.80q...", len(k), k)
		}
	}
}
