package lock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/internal/testenv"
	"github.com/floodgate-dev/floodgate/lock"
	"github.com/floodgate-dev/floodgate/lock/internal/locktest"
)

// semBackend returns the suite's SemBackend on the stores mk makes; waiters
// counts the queued Lock calls of a name (see locktest.SemBackend.Waiters).
func semBackend(name string, mk func(testing.TB) backend.Backend, waiters func(testing.TB, string) int) locktest.SemBackend {
	return locktest.SemBackend{
		Name:    name,
		Waiters: waiters,
		New: func(t testing.TB, name string, permits int, opts ...lock.Option) lock.Locker {
			s, err := lock.NewSemaphore(mk(t), name, permits, opts...)
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
	}
}

func TestSemaphoreMemory(t *testing.T) {
	t.Parallel() // sleep-bound; runs after the sequential tests
	m := backend.NewMemory()
	t.Cleanup(func() { m.Close() })
	locktest.RunSemaphore(t, semBackend("memory", func(testing.TB) backend.Backend { return m },
		func(t testing.TB, name string) int { return lock.SemMemoryWaiters(m, name) }))
}

func TestSemaphoreRedis(t *testing.T) {
	t.Parallel() // sleep-bound; runs after the sequential tests
	mk := redisBackend(testenv.SharedRedis(t).Addr)
	locktest.RunSemaphore(t, semBackend("redis", redisAsBackend(mk), queueLen(mk(t), "smw")))
}

func TestSemaphoreRueidis(t *testing.T) {
	t.Parallel() // sleep-bound; runs after the sequential tests
	mk := rueidisBackend(testenv.SharedRedis(t).Addr)
	locktest.RunSemaphore(t, semBackend("redis-rueidis", redisAsBackend(mk), queueLen(mk(t), "smw")))
}

func TestSemaphoreCluster(t *testing.T) {
	t.Parallel() // sleep-bound; runs after the sequential tests
	mk := redisBackend(testenv.SharedCluster(t).Addrs...)
	locktest.RunSemaphore(t, semBackend("cluster", redisAsBackend(mk), queueLen(mk(t), "smw")))
}

func TestSemaphoreBadArguments(t *testing.T) {
	m := backend.NewMemory()
	defer m.Close()
	for _, permits := range []int{0, -1, lock.MaxPermits + 1} {
		want := fmt.Sprintf("lock: permits must be between 1 and %d, got %d", lock.MaxPermits, permits)
		if _, err := lock.NewSemaphore(m, "x", permits); err == nil || err.Error() != want {
			t.Errorf("NewSemaphore(permits %d): %v, want %q", permits, err, want)
		}
	}
	if _, err := lock.NewSemaphore(m, "", 1); err == nil || err.Error() != "lock: name is empty" {
		t.Errorf("NewSemaphore(empty name): %v", err)
	}
	if _, err := lock.NewSemaphore(nil, "x", 1); err == nil || err.Error() != "lock: backend is nil" {
		t.Errorf("NewSemaphore(nil): %v", err)
	}
	if _, err := lock.NewSemaphore(m, "x", 1, lock.TTL(0)); err == nil || err.Error() != "lock: TTL must be >= 1ms, got 0s" {
		t.Errorf("NewSemaphore(TTL 0): %v", err)
	}
	s, err := lock.NewSemaphore(m, "x", 1)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := s.Lock(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Lock with a cancelled context: %v", err)
	}
}
