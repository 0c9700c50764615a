package lock_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/internal/backendtest"
	"github.com/floodgate-dev/floodgate/internal/testenv"
	"github.com/floodgate-dev/floodgate/lock"
)

// TestRedisMutexLayout: a mutex's state is one hash without a TTL that
// holds the fence with the holding, so tokens go on increasing across
// releases when the clock does not; the fence key of the earlier layout is
// read by the first acquisition, which continues above it, and deleted; an
// uncontended Lock and Unlock leave no queue behind.
func TestRedisMutexLayout(t *testing.T) {
	srv := testenv.SharedRedis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	defer c.Close()
	ctx := context.Background()
	start := time.UnixMicro(1_700_000_000_000_000)
	clk := clock.NewFake(start)
	r := backend.NewRedis(c, backend.WithPrefix(backendtest.UniquePrefix()), backend.WithClock(clk))
	const name = "layout"
	hash, oldFence := r.Key(name, "lk"), r.Key(name, "lf")
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
		if n, err := c.Exists(ctx, oldFence, r.Key(name, "lq"), r.Key(name, "lw")).Result(); err != nil || n != 0 {
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
