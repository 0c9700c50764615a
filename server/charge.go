package server

import (
	"context"

	"github.com/floodgate-dev/floodgate/ratelimit"
	"github.com/floodgate-dev/floodgate/server/config"
)

// Usage charged after the fact (a descriptor's charge: always,
// config.Limit.Charge; docs/server/configuration.md): the cost a request
// reports for such a limit is recorded whatever the answer, past the limit
// as debt (ratelimit.Limiter.Charge), so that usage known only once the
// work is done — the tokens of an LLM completion, reported by Envoy when
// the response stream ends (apply_on_stream_done) — is always counted. A
// descriptor of cost 0 (Envoy's hits_addend 0 at request time) is the
// check: decided with the others, it spends nothing and is refused while
// the key is in debt. A charge is decided on its own, after the other
// descriptors of its request, which it never makes refused or admitted;
// its answer is OVER_LIMIT when the usage did not fit (Envoy ignores the
// answer of a stream-done call). Not in envoy compatibility mode
// (envoyproxy/ratelimit's counting applies), not through leases.

// charges reports whether descriptor desc of limit l is charged: l says
// charge: always, desc reports usage, and floodgate's own semantics apply.
func (s *Service) charges(l *config.Limit, desc *Descriptor) bool {
	return l.Charge && desc.Cost > 0 && s.policy == (policy{})
}

// decideCharge records the usage of descriptor i, whose limit charges,
// through the store call path (its timeout, breakers and failure mode: in
// the degraded mode, what this server's share admits is recorded in
// process and owed to the store, and the next call pays it), and settles
// its answer. The degraded mode remembers the store's answer, and a debt
// the charge carried is paid whether the charge fit or not.
func (s *Service) decideCharge(ctx context.Context, d *deciding, i int) error {
	var b batch
	var req [1]ratelimit.Request
	var res [1]ratelimit.Result
	req[0] = d.request(s, i)
	b.reqs, b.idx, b.results = req[:], []int{i}, res[:]
	l := d.limits[i]
	st := s.storeOf(l)
	start := s.now()
	var owed []int64
	if s.degraded != nil {
		owed = s.degraded.Charge(b.reqs) // what the degraded mode admitted of the key
	}
	err := s.callStore(ctx, st, []int{st.breakers.Of(req[0].Key)}, func(ctx context.Context) (err error) {
		res[0], err = req[0].Limiter.Charge(ctx, req[0].Key, req[0].N)
		return err
	})
	if s.degraded != nil {
		// A charge is recorded whether it fits or not: the debt it
		// carried is paid once the store answered, and the answer is
		// remembered, as every store call's is (degraded.Limits.Call).
		paid := res
		paid[0].Allowed = true
		s.degraded.Paid(b.reqs, paid[:], owed, err == nil)
		if err == nil {
			s.degraded.Seen(b.reqs, res[:], nil, start)
			s.degraded.Recovered()
		}
	}
	if err != nil {
		if err = s.degrade(ctx, d, &b, err); err != nil {
			return err
		}
	} else if m := s.opts.Metrics; m != nil {
		m.charged.WithLabelValues(d.req.Domain, l.Path).Add(float64(req[0].N))
		if over := min(res[0].Debt, req[0].N); over > 0 {
			m.chargedOver.WithLabelValues(d.req.Domain, l.Path).Add(float64(over))
		}
	}
	d.settle(s, i, 0, &b, l.ShadowMode)
	return nil
}
