package ratelimit_test

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
	"github.com/floodgate-dev/floodgate/internal/testenv"
)

func TestMain(m *testing.M) {
	if os.Getenv(hammerEnv) != "" {
		os.Exit(hammerMain())
	}
	os.Exit(testenv.Main(m))
}

// t0 is aligned to every window of the step tables.
var t0 = time.Unix(1_700_000_000, 0)

// prefixSeq makes every test's Redis keys unique, so tests on shared servers
// never see each other's state.
var prefixSeq atomic.Int64

func uniquePrefix(t testing.TB) string {
	return fmt.Sprintf("t%d_%d", os.Getpid(), prefixSeq.Add(1))
}

type kindOfBackend struct {
	name string
	make func(t testing.TB, clk clock.Clock) backend.Backend
}

// allBackends lists the backends the conformance suite runs on: memory, a
// standalone Redis through go-redis and through rueidis, and a 3-master
// Redis Cluster, each with an injected clock.
func allBackends() []kindOfBackend {
	return []kindOfBackend{
		{"memory", func(t testing.TB, clk clock.Clock) backend.Backend {
			m := backend.NewMemory(backend.WithClock(clk))
			t.Cleanup(func() { m.Close() })
			return m
		}},
		{"redis", func(t testing.TB, clk clock.Clock) backend.Backend {
			return newRedis(t, clk)
		}},
		{"redis-rueidis", func(t testing.TB, clk clock.Clock) backend.Backend {
			r := testenv.SharedRedis(t)
			c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{r.Addr}, DisableCache: true})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			opts := []backend.Option{backend.WithPrefix(uniquePrefix(t))}
			if clk != nil {
				opts = append(opts, backend.WithClock(clk))
			}
			b, err := rueidisadapter.New(c, opts...)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}},
		{"cluster", func(t testing.TB, clk clock.Clock) backend.Backend {
			c := testenv.SharedCluster(t)
			cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs})
			t.Cleanup(func() { cc.Close() })
			return newRedisOn(t, cc, clk)
		}},
	}
}

func newRedis(t testing.TB, clk clock.Clock) *backend.Redis {
	r := testenv.SharedRedis(t)
	c := redis.NewClient(&redis.Options{Addr: r.Addr})
	t.Cleanup(func() { c.Close() })
	return newRedisOn(t, c, clk)
}

func newRedisOn(t testing.TB, c redis.UniversalClient, clk clock.Clock) *backend.Redis {
	opts := []backend.Option{backend.WithPrefix(uniquePrefix(t))}
	if clk != nil {
		opts = append(opts, backend.WithClock(clk))
	}
	b, err := backend.NewRedis(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
