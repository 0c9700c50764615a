package ratelimit

import (
	"context"

	"github.com/floodgate-dev/floodgate/internal/memstore"
)

// Charge records n units of usage for key on every rule of l, whether or
// not they fit: it is for usage known only after the work is done (the
// tokens of an LLM completion, the bytes of a download), which must be
// counted even when it overruns the budget. Check before the work with
// AllowN(ctx, key, 0), which spends nothing and is denied while the key is
// in debt; charge the actual usage after it.
//
// When n fits every rule, Charge is AllowN(ctx, key, n): the same Result,
// Allowed true. When it does not, the units are recorded anyway, atomically
// with the same state as AllowN, and the usage past a rule's limit becomes
// debt:
//
//   - TokenBucket, LeakyBucket, GCRA: the level goes past full and drains
//     at the rule's rate; the key is admitted again once the debt has
//     drained, so the next admission is delayed by exactly the debt's
//     drain time.
//   - FixedWindow: the window counts past its limit; the debt ends with the
//     window (it does not carry into the next one, as envoyproxy/ratelimit
//     counts).
//   - SlidingWindow: the buckets keep the units; the debt lasts until enough
//     of them slide out of the window.
//   - SlidingLog: the log keeps one entry per unit, at most 2 × the largest
//     SlidingLog Limit of l + 1 per call (more entries at one instant could
//     change no decision, only the Debt reported, which so saturates).
//
// A drain rule's level saturates at 2^52 (in units × its per µs) and a
// window's count at 2^53, far beyond any limit. The Result then reports
// Allowed false and the key as AllowN(ctx, key, 0) sees it right after the
// charge: Debt (how far past the binding rule's limit, in units), Remaining
// 0, RetryAfter until the debt is paid back, ResetAfter until the binding
// rule is back to full, Rule the rule with the longest RetryAfter.
//
// n == 0 peeks, as AllowN(ctx, key, 0). Charge goes through the general
// script (lua/limits.lua's mode "f") on Redis, never a generated fast path,
// so Standalone and Cluster, go-redis and rueidis, all decide as the memory
// backend does. A key of any length is limited: see Keys in the package doc.
//
// Errors: backend.ErrEmptyKey, ErrNegativeN, the context's error, and store
// errors (wrapped; on Redis bounded by ctx). After a store error the charge
// may or may not have been recorded.
func (l *Limiter) Charge(ctx context.Context, key string, n int64) (Result, error) {
	key, err := checkCall(ctx, key, n)
	if err != nil {
		return Result{}, err
	}
	var vs [8]verdict
	verdicts := l.verdictsIn(&vs)
	var allowed bool
	if l.mem != nil {
		allowed = l.chargeMemory(key, n, verdicts)
	} else {
		var res [1]Result
		allowed, err = runAllowAll(ctx, l.redis, []Request{{Limiter: l, Key: key, N: n}}, res[:], modeCharge, verdicts)
		if err != nil {
			return Result{}, err
		}
	}
	r := l.result(verdicts)
	r.Allowed = allowed
	return r, nil
}

// chargeMemory is Charge on the memory backend, mirroring limits.lua's mode
// "f": it fills vs and returns whether n fit every rule.
func (l *Limiter) chargeMemory(key string, n int64, vs []verdict) bool {
	var pend [8]int64
	var debts [8]bool
	var pending []int64
	var debt []bool
	if len(l.specs) <= len(pend) {
		pending, debt = pend[:len(l.specs)], debts[:len(l.specs)]
	} else {
		pending, debt = make([]int64, len(l.specs)), make([]bool, len(l.specs))
	}
	now := l.mem.NowMicros()
	sh := l.mem.Shard(key)
	sh.Lock()
	defer sh.Unlock()
	now = sh.Time(now)
	e := sh.Get(key)
	var lg *logState
	if l.logTag != 0 {
		lg = logOf(e, l.logTag)
	}
	ok := true
	for i := range l.specs {
		s := &l.specs[i]
		switch s.kind {
		case kindFixed:
			vs[i], pending[i] = s.fixedCharge(e, now, n)
		case kindSliding:
			vs[i], pending[i] = s.slidingCharge(e, now, n)
		case kindLog:
			vs[i] = s.logCheck(lg, now, n)
		case kindDrain:
			vs[i], pending[i], debt[i] = s.drainCharge(e, now, n)
		}
		ok = ok && vs[i].status == statusAllowed
	}
	if n > 0 {
		if e == nil {
			e = &memstore.Entry{}
			sh.Put(key, e)
		}
		if ok {
			l.commitMemory(e, now, n, pending)
			return true
		}
		l.commitCharge(e, now, n, pending, debt)
	}
	if !ok {
		// Report the state after the charge, as a peek sees it.
		if l.logTag != 0 {
			lg = logOf(e, l.logTag)
		}
		for i := range l.specs {
			vs[i], _ = l.checkRule(i, e, lg, now, 0)
		}
	}
	return ok
}

// commitCharge records a charge of n units that some rule could not admit,
// with what the charge checks computed: pending per rule, and debt for a
// drain rule left past full. As limits.lua's commit in mode "f"; the shard
// of e must be locked.
func (l *Limiter) commitCharge(e *memstore.Entry, now, n int64, pending []int64, debt []bool) {
	var life, most int64
	for i := range l.specs {
		life = max(life, l.commitUntil(i, e, now, pending[i])-now)
		if s := &l.specs[i]; s.kind == kindLog {
			most = max(most, s.limit)
		}
	}
	logged := false
	for i := range l.specs {
		s := &l.specs[i]
		var until int64
		switch s.kind {
		case kindFixed:
			until = s.fixedCommit(e, now, pending[i])
		case kindSliding:
			until = s.slidingCommit(e, now, pending[i])
		case kindLog:
			if logged {
				continue
			}
			until = logCommit(e, l.logTag, l.logMax, now, min(n, 2*most+1))
			logged = true
		case kindDrain:
			if debt[i] {
				until = s.drainDebt(e, now, pending[i])
			} else {
				until = s.drainCommit(e, now, pending[i], life)
			}
		}
		e.Expires = max(e.Expires, until)
	}
}
