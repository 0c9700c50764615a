package ratelimit

import (
	"math"
	"sort"

	"github.com/floodgate-dev/floodgate/internal/memstore"
)

// The memory engine mirrors the Lua scripts in lua/ step for step, in int64
// instead of doubles: the conformance suite demands identical Results.

// verdict is one rule's answer, in µs; the same five numbers the script returns.
type verdict struct {
	status    int64 // 1 allowed, 0 denied, -1 never admissible
	remaining int64
	retry     int64
	reset     int64
	delay     int64
}

const (
	statusNever   = -1
	statusDenied  = 0
	statusAllowed = 1
)

// memState is the per-key value of the memory table: every rule state of a
// user key, so that one shard lock covers an atomic multi-rule decision. The
// first drain or fixed-window rule lives inline in the memstore.Entry (Tag, A,
// B) so that a single-rule limiter allocates nothing beyond the entry.
type memState struct {
	cells   []cell
	windows []*slidingState
	logs    []*logState
}

type cell struct {
	tag  uint64
	a, b int64
}

// cellOf returns the (a, b) pair of the rule tagged tag, or nil.
func cellOf(e *memstore.Entry, tag uint64) (*int64, *int64) {
	if e == nil {
		return nil, nil
	}
	if e.Tag == tag {
		return &e.A, &e.B
	}
	if ms, ok := e.Value.(*memState); ok {
		for i := range ms.cells {
			if ms.cells[i].tag == tag {
				return &ms.cells[i].a, &ms.cells[i].b
			}
		}
	}
	return nil, nil
}

// newCell makes room for the rule tagged tag; e must not hold it yet.
func newCell(e *memstore.Entry, tag uint64) (*int64, *int64) {
	if e.Tag == 0 {
		e.Tag = tag
		return &e.A, &e.B
	}
	ms := memStateOf(e)
	ms.cells = append(ms.cells, cell{tag: tag})
	c := &ms.cells[len(ms.cells)-1]
	return &c.a, &c.b
}

func memStateOf(e *memstore.Entry) *memState {
	ms, ok := e.Value.(*memState)
	if !ok {
		ms = &memState{}
		e.Value = ms
	}
	return ms
}

// --- drain (TokenBucket, LeakyBucket, GCRA); see lua/limits.lua. State:
// a = t, b = the level at t in units of requests × per µs, draining rate
// units per µs. Neither capacity nor rate is stored, so both may change.
// drainCommit stores the state as lua/codec.lua's drain_encode does, moved
// back to the whole second when one of its integer forms applies, so that
// both backends keep the same state. (On Redis a fake clock writes the short
// form's state as text; the state is the same.) A time between that second
// and the commit's would read the level fuller than the commit left it: on
// Memory no decision reads one, since a key's time never runs backwards
// (memstore.Shard.Time).

// Bounds of codec.lua's integer forms of a drain state.
const (
	codecEpoch  = 1577836800 // 2020-01-01T00:00:00Z, in seconds
	codecMaxSec = 900000000
	codecMaxL   = 10000000000 // the long form's L
	// The short form's L, and the key's life (µs) below which it is used.
	codecMaxShort  = 100000000000000
	codecShortLife = 72000000000
	// lifeUnknown rules the short form out: a refund keeps the key's TTL,
	// which limits.lua reads from Redis (PTTL) and the memory backend does
	// not track the same way.
	lifeUnknown = math.MaxInt64
)

// drainLevel is the level at now, at most full unless the state is a debt
// (level < 0: -level is a level past full that a charge left, codec.lua's
// debt form, which is drained but not capped). A state from the future
// has not drained yet: on Redis given an injected clock set back; on Memory
// a key's time never runs backwards (memstore.Shard.Time).
func drainLevel(s *spec, t, level, now int64) int64 {
	if level < 0 {
		return debtLevel(s, t, -level, now)
	}
	if d := now - t; d > 0 {
		if d >= ceilDiv(level, s.rate) {
			return 0
		}
		level -= d * s.rate
	}
	return min(level, s.full)
}

// debtLevel is drainLevel of a debt: level at t, drained, not capped.
func debtLevel(s *spec, t, level, now int64) int64 {
	if d := now - t; d > 0 {
		if d >= ceilDiv(level, s.rate) {
			return 0
		}
		level -= d * s.rate
	}
	return level
}

// Bounds of what a charge leaves, as limits.lua's MAX_LEVEL and MAX_COUNT:
// a drain rule's level (a level plus a full bucket stays below 2^53) and a
// window's count.
const (
	maxChargeLevel = maxExact / 2
	maxChargeCount = maxExact
)

// drainCheck returns the verdict and, when allowed, the new level for
// drainCommit.
func (s *spec) drainCheck(e *memstore.Entry, now, n int64) (verdict, int64) {
	var level int64
	if a, b := cellOf(e, s.tag); a != nil {
		level = drainLevel(s, *a, *b, now)
	}
	return s.drainCheckAt(level, n)
}

// drainCheckAt is drainCheck of a bucket at level.
func (s *spec) drainCheckAt(level, n int64) (verdict, int64) {
	remaining := (s.full - level) / s.per
	if level > s.full { // in debt: floored, as limits.lua's math.floor
		remaining = -ceilDiv(level-s.full, s.per)
	}
	if n > s.capacity {
		return verdict{statusNever, remaining, -1, ceilDiv(level, s.rate), 0}, 0
	}
	nl := level + n*s.per
	if nl > s.full {
		return verdict{statusDenied, remaining, ceilDiv(nl-s.full, s.rate), ceilDiv(level, s.rate), 0}, 0
	}
	var dl int64
	if s.delay >= 0 && n > 0 {
		if ex := nl - s.per - s.delay*s.per; ex > 0 {
			dl = ceilDiv(ex, s.rate)
		}
	}
	return verdict{statusAllowed, (s.full - nl) / s.per, 0, ceilDiv(nl, s.rate), dl}, nl
}

// drainCharge is drainCheck for a charge (limits.lua's mode "f"): when n
// does not fit, it returns a denial and the level past full that
// drainCommit stores anyway (at most maxChargeLevel); debt reports that.
func (s *spec) drainCharge(e *memstore.Entry, now, n int64) (v verdict, nl int64, debt bool) {
	var level int64
	if a, b := cellOf(e, s.tag); a != nil {
		level = drainLevel(s, *a, *b, now)
	}
	if n > s.capacity || level+n*s.per > s.full {
		nl = maxChargeLevel
		if n <= (maxChargeLevel-level)/s.per {
			nl = level + n*s.per
		}
		return verdict{status: statusDenied}, nl, true
	}
	v, nl = s.drainCheckAt(level, n)
	return v, nl, false
}

// drainDebt stores a level nl past full at now (codec.lua's debt form) and
// returns the time the state is worthless.
func (s *spec) drainDebt(e *memstore.Entry, now, nl int64) int64 {
	a, b := cellOf(e, s.tag)
	if a == nil {
		a, b = newCell(e, s.tag)
	}
	*a, *b = now, -nl
	return now + ceilDiv(nl, s.rate)
}

// drainCommit stores the level nl computed by drainCheck in a key that lives
// life µs (what commitLife returns, or lifeUnknown) and returns the time the
// state is worthless.
func (s *spec) drainCommit(e *memstore.Entry, now, nl, life int64) int64 {
	a, b := cellOf(e, s.tag)
	if a == nil {
		a, b = newCell(e, s.tag)
	}
	*a, *b = now, nl
	sec := now / 1e6
	// sub*rate <= codecMaxShort cannot overflow, and nl < 2^53 (New).
	if sub := now - sec*1e6; sub <= codecMaxShort/s.rate {
		l, rel := nl+sub*s.rate, sec-codecEpoch
		if l < codecMaxL && rel >= 0 && rel < codecMaxSec || l < codecMaxShort && life < codecShortLife {
			*a, *b = sec*1e6, l
		}
	}
	return now + ceilDiv(nl, s.rate)
}

// --- FixedWindow; see lua/limits.lua. State: a = window id, b = count.

// fixedWindow returns the current window id and its count. A state from a
// later window (on Redis, an injected clock stepped back; on Memory a key's
// time never runs backwards) keeps counting in that window: the memory
// backend has one counter per key, and forgetting the newer count would
// over-admit.
func (s *spec) fixedWindow(e *memstore.Entry, now int64) (wid, count int64) {
	wid = now / s.window
	if a, b := cellOf(e, s.tag); a != nil && *a >= wid {
		return *a, *b
	}
	return wid, 0
}

// fixedCheck returns the verdict and, when allowed, the new count.
func (s *spec) fixedCheck(e *memstore.Entry, now, n int64) (verdict, int64) {
	wid, c := s.fixedWindow(e, now)
	left := (wid+1)*s.window - now
	var reset int64
	if c > 0 {
		reset = left
	}
	if n > s.limit {
		return verdict{statusNever, s.limit - c, -1, reset, 0}, 0
	}
	if c+n > s.limit {
		return verdict{statusDenied, s.limit - c, left, reset, 0}, 0
	}
	if c+n > 0 {
		reset = left
	}
	return verdict{statusAllowed, s.limit - c - n, 0, reset, 0}, c + n
}

// fixedCharge is fixedCheck for a charge: when n does not fit, a denial
// and the count past the limit (at most maxChargeCount) that fixedCommit
// stores anyway.
func (s *spec) fixedCharge(e *memstore.Entry, now, n int64) (verdict, int64) {
	_, c := s.fixedWindow(e, now)
	if n > s.limit || c+n > s.limit {
		nc := int64(maxChargeCount)
		if n <= maxChargeCount-c {
			nc = c + n
		}
		return verdict{status: statusDenied}, nc
	}
	return s.fixedCheck(e, now, n)
}

func (s *spec) fixedCommit(e *memstore.Entry, now, count int64) int64 {
	wid, _ := s.fixedWindow(e, now)
	a, b := cellOf(e, s.tag)
	if a == nil {
		a, b = newCell(e, s.tag)
	}
	*a, *b = wid, count
	return (wid + 1) * s.window
}

func (s *spec) fixedReset(e *memstore.Entry, now int64) {
	if a, b := cellOf(e, s.tag); a != nil && *a == now/s.window {
		*b = 0
	}
}

// --- SlidingWindow; see lua/limits.lua.

type slidingState struct {
	tag       uint64
	total     int64
	lo, hi    int64
	counts    []int64 // ring of buckets+1 counters, indexed by bucket id mod len
	nonexists bool
}

func (s *spec) slidingOf(e *memstore.Entry) *slidingState {
	if e == nil {
		return nil
	}
	if ms, ok := e.Value.(*memState); ok {
		for _, w := range ms.windows {
			if w.tag == s.tag {
				return w
			}
		}
	}
	return nil
}

// slidingView is sliding_view: the state as of now, without changing it.
func (s *spec) slidingView(w *slidingState, now int64) (total, lo, hi, cur int64, cleared bool) {
	cur = now / s.bucket
	if w == nil || w.nonexists {
		return 0, cur - s.buckets, cur - s.buckets - 1, cur, false
	}
	total, lo, hi = w.total, w.lo, w.hi
	if cur < lo {
		cur = lo
	}
	newlo := cur - s.buckets
	if newlo > lo {
		if newlo > hi {
			return 0, newlo, hi, cur, true
		}
		for id := lo; id < newlo; id++ {
			total -= w.bucket(id)
		}
		lo = newlo
	}
	return total, lo, hi, cur, false
}

func (w *slidingState) bucket(id int64) int64 { return w.counts[id%int64(len(w.counts))] }

func (s *spec) slidingCheck(e *memstore.Entry, now, n int64) verdict {
	w := s.slidingOf(e)
	total, lo, hi, cur, _ := s.slidingView(w, now)
	var reset int64
	if total > 0 {
		reset = (hi+s.buckets+1)*s.bucket - now
	}
	if n > s.limit {
		return verdict{statusNever, s.limit - total, -1, reset, 0}
	}
	if total+n > s.limit {
		need := total + n - s.limit
		var acc int64
		for id := lo; id <= hi; id++ {
			acc += w.bucket(id)
			if acc >= need {
				return verdict{statusDenied, s.limit - total, (id+s.buckets+1)*s.bucket - now, reset, 0}
			}
		}
		return verdict{statusDenied, s.limit - total, -1, reset, 0} // unreachable: need <= total
	}
	if n > 0 {
		hi = max(hi, cur)
		reset = (hi+s.buckets+1)*s.bucket - now
	}
	return verdict{statusAllowed, s.limit - total - n, 0, reset, 0}
}

// slidingCharge is slidingCheck for a charge: the verdict and the units
// slidingCommit adds, n, or when n does not fit, a denial and n anyway, at
// most what takes the total to maxChargeCount.
func (s *spec) slidingCharge(e *memstore.Entry, now, n int64) (verdict, int64) {
	total, _, _, _, _ := s.slidingView(s.slidingOf(e), now)
	if n > s.limit || total+n > s.limit {
		return verdict{status: statusDenied}, min(n, maxChargeCount-total)
	}
	return s.slidingCheck(e, now, n), n
}

func (s *spec) slidingCommit(e *memstore.Entry, now, n int64) int64 {
	w := s.slidingOf(e)
	if w == nil {
		w = &slidingState{tag: s.tag, counts: make([]int64, s.buckets+1), nonexists: true}
		ms := memStateOf(e)
		ms.windows = append(ms.windows, w)
	}
	total, lo, hi, cur, cleared := s.slidingView(w, now)
	switch {
	case w.nonexists || cleared:
		clear(w.counts)
	default:
		for id := w.lo; id < lo; id++ {
			w.counts[id%int64(len(w.counts))] = 0
		}
	}
	hi = max(hi, cur)
	w.counts[cur%int64(len(w.counts))] += n
	w.total, w.lo, w.hi, w.nonexists = total+n, lo, hi, false
	return (hi + s.buckets + 1) * s.bucket
}

// --- SlidingLog; see lua/limits.lua. Every log rule of a Limiter shares one log.

type logState struct {
	tag uint64
	ts  []int64 // admission times, ascending
}

func logOf(e *memstore.Entry, tag uint64) *logState {
	if e == nil {
		return nil
	}
	if ms, ok := e.Value.(*memState); ok {
		for _, l := range ms.logs {
			if l.tag == tag {
				return l
			}
		}
	}
	return nil
}

func (l *logState) newest() (int64, bool) {
	if l == nil || len(l.ts) == 0 {
		return 0, false
	}
	return l.ts[len(l.ts)-1], true
}

// after returns the index of the first entry > t.
func (l *logState) after(t int64) int {
	return sort.Search(len(l.ts), func(i int) bool { return l.ts[i] > t })
}

func (s *spec) logCheck(lg *logState, now, n int64) verdict {
	var c int64
	first := 0
	if lg != nil {
		first = lg.after(now - s.window)
		c = int64(len(lg.ts) - first)
	}
	newest, has := lg.newest()
	var reset int64
	if c > 0 {
		reset = newest + s.window - now
	}
	if n > s.limit {
		return verdict{statusNever, s.limit - c, -1, reset, 0}
	}
	if c+n > s.limit {
		need := c + n - s.limit
		return verdict{statusDenied, s.limit - c, lg.ts[first+int(need)-1] + s.window - now, reset, 0}
	}
	if n > 0 {
		nw := now
		if has && newest > nw {
			nw = newest
		}
		reset = nw + s.window - now
	}
	return verdict{statusAllowed, s.limit - c - n, 0, reset, 0}
}

func logCommit(e *memstore.Entry, tag uint64, maxWindow, now, n int64) int64 {
	lg := logOf(e, tag)
	if lg == nil {
		lg = &logState{tag: tag}
		ms := memStateOf(e)
		ms.logs = append(ms.logs, lg)
	}
	if k := lg.after(now - maxWindow); k > 0 {
		lg.ts = append(lg.ts[:0], lg.ts[k:]...)
	}
	i := lg.after(now) // entries newer than now stay after the new ones
	for range n {
		lg.ts = append(lg.ts, 0)
	}
	copy(lg.ts[i+int(n):], lg.ts[i:])
	for j := i; j < i+int(n); j++ {
		lg.ts[j] = now
	}
	newest, _ := lg.newest()
	return newest + maxWindow
}

func ceilDiv(a, b int64) int64 {
	q := a / b
	if q*b < a {
		q++
	}
	return q
}
