package bloom_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/bloom"
)

// filter is what Filter and CountingFilter have in common, plus Remove for
// the counting one (nil for a Filter).
type filter struct {
	add, contains func(context.Context, ...string) ([]bool, error)
	remove        func(context.Context, ...string) error
	reset         func(context.Context) error
	info          bloom.Info
}

func asFilter(f *bloom.Filter) filter {
	return filter{add: f.Add, contains: f.Contains, reset: f.Reset, info: f.Info()}
}

func asCounting(f *bloom.CountingFilter) filter {
	return filter{add: f.Add, contains: f.Contains, remove: f.Remove, reset: f.Reset, info: f.Info()}
}

// maker builds a filter of one kind on a backend; shardBytes 0 means the
// default shard size.
type maker func(t testing.TB, b backend.Backend, name string, capacity int64, p float64, shardBytes int64) filter

func makeFilter(t testing.TB, b backend.Backend, name string, capacity int64, p float64, shardBytes int64) filter {
	t.Helper()
	if shardBytes == 0 {
		shardBytes = bloom.ShardBytes
	}
	f, err := bloom.NewSharded(b, name, capacity, p, shardBytes)
	if err != nil {
		t.Fatal(err)
	}
	return asFilter(f)
}

func makeCounting(t testing.TB, b backend.Backend, name string, capacity int64, p float64, shardBytes int64) filter {
	t.Helper()
	if shardBytes == 0 {
		shardBytes = bloom.ShardBytes
	}
	f, err := bloom.NewCountingSharded(b, name, capacity, p, shardBytes)
	if err != nil {
		t.Fatal(err)
	}
	return asCounting(f)
}

// op is one step of a table: call op with items and demand want (for add
// and contains).
type op struct {
	op    string // "add", "contains", "remove", "reset"
	items []string
	want  []bool
}

func items(s ...string) []string { return s }
func bools(b ...bool) []bool     { return b }

const T, F = true, false

// do runs one op and returns add's or contains' result (nil for the others).
func (f filter) do(ctx context.Context, o op) ([]bool, error) {
	switch o.op {
	case "add":
		return f.add(ctx, o.items...)
	case "contains":
		return f.contains(ctx, o.items...)
	case "remove":
		return nil, f.remove(ctx, o.items...)
	case "reset":
		return nil, f.reset(ctx)
	}
	return nil, fmt.Errorf("unknown op %q", o.op)
}

var conformanceTables = []struct {
	name  string
	make  maker
	steps []op
}{
	{"filter", makeFilter, []op{
		{"contains", items("a", "b"), bools(F, F)},
		{"add", items("a", "b", "a"), bools(T, T, F)},
		{"contains", items("a", "b", "c"), bools(T, T, F)},
		{"add", items("c", ""), bools(T, T)},
		{"contains", items(""), bools(T)},
		{"add", items("a", "b", "c", ""), bools(F, F, F, F)},
		{"add", nil, bools()},
		{"contains", nil, bools()},
		{"reset", nil, nil},
		{"contains", items("a", "b", "c", ""), bools(F, F, F, F)},
		{"add", items("a"), bools(T)},
	}},
	{"counting filter", makeCounting, []op{
		{"add", items("x", "x", "y"), bools(T, F, T)},
		{"contains", items("x", "y", "z"), bools(T, T, F)},
		{"remove", items("x"), nil},
		{"contains", items("x"), bools(T)}, // added twice, removed once
		{"remove", items("x"), nil},
		{"contains", items("x", "y"), bools(F, T)},
		{"remove", items("z", "x"), nil}, // never added / already removed: skipped
		{"contains", items("y"), bools(T)},
		{"add", items("x"), bools(T)},
		{"remove", items("y", "y"), nil}, // the second is skipped
		{"contains", items("x", "y"), bools(T, F)},
		{"remove", nil, nil},
		{"reset", nil, nil},
		{"contains", items("x"), bools(F)},
		{"add", items("x"), bools(T)},
	}},
}

// TestConformance runs hand-written step tables on every backend, with one
// shard and split across many tiny shards.
func TestConformance(t *testing.T) {
	ctx := context.Background()
	for _, bk := range allBackends() {
		t.Run(bk.name, func(t *testing.T) {
			t.Parallel()
			for _, tb := range conformanceTables {
				for _, shardBytes := range []int64{0, 8} {
					t.Run(fmt.Sprintf("%s/shardBytes=%d", tb.name, shardBytes), func(t *testing.T) {
						f := tb.make(t, bk.make(t), "conf", 1000, 0.01, shardBytes)
						if shardBytes == 8 && f.info.Shards < 10 {
							t.Fatalf("want a filter split over many shards, got %d", f.info.Shards)
						}
						for i, s := range tb.steps {
							got, err := f.do(ctx, s)
							if err != nil {
								t.Fatalf("step %d %s%q: %v", i+1, s.op, s.items, err)
							}
							if (s.op == "add" || s.op == "contains") && !slices.Equal(got, s.want) {
								t.Errorf("step %d %s%q: got %v, want %v", i+1, s.op, s.items, got, s.want)
							}
						}
					})
				}
			}
		})
	}
}

// stream is a reproducible random sequence of batched operations over a
// small universe of items, on a filter small enough to be overfull: false
// positives, shared counters and saturated counters all occur, so results
// depend on every cell.
func stream(seed uint64, counting bool, n int) []op {
	r := rand.New(rand.NewPCG(seed, 1))
	kinds, universe := []string{"add", "add", "contains"}, 300
	if counting {
		// Few items added often: counters saturate, and removals hit them.
		kinds, universe = []string{"add", "add", "add", "contains", "remove"}, 60
	}
	ops := make([]op, n)
	for i := range ops {
		o := op{op: kinds[r.IntN(len(kinds))]}
		for range 1 + r.IntN(30) {
			o.items = append(o.items, "item-"+strconv.Itoa(r.IntN(universe)))
		}
		ops[i] = o
	}
	return ops
}

// TestDifferential runs the same random stream on every backend, with the
// default shard size and split across tiny shards, and demands the results
// of Memory with one shard, call for call.
func TestDifferential(t *testing.T) {
	ctx := context.Background()
	for _, kind := range []struct {
		name     string
		make     maker
		counting bool
	}{{"filter", makeFilter, false}, {"counting", makeCounting, true}} {
		ops := stream(42, kind.counting, 150)
		run := func(t *testing.T, f filter) [][]bool {
			var out [][]bool
			for i, o := range ops {
				got, err := f.do(ctx, o)
				if err != nil {
					t.Fatalf("op %d %s: %v", i, o.op, err)
				}
				out = append(out, got)
			}
			return out
		}
		mem := backend.NewMemory()
		t.Cleanup(func() { mem.Close() })
		ref := run(t, kind.make(t, mem, "ref", 60, 0.1, 0))
		// The stream must exercise the interesting cases, or the comparison
		// proves little: some adds that are not new although first seen
		// (false positives) and, for counting, some contains false after a
		// true (removals).
		var trues, falses int
		for i, o := range ops {
			for _, b := range ref[i] {
				if o.op == "contains" && b {
					trues++
				} else if o.op == "contains" {
					falses++
				}
			}
		}
		if trues == 0 || falses == 0 {
			t.Fatalf("%s: degenerate stream: %d true and %d false contains", kind.name, trues, falses)
		}
		for _, bk := range allBackends() {
			for _, shardBytes := range []int64{0, 8} {
				t.Run(fmt.Sprintf("%s/%s/shardBytes=%d", kind.name, bk.name, shardBytes), func(t *testing.T) {
					t.Parallel()
					got := run(t, kind.make(t, bk.make(t), "diff", 60, 0.1, shardBytes))
					for i := range ops {
						if !slices.Equal(got[i], ref[i]) {
							t.Fatalf("op %d %s%q:\n got %v\nwant %v", i, ops[i].op, ops[i].items, got[i], ref[i])
						}
					}
				})
			}
		}
	}
}

// TestLargeBatch adds and queries batches larger than one script call
// carries (split into several calls, and within a call into several
// BITFIELD commands) and compares every backend with Memory.
func TestLargeBatch(t *testing.T) {
	ctx := context.Background()
	var ref struct{ add, again, contains []bool }
	for i, bk := range allBackends() {
		t.Run(bk.name, func(t *testing.T) {
			f, err := bloom.New(bk.make(t), "large", 20_000, 0.01)
			if err != nil {
				t.Fatal(err)
			}
			per := f.ItemsPerCall()
			if per != bloom.MaxCellsPerCall/7 {
				t.Fatalf("ItemsPerCall = %d, want %d", per, bloom.MaxCellsPerCall/7)
			}
			all := keys("big-", 0, 3*per+17)
			isNew, err := f.Add(ctx, all...)
			if err != nil {
				t.Fatal(err)
			}
			again, err := f.Add(ctx, all[len(all)-per-5:]...)
			if err != nil {
				t.Fatal(err)
			}
			if slices.Contains(again, true) {
				t.Error("re-added items reported new")
			}
			has, err := f.Contains(ctx, keys("big-", 0, len(all)+per)...)
			if err != nil {
				t.Fatal(err)
			}
			if len(isNew) != len(all) || len(has) != len(all)+per || slices.Contains(has[:len(all)], false) {
				t.Fatalf("lengths %d and %d, or a false negative", len(isNew), len(has))
			}
			if i == 0 {
				ref.add, ref.again, ref.contains = isNew, again, has
				return
			}
			if !slices.Equal(isNew, ref.add) || !slices.Equal(again, ref.again) || !slices.Equal(has, ref.contains) {
				t.Error("results differ from Memory's")
			}
		})
	}
}
