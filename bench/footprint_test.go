package bench

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/backend/rueidisadapter"
	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/ratelimit"
	"github.com/sethvargo/go-limiter/memorystore"
	"golang.org/x/time/rate"
)

// Footprint sizes: distinct 16-byte user keys.
const (
	redisFootprintKeys  = 100_000
	memoryFootprintKeys = 1_000_000
)

// footprint parameters: one call per key leaves state that lives about an
// hour (GCRA and token bucket: 1 per hour, burst 100; windows of an hour, 100
// per window), so nothing expires while it is measured.
var footprint = params{rate: 1, per: time.Hour, limit: 100, win: time.Hour, ttl: time.Hour}

// redisFootprintCase is a library and algorithm whose state is measured:
// rounds calls per user key, with next run between rounds.
type redisFootprintCase struct {
	lib, alg string
	rounds   int
	make     func(c *clients, p params, keys []string) (f decide, next func(), err error)
}

// once measures a throughput case with one call per key.
func once(lib string, rc redisCase) redisFootprintCase {
	return redisFootprintCase{lib: lib, alg: rc.alg, rounds: 1, make: func(c *clients, p params, keys []string) (decide, func(), error) {
		f, err := rc.make(c, p, keys)
		return f, func() {}, err
	}}
}

// slidingFull fills every bucket of a floodgate SlidingWindow: one call per
// key in each of its 10 buckets, on a clock injected into the backend (the
// scripts then take "now" from it) that moves one bucket between rounds.
var slidingFull = redisFootprintCase{lib: "floodgate", alg: "slidingwindow-full", rounds: 10,
	make: func(c *clients, p params, _ []string) (decide, func(), error) {
		clk := clock.NewFake(time.Unix(1_700_000_000, 0))
		be, err := rueidisadapter.New(c.rued, backend.WithClock(clk))
		if err != nil {
			return nil, nil, err
		}
		lim, err := ratelimit.New(be, floodgateRules("slidingwindow", p)...)
		if err != nil {
			return nil, nil, err
		}
		ctx := context.Background()
		return func(key string) (bool, error) {
			r, err := lim.Allow(ctx, key)
			return r.Allowed, err
		}, func() { clk.Advance(p.win / 10) }, nil
	}}

// gcra3 is floodgate's GCRA after 3 calls per key: a level of 3 hours of
// units (1.08·10^10 request × µs), past the 10^10 of the long integer form of
// a drain state (lua/codec.lua), within the short one's.
var gcra3 = redisFootprintCase{lib: "floodgate", alg: "gcra-3calls", rounds: 3,
	make: func(c *clients, p params, keys []string) (decide, func(), error) {
		f, err := floodgateCase("floodgate-rueidis", "gcra").make(c, p, keys)
		return f, func() {}, err
	}}

// redisFootprintCases: both floodgate adapters write the same keys, so only
// rueidis is measured.
var redisFootprintCases = []redisFootprintCase{
	once("raw", redisCase{alg: "gcra", make: rawRueidis}),
	once("floodgate", floodgateCase("floodgate-rueidis", "gcra")),
	gcra3,
	once("floodgate", floodgateCase("floodgate-rueidis", "gcra+daily")),
	once("floodgate", floodgateCase("floodgate-rueidis", "tokenbucket")),
	once("floodgate", floodgateCase("floodgate-rueidis", "fixedwindow")),
	once("floodgate", floodgateCase("floodgate-rueidis", "slidingwindow")),
	slidingFull,
	once("redis_rate", redisCase{alg: "gcra", make: redisRateCase}),
	once("ulule", redisCase{alg: "fixedwindow", make: ululeCase}),
	once("mennanov", redisCase{alg: "tokenbucket", make: mennanovTokenBucket}),
	once("mennanov", redisCase{alg: "slidingwindow", make: mennanovSlidingWindow}),
}

// callAll makes one call per key with 32 goroutines and fails on an error or
// a denial.
func callAll(b *testing.B, f decide, keys []string) {
	b.Helper()
	const g = 32
	var wg sync.WaitGroup
	errs := make([]error, g)
	for i := range g {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			for j := i; j < len(keys); j += g {
				ok, err := f(keys[j])
				if err == nil && !ok {
					err = fmt.Errorf("%q denied", keys[j])
				}
				if err != nil {
					errs[i] = err
					return
				}
			}
		}(i)
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRedisFootprint measures the Redis memory that one user key costs
// in each library: FLUSHALL, INFO used_memory, one call for each of 100,000
// distinct 16-byte user keys, used_memory again; B/key is the difference,
// less the change in client buffers (INFO mem_clients_normal), over 100,000 and redis-keys/key is DBSIZE over 100,000 (slidingwindow-full
// fills all 10 buckets of each key, the SlidingWindow's largest state). A warm-up of 20,000 other
// keys first opens every connection and loads every script, so that client
// buffers and the script cache do not count. Each run measures once,
// whatever b.N; ns/op is suppressed.
func BenchmarkRedisFootprint(b *testing.B) {
	c := redisClients(b)
	ctx := context.Background()
	keys := userKeys(redisFootprintKeys)
	warm := make([]string, 20_000)
	for i := range warm {
		warm[i] = fmt.Sprintf("warm:%011d", i)
	}
	for _, fc := range redisFootprintCases {
		b.Run(fmt.Sprintf("lib=%s/alg=%s/keys=%d", fc.lib, fc.alg, len(keys)), func(b *testing.B) {
			f, next, err := fc.make(c, footprint, append(warm, keys...))
			if err != nil {
				b.Fatal(err)
			}
			callAll(b, f, warm)
			c.flush(b)
			before := int64(c.info(b, "memory", "used_memory"))
			beforeClients := int64(c.info(b, "memory", "mem_clients_normal"))
			for i := range fc.rounds {
				if i > 0 {
					next()
				}
				callAll(b, f, keys)
			}
			after := int64(c.info(b, "memory", "used_memory"))
			afterClients := int64(c.info(b, "memory", "mem_clients_normal"))
			n, err := c.gored.DBSize(ctx).Result()
			if err != nil {
				b.Fatal(err)
			}
			if n < int64(len(keys)) || n%int64(len(keys)) != 0 {
				b.Fatalf("DBSIZE %d after %d user keys: some keys expired or were not created", n, len(keys))
			}
			clientsDelta := afterClients - beforeClients
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(float64(after-before-clientsDelta)/float64(len(keys)), "B/key")
			b.ReportMetric(float64(n)/float64(len(keys)), "redis-keys/key")
			b.Logf("used_memory %d -> %d, client buffers %+d (subtracted), DBSIZE %d", before, after, clientsDelta, n)
			c.flush(b)
		})
	}
}

// heapAlloc returns the live heap after two full collections.
func heapAlloc() int64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

type memoryFootprintCase struct {
	lib, alg string
	// fill makes one call per key and returns a function that expires the
	// state and sweeps it (nil when the library has no sweep to drive) and
	// the object that holds the state, to keep alive while measuring.
	fill func(b *testing.B, keys []string) (sweep func() int, keep any)
}

func floodgateFootprint(alg string) memoryFootprintCase {
	return memoryFootprintCase{lib: "floodgate-memory", alg: alg, fill: func(b *testing.B, keys []string) (func() int, any) {
		clk := clock.NewFake(time.Unix(1_700_000_000, 0))
		m := backend.NewMemory(backend.WithClock(clk), backend.WithSweepInterval(24*time.Hour))
		lim, err := ratelimit.New(m, floodgateRules(alg, footprint)...)
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		for _, k := range keys {
			if r, err := lim.Allow(ctx, k); err != nil || !r.Allowed {
				b.Fatalf("%q: allowed=%v err=%v", k, r.Allowed, err)
			}
		}
		return func() int {
			clk.Advance(2 * footprint.per)
			n := m.Sweep()
			m.Close()
			return n
		}, m
	}}
}

var memoryFootprintCases = []memoryFootprintCase{
	floodgateFootprint("gcra"),
	floodgateFootprint("tokenbucket"),
	// For reference: x/time/rate, one Limiter per key in a sync.Map (which
	// nothing ever shrinks), and sethvargo's memorystore (its own sweeper
	// runs on wall time: not driven here).
	{lib: "xrate", alg: "tokenbucket", fill: func(b *testing.B, keys []string) (func() int, any) {
		var m sync.Map
		for _, k := range keys {
			lim := rate.NewLimiter(rate.Every(time.Hour), 100)
			lim.Allow()
			m.Store(strings.Clone(k), lim) // a request's key is a fresh string
		}
		return nil, &m
	}},
	{lib: "sethvargo", alg: "tokenbucket", fill: func(b *testing.B, keys []string) (func() int, any) {
		st, err := memorystore.New(&memorystore.Config{Tokens: 100, Interval: time.Hour, SweepInterval: 24 * time.Hour})
		if err != nil {
			b.Fatal(err)
		}
		ctx := context.Background()
		for _, k := range keys {
			if _, _, _, ok, err := st.Take(ctx, strings.Clone(k)); err != nil || !ok {
				b.Fatalf("%q: ok=%v err=%v", k, ok, err)
			}
		}
		b.Cleanup(func() { _ = st.Close(context.Background()) })
		return nil, st
	}},
}

// BenchmarkMemoryFootprint measures the heap that idle keys cost in process:
// HeapAlloc after runtime.GC before and after one call for each of 1,000,000
// distinct 16-byte user keys (the keys themselves exist before), over
// 1,000,000 as B/key. For floodgate it then moves the fake clock past every
// key's expiry, runs Memory.Sweep, and reports what is left as B/key-swept
// (and swept/key, the fraction of entries Sweep removed). Each run measures
// once, whatever b.N; ns/op is suppressed.
func BenchmarkMemoryFootprint(b *testing.B) {
	keys := userKeys(memoryFootprintKeys)
	for _, fc := range memoryFootprintCases {
		b.Run(fmt.Sprintf("lib=%s/alg=%s/keys=%d", fc.lib, fc.alg, len(keys)), func(b *testing.B) {
			before := heapAlloc()
			sweep, keep := fc.fill(b, keys)
			idle := heapAlloc()
			b.ReportMetric(0, "ns/op")
			b.ReportMetric(float64(idle-before)/float64(len(keys)), "B/key")
			if sweep != nil {
				n := sweep()
				swept := heapAlloc()
				b.ReportMetric(float64(swept-before)/float64(len(keys)), "B/key-swept")
				b.ReportMetric(float64(n)/float64(len(keys)), "swept/key")
			}
			runtime.KeepAlive(keep)
		})
	}
}
