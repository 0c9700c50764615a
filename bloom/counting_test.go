package bloom_test

import (
	"context"
	"slices"
	"strconv"
	"testing"

	"github.com/floodgate-dev/floodgate/bloom"
)

// TestRemove adds a small set to a large counting filter (so that no two of
// its items share a counter), removes half, and checks that exactly the
// removed ones are gone.
func TestRemove(t *testing.T) {
	ctx := context.Background()
	all := keys("order-", 0, 40)
	gone, kept := all[:20], all[20:]
	for _, bk := range allBackends() {
		t.Run(bk.name, func(t *testing.T) {
			t.Parallel()
			for _, shardBytes := range []int64{0, 64} {
				f := makeCounting(t, bk.make(t), "rm", 10_000, 0.001, shardBytes)
				isNew, err := f.add(ctx, all...)
				if err != nil {
					t.Fatal(err)
				}
				if slices.Contains(isNew, false) {
					t.Fatalf("fresh items reported not new: %v", isNew)
				}
				if err := f.remove(ctx, gone...); err != nil {
					t.Fatal(err)
				}
				got, err := f.contains(ctx, all...)
				if err != nil {
					t.Fatal(err)
				}
				for i, it := range all {
					if want := i >= len(gone); got[i] != want {
						t.Errorf("shardBytes=%d: Contains(%q) = %v after removing %v, want %v", shardBytes, it, got[i], gone, want)
					}
				}
				// Removed items are new again; kept ones are not.
				isNew, err = f.add(ctx, append(slices.Clone(gone[:3]), kept[:3]...)...)
				if err != nil {
					t.Fatal(err)
				}
				if want := []bool{T, T, T, F, F, F}; !slices.Equal(isNew, want) {
					t.Errorf("shardBytes=%d: re-adding 3 removed and 3 kept items: new = %v, want %v", shardBytes, isNew, want)
				}
			}
		})
	}
}

// sharing finds an item, not in exclude, whose cells in a filter of m cells
// and k hashes are related to those of item as want says.
func sharing(t *testing.T, m uint64, k int, item string, want func(mine, other []uint32) bool) string {
	t.Helper()
	mine := bloom.Positions(m, k, item)
	for i := range 1_000_000 {
		c := "other-" + strconv.Itoa(i)
		if want(mine, bloom.Positions(m, k, c)) {
			return c
		}
	}
	t.Fatal("no item found")
	return ""
}

func overlap(a, b []uint32) int {
	n := 0
	for _, x := range b {
		if slices.Contains(a, x) {
			n++
		}
	}
	return n
}

// TestRemoveNeverAdded checks what CountingFilter documents about removing
// items that were never added.
func TestRemoveNeverAdded(t *testing.T) {
	ctx := context.Background()
	for _, bk := range allBackends() {
		t.Run(bk.name, func(t *testing.T) {
			t.Parallel()
			b := bk.make(t)

			// An item with a zero counter is skipped: it must not decrement
			// the counters it shares with an added item.
			f := makeCounting(t, b, "skip", 100, 0.01, 0)
			m, k := f.info.Cells, f.info.Hashes
			stranger := sharing(t, m, k, "alice", func(mine, other []uint32) bool {
				return overlap(mine, other) > 0 && overlap(mine, other) < k
			})
			if _, err := f.add(ctx, "alice"); err != nil {
				t.Fatal(err)
			}
			if got, _ := f.contains(ctx, stranger); got[0] {
				t.Fatalf("%q shares only some cells with alice; it must be absent", stranger)
			}
			if err := f.remove(ctx, stranger, stranger); err != nil {
				t.Fatal(err)
			}
			if got, _ := f.contains(ctx, "alice"); !got[0] {
				t.Error("removing a never-added item with a zero counter removed alice")
			}

			// A never-added item that is a false positive is removed anyway,
			// taking down the item whose counters it shares: a false negative.
			g := makeCounting(t, b, "fp", 100, 0.01, 0)
			twin := sharing(t, m, k, "bob", func(mine, other []uint32) bool {
				return overlap(mine, other) > 0 && overlap(mine, other) < k
			})
			// Make twin a false positive: add bob and, for each of twin's
			// cells that bob lacks, an item covering it that shares no cell
			// with bob.
			if _, err := g.add(ctx, "bob"); err != nil {
				t.Fatal(err)
			}
			bobCells := bloom.Positions(m, k, "bob")
			for _, c := range bloom.Positions(m, k, twin) {
				if slices.Contains(bobCells, c) {
					continue
				}
				filler := sharing(t, m, k, twin, func(_, other []uint32) bool {
					return slices.Contains(other, c) && overlap(bobCells, other) == 0
				})
				if _, err := g.add(ctx, filler); err != nil {
					t.Fatal(err)
				}
			}
			if got, _ := g.contains(ctx, twin, "bob"); !got[0] || !got[1] {
				t.Fatalf("setup: want twin a false positive and bob present, got %v", got)
			}
			if err := g.remove(ctx, twin); err != nil {
				t.Fatal(err)
			}
			if got, _ := g.contains(ctx, twin, "bob"); got[0] || got[1] {
				t.Errorf("removing the false positive twin: Contains(twin, bob) = %v, want [false false] (bob's shared counters went to zero, as documented)", got)
			}
		})
	}
}

// TestSaturation checks that counters stop at 15 without wrapping, and that
// a saturated counter is never decremented. With fpRate 0.5 a filter has
// k = 1, so an item is a single counter.
func TestSaturation(t *testing.T) {
	ctx := context.Background()
	for _, bk := range allBackends() {
		t.Run(bk.name, func(t *testing.T) {
			t.Parallel()
			f := makeCounting(t, bk.make(t), "sat", 100, 0.5, 0)
			if f.info.Hashes != 1 {
				t.Fatalf("k = %d, want 1", f.info.Hashes)
			}
			for i := range 20 {
				isNew, err := f.add(ctx, "x")
				if err != nil {
					t.Fatal(err)
				}
				if isNew[0] != (i == 0) {
					t.Fatalf("add %d: new = %v (a counter that wrapped to 0 would make it new again)", i+1, isNew[0])
				}
				if got, _ := f.contains(ctx, "x"); !got[0] {
					t.Fatalf("after %d adds, x is absent: the counter wrapped", i+1)
				}
			}
			for i := range 20 {
				if err := f.remove(ctx, "x"); err != nil {
					t.Fatal(err)
				}
				if got, _ := f.contains(ctx, "x"); !got[0] {
					t.Fatalf("x absent after %d removals of 20 adds: a saturated counter was decremented", i+1)
				}
			}

			// Below saturation, counting is exact.
			for range 14 {
				if _, err := f.add(ctx, "y"); err != nil {
					t.Fatal(err)
				}
			}
			for i := range 14 {
				if got, _ := f.contains(ctx, "y"); !got[0] {
					t.Fatalf("y absent after %d of 14 removals", i)
				}
				if err := f.remove(ctx, "y"); err != nil {
					t.Fatal(err)
				}
			}
			if got, _ := f.contains(ctx, "y"); got[0] {
				t.Error("y present after 14 adds and 14 removals")
			}
		})
	}
}
