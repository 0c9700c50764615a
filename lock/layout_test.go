package lock_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/internal/backendtest"
	"github.com/floodgate-dev/floodgate/internal/testenv"
	"github.com/floodgate-dev/floodgate/internal/unwrap"
	"github.com/floodgate-dev/floodgate/lock"
)

// TestRedisMutexLayout: a mutex's state is one hash without a TTL that
// holds the fence with the holding, so tokens go on increasing across
// releases when the clock does not; the fence key of the earlier layout is
// read by the first acquisition, which continues above it, and deleted; an
// uncontended Lock and Unlock leave no queue behind.
func TestRedisMutexLayout(t *testing.T) {
	c, r, clk, start := layoutRedis(t)
	rs := unwrap.Redis(r)
	ctx := context.Background()
	const name = "layout"
	hash, oldFence := rs.Key(name, "lk"), rs.Key(name, "lf")
	// The earlier layout's fence, ahead of the clock (as after a clock step
	// back): the next token must come from it.
	ahead := start.UnixMicro() + 1_000_000
	if err := c.Set(ctx, oldFence, ahead, 0).Err(); err != nil {
		t.Fatal(err)
	}
	mu, err := lock.NewMutex(r, name, lock.TTL(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	want := ahead
	for i := range 3 {
		lease, err := mu.Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want++
		if lease.Token() != want {
			t.Fatalf("acquisition %d: token %d, want %d (fence + 1)", i, lease.Token(), want)
		}
		if f, err := c.HGet(ctx, hash, "f").Result(); err != nil || f != strconv.FormatInt(want, 10) {
			t.Fatalf("acquisition %d: fence field %q (%v), want %d", i, f, err, want)
		}
		if ttl, err := c.PTTL(ctx, hash).Result(); err != nil || ttl != -1 {
			t.Fatalf("acquisition %d: lock hash TTL %v (%v), want none", i, ttl, err)
		}
		if n, err := c.Exists(ctx, oldFence, rs.Key(name, "lq"), rs.Key(name, "lw")).Result(); err != nil || n != 0 {
			t.Fatalf("acquisition %d: %d of the old fence and the queue keys exist (%v)", i, n, err)
		}
		if err := lease.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := mu.TryLock(ctx); err != nil {
			t.Fatalf("acquisition %d: the lock is not free after Unlock: %v", i, err)
		}
		want++ // the TryLock's token
		// Its lease ends: the next acquisition finds a dead holding.
		clk.Advance(2 * time.Millisecond)
	}
	// Once the clock passes the fence, tokens follow the clock.
	clk.Advance(2 * time.Second)
	lease, err := mu.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if lease.Token() != clk.Now().UnixMicro() {
		t.Fatalf("token %d, want the clock's %d", lease.Token(), clk.Now().UnixMicro())
	}
}

// checkSharedLayout checks a lock of the one-hash layout (RWMutex,
// Semaphore): the hash has no TTL and is a listpack (small fields only), no
// other key of the name exists, and its fields are the fence f, the shared
// bound m, the ended calls r and u, the writer's fields, and nothing else
// but want (each "field=value"; value "" for any) and the tokens 't'..owner
// of the holdings 'h'..owner.
func checkSharedLayout(t *testing.T, c *redis.Client, hash string, others []string, want ...string) {
	t.Helper()
	ctx := context.Background()
	if ttl, err := c.PTTL(ctx, hash).Result(); err != nil || ttl != -1 {
		t.Fatalf("lock hash TTL %v (%v), want none", ttl, err)
	}
	if enc, err := c.ObjectEncoding(ctx, hash).Result(); err != nil || enc != "listpack" {
		t.Fatalf("lock hash encoding %q (%v), want listpack", enc, err)
	}
	if n, err := c.Exists(ctx, others...).Result(); err != nil || n != 0 {
		t.Fatalf("%d of the other keys %v exist (%v), want none", n, others, err)
	}
	got, err := c.HGetAll(ctx, hash).Result()
	if err != nil {
		t.Fatal(err)
	}
	all := maps.Clone(got)
	for _, w := range want {
		f, v, _ := strings.Cut(w, "=")
		g, ok := got[f]
		if !ok || (v != "" && g != v) {
			t.Fatalf("field %s = %q (present %v), want %q; hash %v", f, g, ok, v, got)
		}
		delete(got, f)
	}
	for f := range got {
		switch f {
		case "f", "m", "u", "r", "k", "o", "c", "t", "d": // fence, shared bound, ended calls, writer fields
		case "t" + f[min(1, len(f)):]: // a holder's token, with its deadline
			if _, ok := all["h"+f[1:]]; !ok {
				t.Fatalf("token field %s without its holding in %v", f, got)
			}
		default:
			t.Fatalf("unexpected field %s in %v", f, got)
		}
	}
}

// TestRedisRWMutexLayout: an RWMutex's state, both sides, is one hash
// without a TTL that holds the fence: tokens of readers and writers go on
// increasing past the 0.9 layout's fence key, which the first acquisition
// reads and deletes; keys of the 0.9 layout are ignored; an uncontended
// RLock/RUnlock and Lock/Unlock leave no queue behind; a reader's lease that
// ended (also one shortened by Extend) stops counting at its deadline.
func TestRedisRWMutexLayout(t *testing.T) {
	c, r, clk, start := layoutRedis(t)
	rs := unwrap.Redis(r)
	ctx := context.Background()
	const name = "layout"
	hash, oldFence := rs.Key(name, "rwk"), rs.Key(name, "rwf")
	others := []string{oldFence, rs.Key(name, "rwwr"), rs.Key(name, "rwww"), rs.Key(name, "rwwd")}
	ahead := start.UnixMicro() + 1_000_000
	if err := c.Set(ctx, oldFence, ahead, 0).Err(); err != nil {
		t.Fatal(err)
	}
	// A writer of the 0.9 layout, live: not seen by this version.
	if err := c.HSet(ctx, rs.Key(name, "rwl"), "o", "old", "c", 1, "t", 5, "d", start.UnixMicro()+3_600_000_000).Err(); err != nil {
		t.Fatal(err)
	}
	rw, err := lock.NewRWMutex(r, name, lock.TTL(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	want := ahead
	for i := range 3 {
		want++
		rl := lockWithToken(t, ctx, rw.RLock, want, fmt.Sprintf("round %d: read", i))
		checkSharedLayout(t, c, hash, others, "f="+strconv.FormatInt(want, 10), "n=1", "h"+rl.Owner()+"=")
		if err := rl.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		checkSharedLayout(t, c, hash, others, "n=0")
		want++
		wl := lockWithToken(t, ctx, rw.Lock, want, fmt.Sprintf("round %d: write", i))
		checkSharedLayout(t, c, hash, others, "f="+strconv.FormatInt(want, 10), "n=0")
		if err := wl.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		// Two readers; one ends by its lease, one by a shortened Extend.
		a, err := rw.TryRLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		long, _ := lock.NewRWMutex(r, name, lock.TTL(time.Hour))
		b, err := long.TryRLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want += 2
		if err := b.Extend(ctx, time.Millisecond); err != nil {
			t.Fatal(err)
		}
		checkSharedLayout(t, c, hash, others, "n=2", "h"+a.Owner()+"=", "h"+b.Owner()+"=")
		if _, err := rw.TryLock(ctx); !errors.Is(err, lock.ErrLocked) {
			t.Fatalf("round %d: TryLock with two readers: %v", i, err)
		}
		clk.Advance(2 * time.Millisecond)
		wl, err = rw.TryLock(ctx)
		if err != nil {
			t.Fatalf("round %d: TryLock after the readers' leases ended: %v", i, err)
		}
		want++
		checkSharedLayout(t, c, hash, others, "n=0", "o="+wl.Owner())
		if err := wl.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRedisSemaphoreLayout: as TestRedisRWMutexLayout, for a Semaphore.
func TestRedisSemaphoreLayout(t *testing.T) {
	c, r, clk, start := layoutRedis(t)
	rs := unwrap.Redis(r)
	ctx := context.Background()
	const name = "layout"
	hash, oldFence := rs.Key(name, "smk"), rs.Key(name, "smf")
	others := []string{oldFence, rs.Key(name, "smw"), rs.Key(name, "smwd")}
	ahead := start.UnixMicro() + 1_000_000
	if err := c.Set(ctx, oldFence, ahead, 0).Err(); err != nil {
		t.Fatal(err)
	}
	// Holders of the 0.9 layout, live: not seen by this version.
	if err := c.ZAdd(ctx, rs.Key(name, "smh"), redis.Z{Score: float64(start.UnixMicro() + 3_600_000_000), Member: "old"}).Err(); err != nil {
		t.Fatal(err)
	}
	sem, err := lock.NewSemaphore(r, name, 2, lock.TTL(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	long, _ := lock.NewSemaphore(r, name, 2, lock.TTL(time.Hour))
	want := ahead
	for i := range 3 {
		want++
		a := lockWithToken(t, ctx, sem.Lock, want, fmt.Sprintf("round %d:", i))
		checkSharedLayout(t, c, hash, others, "f="+strconv.FormatInt(want, 10), "n=1", "h"+a.Owner()+"=")
		if err := a.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		checkSharedLayout(t, c, hash, others, "n=0")
		a, err = sem.TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		b, err := long.TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want += 2
		if a.Token() != want-1 || b.Token() != want {
			t.Fatalf("round %d: tokens %d, %d, want %d, %d", i, a.Token(), b.Token(), want-1, want)
		}
		if _, err := sem.TryLock(ctx); !errors.Is(err, lock.ErrLocked) {
			t.Fatalf("round %d: third permit: %v", i, err)
		}
		if err := b.Extend(ctx, time.Millisecond); err != nil {
			t.Fatal(err)
		}
		clk.Advance(2 * time.Millisecond)
		x, err := sem.TryLock(ctx)
		if err != nil {
			t.Fatalf("round %d: TryLock after both leases ended: %v", i, err)
		}
		want++
		checkSharedLayout(t, c, hash, others, "n=1", "h"+x.Owner()+"=")
		if err := x.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// lockWithToken takes a lease with acquire and fails t unless its fencing
// token is want.
func lockWithToken(t *testing.T, ctx context.Context, acquire func(context.Context) (*lock.Lease, error), want int64, what string) *lock.Lease {
	t.Helper()
	l, err := acquire(ctx)
	if err != nil {
		t.Fatalf("%s %v", what, err)
	}
	if l.Token() != want {
		t.Fatalf("%s token %d, want %d", what, l.Token(), want)
	}
	return l
}

// layoutRedis returns a client of the shared Redis and a backend over it on
// a fake clock (at start) with a prefix of its own, for the layout tests.
func layoutRedis(t *testing.T) (*redis.Client, *backend.Redis, *clock.Fake, time.Time) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: testenv.SharedRedis(t).Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	start := time.UnixMicro(1_700_000_000_000_000)
	clk := clock.NewFake(start)
	return c, backendtest.NewRedis(t, c, backend.WithPrefix(backendtest.UniquePrefix()), backend.WithClock(clk)), clk, start
}
