package idempotency_test

import (
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/backend/rueidisadapter"
	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/idempotency"
	"github.com/floodgate-dev/floodgate/internal/testenv"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(childMain())
	}
	os.Exit(testenv.Main(m))
}

// t0 is the start of every fake-clock scenario.
var t0 = time.Unix(1_700_000_000, 0)

var prefixSeq atomic.Int64

// uniquePrefix keeps every test's Redis keys apart on the shared servers.
func uniquePrefix() string {
	return fmt.Sprintf("it%d_%d", os.Getpid(), prefixSeq.Add(1))
}

type kindOfBackend struct {
	name string
	make func(t testing.TB, clk clock.Clock) backend.Backend
}

// allBackends lists the backends every behaviour test runs on: memory, a
// standalone Redis through go-redis and through rueidis, and a 3-master
// Redis Cluster. clk == nil means real time (Redis TIME, time.Now).
func allBackends() []kindOfBackend {
	return []kindOfBackend{
		{"memory", func(t testing.TB, clk clock.Clock) backend.Backend {
			var opts []backend.Option
			if clk != nil {
				opts = append(opts, backend.WithClock(clk))
			}
			m := backend.NewMemory(opts...)
			t.Cleanup(func() { m.Close() })
			return m
		}},
		{"redis", func(t testing.TB, clk clock.Clock) backend.Backend {
			c := redis.NewClient(&redis.Options{Addr: testenv.SharedRedis(t).Addr, ContextTimeoutEnabled: true})
			t.Cleanup(func() { c.Close() })
			return newRedisOn(t, c, clk)
		}},
		{"redis-rueidis", func(t testing.TB, clk clock.Clock) backend.Backend {
			c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{testenv.SharedRedis(t).Addr}, DisableCache: true})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			b, err := rueidisadapter.New(c, redisOpts(clk)...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			return b
		}},
		{"cluster", func(t testing.TB, clk clock.Clock) backend.Backend {
			c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: testenv.SharedCluster(t).Addrs, ContextTimeoutEnabled: true})
			t.Cleanup(func() { c.Close() })
			return newRedisOn(t, c, clk)
		}},
	}
}

// coreBackends is allBackends without the second standalone client, for the
// slower real-time tests.
func coreBackends() []kindOfBackend {
	var out []kindOfBackend
	for _, b := range allBackends() {
		if b.name != "redis-rueidis" {
			out = append(out, b)
		}
	}
	return out
}

func redisOpts(clk clock.Clock) []backend.Option {
	opts := []backend.Option{backend.WithPrefix(uniquePrefix())}
	if clk != nil {
		opts = append(opts, backend.WithClock(clk))
	}
	return opts
}

func newRedisOn(t testing.TB, c redis.UniversalClient, clk clock.Clock) *backend.Redis {
	b, err := backend.NewRedisE(c, redisOpts(clk)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func newStore(t testing.TB, b backend.Backend, opts ...idempotency.Option) *idempotency.Store {
	t.Helper()
	s, err := idempotency.New(b, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
