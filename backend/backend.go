// Package backend holds the state stores that floodgate's primitives run on.
//
// There are two: Memory, an in-process sharded store for a single process and
// for tests, and Redis, which runs every decision as one Lua script call on a
// Redis server (standalone, Sentinel or Cluster). Every primitive behaves the
// same on both; a shared conformance suite checks it on a fake clock.
//
// Applications construct a backend (NewMemory, NewRedis, or
// rueidisadapter.New) and pass it to the primitives (ratelimit, lock,
// counter, ...). Besides that, an application calls Close, Memory.Stats
// (for metrics) and, in tests on a fake clock, Memory.Sweep. The tables,
// scripts and keys the primitives run on are internal to floodgate.
package backend

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/floodgate-dev/floodgate/clock"
)

// Backend is a state store: *Memory or *Redis. It is sealed: no other type
// implements it, so primitives can rely on knowing every backend.
type Backend interface {
	// Clock returns the injected clock, or nil when time comes from the store
	// (Redis TIME) or from time.Now (Memory).
	Clock() clock.Clock
	sealed()
}

// MaxKeyLen is the longest user key, in bytes, that names its state as it
// is. ratelimit, counter, lockout and idempotency take a longer key and keep
// its state under a fixed-length digest of the whole key (see Keys in
// package ratelimit), so that a long key is limited, counted, locked out and
// deduplicated like any other. delayqueue's job IDs (MaxIDLen) and bloom's
// filter names are refused past it.
const MaxKeyLen = 1024

// ErrEmptyKey is returned for the empty user key, which every primitive
// refuses. ErrKeyTooLong is returned by CheckKey for a key longer than
// MaxKeyLen; the primitives take such keys (see MaxKeyLen).
var (
	ErrEmptyKey   = errors.New("floodgate: key is empty")
	ErrKeyTooLong = fmt.Errorf("floodgate: key is longer than %d bytes", MaxKeyLen)
)

// CheckKey validates a user key: it must be non-empty and at most MaxKeyLen bytes.
func CheckKey(key string) error {
	if key == "" {
		return ErrEmptyKey
	}
	if len(key) > MaxKeyLen {
		return fmt.Errorf("%w (got %d)", ErrKeyTooLong, len(key))
	}
	return nil
}

// Option configures a backend.
type Option func(*config)

type config struct {
	prefix     string
	clock      clock.Clock
	sweepEvery time.Duration
	shards     int
	maxBytes   int64 // < 0: unbounded
	noAutoPipe bool  // go-redis: plain calls, not the client's autopipeliner
	err        error
}

func newConfig(opts []Option) config {
	c := config{prefix: "fg", sweepEvery: time.Second, shards: 64, maxBytes: DefaultMaxBytes}
	for _, o := range opts {
		o(&c)
	}
	return c
}

// WithPrefix sets the prefix of every Redis key (default "fg"). Keys read
// "<prefix>:{<user key>}:<suffix>". The prefix must not contain '{' or '}'.
// Memory ignores it.
func WithPrefix(p string) Option {
	return func(c *config) {
		if strings.ContainsAny(p, "{}") {
			c.err = fmt.Errorf("backend: prefix must not contain '{' or '}', got %q", p)
			return
		}
		c.prefix = p
	}
}

// WithClock injects a clock. On Redis the scripts then receive "now" as an
// argument instead of calling TIME: use it in tests only, since clients with
// different clocks would disagree. On Memory the default is time.Now, and
// with any clock time never runs backwards for a key (see Memory).
func WithClock(c clock.Clock) Option { return func(cfg *config) { cfg.clock = c } }

// WithoutAutoPipeline makes a Redis backend over a go-redis client (NewRedis)
// send every script call on its own instead of through the client's
// autopipeliner, which NewRedis uses by default (see NewRedis). It has no
// effect on rueidis, which always pipelines, nor on Memory.
func WithoutAutoPipeline() Option { return func(c *config) { c.noAutoPipe = true } }

// WithSweepInterval sets how often Memory's janitor removes expired entries
// (default 1s; each pass visits every shard). It has no effect on Redis.
func WithSweepInterval(d time.Duration) Option {
	return func(c *config) {
		if d > 0 {
			c.sweepEvery = d
		}
	}
}

// WithShards sets the number of Memory shards, rounded up to a power of two
// (default 64). It has no effect on Redis.
func WithShards(n int) Option {
	return func(c *config) {
		if n > 0 {
			c.shards = n
		}
	}
}

// DefaultMaxBytes is Memory's bound on the estimated size of its state when
// WithMaxBytes is not given or is given 0: 128 MiB. The live heap tracks the
// estimate, and with Go's default GC settings (GOGC=100) a process's RSS is
// about twice its live heap: a rate limiter fed 1 to 5 million distinct keys
// at this bound measured 250 to 290 MB of RSS, whereas 256 MiB measured 564 MB.
// So a process that holds little else stays under 512 MB whatever the churn
// of keys.
const DefaultMaxBytes = 128 << 20

// WithMaxBytes bounds the estimated size of Memory's state to n bytes
// (default DefaultMaxBytes; 0 also means the default; n < 0 means unbounded).
// It has no effect on Redis (bound Redis with maxmemory).
//
// Every entry is estimated as a fixed overhead (128 bytes: the entry and its
// share of its map, as measured) + its key's length (rounded as the
// allocator rounds it) + the size of its value (measured by primitives whose
// values vary in size, 64 bytes for the others). When a shard of an
// evictable table (rate limit state) is changed while over its share of the
// bound, it evicts. Each eviction looks at a sample of the shard's entries,
// as Redis's allkeys-lru does: it forgets
// those that have expired first, which costs nothing, then the least recently
// used of them, which costs its state: that key starts afresh, so a client
// that was being limited gets a fresh budget early. That is the price of not
// letting a stream of new keys grow the process until it dies.
//
// Entries of other tables (locks, semaphores, leases of the concurrency
// limiter, delay queue jobs, idempotency results, Bloom filters, counters,
// lockout bans) are never evicted: they count towards n, so they leave less
// room to evictable tables, but they are only ever removed by their owner or
// when they expire. Evictable tables may always hold n/4, so that rate
// limiting keeps a working set: when non-evictable state passes 3n/4, the
// total exceeds n.
//
// Slack: evictable tables share what non-evictable state leaves of n, split
// evenly between their shards (WithShards), and each shard is back within its
// share after every change, so their total stays within it, with two
// exceptions. A change never evicts the entries it used, so a single entry
// larger than its shard's share (n/shards) stays until another key of its
// shard is used. And the room left by non-evictable state
// is re-read only by Sweep (every sweep interval) and Stats.
func WithMaxBytes(n int64) Option {
	return func(c *config) {
		switch {
		case n == 0:
			c.maxBytes = DefaultMaxBytes
		case n < 0:
			c.maxBytes = -1
		default:
			c.maxBytes = n
		}
	}
}
