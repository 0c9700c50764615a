package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/idempotency"
	"github.com/floodgate-dev/floodgate/internal/backendtest"
	"github.com/floodgate-dev/floodgate/internal/longkey"
	"github.com/floodgate-dev/floodgate/internal/testenv"
)

// longKeys returns two keys of 2,000 bytes that share their first 1,999, a
// key of MaxKeyLen bytes and one of MaxKeyLen+1 with the same start.
func longKeys(t *testing.T) (a, b, atMax, pastMax string) {
	long := strings.Repeat("i", 1999)
	a, b = long+"A", long+"B"
	atMax, pastMax = long[:backend.MaxKeyLen], long[:backend.MaxKeyLen+1]
	if len(a) != 2000 || longkey.Key(a) == longkey.Key(b) || longkey.Key(atMax) != atMax {
		t.Fatal("bad keys")
	}
	return
}

// TestLongKeys: Do deduplicates a key longer than backend.MaxKeyLen like any
// other (it used to refuse it with backend.ErrKeyTooLong, issue 27), on every
// backend: the same long key runs fn once and replays its result, through a
// failed run (the marker removed) and a concurrent duplicate that waits for
// the result, and keys that differ only past their 1,999th byte, or around
// MaxKeyLen, are apart.
func TestLongKeys(t *testing.T) {
	ctx := context.Background()
	keyA, keyB, atMax, pastMax := longKeys(t)
	for _, bk := range allBackends() {
		t.Run(bk.Name, func(t *testing.T) {
			s := newStore(t, bk.Make(t, clock.NewFake(t0)), idempotency.WaitForResult(30*time.Second))
			var runs atomic.Int64
			returning := func(v string) func(context.Context) ([]byte, error) {
				return func(context.Context) ([]byte, error) { runs.Add(1); return []byte(v), nil }
			}
			do := func(what, key, v, want string, wantReplayed bool) {
				t.Helper()
				before := runs.Load()
				res, replayed, err := s.Do(ctx, key, returning(v))
				if err != nil || string(res) != want || replayed != wantReplayed {
					t.Errorf("%s: Do = %q, %v, %v; want %q, %v", what, res, replayed, err, want, wantReplayed)
				}
				if ran := runs.Load() - before; ran != map[bool]int64{false: 1, true: 0}[wantReplayed] {
					t.Errorf("%s: fn ran %d times", what, ran)
				}
			}
			do("keyA", keyA, "A", "A", false)
			do("keyA again", keyA, "A2", "A", true)
			do("keyB, keyA's first 1,999 bytes", keyB, "B", "B", false)
			do("keyB again", keyB, "B2", "B", true)
			do("MaxKeyLen", atMax, "M", "M", false)
			do("MaxKeyLen+1", pastMax, "P", "P", false)
			do("MaxKeyLen again", atMax, "M2", "M", true)
			do("MaxKeyLen+1 again", pastMax, "P2", "P", true)
			// The state of a long key is that of its digest.
			do("keyA's digest", longkey.Key(keyA), "D", "A", true)

			// A failed run frees a long key for a retry.
			keyC := keyA + "C"
			boom := errors.New("boom")
			if _, _, err := s.Do(ctx, keyC, func(context.Context) ([]byte, error) { return nil, boom }); !errors.Is(err, boom) {
				t.Errorf("keyC, failing: %v", err)
			}
			do("keyC after a failure", keyC, "C", "C", false)

			// A duplicate of a long key while it runs gets its result.
			dup := make(chan string, 1)
			keyE := keyA + "E"
			res, replayed, err := s.Do(ctx, keyE, func(context.Context) ([]byte, error) {
				runs.Add(1)
				go func() {
					res, replayed, err := s.Do(ctx, keyE, returning("E2"))
					dup <- fmt.Sprintf("%q %v %v", res, replayed, err)
				}()
				return []byte("E"), nil
			})
			if err != nil || replayed || string(res) != "E" {
				t.Fatalf("keyE: %q %v %v", res, replayed, err)
			}
			if got := <-dup; got != `"E" true <nil>` {
				t.Errorf("keyE's duplicate: %s, want the result replayed", got)
			}
			if n := runs.Load(); n != 6 {
				t.Errorf("fn ran %d times in all, want 6", n)
			}
		})
	}
}

// TestLongKeysInRedis: what a long key leaves in Redis is named by its
// digest: no Redis key holds the long key.
func TestLongKeysInRedis(t *testing.T) {
	ctx := context.Background()
	rc := redis.NewClient(&redis.Options{Addr: testenv.SharedRedis(t).Addr})
	t.Cleanup(func() { rc.Close() })
	prefix := uniquePrefix()
	s := newStore(t, backendtest.NewRedis(t, rc, backend.WithPrefix(prefix)))
	keyA, keyB, _, _ := longKeys(t)
	for _, k := range []string{keyA, keyB} {
		if _, _, err := s.Do(ctx, k, func(context.Context) ([]byte, error) { return []byte("x"), nil }); err != nil {
			t.Fatal(err)
		}
	}
	keys, err := rc.Keys(ctx, prefix+":*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 2 { // a record per key
		t.Errorf("Redis keys: %d, want 2: %.80q", len(keys), keys)
	}
	for _, k := range keys {
		if len(k) > len(prefix)+longkey.DigestLen+64 || !strings.Contains(k, longkey.Sep) {
			t.Errorf("Redis key of %d bytes: %.80q...", len(k), k)
		}
	}
}
