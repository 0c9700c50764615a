package lock_test

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/backend/rueidisadapter"
	"github.com/floodgate-dev/floodgate/internal/backendtest"
	"github.com/floodgate-dev/floodgate/internal/redisstore"
	"github.com/floodgate-dev/floodgate/internal/testenv"
	"github.com/floodgate-dev/floodgate/internal/unwrap"
	"github.com/floodgate-dev/floodgate/lock"
	"github.com/floodgate-dev/floodgate/lock/internal/locktest"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(childMain())
	}
	os.Exit(testenv.Main(m))
}

func TestConformanceMemory(t *testing.T) {
	m := backend.NewMemory()
	t.Cleanup(func() { m.Close() })
	locktest.Run(t, locktest.Backend{
		Name: "memory",
		New: func(t testing.TB, name string, opts ...lock.Option) lock.Locker {
			l, err := lock.NewMutex(m, name, opts...)
			if err != nil {
				t.Fatal(err)
			}
			return l
		},
		Drop:    func(t testing.TB, name string) { lock.DropMemory(m, name) },
		Waiters: func(t testing.TB, name string) int { return lock.MemoryWaiters(m, name) },
	})
}

func redisBackend(addrs ...string) func(t testing.TB) *backend.Redis {
	return func(t testing.TB) *backend.Redis {
		var c redis.UniversalClient
		if len(addrs) > 1 {
			c = redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true})
		} else {
			c = redis.NewClient(&redis.Options{Addr: addrs[0], ContextTimeoutEnabled: true})
		}
		t.Cleanup(func() { c.Close() })
		return backendtest.NewRedis(t, c, backend.WithPrefix("lt"))
	}
}

func runRedisConformance(t *testing.T, name string, mk func(testing.TB) *backend.Redis) {
	drop := mk(t)
	drops := unwrap.Redis(drop)
	locktest.Run(t, locktest.Backend{
		Name: name,
		New: func(t testing.TB, name string, opts ...lock.Option) lock.Locker {
			l, err := lock.NewMutex(mk(t), name, opts...)
			if err != nil {
				t.Fatal(err)
			}
			return l
		},
		Drop: func(t testing.TB, name string) {
			if _, err := drops.Run(context.Background(), redisstore.NewScript("return redis.call('DEL', KEYS[1])"), []string{drops.Key(name, "lk")}, nil); err != nil {
				t.Fatal(err)
			}
		},
		Waiters: queueLen(drop, "lq"),
	})
}

// queueLen returns a Waiters hook of the locktest suites for Redis: how many
// Lock calls wait in the queues of a name, the sorted sets of its keys with
// the given suffixes, as read through b.
func queueLen(b *backend.Redis, suffixes ...string) func(testing.TB, string) int {
	s := unwrap.Redis(b)
	return func(t testing.TB, name string) int {
		keys := make([]string, len(suffixes))
		for i, suffix := range suffixes {
			keys[i] = s.Key(name, suffix)
		}
		n, err := s.Run(context.Background(), zcards, keys, nil)
		if err != nil {
			t.Fatal(err)
		}
		v, _ := n.(int64)
		return int(v)
	}
}

// zcards returns the sum of the ZCARDs of KEYS (one hash tag: Cluster-safe).
var zcards = redisstore.NewScript("local n = 0 for _, k in ipairs(KEYS) do n = n + redis.call('ZCARD', k) end return n")

func TestConformanceRedis(t *testing.T) {
	runRedisConformance(t, "redis", redisBackend(testenv.SharedRedis(t).Addr))
}

func TestConformanceCluster(t *testing.T) {
	runRedisConformance(t, "cluster", redisBackend(testenv.SharedCluster(t).Addrs...))
}

func TestBadArguments(t *testing.T) {
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
		{"x", []lock.Option{lock.TTL(1500 * time.Microsecond)}, "lock: TTL must be a whole number of milliseconds, got 1.5ms"},
		{"x", []lock.Option{lock.MaxPoll(0)}, "lock: MaxPoll must be >= 1ms, got 0s"},
		{"x", []lock.Option{lock.Owner(strings.Repeat("o", 257))}, "lock: Owner must be at most 256 bytes, got 257"},
	}
	for _, c := range cases {
		if _, err := lock.NewMutex(m, c.name, c.opts...); err == nil || err.Error() != c.want {
			t.Errorf("NewMutex(%.10q): %v, want %q", c.name, err, c.want)
		}
	}
	if _, err := lock.NewMutex(nil, "x"); err == nil {
		t.Error("nil backend accepted")
	}
	l, _ := lock.NewMutex(m, "x")
	lease, _ := l.Lock(context.Background())
	if err := lease.Extend(context.Background(), 0); err == nil {
		t.Error("Extend(0) accepted")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := l.Lock(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Lock with a cancelled context: %v", err)
	}
}

// rueidisBackend is redisBackend on a rueidis client (auto-pipelining).
func rueidisBackend(addr string) func(t testing.TB) *backend.Redis {
	return func(t testing.TB) *backend.Redis {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		b, err := rueidisadapter.New(c, backend.WithPrefix("lt"))
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
}

func TestConformanceRedisRueidis(t *testing.T) {
	runRedisConformance(t, "redis-rueidis", rueidisBackend(testenv.SharedRedis(t).Addr))
}
