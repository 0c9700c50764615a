package ratelimit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/internal/redisstore"
	"github.com/floodgate-dev/floodgate/internal/testenv"
)

// TestGenCacheBound: a process generates at most max scripts; the same rules
// get the same script, and rule sets the generator does not take get none.
func TestGenCacheBound(t *testing.T) {
	c := &genCache{m: map[string]*redisstore.Script{}, max: 2}
	rule := func(limit int64) []spec {
		s, err := FixedWindow{Limit: limit, Window: time.Second}.compile()
		if err != nil {
			t.Fatal(err)
		}
		return []spec{s}
	}
	a, b := c.get(rule(1)), c.get(rule(2))
	if a == nil || b == nil || a == b {
		t.Fatalf("first two scripts: %p %p", a, b)
	}
	if again := c.get(rule(1)); again != a {
		t.Errorf("the same rules got another script")
	}
	if third := c.get(rule(3)); third != nil {
		t.Errorf("a third script beyond the bound of 2")
	}
	if c.get(make([]spec, maxGenRules+1)) != nil {
		t.Errorf("a script for %d rules", maxGenRules+1)
	}
}

// TestGeneratedAndArgumentScriptsAgree: a Limiter past the bound of
// generated scripts runs limits.lua with its parameters as arguments; random
// calls of both kinds on the same keys give the memory backend's results.
func TestGeneratedAndArgumentScriptsAgree(t *testing.T) {
	srv := testenv.SharedRedis(t)
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { rc.Close() })
	sets := [][]Rule{
		{GCRA{Rate: 3, Per: time.Second, Burst: 4}},
		{FixedWindow{Limit: 5, Window: time.Second}},
		{LeakyBucket{Rate: 2, Per: time.Second, Burst: 3, Delay: 1}},
		{TokenBucket{Capacity: 4, Refill: 1, Every: 300 * time.Millisecond}, FixedWindow{Limit: 7, Window: 2 * time.Second}, Named("b", GCRA{Rate: 5, Per: time.Second, Burst: 2})},
	}
	start := time.Unix(1_700_000_000, 250_000_000)
	mclk, rclk := clock.NewFake(start), clock.NewFake(start)
	mem := backend.NewMemory(backend.WithClock(mclk))
	t.Cleanup(func() { mem.Close() })
	rb, err := backend.NewRedis(rc, backend.WithClock(rclk), backend.WithPrefix(fmt.Sprintf("gen%d", rand.Int64())))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(3, 4))
	for si, rules := range sets {
		ml, err := New(mem, rules...)
		if err != nil {
			t.Fatal(err)
		}
		gen, err := New(rb, rules...)
		if err != nil {
			t.Fatal(err)
		}
		arg, err := New(rb, rules...)
		if err != nil {
			t.Fatal(err)
		}
		if gen.fast == nil {
			t.Fatalf("set %d: no generated script", si)
		}
		arg.fast = nil // as past the bound
		for i := range 200 {
			d := time.Duration(rng.Int64N(int64(150 * time.Millisecond)))
			mclk.Advance(d)
			rclk.Advance(d)
			n := rng.Int64N(3)
			l := gen
			if rng.IntN(2) == 0 {
				l = arg
			}
			want, err := ml.AllowN(ctx, "k", n)
			if err != nil {
				t.Fatal(err)
			}
			got, err := l.AllowN(ctx, "k", n)
			if err != nil {
				t.Fatal(err)
			}
			if got != want {
				t.Fatalf("set %d call %d (generated %v, n %d): %+v, memory %+v", si, i, l == gen, n, got, want)
			}
		}
	}
}

// TestInlineCodec: the generator finds codec.lua's four functions, inlines
// them so that no generated script defines a function (each definition costs
// Redis a closure per call), and refuses what it cannot inline faithfully.
func TestInlineCodec(t *testing.T) {
	for _, name := range []string{"drain_decode", "drain_encode", "fixed_count", "fixed_encode"} {
		if f, ok := codecFuncs[name]; !ok || len(f.Body) == 0 || f.Params == "" {
			t.Errorf("codec.lua's %s: %+v, %v", name, f, ok)
		}
	}
	if strings.Contains(codecHead, "function") {
		t.Errorf("codec.lua's head keeps a function:\n%s", codecHead)
	}
	g, err := GCRA{Rate: 5, Per: time.Second, Burst: 2}.compile()
	if err != nil {
		t.Fatal(err)
	}
	f, err := FixedWindow{Limit: 5, Window: time.Minute}.compile()
	if err != nil {
		t.Fatal(err)
	}
	if src := genSource([]spec{g, f}); strings.Contains(src, "function") || strings.Count(src, "repeat") != 4 {
		t.Errorf("a generated script defines a function or lacks an inlined one:\n%s", src)
	}
	mustPanic := func(what string, f func()) {
		t.Helper()
		defer func() {
			if recover() == nil {
				t.Errorf("%s: no panic", what)
			}
		}()
		f()
	}
	mustPanic("unknown function", func() { inlineCall("drain_nothing", "v", "x") })
	mustPanic("an out named like a local", func() { inlineCall("drain_encode", "now, nl, rate, life", "sec") })
	mustPanic("a codec.lua whose function has no end", func() { splitCodec("local function f(x)\n  return x\n") })
	_, funcs := splitCodec("local K = 1\nlocal function f(x, y)\n  if x then return y end\n  return x -- comment\nend\n")
	codecFuncs["zz_test"] = funcs["f"]
	defer delete(codecFuncs, "zz_test")
	mustPanic("a comment after a return", func() { inlineCall("zz_test", "1, 2", "o") })
}
