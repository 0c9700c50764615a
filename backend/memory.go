package backend

import (
	"runtime"

	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/internal/memstore"
)

// Memory is an in-process backend: state lives in sharded maps guarded by one
// mutex per shard, so decisions on different keys rarely contend. It is the
// embedded default of the decision server and the reference the Redis backend
// is tested against.
//
// Entries carry an expiry; a janitor goroutine removes expired entries every
// sweep interval (WithSweepInterval) so that idle keys do not accumulate.
// Correctness never depends on the janitor: primitives store their own
// timestamps and judge them against now. Close stops the janitor; a Memory
// that becomes unreachable stops it too.
//
// Time never runs backwards for a key. A decision reads the clock (Memory's
// own, or the one of WithClock) and, under the lock of the key's shard, takes
// that reading or, when it is earlier, the latest time a decision on the
// shard took: a call that read the clock before another call took the lock
// and committed decides as of that commit, as on Redis, whose scripts read
// TIME themselves one after another; and when an injected clock is set back,
// the keys' time stands still until the clock is past it again.
//
// The state is bounded (WithMaxBytes, default DefaultMaxBytes): Memory keeps
// an estimate of the bytes of every entry and, when the estimate is over the
// bound, evicts rate limit state: expired entries first, which costs nothing,
// then the least recently used (approximated by sampling), which costs their
// state: that key starts afresh, so a rate-limited client whose state is
// evicted gets a fresh budget. The state of every other primitive (locks,
// semaphores, concurrency leases, delay queues, idempotency, Bloom filters,
// counters, lockout) is never evicted. Stats reports the estimate and the
// evictions, for metrics.
//
// A Memory is safe for concurrent use.
type Memory struct {
	s *memstore.Store
}

// NewMemory returns an empty in-process backend. Options: WithClock,
// WithSweepInterval, WithShards, WithMaxBytes.
func NewMemory(opts ...Option) *Memory {
	cfg := newConfig(opts)
	s := memstore.New(cfg.clock, cfg.shards, cfg.maxBytes, cfg.sweepEvery)
	m := &Memory{s}
	runtime.AddCleanup(m, func(s *memstore.Store) { s.Close() }, s)
	return m
}

// Clock returns the injected clock, or nil when Memory keeps its own time
// (time.Now's reading at start plus the monotonic clock since).
func (m *Memory) Clock() clock.Clock { return m.s.Clock() }

func (*Memory) sealed() {}

// Close stops the janitor. The state stays usable; expired entries are then
// only replaced or evicted, not swept. Close is idempotent and returns nil.
func (m *Memory) Close() error {
	m.s.Close()
	return nil
}

// MemoryStats describes a Memory's state, for metrics. Sizes are estimates
// (see WithMaxBytes).
type MemoryStats struct {
	Entries     int64 // in every table, expired or not
	Bytes       int64 // estimated bytes of every entry, evictable or not
	PinnedBytes int64 // the part of Bytes in tables that are never evicted
	MaxBytes    int64 // the bound (WithMaxBytes); < 0 when unbounded

	// Cumulative counts of removed entries.
	Swept          uint64 // removed by Sweep (the janitor) after they expired, in any table
	EvictedExpired uint64 // evicted over the bound, already expired: forgetting them cost nothing
	EvictedLRU     uint64 // evicted over the bound while live, least recently used first: each key starts afresh
}

// Stats returns the current size of the state and the eviction counts. It
// locks every shard in turn, so it is meant for a metrics scrape, not for
// every request.
func (m *Memory) Stats() MemoryStats { return MemoryStats(m.s.Stats()) }

// Sweep removes every entry whose expiry has passed and returns how many it
// removed. The janitor calls it every sweep interval; a test that drives a
// Memory with a fake clock (WithClock) may call it to be deterministic.
func (m *Memory) Sweep() int { return m.s.Sweep() }
