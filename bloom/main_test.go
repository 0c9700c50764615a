package bloom_test

import (
	"fmt"
	"os"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/backend/rueidisadapter"
	"github.com/floodgate-dev/floodgate/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// prefixSeq makes every test's Redis keys unique, so tests on shared servers
// never see each other's state.
var prefixSeq atomic.Int64

func uniquePrefix() string {
	return fmt.Sprintf("t%d_%d", os.Getpid(), prefixSeq.Add(1))
}

type kindOfBackend struct {
	name string
	make func(t testing.TB) backend.Backend
}

// allBackends lists the backends every behaviour test runs on: memory, a
// standalone Redis through go-redis and through rueidis, and a 3-master Redis
// Cluster. Bloom filters do not read the clock, so no clock is injected.
func allBackends() []kindOfBackend {
	return []kindOfBackend{
		{"memory", func(t testing.TB) backend.Backend {
			m := backend.NewMemory()
			t.Cleanup(func() { m.Close() })
			return m
		}},
		{"redis", func(t testing.TB) backend.Backend { return newRedis(t) }},
		{"redis-rueidis", func(t testing.TB) backend.Backend {
			c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{testenv.SharedRedis(t).Addr}, DisableCache: true})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			b, err := rueidisadapter.New(c, backend.WithPrefix(uniquePrefix()))
			if err != nil {
				t.Fatal(err)
			}
			return b
		}},
		{"cluster", func(t testing.TB) backend.Backend {
			cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: testenv.SharedCluster(t).Addrs, ContextTimeoutEnabled: true})
			t.Cleanup(func() { cc.Close() })
			return newRedisOn(t, cc, uniquePrefix())
		}},
	}
}

func redisClient(t testing.TB) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: testenv.SharedRedis(t).Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	return c
}

func newRedis(t testing.TB) *backend.Redis {
	return newRedisOn(t, redisClient(t), uniquePrefix())
}

func newRedisOn(t testing.TB, c redis.UniversalClient, prefix string) *backend.Redis {
	b, err := backend.NewRedis(c, backend.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	return b
}
