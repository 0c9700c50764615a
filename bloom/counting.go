package bloom

import (
	"context"

	"github.com/floodgate-dev/floodgate/backend"
)

// CountingFilter is a Bloom filter whose cells are 4-bit counters instead of
// bits, so that items can be removed: Add increments an item's k counters,
// Remove decrements them, Contains reports whether all k are non-zero. It has
// the false-positive rate of a Filter of the same size and takes four times
// the memory.
//
// Counters saturate at 15 and never wrap. A saturated counter is never
// decremented again (its true count is unknown), so Remove can never clear a
// cell that another item still needs; the cell just stays set. With the
// optimal k, a counter reaches 16 with probability about 1.37e-15 per cell
// (Fan et al., "Summary Cache", 2000), which is why four bits suffice and
// eight would only double the memory.
//
// Remove only items that were added. Remove skips an item any of whose
// counters is zero (it was certainly not added, or was already removed), so
// counters are never decremented below zero. But an item that was never added
// and is a false positive (all its counters are non-zero because of other
// items) is "removed": its counters, shared with other items, are decremented,
// and those items may then be reported absent — a false negative. Removing an
// item twice after adding it once is the same mistake.
//
// A CountingFilter is safe for concurrent use, across goroutines and
// processes sharing the backend. The zero value is not usable: its methods
// return an error; create filters with NewCounting.
type CountingFilter struct {
	c *core
}

// NewCounting returns the counting Bloom filter name on b, sized to hold
// capacity distinct items with a false-positive rate of fpRate. Sizing and
// errors are those of New; the cells are counters (Info().CellBits is 4). A
// CountingFilter does not share state with a Filter of the same name.
func NewCounting(b backend.Backend, name string, capacity int64, fpRate float64) (*CountingFilter, error) {
	return newCounting(b, name, capacity, fpRate, ShardBytes)
}

func newCounting(b backend.Backend, name string, capacity int64, fpRate float64, shardBytes int64) (*CountingFilter, error) {
	c, err := newCore(b, name, capacity, fpRate, counting, shardBytes)
	if err != nil {
		return nil, err
	}
	return &CountingFilter{c: c}, nil
}

// Add adds items and reports, per item in order, whether it was new: true when
// at least one of its counters was zero before. Adding an item twice counts it
// twice (it must then be removed twice). Batching, atomicity and errors are as
// for Filter.Add.
func (f *CountingFilter) Add(ctx context.Context, items ...string) ([]bool, error) {
	if f == nil {
		return nil, errUninit
	}
	return f.c.add(ctx, items)
}

// Contains reports, per item in order, whether the item may be in the filter:
// false means it certainly is not (never added, or removed as often as added,
// barring the misuse of Remove described on CountingFilter); true means it
// is, or is a false positive. It changes nothing.
func (f *CountingFilter) Contains(ctx context.Context, items ...string) ([]bool, error) {
	if f == nil {
		return nil, errUninit
	}
	return f.c.contains(ctx, items)
}

// Remove removes items, one after the other. For each item whose counters are
// all non-zero (Contains would report true), it decrements every counter of
// the item that is below 15; an item with a zero counter is skipped and
// changes nothing. See CountingFilter for what removing an item that was never
// added does to other items. Batching, atomicity and errors are as for
// Filter.Add.
func (f *CountingFilter) Remove(ctx context.Context, items ...string) error {
	if f == nil || f.c == nil {
		return errUninit
	}
	return f.c.each(ctx, items, f.c.st.remove)
}

// Reset empties the filter: on Redis it deletes the filter's keys, on Memory
// its counters.
func (f *CountingFilter) Reset(ctx context.Context) error {
	if f == nil {
		return errUninit
	}
	return f.c.reset(ctx)
}

// Info returns the filter's geometry: m (counters), k, capacity, fpRate and
// shards.
func (f *CountingFilter) Info() Info {
	if f == nil || f.c == nil {
		return Info{}
	}
	return f.c.info
}
