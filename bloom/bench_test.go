package bloom_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/backend/rueidisadapter"
	"github.com/floodgate-dev/floodgate/bloom"
	"github.com/floodgate-dev/floodgate/internal/testenv"
)

// Benchmarks report items/s for Add and Contains in batches of 100 and 1,000
// on a filter of 100,000 items at 1% (m = 958,506 bits, k = 7), on the
// package's shared Redis. Contains runs on a filter filled to capacity, with
// half of the probes members:
//
//	go test -run '^$' -bench . -benchtime 2s ./bloom/
//
// "floodgate-goredis" and "floodgate-rueidis" are this package over go-redis
// and over rueidis (backend/rueidisadapter). "naive-rueidis" is the command
// pattern of github.com/redis/rueidis/rueidisprob's BloomFilter (AddMulti /
// ExistsMulti): positions computed in Go, then an EVAL carrying the script
// source on every call that runs one SETBIT (plus an INCRBY of a count key)
// or one GETBIT per cell, and replies with every bit. It is a reimplementation of that pattern, not the
// library: rueidisprob is a separate module that this repository does not
// depend on. Both use the same rueidis client and the same cells.

const (
	benchCapacity = 100_000
	benchFP       = 0.01
)

func benchItems(n int) []string {
	s := make([]string, n)
	for i := range s {
		s[i] = "bench-item-" + strconv.Itoa(i)
	}
	return s
}

// bulk is the shape every contender is benchmarked through.
type bulk struct {
	add      func(ctx context.Context, items []string) error
	contains func(ctx context.Context, items []string) ([]bool, error)
}

func BenchmarkRedis(b *testing.B) {
	addr := testenv.SharedRedis(b).Addr
	gc := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	b.Cleanup(func() { gc.Close() })
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(rc.Close)

	fromFilter := func(f *bloom.Filter) bulk {
		return bulk{
			add:      func(ctx context.Context, it []string) error { _, err := f.Add(ctx, it...); return err },
			contains: func(ctx context.Context, it []string) ([]bool, error) { return f.Contains(ctx, it...) },
		}
	}
	contenders := []struct {
		name string
		make func(b *testing.B) bulk
	}{
		{"floodgate-goredis", func(b *testing.B) bulk {
			f, err := bloom.New(newRedisOn(b, gc, uniquePrefix()), "bench", benchCapacity, benchFP)
			if err != nil {
				b.Fatal(err)
			}
			return fromFilter(f)
		}},
		{"floodgate-rueidis", func(b *testing.B) bulk {
			r, err := rueidisadapter.New(rc, backend.WithPrefix(uniquePrefix()))
			if err != nil {
				b.Fatal(err)
			}
			f, err := bloom.New(r, "bench", benchCapacity, benchFP)
			if err != nil {
				b.Fatal(err)
			}
			return fromFilter(f)
		}},
		{"naive-rueidis", func(b *testing.B) bulk {
			mem := backend.NewMemory()
			b.Cleanup(func() { mem.Close() })
			f, err := bloom.New(mem, "geometry", benchCapacity, benchFP)
			if err != nil {
				b.Fatal(err)
			}
			n := newNaive(rc, "{"+uniquePrefix()+"}", f.Info())
			return bulk{add: n.add, contains: n.contains}
		}},
	}
	items := benchItems(2 * benchCapacity)
	for _, batch := range []int{100, 1000} {
		for _, op := range []string{"Add", "Contains"} {
			for _, c := range contenders {
				b.Run(op+"/batch="+strconv.Itoa(batch)+"/"+c.name, func(b *testing.B) {
					ctx := context.Background()
					f := c.make(b)
					if op == "Contains" {
						for i := 0; i < benchCapacity; i += 1000 {
							if err := f.add(ctx, items[i:i+1000]); err != nil {
								b.Fatal(err)
							}
						}
					}
					b.ReportAllocs()
					before := scriptMicros(b, gc)
					b.ResetTimer()
					start := time.Now()
					for i := 0; b.Loop(); i++ {
						from := (i * batch) % (len(items) - batch)
						var err error
						if op == "Add" {
							err = f.add(ctx, items[from:from+batch])
						} else {
							_, err = f.contains(ctx, items[from:from+batch])
						}
						if err != nil {
							b.Fatal(err)
						}
					}
					b.ReportMetric(float64(b.N*batch)/time.Since(start).Seconds(), "items/s")
					b.ReportMetric((scriptMicros(b, gc)-before)/float64(b.N), "server-µs/op")
				})
			}
		}
	}
}

// scriptMicros returns the microseconds Redis has spent running scripts
// (EVAL and EVALSHA, from INFO commandstats): a measure of server work that
// other processes on a loaded machine disturb less than wall time.
func scriptMicros(b *testing.B, c *redis.Client) float64 {
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	total := 0.0
	for _, line := range strings.Split(info, "\n") {
		if !strings.HasPrefix(line, "cmdstat_eval:") && !strings.HasPrefix(line, "cmdstat_evalsha:") {
			continue
		}
		for _, field := range strings.Split(strings.TrimSpace(line[strings.Index(line, ":")+1:]), ",") {
			if v, ok := strings.CutPrefix(field, "usec="); ok {
				us, err := strconv.ParseFloat(v, 64)
				if err != nil {
					b.Fatal(err)
				}
				total += us
			}
		}
	}
	return total
}

// BenchmarkMemory is the in-process reference.
func BenchmarkMemory(b *testing.B) {
	mem := backend.NewMemory()
	defer mem.Close()
	f, err := bloom.New(mem, "bench", benchCapacity, benchFP)
	if err != nil {
		b.Fatal(err)
	}
	items := benchItems(2 * benchCapacity)
	ctx := context.Background()
	for _, batch := range []int{100, 1000} {
		b.Run("Add/batch="+strconv.Itoa(batch), func(b *testing.B) {
			b.ReportAllocs()
			start := time.Now()
			for i := 0; b.Loop(); i++ {
				from := (i * batch) % (len(items) - batch)
				if _, err := f.Add(ctx, items[from:from+batch]...); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*batch)/time.Since(start).Seconds(), "items/s")
		})
		b.Run("Contains/batch="+strconv.Itoa(batch), func(b *testing.B) {
			b.ReportAllocs()
			start := time.Now()
			for i := 0; b.Loop(); i++ {
				from := (i * batch) % (len(items) - batch)
				if _, err := f.Contains(ctx, items[from:from+batch]...); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*batch)/time.Since(start).Seconds(), "items/s")
		})
	}
}

// naive is the rueidisprob command pattern described above, with the same
// cells as bloom (so both do the same Redis work per cell).
type naive struct {
	c            rueidis.Client
	bits, count  string
	m            uint64
	k            int
	addScript    string
	existsScript string
}

func newNaive(c rueidis.Client, tag string, info bloom.Info) *naive {
	return &naive{
		c: c, bits: tag + ":bits", count: tag + ":count", m: info.Cells, k: info.Hashes,
		// One command per cell, as rueidisprob's scripts do.
		addScript: `for i = 2, #ARGV do redis.call('SETBIT', KEYS[1], ARGV[i], 1) end
return redis.call('INCRBY', KEYS[2], ARGV[1])`,
		existsScript: `local r = {}
for i = 1, #ARGV do r[i] = redis.call('GETBIT', KEYS[1], ARGV[i]) end
return r`,
	}
}

func (n *naive) offsets(items []string) []string {
	out := make([]string, 0, len(items)*n.k)
	for _, it := range items {
		for _, p := range bloom.Positions(n.m, n.k, it) {
			out = append(out, strconv.FormatUint(uint64(p), 10))
		}
	}
	return out
}

func (n *naive) add(ctx context.Context, items []string) error {
	args := append([]string{strconv.Itoa(len(items))}, n.offsets(items)...)
	cmd := n.c.B().Eval().Script(n.addScript).Numkeys(2).Key(n.bits, n.count).Arg(args...).Build()
	return n.c.Do(ctx, cmd).Error()
}

func (n *naive) contains(ctx context.Context, items []string) ([]bool, error) {
	cmd := n.c.B().Eval().Script(n.existsScript).Numkeys(1).Key(n.bits).Arg(n.offsets(items)...).Build()
	bits, err := n.c.Do(ctx, cmd).AsIntSlice()
	if err != nil {
		return nil, err
	}
	out := make([]bool, len(items))
	for i := range out {
		out[i] = true
		for _, b := range bits[i*n.k : (i+1)*n.k] {
			if b == 0 {
				out[i] = false
			}
		}
	}
	return out, nil
}
