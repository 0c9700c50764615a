// Package degraded keeps limits enforced in process while their store
// cannot decide (a stall, a failover, an outage), instead of admitting or
// denying everything. The decision server uses it for its failure mode
// FailDegraded.
//
// While the store answers, the caller shows every result it gave (Seen):
// for each state key the last thing the store said about it — how much was
// remaining and until when, for each rule of its limit — is remembered,
// within a bounded memory. While the store cannot decide, the caller
// decides on Limits: each limit's rules, each cut to this server's share
// of it (the limit divided by the live servers, rounded down), on an
// in-process memory backend. A key decided here for the first time in an
// outage starts each rule from the state the store last gave for it: its
// share of what was remaining of that rule, while that is still current.
// Every admission made here is owed to the store (a debt, per key): when
// the store answers again, the next request for the key carries its debt
// (Charge adds it to the request's cost), so that the store counts what
// was admitted without it, and a window is never admitted twice. A debt
// lasts as long as it can matter: to the end of its fixed window, or one
// unit of its limit for the other algorithms. One the store refuses (the
// key is over its limit with it) makes the caller spend what the limit has
// left (Spent), so that no other server is admitted past it either; the
// rest is kept until it ends, and the key's requests are refused
// meanwhile, as they must be.
//
// The servers do not find the store back at once: each probes it on its
// own schedule, and until it does, what it admitted is owed, not counted.
// So for a grace period after an outage (Options.Grace; Recovered starts
// it, InGrace tells it) every decision the store admits must also pass
// this server's share, in the state the outage left it (Check): no server
// is admitted by the store what another still owes.
//
// The bound: with N servers that agree on N, what the whole fleet admits
// in any window of a limit is at most the limit (the store's count and
// every server's share of what remained, which together never exceed it),
// plus the store's own count of calls whose answers were lost to the
// outage (answered here too: counted twice, so under-admitted). A server
// that overestimates N under-admits; one that underestimates it (it sees
// fewer servers than there are) over-admits by the shares it takes too
// many. "What remained" is what the store last told each server: the bound
// assumes every server sees its part of a key's traffic, so that each has
// heard from the store shortly before the outage. A server that decided a
// key rarely (one key's traffic routed mostly to another server) starts
// the outage from an older count, and the window in progress can admit up
// to its share of what was spent since; windows that begin during the
// outage are exact. Memory: the remembered results are bounded
// (Options.MemoBytes, an LRU ring); a key whose result was forgotten starts
// afresh with its share.
package degraded

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coocood/freecache"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/ratelimit"
)

// Options configure Limits.
type Options struct {
	// Servers returns how many servers share the store, this one
	// included; nil or a value below 1 means 1.
	Servers func() int
	// MemoBytes bounds the memory of the remembered store results;
	// DefaultMemoBytes when 0 (freecache's minimum, 512 KiB, at least).
	MemoBytes int
	// Clock is the time the in-process limits and the store's results
	// are read on: the store's injected clock, or nil for the real one.
	Clock clock.Clock
	// Grace is how long after an outage every decision must also pass
	// this server's share (Check): longer than the other servers can take
	// to find the store back and pay their debts. DefaultGrace when 0.
	Grace time.Duration
}

// DefaultGrace is what a zero Options.Grace means.
const DefaultGrace = 3 * time.Second

// DefaultMemoBytes is the default bound of the remembered results: about
// 80,000 keys of 50 bytes.
const DefaultMemoBytes = 8 << 20

// maxDebts bounds the keys that owe the store at once. Past it, a request
// for another key is refused rather than admitted without a record.
const maxDebts = 1 << 20

// Limits decides requests in process while the store cannot. Safe for
// concurrent use.
type Limits struct {
	memOpts   []backend.Option
	memoBytes int
	servers   func() int
	now       func() time.Time

	memoOnce sync.Once
	memo     *freecache.Cache // made at the first Seen
	mem      *backend.Memory  // made at the first Decide, under mu

	mu       sync.Mutex
	limiters map[limiterKey][]*ratelimit.Limiter // the local limiters of each store limiter, by share: one per rule
	debts    map[string]debt                     // by state key
	// seeded holds, for each key decided here, when the store gave the
	// result it was seeded from (0: none). A key is seeded again only
	// when the store has answered for it since.
	seeded map[string]int64

	owed atomic.Int64 // len(debts), read without the lock on the hot path

	grace      time.Duration
	outage     atomic.Bool  // decided here since the store last answered
	graceUntil atomic.Int64 // Unix ns: Check applies until then
}

type limiterKey struct {
	store  *ratelimit.Limiter
	shares int
}

// debt is what a key was admitted in process and the store has not counted.
type debt struct {
	n       int64
	expires time.Time
}

// New returns the Limits of o.
func New(o Options) *Limits {
	if o.MemoBytes <= 0 {
		o.MemoBytes = DefaultMemoBytes
	}
	var opts []backend.Option
	if o.Clock != nil {
		opts = append(opts, backend.WithClock(o.Clock))
	} else {
		o.Clock = clock.Real{}
	}
	if o.Servers == nil {
		o.Servers = func() int { return 1 }
	}
	if o.Grace <= 0 {
		o.Grace = DefaultGrace
	}
	return &Limits{
		grace:     o.Grace,
		memOpts:   opts,
		memoBytes: o.MemoBytes,
		servers:   o.Servers,
		now:       o.Clock.Now,
		limiters:  map[limiterKey][]*ratelimit.Limiter{},
		debts:     map[string]debt{},
		seeded:    map[string]int64{},
	}
}

// Close releases the in-process state.
func (l *Limits) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.mem != nil {
		return l.mem.Close()
	}
	return nil
}

// memoCache returns the remembered results, made on first use.
func (l *Limits) memoCache() *freecache.Cache {
	l.memoOnce.Do(func() { l.memo = freecache.NewCache(l.memoBytes) })
	return l.memo
}

// memo values: when the result was given (Unix ns), then for each rule of
// the request's limit, in its order, what was remaining and when the rule
// resets from it (Unix ns): memoHead + memoRule bytes per rule.
const (
	memoHead = 8
	memoRule = 16
)

// memoBuf holds a memo value of up to 8 rules without allocating.
type memoBuf [memoHead + 8*memoRule]byte

// memoRules returns the number of rules of memo value v, or 0 when v is not
// one.
func memoRules(v []byte) int {
	if len(v) < memoHead+memoRule || (len(v)-memoHead)%memoRule != 0 {
		return 0
	}
	return (len(v) - memoHead) / memoRule
}

// memoEntry returns what memo value v says of rule j: remaining, and when
// the rule resets from it (Unix ns).
func memoEntry(v []byte, j int) (remaining, resets int64) {
	o := memoHead + j*memoRule
	return int64(binary.BigEndian.Uint64(v[o:])), int64(binary.BigEndian.Uint64(v[o+8:]))
}

// sameReset is how close two answers' reset times are when they are about
// the same window: concurrent calls see the same end, give or take their
// latencies.
const sameReset = 100 * time.Millisecond

// Seen remembers what the store answered for reqs, asked at start: results
// for reqs[i] and, when reqs[i].Limiter has several rules, each[i] (of
// ratelimit.Limiter.AllowNEach), its rules' own results, in their order.
// each, or each[i], is nil for requests of one rule, whose result is their
// rule's. A request of several rules remembered without its rules' results
// is remembered by its binding rule's, which then bounds every rule (less
// exact: an outage that outlasts that rule starts every rule afresh).
//
// A rule resets ResetAfter after the store decided, somewhere between start
// and the answer's arrival: it is remembered as resetting ResetAfter after
// the arrival (now), never earlier than it does. (From start, an answer
// that took long to arrive — a busy machine — would make its window end
// early here, and the degraded mode start the key afresh in the window's
// last moments, beside what the store had already admitted in it.)
func (l *Limits) Seen(reqs []ratelimit.Request, results []ratelimit.Result, each [][]ratelimit.Result, start time.Time) {
	arrived := l.now()
	if arrived.Before(start) {
		arrived = start
	}
	var buf, oldBuf memoBuf
	for i, q := range reqs {
		rs := results[i : i+1]
		if i < len(each) && each[i] != nil {
			rs = each[i]
		}
		var life time.Duration // until the last rule resets
		for _, r := range rs {
			life = max(life, r.ResetAfter)
		}
		if life <= 0 {
			continue // every rule full: nothing to remember, the key starts afresh
		}
		var v []byte
		if size := memoHead + len(rs)*memoRule; size <= len(buf) {
			v = buf[:size]
		} else {
			v = make([]byte, size)
		}
		key := []byte(q.Key)
		old, err := l.memoCache().GetWithBuf(key, oldBuf[:])
		if err != nil || memoRules(old) != len(rs) {
			old = nil
		}
		kept := 0
		for j, r := range rs {
			// A rule that is full resets at start: the key starts it
			// afresh.
			remaining, resets := max(r.Remaining, 0), arrived.Add(max(r.ResetAfter, 0)).UnixNano()
			// Answers of concurrent calls arrive in any order: an older
			// one, which says more was remaining in the same window (its
			// reset within sameReset of the one kept), does not replace a
			// newer.
			if old != nil {
				oldRemaining, oldResets := memoEntry(old, j)
				if d := resets - oldResets; d < int64(sameReset) && d > -int64(sameReset) && oldRemaining < remaining {
					remaining, resets = oldRemaining, oldResets
					kept++
				}
			}
			o := memoHead + j*memoRule
			binary.BigEndian.PutUint64(v[o:], uint64(remaining))
			binary.BigEndian.PutUint64(v[o+8:], uint64(resets))
		}
		if kept == len(rs) {
			continue // nothing newer
		}
		binary.BigEndian.PutUint64(v[0:], uint64(start.UnixNano()))
		ttl := int(life/time.Second) + 2
		_ = l.memoCache().Set(key, v, ttl) // too large: forgotten
	}
}

// Owed reports whether any key owes the store: only then does Charge
// change a request.
func (l *Limits) Owed() bool { return l.owed.Load() > 0 }

// Charge adds to each request of reqs the debt its key owes the store and
// returns what it added (nil when nothing); the caller passes it to Paid
// once the store has answered.
func (l *Limits) Charge(reqs []ratelimit.Request) []int64 {
	if !l.Owed() {
		return nil
	}
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	var added []int64
	for i := range reqs {
		d, ok := l.debts[reqs[i].Key]
		if !ok {
			continue
		}
		if !now.Before(d.expires) {
			delete(l.debts, reqs[i].Key)
			continue
		}
		if added == nil {
			added = make([]int64, len(reqs))
		}
		added[i] = d.n
		reqs[i].N += d.n
	}
	l.owed.Store(int64(len(l.debts)))
	return added
}

// Paid settles the debts Charge added to reqs, after the store's call:
// those of an admitted request are counted by the store now, and cleared;
// those of a refused one, or of a call that failed (stored is false), stay
// owed. It takes the debts back out of the requests' costs.
func (l *Limits) Paid(reqs []ratelimit.Request, results []ratelimit.Result, added []int64, stored bool) {
	if added == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, n := range added {
		if n == 0 {
			continue
		}
		reqs[i].N -= n
		if stored && results[i].Allowed {
			if d := l.debts[reqs[i].Key]; d.n <= n {
				delete(l.debts, reqs[i].Key)
			} else {
				d.n -= n // admitted in process since Charge
				l.debts[reqs[i].Key] = d
			}
		}
	}
	l.owed.Store(int64(len(l.debts)))
}

// Spent records that n of the debt of key was counted by the store
// otherwise (the caller spent what the key's limit had left, when the debt
// did not fit in it): the rest stays owed.
func (l *Limits) Spent(key string, n int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	d, ok := l.debts[key]
	if !ok {
		return
	}
	if d.n <= n {
		delete(l.debts, key)
	} else {
		d.n -= n
		l.debts[key] = d
	}
	l.owed.Store(int64(len(l.debts)))
}

// Call runs decide, the store's decision of reqs into results (and into
// each, the rules' own results, as Seen takes them: nil for requests of
// one rule), with each key's debt added to its cost, and settles it, as
// every store call of a caller of Limits must go:
//   - the debts of admitted requests are paid; the others stay owed;
//   - the store's answers are remembered (Seen);
//   - a request refused with its debt spends what its limit has left
//     through spend(j, n), which returns the store's result of that and
//     whether it admitted it (then Spent), and the refusal takes that
//     result's Remaining and ResetAfter; where the store's answer, made with
//     the debt, said it is never admissible, its RetryAfter becomes the time
//     until the limit is back to full, at least a second;
//   - in the grace period after an outage, what the store admitted must
//     also pass this server's share (Check; rules gives the requests' rules
//     and windows, as Decide takes them).
//
// It returns decide's error: the debts then stay owed and nothing is
// remembered.
func (l *Limits) Call(ctx context.Context, reqs []ratelimit.Request, results []ratelimit.Result, each [][]ratelimit.Result,
	rules func() ([][]ratelimit.Rule, []time.Duration), decide func() error, spend func(j int, n int64) (ratelimit.Result, bool)) error {
	start := l.now()
	added := l.Charge(reqs)
	err := decide()
	l.Paid(reqs, results, added, err == nil)
	if err != nil {
		return err
	}
	l.Seen(reqs, results, each, start)
	l.Recovered()
	for j, n := range added {
		r := &results[j]
		if n == 0 || r.Allowed {
			continue
		}
		if r.Remaining > 0 {
			// The debt does not fit: spend what the limit has left, so
			// that no other server is admitted past it either (a debt
			// owed to a longer rule that does not fit in a shorter one
			// is paid so, in parts). The refusal then tells what the
			// spending left.
			part := min(r.Remaining, n)
			if s, ok := spend(j, part); ok {
				l.Spent(reqs[j].Key, part)
				r.Remaining, r.ResetAfter = s.Remaining, s.ResetAfter
			}
		}
		if r.RetryAfter < 0 {
			// Never admissible with the debt, not on its own: the
			// caller may retry once the limit is back to full.
			r.RetryAfter = max(r.ResetAfter, time.Second)
		}
	}
	// The store's refusals are settled; what it admitted (debts paid) must
	// also pass this server's share in the grace period.
	if l.InGrace() && allAdmitted(results) {
		rs, ws := rules()
		local := make([]ratelimit.Result, len(reqs))
		if ok, err := l.Check(ctx, reqs, rs, ws, local); err == nil && !ok {
			copy(results, local) // refused: the store's units stay spent
		}
	}
	return nil
}

func allAdmitted(results []ratelimit.Result) bool {
	for _, r := range results {
		if !r.Allowed {
			return false
		}
	}
	return true
}

// Recovered tells l that the store answered: after an outage (a Decide
// since the last answer), the grace period starts.
func (l *Limits) Recovered() {
	if l.outage.Load() && l.outage.Swap(false) {
		l.graceUntil.Store(l.now().Add(l.grace).UnixNano())
	}
}

// InGrace reports whether the grace period after an outage runs.
func (l *Limits) InGrace() bool {
	until := l.graceUntil.Load()
	return until != 0 && l.now().UnixNano() < until
}

// Decide decides reqs in one step on this server's share of each limit:
// rules[i] are the rules of reqs[i] (its Limiter's, as the store decides
// them, in their order: a result's Rule indexes them), each cut with
// Share, and windows[i] how long an admission matters to the rules of
// reqs[i] that are not fixed windows (its limit's unit; see Lasting). results
// get the decisions; an admitted request's cost becomes its key's debt,
// which lasts as long as it matters to the longest-lasting of its rules.
// The results' Limit and Remaining are those of the share; their RuleName
// is not the store's (the caller knows the names of its rules).
func (l *Limits) Decide(ctx context.Context, reqs []ratelimit.Request, rules [][]ratelimit.Rule, windows []time.Duration, results []ratelimit.Result) (bool, error) {
	l.outage.Store(true)
	return l.decide(ctx, reqs, rules, windows, results, true)
}

// Check decides reqs, which the store has admitted, on this server's share
// as Decide does, in the grace period after an outage: it spends the share
// but owes nothing (the store counted them), and a key is not seeded again
// from the store's answers (its state here is what the outage left).
func (l *Limits) Check(ctx context.Context, reqs []ratelimit.Request, rules [][]ratelimit.Rule, windows []time.Duration, results []ratelimit.Result) (bool, error) {
	return l.decide(ctx, reqs, rules, windows, results, false)
}

func (l *Limits) decide(ctx context.Context, reqs []ratelimit.Request, rules [][]ratelimit.Rule, windows []time.Duration, results []ratelimit.Result, owe bool) (bool, error) {
	now := l.now()
	shares := max(l.servers(), 1)
	total := 0 // local requests: one per rule
	for i := range reqs {
		total += len(rules[i])
	}
	var lb [8]ratelimit.Request
	local := lb[:0]
	if total > len(lb) {
		local = make([]ratelimit.Request, 0, total)
	}
	l.mu.Lock()
	if l.mem == nil {
		l.mem = backend.NewMemory(l.memOpts...)
	}
	if len(l.seeded) > maxDebts {
		// Keys without a debt have had no admission here for as long as
		// one could matter: their state here is full again.
		for k := range l.seeded {
			if _, owed := l.debts[k]; !owed {
				delete(l.seeded, k)
			}
		}
	}
	for i, q := range reqs {
		lims, err := l.limiter(q.Limiter, rules[i], shares)
		if err != nil {
			l.mu.Unlock()
			return false, err
		}
		for _, lim := range lims {
			local = append(local, ratelimit.Request{Limiter: lim, Key: q.Key, N: q.N})
		}
		if _, known := l.seeded[q.Key]; owe || !known {
			if err := l.seed(ctx, lims, q.Key, shares, now); err != nil {
				l.mu.Unlock()
				return false, err
			}
		}
	}
	l.mu.Unlock()
	var ok bool
	var err error
	if len(local) == len(reqs) {
		// One rule each: the rules' results are the requests'.
		ok, err = ratelimit.AllowAll(ctx, local, results)
	} else {
		var buf [8]ratelimit.Result
		var each []ratelimit.Result
		if len(local) <= len(buf) {
			each = buf[:len(local)]
		} else {
			each = make([]ratelimit.Result, len(local))
		}
		if ok, err = ratelimit.AllowAll(ctx, local, each); err == nil {
			for i := range reqs {
				results[i], each = combine(each[:len(rules[i])], ok), each[len(rules[i]):]
			}
		}
	}
	if err != nil || !ok || !owe {
		return ok, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for i, q := range reqs {
		if q.N <= 0 {
			continue
		}
		d, exists := l.debts[q.Key]
		if !exists && len(l.debts) >= maxDebts {
			// Nowhere to record it: refuse rather than admit unrecorded.
			for j := range results {
				results[j].Allowed = false
			}
			results[i].RetryAfter = time.Second
			return false, nil
		}
		d.n += q.N
		for _, r := range rules[i] {
			if end := until(r, windows[i], now); end.After(d.expires) {
				d.expires = end
			}
		}
		l.debts[q.Key] = d
	}
	l.owed.Store(int64(len(l.debts)))
	return true, nil
}

// Lasting is how long an admission at most matters to rule r, for the
// windows of Decide when r is not a fixed window: the Window of a
// SlidingWindow (and one of its buckets) or a SlidingLog, and for the
// bucket rules the time they take to refill from empty (Capacity·Every/Refill
// for a TokenBucket, Burst·Per/Rate for a GCRA, (Burst+1)·Per/Rate for a
// LeakyBucket); a fixed window's own Window. Unknown rules: 0.
func Lasting(r ratelimit.Rule) time.Duration {
	switch r := r.(type) {
	case ratelimit.FixedWindow:
		return r.Window
	case ratelimit.SlidingWindow:
		b := int64(max(r.Buckets, 1))
		if r.Buckets == 0 {
			b = ratelimit.DefaultBuckets
		}
		return r.Window + r.Window/time.Duration(b)
	case ratelimit.SlidingLog:
		return r.Window
	case ratelimit.TokenBucket:
		return refill(r.Capacity, r.Every, r.Refill)
	case ratelimit.GCRA:
		return refill(r.Burst, r.Per, r.Rate)
	case ratelimit.LeakyBucket:
		return refill(r.Burst+1, r.Per, r.Rate)
	}
	return 0
}

// refill returns n·per/rate, rounded up, saturating at ratelimit.MaxPeriod.
func refill(n int64, per time.Duration, rate int64) time.Duration {
	if n <= 0 || per <= 0 || rate <= 0 {
		return 0
	}
	f := float64(n) * float64(per) / float64(rate)
	if f >= float64(ratelimit.MaxPeriod) {
		return ratelimit.MaxPeriod
	}
	return time.Duration(f) + 1
}

// until is how long an admission at now matters to a limit: to the end of
// its fixed window (windows start at multiples of their length since the
// Unix epoch, as on every backend), or one window (unit) for the other
// algorithms.
func until(r ratelimit.Rule, window time.Duration, now time.Time) time.Time {
	if fw, ok := r.(ratelimit.FixedWindow); ok && fw.Window > 0 {
		ns, w := now.UnixNano(), fw.Window.Nanoseconds()
		return time.Unix(0, ns-ns%w+w)
	}
	return now.Add(window)
}

// limiter returns the local limiters of store limiter s with rules rs: one
// per rule, cut to one of shares, in their order; l.mu is held. Each rule
// has a limiter of its own so that each starts from what the store said of
// it (seed), and AllowAll decides them at once.
func (l *Limits) limiter(s *ratelimit.Limiter, rs []ratelimit.Rule, shares int) ([]*ratelimit.Limiter, error) {
	k := limiterKey{s, shares}
	if lims := l.limiters[k]; lims != nil {
		return lims, nil
	}
	if len(l.limiters) > 4096 {
		clear(l.limiters) // limits and overrides come and go; their state restarts
	}
	if len(rs) == 0 {
		return nil, fmt.Errorf("degraded: a request of %p has no rules", s)
	}
	// Each share is named apart: two rules cut to nothing are the same
	// rule otherwise, and the local state of one store limiter is never
	// another's.
	lims := make([]*ratelimit.Limiter, len(rs))
	for j, r := range rs {
		lim, err := ratelimit.New(l.mem, ratelimit.Named(fmt.Sprintf("degraded/%p/%d/%d", s, shares, j), Share(r, shares)))
		if err != nil {
			return nil, fmt.Errorf("degraded: the share of %T: %w", r, err)
		}
		lims[j] = lim
	}
	l.limiters[k] = lims
	return lims, nil
}

// combine returns the result of a request of several rules from rs, its
// rules' own results of one AllowAll call (a single-rule limiter each)
// that allowed or not: the binding rule's, as ratelimit.Limiter picks it
// (see Result.Rule), with Rule its index. A rule that denies has a
// RetryAfter (< 0 when it never admits); the others report 0.
func combine(rs []ratelimit.Result, allowed bool) ratelimit.Result {
	best, denied := 0, false
	var delay time.Duration
	for j, r := range rs {
		b := rs[best]
		switch {
		case r.RetryAfter == 0:
			delay = max(delay, r.Delay)
			if !denied && r.Remaining < b.Remaining {
				best = j
			}
		case !denied:
			best, denied = j, true
		case r.RetryAfter < 0:
			if b.RetryAfter > 0 {
				best = j
			}
		case b.RetryAfter > 0 && r.RetryAfter > b.RetryAfter:
			best = j
		}
	}
	res := rs[best]
	res.Allowed, res.Rule = allowed, best
	if allowed {
		res.Delay = delay
	}
	return res
}

// seed starts key on lims, the local limiters of its rules, the first time
// it is decided here and whenever the store has answered for it since:
// each rule from what the store last said of it, when that is still
// current, keeps its share of what was remaining; else its share afresh.
// l.mu is held.
func (l *Limits) seed(ctx context.Context, lims []*ratelimit.Limiter, key string, shares int, now time.Time) error {
	var buf memoBuf
	val, err := l.memoCache().GetWithBuf([]byte(key), buf[:])
	seen, known := int64(0), 0
	if err == nil {
		if known = memoRules(val); known > 0 {
			seen = int64(binary.BigEndian.Uint64(val[0:]))
		}
	}
	if last, ok := l.seeded[key]; ok && last == seen {
		return nil // decided here since the store last answered for it
	}
	l.seeded[key] = seen
	for j, lim := range lims {
		if err := lim.Reset(ctx, key); err != nil {
			return err
		}
		full, err := lim.AllowN(ctx, key, 0)
		if err != nil {
			return err
		}
		// This server's share of what the store had left of the rule,
		// when the store's answer is still current, else its share
		// afresh; less, either way, what this server admitted here that
		// the store has not counted (a debt lasts as long as the
		// admission matters). A memo of one result for several rules
		// (see Seen) bounds each.
		left := full.Remaining
		if e := j; known == len(lims) || known == 1 {
			if known == 1 {
				e = 0
			}
			if remaining, resets := memoEntry(val, e); now.UnixNano() < resets {
				left = min(left, remaining/int64(shares))
			}
		}
		left -= l.debts[key].n
		if spent := full.Remaining - max(left, 0); spent > 0 {
			if _, err := lim.AllowN(ctx, key, spent); err != nil {
				return err
			}
		}
	}
	return nil
}

// Share is r cut to one of shares equal parts, rounded down: its limit,
// rate and burst divided; a part of nothing denies everything.
func Share(r ratelimit.Rule, shares int) ratelimit.Rule {
	n := int64(max(shares, 1))
	if n == 1 {
		return r
	}
	switch r := r.(type) {
	case ratelimit.FixedWindow:
		r.Limit /= n
		return r
	case ratelimit.SlidingWindow:
		r.Limit /= n
		return r
	case ratelimit.SlidingLog:
		r.Limit /= n
		return r
	case ratelimit.TokenBucket:
		r.Capacity, r.Refill = r.Capacity/n, r.Refill/n
		if r.Capacity == 0 || r.Refill == 0 {
			return ratelimit.FixedWindow{Limit: 0, Window: max(r.Every, time.Second)}
		}
		return r
	case ratelimit.LeakyBucket:
		r.Rate, r.Burst = r.Rate/n, r.Burst/n
		if r.Delay > 0 {
			r.Delay /= n
		}
		if r.Rate == 0 {
			return ratelimit.FixedWindow{Limit: 0, Window: max(r.Per, time.Second)}
		}
		return r
	case ratelimit.GCRA:
		r.Rate, r.Burst = r.Rate/n, r.Burst/n
		if r.Rate == 0 {
			return ratelimit.FixedWindow{Limit: 0, Window: max(r.Per, time.Second)}
		}
		return r
	}
	return r
}
