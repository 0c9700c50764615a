package delayqueue_test

import (
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/backend/rueidisadapter"
	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/internal/backendtest"
	"github.com/floodgate-dev/floodgate/internal/testenv"
)

func TestMain(m *testing.M) {
	if os.Getenv(consumerEnv) != "" {
		os.Exit(consumerMain())
	}
	os.Exit(testenv.Main(m))
}

// t0 is the start of every fake clock.
var t0 = time.Unix(1_700_000_000, 0)

// uniquePrefix makes every test's Redis keys unique, so tests on shared
// servers never see each other's state. It shares its sequence with the
// backends of internal/backendtest (such as backendtest.Replaying).
func uniquePrefix() string { return backendtest.UniquePrefix() }

type kindOfBackend struct {
	name string
	// make returns a backend; every call for one test returns a view of the
	// same store (the same Memory, the same Redis prefix), so that several
	// Queues made from them share queues. A nil clock means the store's own
	// time (time.Now, Redis TIME).
	make func(t testing.TB, clk clock.Clock) func() backend.Backend
}

// allBackends lists the backends every scenario runs on: memory, a
// standalone Redis through go-redis and through rueidis, and a 3-master Redis
// Cluster.
func allBackends() []kindOfBackend {
	return []kindOfBackend{
		{"memory", func(t testing.TB, clk clock.Clock) func() backend.Backend {
			var opts []backend.Option
			if clk != nil {
				opts = append(opts, backend.WithClock(clk))
			}
			m := backend.NewMemory(opts...)
			t.Cleanup(func() { m.Close() })
			return func() backend.Backend { return m }
		}},
		{"redis", func(t testing.TB, clk clock.Clock) func() backend.Backend {
			opts := backendOpts(clk)
			addr := testenv.SharedRedis(t).Addr
			return func() backend.Backend { return newRedisAt(t, addr, opts) }
		}},
		{"redis-rueidis", func(t testing.TB, clk clock.Clock) func() backend.Backend {
			opts := backendOpts(clk)
			addr := testenv.SharedRedis(t).Addr
			return func() backend.Backend {
				c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(c.Close)
				b, err := rueidisadapter.New(c, opts...)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { b.Close() })
				return b
			}
		}},
		{"cluster", func(t testing.TB, clk clock.Clock) func() backend.Backend {
			opts := backendOpts(clk)
			addrs := testenv.SharedCluster(t).Addrs
			return func() backend.Backend {
				cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: addrs, ContextTimeoutEnabled: true})
				t.Cleanup(func() { cc.Close() })
				b, err := backend.NewRedis(cc, opts...)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { b.Close() })
				return b
			}
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

func newRedisAt(t testing.TB, addr string, opts []backend.Option) *backend.Redis {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	b, err := backend.NewRedis(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		b.Close()
		c.Close()
	})
	return b
}
