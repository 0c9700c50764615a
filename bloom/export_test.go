package bloom

import "github.com/floodgate-dev/floodgate/backend"

// NewSharded is New with shards of shardBytes bytes (a power of two, at
// least 8) instead of ShardBytes, so that tests can split small filters
// across many keys.
func NewSharded(b backend.Backend, name string, capacity int64, fpRate float64, shardBytes int64) (*Filter, error) {
	return newFilter(b, name, capacity, fpRate, shardBytes)
}

// NewCountingSharded is NewCounting with shards of shardBytes bytes.
func NewCountingSharded(b backend.Backend, name string, capacity int64, fpRate float64, shardBytes int64) (*CountingFilter, error) {
	return newCounting(b, name, capacity, fpRate, shardBytes)
}

// Positions returns the k cells of item in a filter of m cells.
func Positions(m uint64, k int, item string) []uint32 {
	c := core{m: m, k: k}
	dst := make([]uint32, k)
	c.positions(dst, item)
	return dst
}

// ItemsPerCall reports how many items one script call carries.
func (f *Filter) ItemsPerCall() int { return f.c.itemsPerCall() }
