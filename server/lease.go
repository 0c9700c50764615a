package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-dev/floodgate/ratelimit"
	"github.com/floodgate-dev/floodgate/server/config"
)

// Quota leases (docs/server/leases.md): a limit that leases (the YAML's
// lease, or Options.Leases for limits that say nothing) decides requests
// with one limited descriptor through a ratelimit.Leased: a store call
// takes a lease of several units of the key's budget, sized by the rate
// this server sees for the key, and the server decides from it in
// process until it is spent. A key decided rarely is decided by the
// limit's own store call, as without leases; a hot key's decisions stop
// being a store call each. A request with several limited
// descriptors is decided by the store in one atomic step, as always (it
// shares the keys' budgets with the leases).
//
// Through a store stall, a server keeps deciding exactly from what its
// leases hold (Leased.Local never waits for the store), and then as the
// failure mode says. In the degraded mode's grace period after an outage,
// decisions go through the store call path, where the degraded mode
// checks them against this server's share.

// leases returns the Leased of each limit of cfg that leases, on a
// remote store (on the memory backend every decision is in process
// already), in floodgate's own semantics (envoy's counting spends past
// limits, which leases do not).
func (s *Service) leases(cfg *config.Config, limiters map[*config.Limit]*ratelimit.Limiter) (map[*config.Limit]*ratelimit.Leased, error) {
	if s.policy != (policy{}) {
		for l := range limiters {
			if l.Lease == config.LeaseOn {
				s.log.Warn("lease is not applied in envoy compatibility mode", "limit", l.Path, "file", l.File, "line", l.Line)
			}
		}
		return nil, nil
	}
	var out map[*config.Limit]*ratelimit.Leased
	for l, lim := range limiters {
		if !s.storeOf(l).remote || l.Charge || l.Lease == config.LeaseOff || l.Lease == config.LeaseDefault && !s.opts.Leases {
			continue
		}
		lz, err := ratelimit.NewLeased(lim)
		if errors.Is(err, ratelimit.ErrNotLeasable) && l.Lease == config.LeaseDefault {
			continue // Options.Leases applies to the limits that can
		}
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", l.File, l.Line, err)
		}
		if out == nil {
			out = map[*config.Limit]*ratelimit.Leased{}
		}
		out[l] = lz
	}
	return out, nil
}

// leasedFor returns the Leased that decides b: b's one request's limit's,
// nil when b has several requests or its limit does not lease.
func (d *deciding) leasedFor(b *batch) *ratelimit.Leased {
	if len(b.reqs) != 1 || d.rs.leased == nil || b.fromCache != nil {
		return nil
	}
	return d.rs.leased[d.limits[b.idx[0]]]
}

// countLeased decides b's one request through its lease lz: in process
// when the lease can (not in the degraded mode's grace period), else by a
// store call as every other, which takes a new lease when it needs one.
func (s *Service) countLeased(ctx context.Context, d *deciding, b *batch, lz *ratelimit.Leased) error {
	if s.degraded == nil || !s.degraded.InGrace() {
		if r, ok := lz.Local(b.reqs[0].Key, b.reqs[0].N); ok {
			b.results[0] = r
			return nil
		}
	}
	st := s.storeOf(d.limits[b.idx[0]])
	start := s.now()
	err := s.storeCall(ctx, d, b, func() error {
		_, err := s.allowOn(ctx, st, b.reqs, b.results, lz)
		return err
	})
	if err != nil || !b.results[0].Allowed {
		return err
	}
	held := lz.Held(b.reqs[0].Key)
	if n := s.servers.Load(); held > 0 && s.degraded != nil && n > 1 {
		// The degraded mode remembered the store's Remaining, which
		// this server hears again only at its next lease, while the
		// other servers' leases go on spending it. With the traffic
		// spread, each of them takes leases of about this one's size, and
		// a lease lives at most two of them: the degraded mode counts on
		// what the store had left less two leases of each other server.
		r := b.results[0]
		r.Remaining = max(0, r.Remaining-2*(n-1)*(held+b.reqs[0].N))
		s.degraded.Seen(b.reqs, []ratelimit.Result{r}, nil, start)
	}
	// allowLeased gave the store's Remaining; the answer says what this
	// server can still admit.
	b.results[0].Remaining += held
	return nil
}

// allowLeased decides q through its lease lz into results[0], for
// allowAll. The result's Remaining is the store's: without the units
// lz holds (countLeased adds them back).
func allowLeased(ctx context.Context, lz *ratelimit.Leased, q ratelimit.Request, results []ratelimit.Result) (bool, error) {
	r, err := lz.AllowN(ctx, q.Key, q.N)
	if err != nil {
		return false, err
	}
	if r.Allowed {
		r.Remaining -= lz.Held(q.Key)
	}
	results[0] = r
	return r.Allowed, nil
}

// closeLeases gives back what the leases of rs hold, within d.
func closeLeases(rs *ruleset, d time.Duration) {
	if rs == nil || len(rs.leased) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	for _, lz := range rs.leased {
		_ = lz.Close(ctx) // units not given back are under-admission only
	}
}

// leaseCollector exports what the current configuration's leases did
// (ratelimit.LeaseStats, summed over its limits) on /metrics. The counts
// start again with each configuration (a reload makes new leases), which
// Prometheus reads as a counter reset.
type leaseCollector struct {
	s                 *Service
	decisions, grants *prometheus.Desc
}

func (c *leaseCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.decisions
	ch <- c.grants
}

func (c *leaseCollector) Collect(ch chan<- prometheus.Metric) {
	var st ratelimit.LeaseStats
	if rs := c.s.rules.Load(); rs != nil {
		for _, lz := range rs.leased {
			ls := lz.Stats()
			st.Decisions += ls.Decisions
			st.FromLease += ls.FromLease
			st.Grants += ls.Grants
			st.Granted += ls.Granted
		}
	}
	ch <- prometheus.MustNewConstMetric(c.decisions, prometheus.CounterValue, float64(st.FromLease), "lease")
	ch <- prometheus.MustNewConstMetric(c.decisions, prometheus.CounterValue, float64(st.Decisions-st.FromLease), "store")
	ch <- prometheus.MustNewConstMetric(c.grants, prometheus.CounterValue, float64(st.Grants))
}

// watchLeases exports s's leases on /metrics.
func (m *Metrics) watchLeases(s *Service) {
	if m.leases {
		return
	}
	m.leases = true
	m.Registry.MustRegister(&leaseCollector{
		s:         s,
		decisions: prometheus.NewDesc("floodgate_lease_decisions_total", "Decisions of limits that lease (--leases, lease: true), by source: lease (in process, from a lease or a denial until the store's retry time) or store (a store call). Counted since the configuration was loaded.", []string{"source"}, nil),
		grants:    prometheus.NewDesc("floodgate_lease_grants_total", "Leases taken from the store (a key seen rarely takes a lease of exactly its request). Counted since the configuration was loaded.", nil, nil),
	})
}
