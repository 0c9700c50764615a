package bench

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/backend/rueidisadapter"
	"github.com/floodgate-dev/floodgate/internal/testenv"
	"github.com/floodgate-dev/floodgate/ratelimit"
	"github.com/go-redis/redis_rate/v10"
	mlimiters "github.com/mennanov/limiters"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
	ulule "github.com/ulule/limiter/v3"
	ululeredis "github.com/ulule/limiter/v3/drivers/store/redis"
)

//go:embed gcra.lua
var gcraLua string

// Redis limits: high enough that every call is admitted, so that every
// library runs its full write path. 1e6/s rather than 1e9/s because
// redis_rate keeps its state in float seconds since 2017: at 1e9/s its 1 ns
// emission interval is below the precision of a double and it would skip its
// SET.
const (
	redisRate  = 1_000_000
	redisLimit = 1_000_000_000_000 // window counters
)

// gcraArgs are the minimal script's ARGV for p: rate per second, burst.
func gcraArgs(p params) []string {
	perSec := float64(p.rate) / p.per.Seconds()
	return []string{strconv.FormatFloat(perSec, 'g', -1, 64), strconv.FormatInt(p.burstOf(), 10)}
}

// clients are the Redis clients shared by every Redis benchmark of the test
// binary, all on the one private server.
type clients struct {
	srv   *testenv.Redis
	gored *redis.Client
	rued  rueidis.Client
	// ruedFD is a rueidis client tuned for throughput: MaxFlushDelay 20µs
	// (rueidis's own suggestion) lets each write gather more commands, so
	// client and Redis spend fewer system calls per decision.
	ruedFD rueidis.Client
	sha    string // of gcra.lua
}

var (
	clientsOnce sync.Once
	shared      *clients
	sharedErr   error
)

// redisClients starts the binary's private Redis (once) and connects to it.
// go-redis uses its defaults (pool of 10 connections per GOMAXPROCS) with
// ContextTimeoutEnabled, as floodgate's docs advise; rueidis its defaults,
// which auto-pipeline every Do. Both clients are shared by all libraries.
func redisClients(b testing.TB) *clients {
	b.Helper()
	srv := testenv.SharedRedis(b)
	clientsOnce.Do(func() {
		c := &clients{srv: srv}
		c.gored = redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
		c.rued, sharedErr = rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true})
		if sharedErr != nil {
			return
		}
		c.ruedFD, sharedErr = rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true, MaxFlushDelay: 20 * time.Microsecond})
		if sharedErr != nil {
			return
		}
		c.sha, sharedErr = c.gored.ScriptLoad(context.Background(), gcraLua).Result()
		shared = c
	})
	if sharedErr != nil {
		b.Fatalf("redis clients: %v", sharedErr)
	}
	return shared
}

func (c *clients) flush(b testing.TB) {
	b.Helper()
	if err := c.gored.FlushAll(context.Background()).Err(); err != nil {
		b.Fatalf("FLUSHALL: %v", err)
	}
}

// info returns a numeric field of INFO section.
func (c *clients) info(b testing.TB, section, field string) float64 {
	b.Helper()
	s, err := c.gored.Info(context.Background(), section).Result()
	if err != nil {
		b.Fatal(err)
	}
	for line := range strings.Lines(s) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), field+":"); ok {
			n, err := strconv.ParseFloat(v, 64)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	b.Fatalf("INFO %s has no %s", section, field)
	return 0
}

// serverCPU returns the CPU time, in seconds, that the server's main thread
// (which runs every command and script) has used.
func (c *clients) serverCPU(b testing.TB) float64 {
	return c.info(b, "cpu", "used_cpu_user_main_thread") + c.info(b, "cpu", "used_cpu_sys_main_thread")
}

// scriptStats are the script calls Redis has run (EVAL and EVALSHA) and
// the microseconds it spent in them, commands called by the scripts included.
type scriptStats struct{ calls, usec int64 }

// scriptStats reads scriptStats from INFO commandstats of the shared Redis.
func (c *clients) scriptStats(b testing.TB) scriptStats {
	b.Helper()
	s, err := c.gored.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	var st scriptStats
	for line := range strings.Lines(s) {
		line = strings.TrimSpace(line)
		v, ok := strings.CutPrefix(line, "cmdstat_evalsha:")
		if !ok {
			v, ok = strings.CutPrefix(line, "cmdstat_eval:")
		}
		if !ok {
			continue
		}
		for field := range strings.SplitSeq(v, ",") {
			k, n, _ := strings.Cut(field, "=")
			i, err := strconv.ParseInt(n, 10, 64)
			switch {
			case k != "calls" && k != "usec":
			case err != nil:
				b.Fatalf("INFO commandstats: %q: %v", line, err)
			case k == "calls":
				st.calls += i
			default:
				st.usec += i
			}
		}
	}
	return st
}

// redisCase is one library and algorithm; make builds its decide function
// (once per sub-benchmark) on the shared clients. keys are the user keys the
// benchmark will use: libraries with one limiter object per key create them
// up front, so that no timed call pays for it.
type redisCase struct {
	lib, alg string
	make     func(c *clients, p params, keys []string) (decide, error)
}

// params are the rule parameters: the throughput benchmarks admit every call;
// the footprint benchmarks use slow rates so that keys live for an hour.
type params struct {
	rate  int64         // GCRA and token bucket: per second
	per   time.Duration // GCRA and token bucket period
	limit int64         // window counters: per window
	win   time.Duration // window
	ttl   time.Duration // mennanov's explicit TTL
}

var throughput = params{rate: redisRate, per: time.Second, limit: redisLimit, win: time.Second, ttl: time.Second}

// floodgateCase is a floodgate Limiter of floodgateRules(alg) on the shared
// clients: lib floodgate-rueidis (rueidisadapter), floodgate-rueidis-fd (the
// same on the client with MaxFlushDelay), floodgate-goredis
// (backend.NewRedis, go-redis's deferred autopipelining by default) or
// floodgate-goredis-noap (the same with backend.WithoutAutoPipeline: every
// call a plain go-redis EvalSha).
func floodgateCase(lib, alg string) redisCase {
	return redisCase{lib: lib, alg: alg, make: func(c *clients, p params, _ []string) (decide, error) {
		var be *backend.Redis
		var err error
		switch lib {
		case "floodgate-rueidis":
			be, err = rueidisadapter.New(c.rued)
		case "floodgate-rueidis-fd":
			be, err = rueidisadapter.New(c.ruedFD)
		case "floodgate-goredis":
			be, err = backend.NewRedis(c.gored)
		case "floodgate-goredis-noap":
			be, err = backend.NewRedis(c.gored, backend.WithoutAutoPipeline())
		default:
			panic("unknown floodgate case " + lib)
		}
		if err != nil {
			return nil, err
		}
		lim, err := ratelimit.New(be, floodgateRules(alg, p)...)
		if err != nil {
			return nil, err
		}
		ctx := context.Background()
		return func(key string) (bool, error) {
			r, err := lim.Allow(ctx, key)
			return r.Allowed, err
		}, nil
	}}
}

// floodgateRules are the rules of a floodgate Limiter for alg; gcra+daily
// is the GCRA of "gcra" and a fixed window of a day with the window limit,
// two rules in one Limiter (one script call, one Redis key).
func floodgateRules(alg string, p params) []ratelimit.Rule {
	switch alg {
	case "gcra":
		return []ratelimit.Rule{ratelimit.GCRA{Rate: p.rate, Per: p.per, Burst: p.burstOf()}}
	case "gcra+daily":
		return []ratelimit.Rule{
			ratelimit.GCRA{Rate: p.rate, Per: p.per, Burst: p.burstOf()},
			ratelimit.FixedWindow{Limit: p.limit, Window: 24 * time.Hour},
		}
	case "tokenbucket":
		return []ratelimit.Rule{ratelimit.TokenBucket{Capacity: p.burstOf(), Refill: p.rate, Every: p.per}}
	case "fixedwindow":
		return []ratelimit.Rule{ratelimit.FixedWindow{Limit: p.limit, Window: p.win}}
	case "slidingwindow":
		return []ratelimit.Rule{ratelimit.SlidingWindow{Limit: p.limit, Window: p.win, Buckets: 10}}
	}
	panic("unknown algorithm " + alg)
}

// burstOf is the burst of the GCRA and token bucket: one period's worth, at
// least 100.
func (p params) burstOf() int64 { return max(p.rate, 100) }

// rawGoRedis is the client-side ceiling of go-redis: EVALSHA of gcra.lua.
func rawGoRedis(c *clients, p params, _ []string) (decide, error) {
	ctx := context.Background()
	a := gcraArgs(p)
	args := []any{a[0], a[1]}
	return func(key string) (bool, error) {
		v, err := c.gored.EvalSha(ctx, c.sha, []string{"raw:{" + key + "}"}, args...).Int64Slice()
		if err != nil {
			return false, err
		}
		return v[0] == 1, nil
	}, nil
}

// rawGoRedisAP is rawGoRedis through go-redis's deferred autopipeliner
// (AsyncAutoPipeline, EXPERIMENTAL), as floodgate's go-redis backend sends
// its calls by default: each call is submitted, then waited for, so that
// concurrent goroutines' calls share pipelines.
func rawGoRedisAP(c *clients, p params, _ []string) (decide, error) {
	ap, err := c.gored.AsyncAutoPipeline()
	if err != nil {
		return nil, err
	}
	ctx := context.Background()
	a := gcraArgs(p)
	return func(key string) (bool, error) {
		cmd := redis.NewCmd(ctx, "evalsha", c.sha, 1, "raw:{"+key+"}", a[0], a[1])
		cmd.SetFirstKeyPos(3)
		if err := ap.Submit(ctx, cmd).WaitContext(ctx); err != nil {
			return false, err
		}
		v, err := cmd.Int64Slice()
		if err != nil {
			return false, err
		}
		return v[0] == 1, nil
	}, nil
}

// rawRueidis is the client-side ceiling of rueidis: EVALSHA of gcra.lua
// through Do, auto-pipelined.
func rawRueidis(c *clients, p params, _ []string) (decide, error) { return rawRueidisOn(c, c.rued, p) }

// rawRueidisFD is rawRueidis on the client tuned for throughput.
func rawRueidisFD(c *clients, p params, _ []string) (decide, error) {
	return rawRueidisOn(c, c.ruedFD, p)
}

func rawRueidisOn(c *clients, rc rueidis.Client, p params) (decide, error) {
	ctx := context.Background()
	args := gcraArgs(p)
	return func(key string) (bool, error) {
		cmd := rc.B().Evalsha().Sha1(c.sha).Numkeys(1).Key("raw:{" + key + "}").Arg(args...).Build()
		v, err := rc.Do(ctx, cmd).AsIntSlice()
		if err != nil {
			return false, err
		}
		return v[0] == 1, nil
	}, nil
}

func redisRateCase(c *clients, p params, _ []string) (decide, error) {
	lim := redis_rate.NewLimiter(c.gored)
	limit := redis_rate.Limit{Rate: int(p.rate), Period: p.per, Burst: int(p.burstOf())}
	ctx := context.Background()
	return func(key string) (bool, error) {
		r, err := lim.Allow(ctx, key, limit)
		if err != nil {
			return false, err
		}
		return r.Allowed > 0, nil
	}, nil
}

func ululeCase(c *clients, p params, _ []string) (decide, error) {
	store, err := ululeredis.NewStore(c.gored)
	if err != nil {
		return nil, err
	}
	lim := ulule.New(store, ulule.Rate{Period: p.win, Limit: p.limit})
	ctx := context.Background()
	return func(key string) (bool, error) {
		r, err := lim.Get(ctx, key)
		return !r.Reached, err
	}, nil
}

// mennanov's limiters are one object per key (the key is the Redis prefix);
// like x/time/rate, they live in a sync.Map, created before the timed calls. Its token
// bucket reads the state with MGET and writes it with MULTI/SET/SET/EXEC; it
// is run with LockNoop, its cheapest setting, which serialises the calls of
// one process per key with a sync.Mutex but does not lock across processes
// (its safe setting takes a redsync lock around every call).
type perKey struct {
	m   sync.Map
	new func(key string) any
}

func (p *perKey) get(key string) any {
	if v, ok := p.m.Load(key); ok {
		return v
	}
	v, _ := p.m.LoadOrStore(key, p.new(key))
	return v
}

// warm creates the objects of keys.
func (p *perKey) warm(keys []string) {
	for _, k := range keys {
		p.get(k)
	}
}

func mennanovTokenBucket(c *clients, p params, keys []string) (decide, error) {
	clk, logger := mlimiters.NewSystemClock(), mlimiters.NewStdLogger()
	capacity := p.burstOf()
	refill := p.per / time.Duration(p.rate) // one token per refill
	pk := &perKey{new: func(key string) any {
		return mlimiters.NewTokenBucket(capacity, refill, mlimiters.NewLockNoop(),
			mlimiters.NewTokenBucketRedis(c.gored, key, p.ttl, false), clk, logger)
	}}
	pk.warm(keys)
	ctx := context.Background()
	return func(key string) (bool, error) {
		_, err := pk.get(key).(*mlimiters.TokenBucket).Limit(ctx)
		if errors.Is(err, mlimiters.ErrLimitExhausted) {
			return false, nil
		}
		return err == nil, err
	}, nil
}

func mennanovSlidingWindow(c *clients, p params, keys []string) (decide, error) {
	clk := mlimiters.NewSystemClock()
	pk := &perKey{new: func(key string) any {
		return mlimiters.NewSlidingWindow(p.limit, p.win, mlimiters.NewSlidingWindowRedis(c.gored, key), clk, 1e-9)
	}}
	pk.warm(keys)
	ctx := context.Background()
	return func(key string) (bool, error) {
		_, err := pk.get(key).(*mlimiters.SlidingWindow).Limit(ctx)
		if errors.Is(err, mlimiters.ErrLimitExhausted) {
			return false, nil
		}
		return err == nil, err
	}, nil
}

var redisCases = []redisCase{
	{lib: "raw-rueidis", alg: "gcra", make: rawRueidis},
	{lib: "raw-rueidis-fd", alg: "gcra", make: rawRueidisFD},
	{lib: "raw-goredis", alg: "gcra", make: rawGoRedis},
	{lib: "raw-goredis-ap", alg: "gcra", make: rawGoRedisAP},
	floodgateCase("floodgate-rueidis", "gcra"),
	floodgateCase("floodgate-rueidis", "gcra+daily"),
	floodgateCase("floodgate-rueidis", "tokenbucket"),
	floodgateCase("floodgate-rueidis", "fixedwindow"),
	floodgateCase("floodgate-rueidis", "slidingwindow"),
	floodgateCase("floodgate-rueidis-fd", "gcra"),
	floodgateCase("floodgate-goredis", "gcra"),
	floodgateCase("floodgate-goredis", "gcra+daily"),
	floodgateCase("floodgate-goredis", "tokenbucket"),
	floodgateCase("floodgate-goredis", "fixedwindow"),
	floodgateCase("floodgate-goredis", "slidingwindow"),
	floodgateCase("floodgate-goredis-noap", "gcra"),
	{lib: "redis_rate", alg: "gcra", make: redisRateCase},
	{lib: "ulule", alg: "fixedwindow", make: ululeCase},
	{lib: "mennanov", alg: "tokenbucket", make: mennanovTokenBucket},
	{lib: "mennanov", alg: "slidingwindow", make: mennanovSlidingWindow},
}

// BenchmarkRedis measures decisions per second and per-call latency of every
// library on the one private Redis, for a hot key and for 100,000 keys, with
// 1 to 256 goroutines. Each sub-benchmark starts from an empty database.
//
// It also reports the server's side: server-µs/op is the CPU time of Redis's
// main thread (INFO cpu) per decision, everything included (network, parsing,
// scripts), and server-busy that CPU time over the wall time of the calls;
// near 1 the single-threaded server is the bottleneck. script-µs/op is the
// time Redis spent in each script call (INFO commandstats: EVALSHA and EVAL
// usec over their calls, the commands the script calls included), reported
// when the library runs scripts: the server's cost of the script alone.
func BenchmarkRedis(b *testing.B) {
	c := redisClients(b)
	for _, rc := range redisCases {
		b.Run("lib="+rc.lib+"/alg="+rc.alg, func(b *testing.B) {
			for _, nk := range keySpaces {
				keys := benchKeys(nk)
				for _, g := range redisGoroutines {
					var f decide // built on the first run, kept for the later ones
					b.Run(fmt.Sprintf("keys=%d/g=%d", nk, g), func(b *testing.B) {
						if f == nil {
							c.flush(b)
							var err error
							if f, err = rc.make(c, throughput, keys); err != nil {
								b.Fatal(err)
							}
						}
						cpu0, st0 := c.serverCPU(b), c.scriptStats(b)
						elapsed := run(b, g, keys, true, f)
						cpu, st := c.serverCPU(b)-cpu0, c.scriptStats(b)
						b.ReportMetric(cpu*1e6/float64(b.N), "server-µs/op")
						b.ReportMetric(cpu/elapsed.Seconds(), "server-busy")
						if calls := st.calls - st0.calls; calls > 0 {
							b.ReportMetric(float64(st.usec-st0.usec)/float64(calls), "script-µs/op")
						}
					})
				}
			}
		})
	}
}

// TestRedisCases checks that every library admits calls on the private Redis
// and that the minimal script denies once its burst is spent.
func TestRedisCases(t *testing.T) {
	c := redisClients(t)
	for _, rc := range redisCases {
		f, err := rc.make(c, throughput, []string{"test:" + rc.lib + rc.alg})
		if err != nil {
			t.Fatalf("%s/%s: %v", rc.lib, rc.alg, err)
		}
		for i := range 3 {
			ok, err := f("test:" + rc.lib + rc.alg)
			if err != nil || !ok {
				t.Errorf("%s/%s call %d: allowed=%v err=%v", rc.lib, rc.alg, i, ok, err)
			}
		}
	}
	ctx := context.Background()
	for i := range 3 {
		v, err := c.gored.EvalSha(ctx, c.sha, []string{"test:gcra"}, 1, 2).Int64Slice()
		if err != nil {
			t.Fatal(err)
		}
		if want := int64(1); i == 2 {
			want = 0
			if v[0] != want || v[1] <= 0 {
				t.Errorf("call %d: %v, want denied with a retry-after", i, v)
			}
		} else if v[0] != want {
			t.Errorf("call %d: %v, want allowed", i, v)
		}
	}
}
