package server

import (
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coocood/freecache"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/ratelimit"
	"github.com/floodgate-dev/floodgate/server/config"
)

// The local over-limit cache (Options.LocalCacheBytes, envoyproxy/ratelimit's
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
// by the limit's generation, which changes when a reload changes the limit
// (its algorithm or numbers): the entries of a changed limit are never read
// again and age out of the ring buffer. What the cache cannot see: a store
// that loses its state (flushed, or failed over to a replica that was
// behind) admits again before the cache's entries end, as in envoy.

// localCache is the cache: a freecache ring buffer of at most its size in
// bytes (freecache's minimum is 512 KiB), on the backend's clock.
type localCache struct {
	c     *freecache.Cache
	clk   clock.Clock
	exact bool               // clk is the store's clock
	hits  prometheus.Counter // nil without metrics

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

// localValueSize is the size of an entry's value: until (Unix ns), the cost
// denied, what was remaining, and when the limit resets (Unix ns).
const localValueSize = 32

func newLocalCache(size int, clk clock.Clock) *localCache {
	exact := clk != nil
	if clk == nil {
		clk = clock.Real{}
	}
	return &localCache{
		c:     freecache.NewCacheCustomTimer(size, freecacheTimer{clk}),
		clk:   clk,
		exact: exact,
		gens:  map[string]limitGen{},
		next:  1,
	}
}

// The counts envoystats.WatchLocalCache sends: freecache's, but for
// lookups, hits and misses, which count the cache's answers (a denial
// found, or not), as envoyproxy/ratelimit's freecache Get counts them.
func (c *localCache) EvacuateCount() int64     { return c.c.EvacuateCount() }
func (c *localCache) ExpiredCount() int64      { return c.c.ExpiredCount() }
func (c *localCache) EntryCount() int64        { return c.c.EntryCount() }
func (c *localCache) AverageAccessTime() int64 { return c.c.AverageAccessTime() }
func (c *localCache) OverwriteCount() int64    { return c.c.OverwriteCount() }
func (c *localCache) LookupCount() int64       { return c.lookups.Load() }
func (c *localCache) HitCount() int64          { return c.found.Load() }
func (c *localCache) MissCount() int64         { return c.lookups.Load() - c.found.Load() }

// freecacheTimer gives freecache the backend's clock (in whole seconds: its
// TTLs only bound how long an entry is kept; until, in the value, decides).
type freecacheTimer struct{ clk clock.Clock }

func (t freecacheTimer) Now() uint32 { return uint32(t.clk.Now().Unix()) }

// generations gives every limit of rs its generation: the same as in the
// previous configurations while the limit's rule (algorithm and numbers) at
// its path is unchanged, a new one otherwise.
func (c *localCache) generations(rs *ruleset) map[*config.Limit]uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[*config.Limit]uint64, len(rs.limiters))
	seen := make(map[string]bool, len(rs.limiters))
	for l := range rs.limiters {
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

// key is the cache key of a descriptor of limit l counted under stateKey:
// the limit's generation (or, for a limit the request carries, its numbers:
// those share their state, not their limit), then the state key.
func (c *localCache) key(buf []byte, rs *ruleset, l *config.Limit, stateKey string) []byte {
	buf = buf[:0]
	if g, ok := rs.localGens[l]; ok {
		buf = binary.BigEndian.AppendUint64(buf, g)
	} else {
		// An override: generation 0, then its limit and unit.
		buf = binary.BigEndian.AppendUint64(buf, 0)
		buf = binary.BigEndian.AppendUint32(buf, l.RequestsPerUnit)
		buf = append(buf, byte(l.Unit))
	}
	return append(buf, stateKey...)
}

// lookup returns the result the store gave for key if it still denies a
// cost of n now.
func (c *localCache) lookup(key []byte, n int64, now time.Time) (ratelimit.Result, bool) {
	if n <= 0 {
		return ratelimit.Result{}, false // a peek is never denied
	}
	c.lookups.Add(1)
	var v [localValueSize]byte
	val, err := c.c.GetWithBuf(key, v[:])
	if err != nil || len(val) != localValueSize {
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

// remember keeps r, the store's denial of a cost of n under key, asked at
// start, until start + r.RetryAfter.
func (c *localCache) remember(key []byte, n int64, r ratelimit.Result, start time.Time) {
	if n <= 0 || r.RetryAfter <= 0 {
		return // admitted, or never admissible (kept out: rare, and no end)
	}
	var v [localValueSize]byte
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

// localCheck looks the requests of b up in the cache, at now: b.hits marks
// those it found over their limits (their results filled from it), and
// b.fromCache those it answers, for which the store is not asked. Decided
// in one step, the requests are answered from it all or none: a request
// over a limit consumes nothing from the others, so the store is asked for
// all of them, and decides as it did (the cached one is still over).
// Decided each apart (policy.each), every hit is answered from it. Every
// request is looked up either way, as envoy looks every descriptor up.
func (s *Service) localCheck(d *deciding, b *batch, now time.Time) {
	c := s.local
	if c == nil {
		return
	}
	n, missed := 0, false
	var hits []bool
	var buf [256]byte
	for j, q := range b.reqs {
		l := d.limits[b.idx[j]]
		r, ok := ratelimit.Result{}, false
		if s.localApplies(l) {
			r, ok = c.lookup(c.key(buf[:0], d.rs, l, q.Key), q.N, now)
		}
		if !ok {
			missed = true
			continue
		}
		if hits == nil {
			hits = make([]bool, len(b.reqs))
		}
		hits[j] = true
		b.results[j] = r
		n++
	}
	b.hits = hits
	if n == 0 || missed && !s.eachApart(b) {
		return // the store is asked for all
	}
	b.fromCache = hits
	if c.hits != nil {
		c.hits.Add(float64(n))
	}
}

// localRemember keeps the denials of b that the store decided and the
// cache had not found, asked at start. Unless they were decided each
// apart, the cost denied under a key is that of every request of b under
// it: the store decided them together.
func (s *Service) localRemember(d *deciding, b *batch, start time.Time) {
	c := s.local
	if c == nil {
		return
	}
	each := s.eachApart(b)
	var buf [256]byte
	for j, q := range b.reqs {
		l := d.limits[b.idx[j]]
		if b.hits != nil && b.hits[j] || b.results[j].RetryAfter <= 0 || !s.localApplies(l) {
			continue
		}
		n := q.N
		if !each {
			for k, o := range b.reqs {
				if k != j && o.Key == q.Key && o.Limiter == q.Limiter {
					n += o.N
				}
			}
		}
		c.remember(c.key(buf[:0], d.rs, l, q.Key), n, b.results[j], start)
	}
}

// localApplies reports whether the cache applies to l: to every algorithm
// when a denial consumes nothing (the state only gets further from
// admitting); when a denial spends what the limit has left
// (policy.spendOverLimit) and a cache hit spends nothing, to fixed windows
// only, as envoy (a bucket that refills could admit sooner than without
// the cache).
func (s *Service) localApplies(l *config.Limit) bool {
	return !s.policy.spendOverLimit || l.Algorithm == "fixed_window"
}

// localNow is the time the cache reads; the zero time without a cache.
func (s *Service) localNow() time.Time {
	if s.local == nil {
		return time.Time{}
	}
	return s.local.clk.Now()
}

// watchLocalCache exports the cache's hits and entries.
func (m *Metrics) watchLocalCache(c *localCache) {
	if m.localCacheHits == nil {
		m.localCacheHits = prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floodgate_local_cache_hits_total", Help: "Descriptors answered OVER_LIMIT by the local over-limit cache, without a store call.",
		})
		entries := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "floodgate_local_cache_entries", Help: "Descriptors held by the local over-limit cache (expired ones until overwritten).",
		}, func() float64 { return float64(c.c.EntryCount()) })
		for _, reg := range []*prometheus.Registry{m.Registry, m.own} {
			reg.MustRegister(m.localCacheHits, entries)
		}
	}
	c.hits = m.localCacheHits
}
