package server

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"

	"github.com/floodgate-dev/floodgate/ratelimit"
	"github.com/floodgate-dev/floodgate/server/config"
	"github.com/floodgate-dev/floodgate/server/decision"
)

// The decision core. Decide runs the front chosen at start-up: the core's
// own decide, or an adapter around it (envoy.go). The core matches the
// descriptors, decides the limited ones on the stores as the counting
// policy says (the local over-limit cache first), decides the shadow-mode
// ones on their own, and records the answer; an observer (envoy's
// statistics) sees each decision. Nothing in it depends on which
// compatibility mode runs: what differs is the policy value and the
// observer (a decision.Observer), both fixed by NewService.

// policy is what a compatibility mode may change in how the core counts,
// chosen once by NewService. The zero value is floodgate's own.
type policy struct {
	// each decides the limited descriptors of a request each on its own:
	// those within their limits are counted even when another is over its
	// limit. Without it they are decided in one atomic step, and a request
	// over any limit consumes nothing from the others.
	each bool
	// spendOverLimit makes a descriptor over its limit spend what its
	// limit had left (its counter goes past the limit), so that a later,
	// smaller request in the same window is over the limit too. The local
	// cache then applies to fixed windows only: a bucket that refills
	// could admit sooner than the cache says.
	spendOverLimit bool
	// emptyDescriptors accepts a descriptor with no entries (it matches no
	// limit) rather than refusing the request.
	emptyDescriptors bool
}

// Decide decides req. Errors: *InputError for a malformed request, and
// ErrUnavailable in the FailError mode when the store cannot decide; in the
// other modes a store failure is answered by the failure mode with
// Response.Failed set.
//
// Every descriptor with a limit (and not in shadow mode) is decided in one
// atomic step where the store allows it — the memory backend, a standalone
// Redis, keys of one Redis Cluster slot — so a request that is over any limit
// consumes nothing from the others. Across Cluster slots, see
// ratelimit.AllowAll; across a main and a per-second store
// (Options.PerSecondBackend), stores.go. Shadow-mode descriptors are decided
// on their own after it and never change the codes. In envoy compatibility
// mode (Options.Envoy) envoyproxy/ratelimit's semantics apply instead, as
// EnvoyOptions describes.
func (s *Service) Decide(ctx context.Context, req *Request) (*Response, error) {
	return s.front(ctx, req)
}

// decide is the core's Decide: validate, then decideValid.
func (s *Service) decide(ctx context.Context, req *Request) (*Response, error) {
	if err := s.validate(req); err != nil {
		return nil, err
	}
	return s.decideValid(ctx, req)
}

// decideValid decides a request validate accepted. Before any
// configuration is set, no limit applies: every descriptor is OK.
func (s *Service) decideValid(ctx context.Context, req *Request) (*Response, error) {
	resp := &Response{Code: CodeOK, Statuses: make([]Status, len(req.Descriptors))}
	for i := range resp.Statuses {
		resp.Statuses[i].Code = CodeOK
	}
	rs := s.rules.Load()
	if rs == nil {
		return resp, nil
	}
	// The gate's buffers stay on the stack: the decision, which holds
	// pointers that leave the function, holds none to them.
	var reqBuf [8]ratelimit.Request
	var idxBuf [8]int
	var resBuf [8]ratelimit.Result
	d := deciding{rs: rs, req: req, resp: resp}
	var gate batch
	gate.reqs, gate.idx = s.match(&d, reqBuf[:0], idxBuf[:0])
	if n := len(gate.reqs); n > len(resBuf) {
		gate.results = make([]ratelimit.Result, n)
	} else {
		gate.results = resBuf[:n]
	}
	if len(gate.reqs) > 0 {
		if err := s.count(ctx, &d, &gate); err != nil {
			if err = s.degrade(ctx, &d, &gate, err); err != nil {
				return s.fail(ctx, req.Domain, resp, err)
			}
		}
		for j, i := range gate.idx {
			d.settle(s, i, j, &gate, false)
		}
	}
	for _, i := range d.charge {
		if err := s.decideCharge(ctx, &d, i); err != nil {
			return s.fail(ctx, req.Domain, resp, err)
		}
	}
	for _, i := range d.shadow {
		s.decideShadow(ctx, &d, i)
	}
	s.record(rs, req, resp)
	return resp, nil
}

// deciding is one request on its way through the core.
type deciding struct {
	rs     *ruleset
	req    *Request
	resp   *Response
	limits []*config.Limit // of each descriptor; nil where none applies
	shadow []int           // the shadow-mode descriptors, decided one by one
	charge []int           // the descriptors whose usage is charged (charge.go), one by one
	tally  decision.Tally  // the observer's, or nil
}

// batch is descriptors of a request decided in one count: their store
// requests, their indexes in the request, and their results.
type batch struct {
	reqs    []ratelimit.Request
	idx     []int
	results []ratelimit.Result
	// hits marks the requests the local cache found over their limits; nil
	// when it found none. fromCache marks those it answered (the store was
	// not asked for them); nil when it answered none.
	hits, fromCache []bool
}

// match sets d up for its request: the limit of each descriptor
// (overrides first, then the configuration, then replaces), the statuses
// of those with a limit, and which are decided alone (d.shadow, d.charge) or
// together: those it appends to reqs (their store requests) and idx
// (their indexes), and returns.
func (s *Service) match(d *deciding, reqs []ratelimit.Request, idx []int) ([]ratelimit.Request, []int) {
	req, resp := d.req, d.resp
	d.limits = make([]*config.Limit, len(req.Descriptors))
	dom := d.rs.cfg.Domains[req.Domain]
	if dom != nil {
		for i := range req.Descriptors {
			if desc := &req.Descriptors[i]; desc.Override != nil {
				d.limits[i] = overrideLimit(req.Domain, desc)
			} else {
				d.limits[i] = dom.Match(desc.Entries)
			}
		}
		d.limits = config.ApplyReplaces(d.limits)
	}
	if s.obs != nil {
		d.tally = s.obs.Matched(req, d.limits, dom != nil)
	}
	for i, l := range d.limits {
		if l == nil {
			continue
		}
		st := &resp.Statuses[i]
		st.Limit = l
		switch {
		case l.Unlimited:
			st.Remaining = math.MaxUint32
		case s.charges(l, &req.Descriptors[i]):
			d.charge = append(d.charge, i)
		case l.ShadowMode:
			d.shadow = append(d.shadow, i)
		default:
			reqs = append(reqs, d.request(s, i))
			idx = append(idx, i)
		}
	}
	return reqs, idx
}

// request is the store request of descriptor i.
func (d *deciding) request(s *Service, i int) ratelimit.Request {
	l, desc := d.limits[i], &d.req.Descriptors[i]
	return ratelimit.Request{Limiter: s.limiter(d.rs, l), Key: stateKey(l, desc.Entries), N: desc.Cost}
}

// settle writes the result j of b, descriptor i's, into its status, and
// tells the tally. A shadow-mode descriptor over its limit is marked
// Shadow and keeps its OK code.
func (d *deciding) settle(s *Service, i, j int, b *batch, shadow bool) {
	st, r := &d.resp.Statuses[i], b.results[j]
	st.Remaining, st.RetryAfter, st.ResetAfter = r.Remaining, r.RetryAfter, r.ResetAfter
	cached := b.hits != nil && b.hits[j]
	if d.tally != nil {
		d.tally.Decided(i, st.Limit, d.req.Descriptors[i].Cost, r, cached)
	}
	if r.RetryAfter == 0 {
		return
	}
	if shadow {
		st.Shadow = true
		return
	}
	st.Code, d.resp.Code = CodeOverLimit, CodeOverLimit
	if s.top != nil {
		s.top.Add(d.req.Domain, st.Limit.Path, b.reqs[j].Key)
	}
}

// decideShadow decides shadow-mode descriptor i on its own. Its failure
// changes no answer, so it is only logged.
func (s *Service) decideShadow(ctx context.Context, d *deciding, i int) {
	var b batch
	var req [1]ratelimit.Request
	var res [1]ratelimit.Result
	req[0] = d.request(s, i)
	b.reqs, b.idx, b.results = req[:], []int{i}, res[:]
	if err := s.count(ctx, d, &b); err != nil {
		s.log.Debug("shadow mode limit not decided", "domain", d.req.Domain, "limit", d.limits[i].Path, "error", err)
		return
	}
	d.settle(s, i, 0, &b, true)
}

// count decides b on the stores as the policy says, the local cache first,
// and remembers the store's denials in the cache. Under FailOpen, one of
// two stores failing leaves its requests admitted and marks the answer
// Failed (stores.go); any other failure is returned, for the failure mode.
func (s *Service) count(ctx context.Context, d *deciding, b *batch) error {
	start := s.localNow()
	s.localCheck(d, b, start)
	var err error
	lz := d.leasedFor(b)
	switch {
	case b.fromCache != nil && !slices.Contains(b.fromCache, false):
		// Every request is answered from the cache.
	case lz != nil:
		err = s.countLeased(ctx, d, b, lz)
	case s.eachApart(b):
		err = s.storeCall(ctx, d, b, func() error { return s.allowEach(ctx, b.reqs, b.results, b.fromCache) })
	default:
		err = s.storeCall(ctx, d, b, func() (err error) {
			_, err = s.allow(ctx, b.reqs, b.results)
			return err
		})
	}
	if err != nil {
		var part *partialFailure // on the heap: declared where errors are
		if errors.As(err, &part) {
			s.storeFailed(ctx, d.req.Domain, part.err)
			d.resp.Failed, err = true, nil
		}
	}
	if err == nil && s.policy.spendOverLimit {
		err = s.spend(ctx, b)
	}
	if err != nil {
		return err
	}
	s.localRemember(d, b, start)
	return nil
}

// eachApart reports whether the requests of b are decided each on its own
// (policy.each); a single request is decided as in one step.
func (s *Service) eachApart(b *batch) bool { return s.policy.each && len(b.reqs) > 1 }

// spend spends, for each request of b over its limit that the store
// decided, what its limit has left (policy.spendOverLimit). b's results
// keep the denials.
func (s *Service) spend(ctx context.Context, b *batch) error {
	for j, r := range b.results {
		if r.RetryAfter == 0 || r.Remaining <= 0 || b.reqs[j].N <= 0 || b.fromCache != nil && b.fromCache[j] {
			continue
		}
		q := b.reqs[j]
		q.N = r.Remaining
		var out [1]ratelimit.Result
		if _, err := s.allow(ctx, []ratelimit.Request{q}, out[:]); err != nil {
			return err
		}
	}
	return nil
}

func (s *Service) validate(req *Request) error {
	if req == nil {
		return inputErrorf("request is empty")
	}
	if req.Domain == "" {
		return inputErrorf("domain is empty")
	}
	if len(req.Descriptors) == 0 {
		return inputErrorf("rate limit descriptor list must not be empty")
	}
	if len(req.Descriptors) > s.opts.MaxDescriptors {
		return inputErrorf("%d descriptors: at most %d are accepted", len(req.Descriptors), s.opts.MaxDescriptors)
	}
	for i, d := range req.Descriptors {
		if len(d.Entries) == 0 && !s.policy.emptyDescriptors {
			return inputErrorf("descriptors[%d] has no entries", i)
		}
		if len(d.Entries) > s.opts.MaxEntries {
			return inputErrorf("descriptors[%d]: %d entries: at most %d are accepted", i, len(d.Entries), s.opts.MaxEntries)
		}
		for j, e := range d.Entries {
			if e.Key == "" {
				return inputErrorf("descriptors[%d].entries[%d]: key is empty", i, j)
			}
		}
		if d.Cost < 0 {
			return inputErrorf("descriptors[%d]: cost %d is negative", i, d.Cost)
		}
		if o := d.Override; o != nil {
			if o.Unit.Duration() == 0 {
				return inputErrorf("descriptors[%d].limit: unit %v is not a rate limit unit", i, o.Unit)
			}
			if w := o.Window(); w > ratelimit.MaxPeriod {
				return inputErrorf("descriptors[%d].limit: a period of %d × %v is longer than %v (ten years)", i, o.UnitMultiplier, o.Unit, ratelimit.MaxPeriod)
			}
		}
	}
	return nil
}

// overrideLimit is the limit of a descriptor that carries its own: a fixed
// window of its period keyed by the domain and every entry, as
// envoyproxy/ratelimit does.
func overrideLimit(domain string, d *Descriptor) *config.Limit {
	o := d.Override
	return &config.Limit{
		Unit:            o.Unit,
		UnitMultiplier:  max(o.UnitMultiplier, 1),
		RequestsPerUnit: o.RequestsPerUnit,
		Algorithm:       "fixed_window",
		Rule:            ratelimit.FixedWindow{Limit: int64(o.RequestsPerUnit), Window: o.Window()},
		Path:            withEntries(config.EscapePath(domain)+"|override", d.Entries),
	}
}

// withEntries appends a "|key_value" element per entry to path.
func withEntries(path string, entries []config.Entry) string {
	var b strings.Builder
	b.WriteString(path)
	for _, e := range entries {
		b.WriteByte('|')
		b.WriteString(config.EscapePath(e.Key))
		b.WriteByte('_')
		b.WriteString(config.EscapePath(e.Value))
	}
	return b.String()
}
