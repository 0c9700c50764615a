// Package backendtest gives tests every backend a primitive must behave the
// same on: memory, a standalone Redis through go-redis and through rueidis,
// and a 3-master Redis Cluster, all on private servers from testenv (the
// test package's TestMain must call testenv.Main).
package backendtest

import (
	"fmt"
	"os"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/backend/rueidisadapter"
	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/internal/testenv"
)

// Kind is one backend under test. Make returns a fresh backend: a new client
// and, on Redis, a key prefix of its own, so tests on shared servers never see
// each other's state. A nil clock means the backend's own time (time.Now,
// Redis TIME).
type Kind struct {
	Name string
	Make func(t testing.TB, clk clock.Clock) backend.Backend
}

// All returns memory, redis, redis-rueidis and cluster, in that order.
func All() []Kind {
	return []Kind{
		{"memory", func(t testing.TB, clk clock.Clock) backend.Backend {
			var opts []backend.Option
			if clk != nil {
				opts = append(opts, backend.WithClock(clk))
			}
			m := backend.NewMemory(opts...)
			t.Cleanup(func() { m.Close() })
			return m
		}},
		{"redis", func(t testing.TB, clk clock.Clock) backend.Backend { return Redis(t, clk) }},
		{"redis-rueidis", func(t testing.TB, clk clock.Clock) backend.Backend {
			c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{testenv.SharedRedis(t).Addr}, DisableCache: true})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(c.Close)
			b, err := rueidisadapter.New(c, Options(clk)...)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { b.Close() })
			return b
		}},
		{"cluster", func(t testing.TB, clk clock.Clock) backend.Backend { return Cluster(t, clk) }},
	}
}

// Three is All without the rueidis adapter, for the heavier tests.
func Three() []Kind {
	all := All()
	return []Kind{all[0], all[1], all[3]}
}

var prefixSeq atomic.Int64

// UniquePrefix returns a Redis key prefix not used before in this process.
func UniquePrefix() string {
	return fmt.Sprintf("t%d_%d", os.Getpid(), prefixSeq.Add(1))
}

// Options returns a unique prefix and, unless clk is nil, the clock.
func Options(clk clock.Clock) []backend.Option {
	opts := []backend.Option{backend.WithPrefix(UniquePrefix())}
	if clk != nil {
		opts = append(opts, backend.WithClock(clk))
	}
	return opts
}

// Redis returns a backend on the package's shared standalone Redis.
func Redis(t testing.TB, clk clock.Clock) *backend.Redis {
	return RedisAt(t, testenv.SharedRedis(t).Addr, clk)
}

// RedisAt returns a backend on the Redis at addr, through go-redis.
func RedisAt(t testing.TB, addr string, clk clock.Clock) *backend.Redis {
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	b, err := backend.NewRedis(c, Options(clk)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() }) // its pub/sub connection, if it opened one
	return b
}

// Cluster returns a backend on the package's shared 3-master Cluster.
func Cluster(t testing.TB, clk clock.Clock) *backend.Redis {
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: testenv.SharedCluster(t).Addrs, ContextTimeoutEnabled: true})
	t.Cleanup(func() { cc.Close() })
	b, err := backend.NewRedis(cc, Options(clk)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

// NewRedis is backend.NewRedis for tests, which it fails on an error.
func NewRedis(t testing.TB, c redis.UniversalClient, opts ...backend.Option) *backend.Redis {
	t.Helper()
	b, err := backend.NewRedis(c, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
