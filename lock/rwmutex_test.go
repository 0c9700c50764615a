package lock_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/internal/backendtest"
	"github.com/floodgate-dev/floodgate/internal/testenv"
	"github.com/floodgate-dev/floodgate/lock"
	"github.com/floodgate-dev/floodgate/lock/internal/locktest"
)

// rwBackend returns the suite's RWBackend on the stores mk makes; waiters
// counts the queued Lock and RLock calls of a name (see
// locktest.RWBackend.Waiters).
func rwBackend(name string, mk func(testing.TB) backend.Backend, waiters func(testing.TB, string) int) locktest.RWBackend {
	return locktest.RWBackend{
		Name:    name,
		Waiters: waiters,
		New: func(t testing.TB, name string, opts ...lock.Option) lock.RWLocker {
			m, err := lock.NewRWMutex(mk(t), name, opts...)
			if err != nil {
				t.Fatal(err)
			}
			return m
		},
	}
}

func redisAsBackend(mk func(testing.TB) *backend.Redis) func(testing.TB) backend.Backend {
	return func(t testing.TB) backend.Backend { return mk(t) }
}

func TestRWMutexMemory(t *testing.T) {
	t.Parallel() // sleep-bound; runs after the sequential tests
	m := backend.NewMemory()
	t.Cleanup(func() { m.Close() })
	locktest.RunRW(t, rwBackend("memory", func(testing.TB) backend.Backend { return m },
		func(t testing.TB, name string) int { return lock.RWMemoryWaiters(m, name) }))
}

func TestRWMutexRedis(t *testing.T) {
	t.Parallel() // sleep-bound; runs after the sequential tests
	mk := redisBackend(testenv.SharedRedis(t).Addr)
	locktest.RunRW(t, rwBackend("redis", redisAsBackend(mk), queueLen(mk(t), "rwwr", "rwww")))
}

func TestRWMutexRueidis(t *testing.T) {
	t.Parallel() // sleep-bound; runs after the sequential tests
	mk := rueidisBackend(testenv.SharedRedis(t).Addr)
	locktest.RunRW(t, rwBackend("redis-rueidis", redisAsBackend(mk), queueLen(mk(t), "rwwr", "rwww")))
}

func TestRWMutexCluster(t *testing.T) {
	t.Parallel() // sleep-bound; runs after the sequential tests
	mk := redisBackend(testenv.SharedCluster(t).Addrs...)
	locktest.RunRW(t, rwBackend("cluster", redisAsBackend(mk), queueLen(mk(t), "rwwr", "rwww")))
}

// TestRWMutexSeparateFromMutex: an RWMutex and a Mutex of one name are
// separate locks, on both backends.
func TestRWMutexSeparateFromMutex(t *testing.T) {
	m := backend.NewMemory()
	defer m.Close()
	for name, b := range map[string]backend.Backend{
		"memory": m,
		"redis":  redisBackend(testenv.SharedRedis(t).Addr)(t),
	} {
		ctx := context.Background()
		mu, _ := lock.NewMutex(b, "separate")
		rw, _ := lock.NewRWMutex(b, "separate")
		a, err := mu.TryLock(ctx)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		c, err := rw.TryLock(ctx)
		if err != nil {
			t.Fatalf("%s: the RWMutex is blocked by the Mutex of the same name: %v", name, err)
		}
		_ = a.Unlock(ctx)
		_ = c.Unlock(ctx)
	}
}

func TestRWMutexBadArguments(t *testing.T) {
	m := backend.NewMemory()
	defer m.Close()
	cases := []struct {
		name string
		opts []lock.Option
		want string
	}{
		{"", nil, "lock: name is empty"},
		{strings.Repeat("n", 513), nil, "lock: name must be at most 512 bytes, got 513"},
		{"x", []lock.Option{lock.TTL(0)}, "lock: TTL must be >= 1ms, got 0s"},
		{"x", []lock.Option{lock.MaxPoll(0)}, "lock: MaxPoll must be >= 1ms, got 0s"},
		{"x", []lock.Option{lock.Owner(strings.Repeat("o", 257))}, "lock: Owner must be at most 256 bytes, got 257"},
	}
	for _, c := range cases {
		if _, err := lock.NewRWMutex(m, c.name, c.opts...); err == nil || err.Error() != c.want {
			t.Errorf("NewRWMutex(%.10q): %v, want %q", c.name, err, c.want)
		}
	}
	if _, err := lock.NewRWMutex(nil, "x"); err == nil || err.Error() != "lock: backend is nil" {
		t.Errorf("NewRWMutex(nil): %v", err)
	}
	rw, err := lock.NewRWMutex(m, "x")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := rw.RLock(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("RLock with a cancelled context: %v", err)
	}
	if _, err := rw.Lock(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Lock with a cancelled context: %v", err)
	}
	r, err := rw.TryRLock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Extend(context.Background(), 0); err == nil {
		t.Error("Extend(0) accepted")
	}
	if _, err := rw.TryLock(context.Background()); !errors.Is(err, lock.ErrLocked) {
		t.Errorf("TryLock while read-locked: %v", err)
	}
}

// TestRWMutexFakeClock: leases are judged by the backend's clock, on Memory
// and (through NowArg) on Redis alike.
func TestRWMutexFakeClock(t *testing.T) {
	addr := testenv.SharedRedis(t).Addr
	for _, name := range []string{"memory", "redis"} {
		t.Run(name, func(t *testing.T) {
			clk := clock.NewFake(time.Now())
			var b backend.Backend
			if name == "memory" {
				m := backend.NewMemory(backend.WithClock(clk))
				t.Cleanup(func() { m.Close() })
				b = m
			} else {
				c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
				t.Cleanup(func() { c.Close() })
				b = backendtest.NewRedis(t, c, backend.WithPrefix("lt"), backend.WithClock(clk))
			}
			ctx := context.Background()
			key := locktest.Name(t)
			rw, _ := lock.NewRWMutex(b, key, lock.TTL(time.Hour))
			r, err := rw.TryRLock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := rw.TryLock(ctx); !errors.Is(err, lock.ErrLocked) {
				t.Fatalf("TryLock while read-locked: %v", err)
			}
			clk.Advance(time.Hour + time.Microsecond)
			w, err := rw.TryLock(ctx)
			if err != nil {
				t.Fatalf("TryLock after the reader's lease ended on the store clock: %v", err)
			}
			if w.Token() <= r.Token() {
				t.Fatalf("tokens: %d after %d", w.Token(), r.Token())
			}
		})
	}
}
