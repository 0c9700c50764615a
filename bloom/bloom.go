// Package bloom provides Bloom filters on a Memory or Redis backend: a bitmap
// filter (Filter) that answers "possibly added" or "certainly not added", and
// a counting variant (CountingFilter) with small counters instead of bits that
// also supports Remove.
//
// A filter is sized from the number of items it should hold (capacity, n) and
// the false-positive rate wanted at that load (fpRate, p) by the standard
// formulas
//
//	m = ceil(-n·ln p / (ln 2)²)   cells (bits, or 4-bit counters)
//	k = round(m/n · ln 2)         hash functions, at least 1
//
// which Info reports. Each item's k cells come from one 64-bit xxHash of the
// item by enhanced double hashing (g_i = h1 + i·h2 + (i³-i)/6 mod m: the
// Kirsch–Mitzenmacher scheme plus a cubic term that keeps small filters with
// many hashes at their configured rate), computed in Go: Redis never hashes,
// it only receives cell offsets. The cells are a pure function of the item
// and m, identical in every process and every release, so any number of
// processes can share a filter by name.
//
// On Redis (6.2 or later: BITFIELD_RO) a batch of up to MaxCellsPerCall/k
// items is one atomic script call (EVALSHA) and one round trip; larger batches
// take several calls. A filter lives in Redis strings of at most ShardBytes
// (16 MiB) each, written with BITFIELD and read with GETBIT or BITFIELD_RO;
// a larger filter is split across several keys "<prefix>:{<name>}:b0",
// "…:b1", … (counting filters: "…:c0", …) that share the hash tag {name}, so
// that every call stays on one Redis Cluster slot. Keys have no TTL: a filter lives until Reset. Redis
// allocates each key up to the highest cell written, so a filter takes its
// full size (Info.Bytes) soon after its first items are added.
//
// On Memory a filter is a bitset (or packed counter array) per name in the
// backend's "bloom" table, with the same semantics, call for call.
//
// Filters with the same name and kind on the same store share their cells:
// they must be created with the same capacity and fpRate (as every process
// sharing a filter must). A Filter and a CountingFilter of the same name are
// separate.
package bloom

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/internal/unwrap"
)

const (
	// MaxCells is the most cells (bits of a Filter, counters of a
	// CountingFilter) one filter may have: 2^32, so that a cell number fits in
	// 32 bits. A Filter of MaxCells bits takes 512 MiB in 32 keys, a
	// CountingFilter 2 GiB in 128 keys; both hold about 448 million items at
	// fpRate 0.01.
	MaxCells = 1 << 32

	// MaxHashes is the largest k a filter may use. It bounds fpRate from
	// below: k = 64 is reached near fpRate = 2^-64 (5e-20).
	MaxHashes = 64

	// ShardBytes is the size of the Redis strings a filter is stored in:
	// 16 MiB, that is 2^27 bits of a Filter or 2^25 counters of a
	// CountingFilter per key. Larger filters use several keys. Small strings
	// keep a key's allocation, replication and migration (Cluster resharding
	// moves whole keys) bounded.
	ShardBytes = 1 << 24

	// MaxCellsPerCall is the most cells one script call reads or writes. A
	// batch of more than MaxCellsPerCall/k items is split into several calls,
	// each atomic on its own, so that no call blocks Redis for long: a cell
	// costs Redis about 0.35 µs of script time (measured on Redis 7.0 on a
	// shared 2-core virtual machine), so a full call takes about 3 ms.
	MaxCellsPerCall = 1 << 13
)

// errUninit is returned by the methods of a zero Filter or CountingFilter.
var errUninit = errors.New("bloom: filter was not created by New or NewCounting")

// Info describes a filter's geometry. All of it is fixed at construction.
type Info struct {
	Name     string
	Capacity int64   // n: the number of distinct items the filter is sized for
	FPRate   float64 // p: the configured false-positive rate at capacity
	Cells    uint64  // m: bits of a Filter, counters of a CountingFilter
	Hashes   int     // k: cells per item
	// CellBits is 1 for a Filter and 4 for a CountingFilter.
	CellBits int
	// Bytes is the storage the cells take: ceil(Cells·CellBits/8).
	Bytes int64
	// Shards is the number of Redis keys (strings of at most ShardBytes bytes)
	// the filter is split across; Memory splits the same way.
	Shards int
	// ExpectedFPRate is the false-positive rate the sized filter has once it
	// holds Capacity items, (1 - e^(-k·n/m))^k; at most FPRate, up to rounding
	// of k.
	ExpectedFPRate float64
}

// geometry computes m and k for capacity n and rate p, and validates them.
func geometry(capacity int64, fpRate float64) (m uint64, k int, err error) {
	if capacity <= 0 {
		return 0, 0, fmt.Errorf("bloom: capacity must be > 0, got %d", capacity)
	}
	if !(fpRate > 0 && fpRate < 1) { // also rejects NaN
		return 0, 0, fmt.Errorf("bloom: fpRate must be in (0, 1), got %v", fpRate)
	}
	n := float64(capacity)
	mf := math.Ceil(-n * math.Log(fpRate) / (math.Ln2 * math.Ln2))
	if mf > MaxCells {
		return 0, 0, fmt.Errorf("bloom: capacity %d at fpRate %v needs %.0f cells, more than MaxCells (%d)", capacity, fpRate, mf, uint64(MaxCells))
	}
	m = uint64(mf)
	k = int(math.Round(mf / n * math.Ln2))
	if k < 1 {
		k = 1
	}
	if k > MaxHashes {
		return 0, 0, fmt.Errorf("bloom: fpRate %v needs %d hash functions, more than MaxHashes (%d)", fpRate, k, MaxHashes)
	}
	return m, k, nil
}

func checkName(name string) error {
	if name == "" {
		return errors.New("bloom: name must not be empty")
	}
	if len(name) > backend.MaxKeyLen {
		return fmt.Errorf("bloom: name must be at most %d bytes, got %d", backend.MaxKeyLen, len(name))
	}
	return nil
}

// core is what Filter and CountingFilter share: the geometry and the store.
// It is immutable after construction, so safe for concurrent use.
type core struct {
	info     Info
	m        uint64
	k        int
	shardLog uint // log2 of the cells per shard
	st       store
}

// store keeps a filter's cells. pos holds k cells per item, item by item;
// every method treats the items in order, as if one at a time.
type store interface {
	// add sets (Filter) or increments (CountingFilter, saturating at 15) the
	// cells and reports per item whether any of its cells was zero before.
	add(ctx context.Context, pos []uint32) ([]bool, error)
	// contains reports per item whether all of its cells are non-zero.
	contains(ctx context.Context, pos []uint32) ([]bool, error)
	// remove decrements, per item whose cells are all non-zero, every cell
	// below 15; items with a zero cell are skipped. Counting only.
	remove(ctx context.Context, pos []uint32) error
	reset(ctx context.Context) error
}

// geo is what a store needs to know of a filter's geometry.
type geo struct {
	m        uint64 // cells
	k        int    // cells per item
	kind     kind
	shardLog uint // log2 of the cells per shard
	nshards  int
}

// shard returns the shard of cell p and the cell's index within it.
func (g *geo) shard(p uint32) (int, uint32) {
	return int(p >> g.shardLog), p & (1<<g.shardLog - 1)
}

// kind is a filter's cell layout.
type kind struct {
	width  uint   // bits per cell: 1 or 4
	suffix string // Redis key suffix before the shard number; Memory key prefix
}

var (
	bitmap   = kind{width: 1, suffix: "b"}
	counting = kind{width: 4, suffix: "c"}
)

// newCore validates the arguments and builds the store. shardBytes is
// ShardBytes except in tests, which use tiny shards to exercise splitting;
// it must be a power of two of at least 8.
func newCore(b backend.Backend, name string, capacity int64, fpRate float64, kd kind, shardBytes int64) (*core, error) {
	if b == nil {
		return nil, errors.New("bloom: backend is nil")
	}
	if err := checkName(name); err != nil {
		return nil, err
	}
	m, k, err := geometry(capacity, fpRate)
	if err != nil {
		return nil, err
	}
	shardCells := uint64(shardBytes) * 8 / uint64(kd.width)
	var shardLog uint
	for uint64(1)<<shardLog < shardCells {
		shardLog++
	}
	nshards := int((m + shardCells - 1) / shardCells)
	c := &core{m: m, k: k, shardLog: shardLog}
	c.info = Info{
		Name:           name,
		Capacity:       capacity,
		FPRate:         fpRate,
		Cells:          m,
		Hashes:         k,
		CellBits:       int(kd.width),
		Bytes:          int64((m*uint64(kd.width) + 7) / 8),
		Shards:         nshards,
		ExpectedFPRate: math.Pow(1-math.Exp(-float64(k)*float64(capacity)/float64(m)), float64(k)),
	}
	g := geo{m: m, k: k, kind: kd, shardLog: shardLog, nshards: nshards}
	switch b := b.(type) {
	case *backend.Memory:
		c.st = newMemStore(unwrap.Memory(b), name, g)
	case *backend.Redis:
		c.st = newRedisStore(unwrap.Redis(b), name, g)
	default:
		return nil, fmt.Errorf("bloom: unsupported backend %T", b)
	}
	return c, nil
}

// itemsPerCall is the largest number of items whose cells fit one call.
func (c *core) itemsPerCall() int { return max(1, MaxCellsPerCall/c.k) }

// each runs f on the cell positions of items, itemsPerCall items at a time.
func (c *core) each(ctx context.Context, items []string, f func(ctx context.Context, pos []uint32) error) error {
	if c == nil || c.st == nil {
		return errUninit
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	per := c.itemsPerCall()
	pos := make([]uint32, min(len(items), per)*c.k)
	for start := 0; start < len(items); start += per {
		batch := items[start:min(start+per, len(items))]
		p := pos[:len(batch)*c.k]
		for i, it := range batch {
			c.positions(p[i*c.k:(i+1)*c.k], it)
		}
		if err := f(ctx, p); err != nil {
			return err
		}
	}
	return nil
}

func (c *core) add(ctx context.Context, items []string) ([]bool, error) {
	out := make([]bool, 0, len(items))
	err := c.each(ctx, items, func(ctx context.Context, pos []uint32) error {
		r, err := c.st.add(ctx, pos)
		out = append(out, r...)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (c *core) contains(ctx context.Context, items []string) ([]bool, error) {
	out := make([]bool, 0, len(items))
	err := c.each(ctx, items, func(ctx context.Context, pos []uint32) error {
		r, err := c.st.contains(ctx, pos)
		out = append(out, r...)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (c *core) reset(ctx context.Context) error {
	if c == nil || c.st == nil {
		return errUninit
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return c.st.reset(ctx)
}

// Filter is a Bloom filter on a bitmap: Add sets an item's k bits, Contains
// reports whether all k are set. Contains never answers false for an added
// item (no false negatives); it answers true for an item never added with a
// probability that grows with the number of distinct items added, about
// Info().FPRate at capacity and more beyond. Items cannot be removed: use
// CountingFilter for that.
//
// Most callers want Add (to record items and learn which were new) and
// Contains. A Filter is safe for concurrent use, across goroutines and
// processes sharing the backend. The zero value is not usable: its methods
// return an error; create filters with New.
type Filter struct {
	c *core
}

// New returns the Bloom filter name on b, sized to hold capacity distinct
// items with a false-positive rate of fpRate. It touches no state: a filter
// that does not exist yet is empty.
//
// Errors name the bad argument: a nil or unsupported backend, an empty name
// or one longer than backend.MaxKeyLen, capacity <= 0, fpRate outside (0, 1)
// (or NaN), a size above MaxCells, or more than MaxHashes hash functions.
func New(b backend.Backend, name string, capacity int64, fpRate float64) (*Filter, error) {
	return newFilter(b, name, capacity, fpRate, ShardBytes)
}

func newFilter(b backend.Backend, name string, capacity int64, fpRate float64, shardBytes int64) (*Filter, error) {
	c, err := newCore(b, name, capacity, fpRate, bitmap, shardBytes)
	if err != nil {
		return nil, err
	}
	return &Filter{c: c}, nil
}

// Add adds items and reports, per item in order, whether it was new: true when
// at least one of its bits was unset before, so it had certainly not been
// added; false when all were set (it was added before, or is a false
// positive). Items are treated one after the other, so an item repeated
// within one call is new at most once. The empty string is an item like any
// other.
//
// On Redis, up to MaxCellsPerCall/k items are one atomic script call; a larger
// batch is several calls, and an error may leave the earlier ones applied.
// Add with no items returns an empty slice and does nothing. Errors come from
// the backend or ctx; on error the result is nil.
func (f *Filter) Add(ctx context.Context, items ...string) ([]bool, error) {
	if f == nil {
		return nil, errUninit
	}
	return f.c.add(ctx, items)
}

// Contains reports, per item in order, whether the item may have been added:
// false means it certainly was not; true means it was, or is a false
// positive. It changes nothing. Batching and errors are as for Add. An item's
// test stops at its first unset bit, so absent items are cheaper than
// present ones (about 2 reads instead of k in a filter at capacity).
func (f *Filter) Contains(ctx context.Context, items ...string) ([]bool, error) {
	if f == nil {
		return nil, errUninit
	}
	return f.c.contains(ctx, items)
}

// Reset empties the filter: on Redis it deletes the filter's keys, on Memory
// its bitset. Other Filter values with the same name see it empty too.
func (f *Filter) Reset(ctx context.Context) error {
	if f == nil {
		return errUninit
	}
	return f.c.reset(ctx)
}

// Info returns the filter's geometry: m, k, capacity, fpRate and shards.
func (f *Filter) Info() Info {
	if f == nil || f.c == nil {
		return Info{}
	}
	return f.c.info
}
