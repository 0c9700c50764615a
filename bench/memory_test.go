package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/ratelimit"
	"github.com/sethvargo/go-limiter/memorystore"
	"golang.org/x/time/rate"
)

// memoryRate admits every call of the in-process benchmarks.
const memoryRate = 1_000_000_000

type memoryCase struct {
	lib, alg string
	make     func(keys []string) (decide, func(), error) // decide, close
}

func floodgateMemory(alg string) memoryCase {
	return memoryCase{lib: "floodgate-memory", alg: alg, make: func([]string) (decide, func(), error) {
		m := backend.NewMemory()
		p := params{rate: memoryRate, per: time.Second}
		lim, err := ratelimit.New(m, floodgateRules(alg, p)...)
		if err != nil {
			return nil, nil, err
		}
		ctx := context.Background()
		return func(key string) (bool, error) {
			r, err := lim.Allow(ctx, key)
			return r.Allowed, err
		}, func() { m.Close() }, nil
	}}
}

// floodgateMemoryLeased is floodgateMemory through quota leases
// (ratelimit.NewLeased): the decisions come from a lease held in process.
func floodgateMemoryLeased(alg string) memoryCase {
	return memoryCase{lib: "floodgate-memory-leased", alg: alg, make: func([]string) (decide, func(), error) {
		m := backend.NewMemory()
		p := params{rate: memoryRate, per: time.Second}
		lim, err := ratelimit.New(m, floodgateRules(alg, p)...)
		if err != nil {
			return nil, nil, err
		}
		l, err := ratelimit.NewLeased(lim)
		if err != nil {
			return nil, nil, err
		}
		ctx := context.Background()
		return func(key string) (bool, error) {
			r, err := l.Allow(ctx, key)
			return r.Allowed, err
		}, func() { _ = l.Close(ctx); m.Close() }, nil
	}}
}

// xrate is golang.org/x/time/rate: one Limiter for the hot key; for many keys
// one Limiter per key in a sync.Map, the usual way to key it.
func xrate(keys []string) (decide, func(), error) {
	if len(keys) == 1 {
		lim := rate.NewLimiter(memoryRate, memoryRate)
		return func(string) (bool, error) { return lim.Allow(), nil }, func() {}, nil
	}
	pk := &perKey{new: func(string) any { return rate.NewLimiter(memoryRate, memoryRate) }}
	return func(key string) (bool, error) {
		return pk.get(key).(*rate.Limiter).Allow(), nil
	}, func() {}, nil
}

func sethvargo(_ []string) (decide, func(), error) {
	st, err := memorystore.New(&memorystore.Config{Tokens: memoryRate, Interval: time.Second})
	if err != nil {
		return nil, nil, err
	}
	ctx := context.Background()
	return func(key string) (bool, error) {
			_, _, _, ok, err := st.Take(ctx, key)
			return ok, err
		}, func() {
			if err := st.Close(context.Background()); err != nil {
				panic(err)
			}
		}, nil
}

var memoryCases = []memoryCase{
	{lib: "xrate", alg: "tokenbucket", make: xrate},
	floodgateMemory("gcra"),
	floodgateMemory("tokenbucket"),
	floodgateMemoryLeased("gcra"),
	{lib: "sethvargo", alg: "tokenbucket", make: sethvargo},
}

// BenchmarkMemory measures in-process decisions: ns/op and allocs/op for one
// hot key and for 100,000 keys, with 1 and 64 goroutines. Every key is used
// once before the timer starts, so the maps hold them.
func BenchmarkMemory(b *testing.B) {
	for _, mc := range memoryCases {
		b.Run("lib="+mc.lib+"/alg="+mc.alg, func(b *testing.B) {
			for _, nk := range keySpaces {
				keys := benchKeys(nk)
				for _, g := range memoryGoroutines {
					var f decide // built on the first run, kept for the later ones
					var closer func()
					b.Run(fmt.Sprintf("keys=%d/g=%d", nk, g), func(b *testing.B) {
						if f == nil {
							var err error
							if f, closer, err = mc.make(keys); err != nil {
								b.Fatal(err)
							}
							for _, k := range keys {
								if _, err := f(k); err != nil {
									b.Fatal(err)
								}
							}
						}
						run(b, g, keys, false, f)
					})
					if closer != nil {
						closer()
					}
				}
			}
		})
	}
}

func TestMemoryCases(t *testing.T) {
	for _, mc := range memoryCases {
		for _, keys := range [][]string{{"hot"}, userKeys(3)} {
			f, closer, err := mc.make(keys)
			if err != nil {
				t.Fatal(err)
			}
			for _, k := range keys {
				if ok, err := f(k); !ok || err != nil {
					t.Errorf("%s/%s %q: allowed=%v err=%v", mc.lib, mc.alg, k, ok, err)
				}
			}
			closer()
		}
	}
}
