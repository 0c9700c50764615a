// Package localcache is the server's local over-limit cache
// (server.Options.LocalCacheBytes, envoyproxy/ratelimit's
// LOCAL_CACHE_SIZE_IN_BYTES): a descriptor the store denied is remembered in
// process until the store said its limit would admit it again (RetryAfter:
// the end of a fixed window; for the other algorithms the time until the
// denied cost fits), and a later request for the same state key with at
// least that cost is answered OVER_LIMIT without asking the store.
//
// It never admits: a miss asks the store as usual. It denies only what the
// store already denied for that span: every algorithm's state only gets
// further from admitting a cost by consumption, and closer only with time,
// which RetryAfter accounts for. The span is measured from before the store
// call, so it ends no later than the store's own. A cost smaller than the
// one denied is not answered from the cache (it may fit). Entries are keyed
// by the limit's generation (Generations, Key), which changes when a reload
// changes the limit (its algorithm or numbers): the entries of a changed
// limit are never read again and age out of the ring buffer. What the cache
// cannot see: a store that loses its state (flushed, or failed over to a
// replica that was behind) admits again before the cache's entries end, as
// in envoy.
//
// Which limits the cache applies to, and how a request's descriptors are
// answered from it, is the server's to decide.
package localcache

import (
	"encoding/binary"
	"fmt"
	"iter"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coocood/freecache"

	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/ratelimit"
	"github.com/floodgate-dev/floodgate/server/config"
)

// Cache is the local over-limit cache: a freecache ring buffer of at most its size in bytes
// (freecache's minimum is 512 KiB), on the backend's clock. Safe for
// concurrent use.
type Cache struct {
	c     *freecache.Cache
	clk   clock.Clock
	exact bool // clk is the store's clock

	// lookups and found count lookups of a cost and those that found a
	// denial that still holds (envoy's lookupCount and hitCount).
	lookups, found atomic.Int64

	mu   sync.Mutex
	gens map[string]limitGen // by limit path, across configurations
	next uint64
}

// limitGen is the generation of a limit: it changes when the limit does.
type limitGen struct {
	rule string
	gen  uint64
}

// valueSize is the size of an entry's value: until (Unix ns), the cost
// denied, what was remaining, and when the limit resets (Unix ns).
const valueSize = 32

// New returns a cache of size bytes on clk, the backend's injected clock
// (backend.Backend.Clock); nil when the store keeps its own time (Redis
// TIME, or Memory's time.Now), and then the cache reads the real time and
// counts each denial's span from a microsecond before its start.
func New(size int, clk clock.Clock) *Cache {
	exact := clk != nil
	if clk == nil {
		clk = clock.Real{}
	}
	return &Cache{
		c:     freecache.NewCacheCustomTimer(size, freecacheTimer{clk}),
		clk:   clk,
		exact: exact,
		gens:  map[string]limitGen{},
		next:  1,
	}
}

// Now is the time on the cache's clock: what Lookup's now and Remember's
// start are read from.
func (c *Cache) Now() time.Time { return c.clk.Now() }

// The counts envoystats.WatchLocalCache sends: freecache's, but for
// lookups, hits and misses, which count the cache's answers (a denial
// found, or not), as envoyproxy/ratelimit's freecache Get counts them.
func (c *Cache) EvacuateCount() int64     { return c.c.EvacuateCount() }
func (c *Cache) ExpiredCount() int64      { return c.c.ExpiredCount() }
func (c *Cache) EntryCount() int64        { return c.c.EntryCount() }
func (c *Cache) AverageAccessTime() int64 { return c.c.AverageAccessTime() }
func (c *Cache) OverwriteCount() int64    { return c.c.OverwriteCount() }
func (c *Cache) LookupCount() int64       { return c.lookups.Load() }
func (c *Cache) HitCount() int64          { return c.found.Load() }
func (c *Cache) MissCount() int64         { return c.lookups.Load() - c.found.Load() }

// freecacheTimer gives freecache the backend's clock (in whole seconds: its
// TTLs only bound how long an entry is kept; until, in the value, decides).
type freecacheTimer struct{ clk clock.Clock }

func (t freecacheTimer) Now() uint32 { return uint32(t.clk.Now().Unix()) }

// Generations gives every limit of a configuration its generation, for
// Key: the same as in the previous configurations while the limit's rule
// (algorithm and numbers) at its path is unchanged, a new one otherwise.
// A path absent from limits is forgotten: a limit that comes back there
// later gets a new generation.
func (c *Cache) Generations(limits iter.Seq[*config.Limit]) map[*config.Limit]uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[*config.Limit]uint64{}
	seen := map[string]bool{}
	for l := range limits {
		rule := fmt.Sprintf("%s %#v", l.Algorithm, l.Rule)
		g, ok := c.gens[l.Path]
		if !ok || g.rule != rule {
			g = limitGen{rule: rule, gen: c.next}
			c.next++
			c.gens[l.Path] = g
		}
		out[l] = g.gen
		seen[l.Path] = true
	}
	for p := range c.gens {
		if !seen[p] {
			delete(c.gens, p) // a limit that comes back gets a new generation
		}
	}
	return out
}

// Key appends to buf[:0] the cache key of a descriptor of limit l counted
// under stateKey, and returns it: the limit's generation in gens (as
// Generations returned them) or, for a limit not in gens (one the request
// carries: those share their state, not their limit), its numbers; then
// the state key.
func (c *Cache) Key(buf []byte, gens map[*config.Limit]uint64, l *config.Limit, stateKey string) []byte {
	buf = buf[:0]
	if g, ok := gens[l]; ok {
		buf = binary.BigEndian.AppendUint64(buf, g)
	} else {
		// An override: generation 0, then its limit, unit and multiplier.
		buf = binary.BigEndian.AppendUint64(buf, 0)
		buf = binary.BigEndian.AppendUint32(buf, l.RequestsPerUnit)
		buf = append(buf, byte(l.Unit))
		buf = binary.BigEndian.AppendUint32(buf, l.UnitMultiplier)
	}
	return append(buf, stateKey...)
}

// Lookup returns the result the store gave for key if it still denies a
// cost of n now: its Remaining, and RetryAfter and ResetAfter counted from
// now. A cost of 0 or less (a peek), or one smaller than the cost denied,
// is never found.
func (c *Cache) Lookup(key []byte, n int64, now time.Time) (ratelimit.Result, bool) {
	if n <= 0 {
		return ratelimit.Result{}, false // a peek is never denied
	}
	c.lookups.Add(1)
	var v [valueSize]byte
	val, err := c.c.GetWithBuf(key, v[:])
	if err != nil || len(val) != valueSize {
		return ratelimit.Result{}, false
	}
	until := int64(binary.BigEndian.Uint64(val[0:]))
	cost := int64(binary.BigEndian.Uint64(val[8:]))
	rem := int64(binary.BigEndian.Uint64(val[16:]))
	reset := int64(binary.BigEndian.Uint64(val[24:]))
	left := time.Duration(until - now.UnixNano())
	if left <= 0 {
		c.c.Del(key)
		return ratelimit.Result{}, false
	}
	if n < cost {
		return ratelimit.Result{}, false
	}
	c.found.Add(1)
	return ratelimit.Result{
		Remaining:  rem,
		RetryAfter: left,
		ResetAfter: max(time.Duration(reset-now.UnixNano()), left),
	}, true
}

// Remember keeps r, the store's denial of a cost of n under key, asked at
// start, until start + r.RetryAfter. An admission (RetryAfter 0), a cost of
// 0 or less, or an entry too large for the cache is not kept.
func (c *Cache) Remember(key []byte, n int64, r ratelimit.Result, start time.Time) {
	if n <= 0 || r.RetryAfter <= 0 {
		return // admitted, or never admissible (kept out: rare, and no end)
	}
	var v [valueSize]byte
	// The store reads its time in whole microseconds: an injected clock's,
	// truncated, which start is then too; or its own (Redis TIME, or
	// time.Now after start), whose lost fraction is under a microsecond.
	if c.exact {
		start = start.Truncate(time.Microsecond)
	} else {
		start = start.Add(-time.Microsecond)
	}
	until := start.Add(r.RetryAfter)
	binary.BigEndian.PutUint64(v[0:], uint64(until.UnixNano()))
	binary.BigEndian.PutUint64(v[8:], uint64(n))
	binary.BigEndian.PutUint64(v[16:], uint64(max(r.Remaining, 0)))
	binary.BigEndian.PutUint64(v[24:], uint64(start.Add(r.ResetAfter).UnixNano()))
	// freecache's TTL, in whole seconds of the same clock, only bounds how
	// long the entry is kept; it outlives until by less than two seconds.
	ttl := int((r.RetryAfter+time.Second-1)/time.Second) + 1
	_ = c.c.Set(key, v[:], ttl) // an entry too large is not kept: a miss
}
