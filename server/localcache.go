package server

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-dev/floodgate/ratelimit"
	"github.com/floodgate-dev/floodgate/server/config"
	"github.com/floodgate-dev/floodgate/server/internal/localcache"
)

// The local over-limit cache (Options.LocalCacheBytes) is package
// localcache, which says what it guarantees; here is how a Service's
// batches are answered from it and fill it.

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
			r, ok = c.Lookup(c.Key(buf[:0], d.rs.localGens, l, q.Key), q.N, now)
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
	if s.localHits != nil {
		s.localHits.Add(float64(n))
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
		c.Remember(c.Key(buf[:0], d.rs.localGens, l, q.Key), n, b.results[j], start)
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
	return s.local.Now()
}

// watchLocalCache exports the entries of c and returns the counter of the
// descriptors a cache answered (localCheck adds them). With several
// Services on m, the counter is theirs together and the entries the first
// cache's.
func (m *Metrics) watchLocalCache(c *localcache.Cache) prometheus.Counter {
	if m.localCacheHits == nil {
		m.localCacheHits = prometheus.NewCounter(prometheus.CounterOpts{
			Name: "floodgate_local_cache_hits_total", Help: "Descriptors answered OVER_LIMIT by the local over-limit cache, without a store call.",
		})
		entries := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "floodgate_local_cache_entries", Help: "Descriptors held by the local over-limit cache (expired ones until overwritten).",
		}, func() float64 { return float64(c.EntryCount()) })
		for _, reg := range []*prometheus.Registry{m.Registry, m.own} {
			reg.MustRegister(m.localCacheHits, entries)
		}
	}
	return m.localCacheHits
}
