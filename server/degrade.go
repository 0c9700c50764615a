package server

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/floodgate-dev/floodgate/ratelimit"
)

// The failure mode FailDegraded (package internal/degraded): while
// the store cannot decide, the core's limited descriptors are decided in
// process, on this server's share of each limit; every store call carries
// the debts of what was so admitted, and every store answer is remembered,
// so that the next outage starts from it.

// storeCall runs call, the store's decision of b, through the degraded
// mode's Call: with the debts of b's keys added to their costs, the store's
// answers remembered, a debt that does not fit spent as far as it fits, and
// the grace period's check of this server's share.
func (s *Service) storeCall(ctx context.Context, d *deciding, b *batch, call func() error) error {
	if s.degraded == nil || slices.Contains(b.fromCache, true) {
		return call()
	}
	return s.degraded.Call(ctx, b.reqs, b.results, nil, func() ([][]ratelimit.Rule, []time.Duration) { return d.rulesOf(b) }, call,
		func(j int, n int64) (ratelimit.Result, bool) {
			q := b.reqs[j]
			q.N = n
			var out [1]ratelimit.Result
			ok, err := s.allow(ctx, []ratelimit.Request{q}, out[:])
			return out[0], err == nil && ok
		})
}

// degrade decides b in process after the store failed with err, and
// returns nil when it did; else err, for the failure mode: when the mode is
// not FailDegraded, and when the caller went away or its own deadline
// ended (the caller gets its context's error, as in every mode).
func (s *Service) degrade(ctx context.Context, d *deciding, b *batch, err error) error {
	if s.degraded == nil || ctx.Err() != nil {
		return err
	}
	var gone *callerGoneError
	var st *storeTimeoutError
	if errors.As(err, &gone) || errors.As(err, &st) && st.caller {
		return err
	}
	s.storeFailed(ctx, d.req.Domain, err)
	rules, windows := d.rulesOf(b)
	if _, derr := s.degraded.Decide(ctx, b.reqs, rules, windows, b.results); derr != nil {
		s.log.Error("degraded mode could not decide", "domain", d.req.Domain, "error", derr)
		return err
	}
	b.hits, b.fromCache = nil, nil
	d.resp.Failed, d.resp.ByFailureMode, d.resp.Degraded = true, true, true
	return nil
}

// setServers sets how many servers share the store, learned from their
// heartbeats, unless Options.Servers fixed it.
func (s *Service) setServers(n int) {
	if s.opts.Servers == 0 && n >= 1 {
		s.servers.Store(int64(n))
	}
}

// rulesOf returns the rules and windows of b's requests' limits.
func (d *deciding) rulesOf(b *batch) ([][]ratelimit.Rule, []time.Duration) {
	rules := make([][]ratelimit.Rule, len(b.reqs))
	windows := make([]time.Duration, len(b.reqs))
	for j, i := range b.idx {
		rules[j], windows[j] = []ratelimit.Rule{d.limits[i].Rule}, d.limits[i].Window()
	}
	return rules, windows
}
