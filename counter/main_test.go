package counter_test

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

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// t0 is a UTC midnight, so daily and hourly windows start there.
var t0 = time.Unix(1_699_920_000, 0)

// prefixSeq makes every test's Redis keys unique, so tests on shared servers
// never see each other's state.
var prefixSeq atomic.Int64

func uniquePrefix() string {
	return fmt.Sprintf("t%d_%d", os.Getpid(), prefixSeq.Add(1))
}

type kindOfBackend struct {
	name string
	make func(t testing.TB, clk clock.Clock) backend.Backend
}

// allBackends lists the backends every scenario runs on: memory, a
// standalone Redis through go-redis and through rueidis, and a 3-master Redis
// Cluster. A nil clock means the backend's own time (time.Now, Redis TIME).
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
			return newRedis(t, clk)
		}},
		{"redis-rueidis", func(t testing.TB, clk clock.Clock) backend.Backend {
			r := testenv.SharedRedis(t)
			c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{r.Addr}, DisableCache: true})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			b, err := rueidisadapter.New(c, backendOpts(clk)...)
			if err != nil {
				t.Fatal(err)
			}
			return b
		}},
		{"cluster", func(t testing.TB, clk clock.Clock) backend.Backend {
			return newCluster(t, clk)
		}},
	}
}

// threeBackends is allBackends without the rueidis adapter, for the heavier
// tests.
func threeBackends() []kindOfBackend {
	all := allBackends()
	return []kindOfBackend{all[0], all[1], all[3]}
}

func backendOpts(clk clock.Clock) []backend.Option {
	opts := []backend.Option{backend.WithPrefix(uniquePrefix())}
	if clk != nil {
		opts = append(opts, backend.WithClock(clk))
	}
	return opts
}

func newRedis(t testing.TB, clk clock.Clock) *backend.Redis {
	return newRedisAt(t, testenv.SharedRedis(t).Addr, clk)
}

func newRedisAt(t testing.TB, addr string, clk clock.Clock) *backend.Redis {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	b, err := backend.NewRedisE(c, backendOpts(clk)...)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func newCluster(t testing.TB, clk clock.Clock) *backend.Redis {
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: testenv.SharedCluster(t).Addrs, ContextTimeoutEnabled: true})
	t.Cleanup(func() { cc.Close() })
	b, err := backend.NewRedisE(cc, backendOpts(clk)...)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
