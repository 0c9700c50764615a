// Package backend holds the state stores that floodgate's primitives run on.
//
// There are two: Memory, an in-process sharded store for a single process and
// for tests, and Redis, which runs every decision as one Lua script call on a
// Redis server (standalone, Sentinel or Cluster). Every primitive behaves the
// same on both; a shared conformance suite checks it on a fake clock.
//
// Primitives (ratelimit, lock, ...) use the lower-level methods of *Memory and
// *Redis directly; applications only construct a backend and pass it on.
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

// MaxKeyLen is the longest user key, in bytes, that primitives accept.
const MaxKeyLen = 1024

// ErrEmptyKey and ErrKeyTooLong are returned for invalid user keys.
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
	err        error
}

func newConfig(opts []Option) config {
	c := config{prefix: "fg", sweepEvery: time.Second, shards: 64}
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
// different clocks would disagree. On Memory the default is time.Now.
func WithClock(c clock.Clock) Option { return func(cfg *config) { cfg.clock = c } }

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

// Micros converts t to integer microseconds since the Unix epoch, the unit of
// time of every script and state record. The range covers years 1970 to 2255
// with exact integers in Lua's doubles (below 2^53).
func Micros(t time.Time) int64 { return t.UnixMicro() }
