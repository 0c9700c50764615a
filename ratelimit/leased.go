package ratelimit

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"sync"
	"sync/atomic"
	"time"
	"weak"
)

// Leased decides like a Limiter, but takes a key's budget in leases: one
// store call takes up to k units (consumed in the store at once, as AllowN(k)
// would) and the process then admits from them in process, without a store
// call per decision, until they are spent, their deadline passes or the
// lease's lifetime ends; unspent units are given back where the rules allow
// (see Release). Create it with NewLeased; it is safe for concurrent use.
// Allow and AllowN are what most callers want. A decision from a lease takes
// no lock: one clock read and one compare-and-swap, about what one call of
// golang.org/x/time/rate costs, and less under contention.
//
// Leasing never admits more than the rules allow across all processes: a
// unit is admitted only while the store would still count it (a FixedWindow
// unit within the window it was taken in, a SlidingWindow unit within its
// bucket, a TokenBucket or GCRA unit no later than the time the store gave
// its place in the bucket). What it costs is under-admission: at any time at
// most the units held by the leases of all processes, P·k for P processes
// with leases of at most k units, are counted in the store but not yet used,
// plus for a TokenBucket, GCRA or LeakyBucket the rule's refill of
// LeaseTarget (the pad, see LeaseTarget; docs/algorithms.md, "Quota
// leases"). The lease size k of a key is the
// rate this process saw for it times LeaseTarget, within LeaseSize and at
// most LeaseFraction of the smallest limit: a quiet process holds little.
//
// A Result of a decision from a lease is exact in Allowed; Limit, Rule and
// RuleName are the lease's, Remaining is the store's Remaining at the grant
// plus the units the lease still holds, and ResetAfter is the grant's, less
// the time since. After a denial by the store, requests of at least as many
// units are denied in process until its RetryAfter has passed (for a bucket
// rule, until the lease wanted could be had), with the RetryAfter left.
type Leased struct {
	lim  *Limiter
	cfg  leaseConfig
	most int64 // the largest lease: min(cfg.max, cfg.fraction × the smallest limit), >= 1
	life int64 // cfg.life in µs
	ends bool  // leases end at life: no drain rule, whose units have their own places
	pace int64 // µs per unit of the slowest drain rule (0 without one)
	// the smallest limit: more units can never be admitted, which the store
	// says (RetryAfter < 0) rather than an in-process denial
	smallest int64
	hold     int64   // LeaseTarget in µs: a drain rule's pad (see Limiter.grant)
	noMarks  []int64 // the marks of a spent lease that exact made (never written)

	keys sync.Map // key → *keyLease
	// hot is the lease of the key decided last: a run of decisions of one
	// key (a hot key, what leases are for) finds it without hashing.
	hot atomic.Pointer[keyLease]

	// Counters of decisions are kept per key, under its mu (no shared
	// cache line written per decision), and added here when Flush forgets
	// the key; Stats sums both. statsMu orders the two: Flush holds it
	// shared while it moves counts here, Stats exclusively.
	statsMu sync.RWMutex
	stats   struct{ decisions, fromLease, grants, granted, denied, giveBacks, flushErrors atomic.Int64 }
}

// LeaseStats counts what a Leased did since NewLeased.
type LeaseStats struct {
	Decisions int64 // AllowN calls with n > 0 that returned no error
	FromLease int64 // of them, decided in process (from a lease, or denied until a RetryAfter): no store call
	Grants    int64 // leases taken (store calls that admitted)
	Granted   int64 // units the leases took from the store
	Denied    int64 // store calls that denied (nothing taken)
	GiveBacks int64 // store calls that gave units back
	// FlushErrors counts the background flushes (see LeaseFlushEvery) that
	// returned an error; their units are given back by a later flush.
	FlushErrors int64
}

// Stats returns l's counters. Granted minus the units admitted is what the
// leases took and did not use: given back where the rules allowed, held, or
// dropped.
func (l *Leased) Stats() LeaseStats {
	l.statsMu.Lock()
	defer l.statsMu.Unlock()
	st := LeaseStats{
		Decisions: l.stats.decisions.Load(),
		FromLease: l.stats.fromLease.Load(),
		Grants:    l.stats.grants.Load(),
		Granted:   l.stats.granted.Load(),
		Denied:    l.stats.denied.Load(),
		GiveBacks: l.stats.giveBacks.Load(),

		FlushErrors: l.stats.flushErrors.Load(),
	}
	l.keys.Range(func(_, v any) bool {
		k := v.(*keyLease)
		k.mu.Lock()
		if !k.gone { // else its counts are in l.stats already
			st.Decisions += k.decisions
			st.FromLease += k.fromLease
			if f := k.fast.Load(); f != nil {
				c := int64(f.word.Load() >> fastUnitBits & fastCount)
				st.Decisions += c
				st.FromLease += c
			}
		}
		k.mu.Unlock()
		return true
	})
	return st
}

// LeaseOption configures NewLeased.
type LeaseOption func(*leaseConfig)

type leaseConfig struct {
	target   time.Duration
	life     time.Duration
	flush    time.Duration // < 0: no background flush; 0: life
	min, max int64
	fraction float64
	err      error
}

// Defaults of NewLeased.
const (
	DefaultLeaseTarget   = 50 * time.Millisecond
	DefaultLeaseMax      = 100000
	DefaultLeaseFraction = 0.05
)

// LeaseTarget sets how long a lease should last at the rate this process
// sees for a key: k ≈ rate × d (default DefaultLeaseTarget). It must be > 0
// and at most MaxPeriod.
//
// For a TokenBucket, GCRA or LeakyBucket it is also how long a lease's
// units can wait: a unit may be admitted no later than its place in the
// bucket, which in a bucket near empty comes at the rule's own rate. So a
// grant first raises a level below the rule's refill of d to it (the pad,
// consumed as if admitted, as far as the capacity leaves room for the
// lease): the pad costs at most the refill of d, and only while the bucket
// is below it.
func LeaseTarget(d time.Duration) LeaseOption {
	return func(c *leaseConfig) {
		if d <= 0 || d > MaxPeriod {
			c.err = fmt.Errorf("ratelimit: LeaseTarget must be > 0 and at most MaxPeriod, got %v", d)
		}
		c.target = d
	}
}

// LeaseLifetime sets the longest a lease lives (default twice LeaseTarget):
// the first decision of a key after that gives the lease's unspent units back
// and takes a new lease, sized by the rate seen meanwhile. It must be > 0
// and at most MaxPeriod. It
// applies to Limiters of FixedWindow and SlidingWindow rules only: a lease of
// a TokenBucket, GCRA or LeakyBucket ends unit by unit at the units' places
// in the bucket, and giving it back early could leave its units counted.
func LeaseLifetime(d time.Duration) LeaseOption {
	return func(c *leaseConfig) {
		if d <= 0 || d > MaxPeriod {
			c.err = fmt.Errorf("ratelimit: LeaseLifetime must be > 0 and at most MaxPeriod, got %v", d)
		}
		c.life = d
	}
}

// LeaseFlushEvery sets how often a background goroutine calls Flush, so
// that keys gone quiet give back what their leases hold and the Leased
// forgets them (default: every LeaseLifetime, at least every second: a
// flush visits every key). d < 0 turns it off: the
// caller then calls Flush (or Close) itself. d must be at most MaxPeriod.
//
// The goroutine holds the Leased weakly: it stops by itself once the
// Leased is no longer referenced (and collected), so a Leased needs no
// Close to end it. Each flush is bounded by a timeout of d; its errors are
// counted in LeaseStats.FlushErrors.
func LeaseFlushEvery(d time.Duration) LeaseOption {
	return func(c *leaseConfig) {
		if d > MaxPeriod {
			c.err = fmt.Errorf("ratelimit: LeaseFlushEvery must be at most MaxPeriod, got %v", d)
		}
		if d == 0 {
			d = -1
		}
		c.flush = d
	}
}

// LeaseSize bounds the units of one lease (default 1 and DefaultLeaseMax).
// A request of n units above max takes a lease of n units. It needs
// 1 <= min <= max.
func LeaseSize(min, max int64) LeaseOption {
	return func(c *leaseConfig) {
		if min < 1 || max < min {
			c.err = fmt.Errorf("ratelimit: LeaseSize needs 1 <= min <= max, got min %d, max %d", min, max)
		}
		c.min, c.max = min, max
	}
}

// LeaseFraction bounds a lease to f times the smallest limit of the rules (a
// FixedWindow's or SlidingWindow's Limit, a TokenBucket's Capacity, a GCRA's
// Burst), and to at least one unit (default DefaultLeaseFraction). With P
// processes, P·f of the limit may sit unspent in leases. It needs 0 < f <= 1.
func LeaseFraction(f float64) LeaseOption {
	return func(c *leaseConfig) {
		if !(f > 0 && f <= 1) {
			c.err = fmt.Errorf("ratelimit: LeaseFraction must be in (0, 1], got %v", f)
		}
		c.fraction = f
	}
}

// ErrNotLeasable is returned by NewLeased for a Limiter with a rule that
// cannot lease: SlidingLog, and LeakyBucket with a Delay other than NoDelay.
var ErrNotLeasable = errors.New("ratelimit: rule cannot lease")

// NewLeased returns a Leased that decides lim's requests from leases. Every
// rule of lim must be a FixedWindow, SlidingWindow, TokenBucket, GCRA or
// LeakyBucket with Delay NoDelay; the error for another names the rule and
// wraps ErrNotLeasable. Several Leased (in one process or many) on the same
// rules and backend share each key's budget, as Limiters do; a Limiter and a
// Leased may decide the same keys side by side.
func NewLeased(lim *Limiter, opts ...LeaseOption) (*Leased, error) {
	if lim == nil {
		return nil, errors.New("ratelimit: NewLeased: Limiter is nil")
	}
	cfg := leaseConfig{target: DefaultLeaseTarget, min: 1, max: DefaultLeaseMax, fraction: DefaultLeaseFraction}
	for _, o := range opts {
		if o == nil {
			return nil, errors.New("ratelimit: NewLeased: option is nil")
		}
		o(&cfg)
		if cfg.err != nil {
			return nil, cfg.err
		}
	}
	if cfg.life == 0 {
		cfg.life = 2 * cfg.target
	}
	smallest, ends, pace := int64(math.MaxInt64), true, int64(0)
	for i := range lim.specs {
		s := &lim.specs[i]
		if why := s.leasable(); why != "" {
			return nil, fmt.Errorf("%w: rules[%d]: %s", ErrNotLeasable, i, why)
		}
		smallest = min(smallest, s.limit)
		ends = ends && s.kind != kindDrain
		if s.kind == kindDrain {
			pace = max(pace, ceilDiv(s.per, s.rate))
		}
	}
	most := min(cfg.max, max(int64(cfg.fraction*float64(smallest)), 1))
	l := &Leased{
		lim:      lim,
		cfg:      cfg,
		most:     most,
		life:     max(int64(cfg.life/time.Microsecond), 1),
		ends:     ends,
		pace:     pace,
		smallest: smallest,
		hold:     int64(cfg.target / time.Microsecond),
		noMarks:  make([]int64, len(lim.specs)),
	}
	if cfg.flush == 0 {
		cfg.flush = max(cfg.life, time.Second)
	}
	if cfg.flush > 0 {
		go flushEvery(weak.Make(l), cfg.flush)
	}
	return l, nil
}

// flushers counts the running background flush goroutines, for tests.
var flushers atomic.Int64

// flushEvery calls Flush on the Leased wp points to every d, each bounded
// by d, until the Leased has been collected.
func flushEvery(wp weak.Pointer[Leased], d time.Duration) {
	flushers.Add(1)
	defer flushers.Add(-1)
	t := time.NewTicker(d)
	defer t.Stop()
	for range t.C {
		l := wp.Value()
		if l == nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), d)
		if err := l.Flush(ctx); err != nil {
			l.stats.flushErrors.Add(1)
		}
		cancel()
	}
}

// Limiter returns the Limiter l decides for.
func (l *Leased) Limiter() *Limiter { return l.lim }

// keyLease is a process's lease of one key, and what it saw of the key's
// rate. Its fields are guarded by mu, which a decision holds across the
// store call of a new lease, so that a key takes one lease at a time.
type keyLease struct {
	key string
	// fast is the lease as decisions take units from it without mu (see
	// fastLease), nil when it has none to give; set and frozen under mu.
	fast  atomic.Pointer[fastLease]
	mu    sync.Mutex
	g     grant
	spent int64     // units of g used or skipped (past their place): the next is spent+1
	used  int64     // units of g admitted
	sent  time.Time // local time the grant was asked for, for the store's time
	rate  float64   // units per second seen, 0 before the first lease ends
	// The store's last denial, of n units until the store's time until: a
	// request of at least n before then is denied in process.
	denied     Result
	deniedN    int64
	deniedAt   int64     // the store's time of the denial, µs
	deniedSent time.Time // local time the denied call was sent
	gone       bool      // removed from Leased.keys by Flush
	// call is set while a store call of the key is in flight, mu held,
	// and closed when it ends: Local then declines at once rather than
	// wait for it, and AllowN waits for it no longer than its ctx allows.
	call atomic.Pointer[chan struct{}]
	// held is the lease's unspent units when k.mu was last let go (publish),
	// for Held without the lock.
	held atomic.Int64
	// decisions and fromLease count as LeaseStats's fields do, for this key
	// since it entered Leased.keys
	decisions, fromLease int64
}

// calling marks a store call of k in flight (k.mu is held) until called
// is given the channel it returns.
func (k *keyLease) calling() chan struct{} {
	ch := make(chan struct{})
	k.call.Store(&ch)
	return ch
}

// called ends the store call calling marked, waking its waiters.
func (k *keyLease) called(ch chan struct{}) {
	k.call.Store(nil)
	close(ch)
}

// lock takes k.mu for AllowN, waiting for another decision's store call
// no longer than ctx allows (a brief in-process hold is waited for).
func (k *keyLease) lock(ctx context.Context) error {
	for {
		c := k.call.Load()
		if c == nil {
			k.mu.Lock()
			return nil
		}
		select {
		case <-*c:
		case <-ctx.Done():
			return ctx.Err()
		}
		if k.mu.TryLock() {
			return nil
		}
	}
}

// now returns the store's time of k's lease now: l.at(k, l.instant()).
func (l *Leased) now(k *keyLease) int64 { return l.at(k, l.instant()) }

// An instant is the time of a decision, read before the key's lock is
// taken (as Limiter and x/time/rate read theirs), so that no clock is read
// while others wait for the lock: the store's µs for the memory backend or
// an injected clock, else the local time.
type instant struct {
	us    int64
	local time.Time
}

func (l *Leased) instant() instant {
	if m := l.lim.mem; m != nil {
		return instant{us: m.NowMicros()}
	}
	if c := l.lim.b.Clock(); c != nil {
		return instant{us: c.Now().UnixMicro()}
	}
	return instant{local: time.Now()}
}

// at returns the store's time of k's lease at t: the instant's own µs, or
// for Redis's own TIME the grant's time plus the local time from when the
// grant was asked for to t, which is never earlier than Redis's. It is
// never before the grant: t may have been read before a grant that another
// decision made while this one waited for the lock.
func (l *Leased) at(k *keyLease, t instant) int64 { return atGrant(&k.g, k.sent, t) }

// atGrant is at for grant g asked for at local time sent.
func atGrant(g *grant, sent time.Time, t instant) int64 {
	if t.local.IsZero() {
		return max(t.us, g.now)
	}
	return g.now + max(int64((t.local.Sub(sent)+time.Microsecond-1)/time.Microsecond), 0)
}

// since returns the store's µs since its time t, which a call sent at
// local time sent returned: for Redis's own TIME measured locally from
// sent, which is never less than Redis's.
func (l *Leased) since(t int64, sent time.Time) int64 {
	if m := l.lim.mem; m != nil {
		return m.NowMicros() - t
	}
	if c := l.lim.b.Clock(); c != nil {
		return c.Now().UnixMicro() - t
	}
	return int64((time.Since(sent) + time.Microsecond - 1) / time.Microsecond)
}

// validUnit reports whether unit j (1-based) of lease g may be admitted
// at now: within the FixedWindow's window and the SlidingWindow's bucket
// the grant counted it in, and for a drain rule no later than its place in
// the bucket, the time the grant's level minus the units from j on would
// have drained to nothing.
func (l *Leased) validUnit(g *grant, j, now int64) bool {
	for i := range l.lim.specs {
		s := &l.lim.specs[i]
		switch s.kind {
		case kindFixed:
			if now >= (g.marks[i]+1)*s.window {
				return false
			}
		case kindSliding:
			if now >= (g.marks[i]+1)*s.bucket {
				return false
			}
		case kindDrain:
			if d := now - g.now; d > 0 && d > (g.marks[i]-(g.units-j+1)*s.per)/s.rate {
				return false
			}
		}
	}
	return true
}

// Allow is shorthand for AllowN(ctx, key, 1).
func (l *Leased) Allow(ctx context.Context, key string) (Result, error) {
	return l.AllowN(ctx, key, 1)
}

// AllowN decides whether n units may happen now for key: from the key's
// lease when it holds n units still valid, else by giving back what the
// lease holds and taking a new lease of at least n units in one store call.
// When the store has fewer than n units left, nothing is taken and the
// Result is the store's denial. n == 0 peeks at the store (Remaining adds
// what the lease holds).
//
// A decision from a lease does not look at ctx beyond its first check; one
// that calls the store, or waits for another decision of the key that is
// calling it, is bounded by ctx, and when ctx ends first the lease is left
// as it was (units a grant took whose reply was lost are never
// used: under-admission, as for any lost decision).
//
// Errors: as Limiter.AllowN; a store error of the give-back is returned too.
func (l *Leased) AllowN(ctx context.Context, key string, n int64) (Result, error) {
	key, err := checkCall(ctx, key, n)
	if err != nil {
		return Result{}, err
	}
	t := l.instant()
	for {
		k := l.entry(key)
		if n > 0 {
			if r, ok := l.fromFast(k, n, t); ok {
				return r, nil
			}
		}
		if !k.mu.TryLock() {
			if err := k.lock(ctx); err != nil {
				return Result{}, err
			}
		}
		if k.gone { // Flush removed it between entry and Lock
			k.mu.Unlock()
			l.hot.CompareAndSwap(k, nil)
			continue
		}
		l.absorb(k)
		r, err := l.decide(ctx, key, k, n, t)
		if err == nil && n > 0 {
			k.decisions++
		}
		l.publish(k)
		k.mu.Unlock()
		return r, err
	}
}

// Wait blocks until one unit for key is admitted, or ctx ends, as
// Limiter.Wait does.
func (l *Leased) Wait(ctx context.Context, key string) error { return l.WaitN(ctx, key, 1) }

// WaitN is Wait for n units: it sleeps for the RetryAfter of each denial,
// returns ctx's error when ctx ends first, and an error at once when n units
// can never be admitted or when ctx's deadline is sooner than the next
// chance.
func (l *Leased) WaitN(ctx context.Context, key string, n int64) error {
	return waitN(ctx, n, func() (Result, error) { return l.AllowN(ctx, key, n) })
}

// entry returns key's lease, made if need be: the hot one when it is key's.
func (l *Leased) entry(key string) *keyLease {
	if k := l.hot.Load(); k != nil && k.key == key {
		return k
	}
	v, ok := l.keys.Load(key)
	if !ok {
		v, _ = l.keys.LoadOrStore(key, &keyLease{key: key})
	}
	k := v.(*keyLease)
	l.hot.Store(k)
	return k
}

// lookup returns key's lease, nil when l has none (it makes none).
func (l *Leased) lookup(key string) *keyLease {
	if k := l.hot.Load(); k != nil && k.key == key {
		return k
	}
	if v, ok := l.keys.Load(key); ok {
		return v.(*keyLease)
	}
	return nil
}

// A fastLease is a key's lease as published for decisions that take units
// from it without the key's lock: each takes its units with one
// compare-and-swap of word, which counts the units taken since publication
// and the decisions that took them. A decision that finds no fastLease, a
// frozen one, too few units left, its next unit past its place or the
// lease past its lifetime takes the lock, where absorb freezes the
// fastLease (no unit is taken from it after that) and adds what was taken
// from it to the key's lease. Only leases of at most fastMaxUnits units are
// published, so that both counts fit in word.
type fastLease struct {
	g    *grant    // a copy of the key's grant, never changed
	sent time.Time // of the grant
	base int64     // units of g spent when published
	word atomic.Uint64
}

const (
	fastUnitBits = 40
	fastUnits    = 1<<fastUnitBits - 1 // word's units taken
	fastOne      = 1 << fastUnitBits   // one decision, in word's count
	fastCount    = 1<<23 - 1           // word's count, after the shift
	fastFrozen   = 1 << 63
	fastMaxUnits = 1 << 22 // the count never exceeds the units taken
)

// fromFast decides n units at t from k's fastLease, without k's lock;
// false when it cannot (the caller then decides under the lock).
func (l *Leased) fromFast(k *keyLease, n int64, t instant) (Result, bool) {
	f := k.fast.Load()
	if f == nil {
		return Result{}, false
	}
	g := f.g
	now := atGrant(g, f.sent, t)
	if l.ends && now-g.now >= l.life {
		return Result{}, false
	}
	for {
		w := f.word.Load()
		if w&fastFrozen != 0 {
			return Result{}, false
		}
		spent := f.base + int64(w&fastUnits)
		if g.units-spent < n || !l.validUnit(g, spent+1, now) {
			return Result{}, false
		}
		if f.word.CompareAndSwap(w, w+fastOne+uint64(n)) {
			return fromLease(g, spent+n, now), true
		}
	}
}

// absorb freezes k's fastLease, if any, and adds the units and decisions
// taken from it to k. k.mu is held.
func (l *Leased) absorb(k *keyLease) {
	f := k.fast.Load()
	if f == nil {
		return
	}
	k.fast.Store(nil)
	w := f.word.Load()
	for !f.word.CompareAndSwap(w, w|fastFrozen) {
		w = f.word.Load()
	}
	taken, count := int64(w&fastUnits), int64(w>>fastUnitBits&fastCount)
	k.spent += taken
	k.used += taken
	k.decisions += count
	k.fromLease += count
}

// publish makes k's lease, if it has units left, a fastLease. k.mu is held
// and k has no fastLease.
func (l *Leased) publish(k *keyLease) {
	k.held.Store(max(k.g.units-k.spent, 0))
	if k.gone || k.g.units == 0 || k.spent >= k.g.units || k.g.units > fastMaxUnits {
		return
	}
	g := k.g
	k.fast.Store(&fastLease{g: &g, sent: k.sent, base: k.spent})
}

// decide is AllowN at t for a key's lease k, whose mu is held.
func (l *Leased) decide(ctx context.Context, key string, k *keyLease, n int64, t instant) (Result, error) {
	var now int64
	if k.g.units > 0 {
		now = l.at(k, t)
		if l.ends && now-k.g.now >= l.life {
			l.observe(k, now)
			if err := l.giveBack(ctx, key, k); err != nil {
				return Result{}, err
			}
		}
	}
	avail := l.avail(k, now) // the lease's units from the first valid one
	if n == 0 {
		call := k.calling()
		r, err := l.lim.AllowN(ctx, key, 0)
		k.called(call)
		r.Remaining += avail
		return r, err
	}
	if r, ok := l.inProcess(k, n, avail, now); ok {
		return r, nil
	}
	if k.g.units > 0 && avail == 0 {
		// Spent, or past its deadline: give back what the store still
		// counts (a SlidingWindow's bucket that is still in the window).
		l.observe(k, now)
		if err := l.giveBack(ctx, key, k); err != nil {
			return Result{}, err
		}
	}
	// Take a new lease for the n units the lease lacks; the ones it has
	// (fewer than n) are spent with them once the new lease is granted.
	need := n - avail
	want := max(need, l.size(k))
	sent := time.Now()
	if avail == 0 && want == n {
		return l.exact(ctx, key, k, n, t, sent)
	}
	call := k.calling()
	g, err := l.lim.grant(ctx, key, need, want, l.hold)
	k.called(call)
	if err != nil {
		return Result{}, err
	}
	if g.units == 0 {
		l.stats.denied.Add(1)
		if g.res.RetryAfter > 0 {
			// Wait until the lease it wanted could be had: at a drain
			// rule's pace, want-need units after the n. Asking as soon as
			// one unit is back would send a call per unit to the store when
			// a bucket is empty, where a lease is worth most.
			k.denied, k.deniedN, k.deniedAt, k.deniedSent = g.res, n, g.now, sent
			extra := int64(MaxPeriod / time.Microsecond)
			if l.pace > 0 && want-need < extra/l.pace {
				extra = (want - need) * l.pace
			} else if l.pace == 0 {
				extra = 0
			}
			k.denied.RetryAfter += time.Duration(extra) * time.Microsecond
		}
		return g.res, nil // the lease, if any, keeps its units
	}
	l.stats.grants.Add(1)
	l.stats.granted.Add(g.units)
	k.deniedN = 0
	if avail > 0 { // the old lease's last units go with the new lease's
		k.used += avail
		k.spent = k.g.units
		l.observe(k, now)
		// Units it skipped (past a drain rule's places) may still count in
		// the Limiter's window rules: give them back.
		err = l.giveBack(ctx, key, k)
	}
	k.g, k.spent, k.used, k.sent = g, need, need, sent
	r := g.res
	r.Remaining += g.units - need
	return r, err
}

// exact decides n units for k, which holds no lease and would take one of
// n units (a key seen rarely), as the Limiter itself does: a lease of
// exactly the request admits what AllowN admits, and the Limiter's own
// store call is cheaper than a grant (about half the Redis CPU) and takes
// no pad. k keeps a spent lease of the n units admitted, for the rate its
// next lease is sized by, and a denial as a grant's. t is the decision's
// instant and sent the local time of the call. k.mu is held.
func (l *Leased) exact(ctx context.Context, key string, k *keyLease, n int64, t instant, sent time.Time) (Result, error) {
	call := k.calling()
	r, err := l.lim.AllowN(ctx, key, n)
	k.called(call)
	if err != nil {
		return Result{}, err
	}
	if !r.Allowed {
		l.stats.denied.Add(1)
		if r.RetryAfter > 0 {
			k.denied, k.deniedN, k.deniedAt, k.deniedSent = r, n, t.us, sent
		}
		return r, nil
	}
	l.stats.grants.Add(1)
	l.stats.granted.Add(n)
	k.deniedN = 0
	// The store's time of the call: the instant's own µs, or for Redis's
	// TIME 0, from which at() counts the local time since sent.
	k.g = grant{res: r, now: t.us, units: n, marks: l.noMarks} // spent: never given back, no id
	k.spent, k.used, k.sent = n, n, sent
	return r, nil
}

// avail returns the units of k's lease that may still be admitted at now,
// from the first valid one, and marks those before it spent. k.mu is held.
func (l *Leased) avail(k *keyLease, now int64) int64 {
	left := k.g.units - k.spent
	if k.g.units == 0 || left <= 0 {
		return 0
	}
	// Validity is monotone in the unit: a drain rule's later units have
	// later places, windows and buckets end for all at once. The next unit
	// is valid in the common case: no search then.
	if !l.validUnit(&k.g, k.spent+1, now) {
		skip := 1 + int64(sort.Search(int(left-1), func(i int) bool {
			return l.validUnit(&k.g, k.spent+2+int64(i), now)
		}))
		k.spent += skip // never admitted: a give-back still returns them
		left -= skip
	}
	return left
}

// inProcess decides n > 0 units of k at now without the store, where it
// can: a denial until the store's last RetryAfter, or avail units of the
// lease. k.mu is held.
func (l *Leased) inProcess(k *keyLease, n, avail, now int64) (Result, bool) {
	if avail < n && k.deniedN > 0 && n >= k.deniedN && n <= l.smallest {
		// Denied until the store's RetryAfter: nothing is asked of the store
		// until then. (Units given back by other processes meanwhile wait
		// too: they are of the held units the under-admission bound counts.)
		if wait := k.denied.RetryAfter - time.Duration(l.since(k.deniedAt, k.deniedSent))*time.Microsecond; wait > 0 {
			r := k.denied
			r.RetryAfter = wait
			k.fromLease++
			return r, true
		}
		k.deniedN = 0
	}
	if avail >= n {
		k.spent += n
		k.used += n
		k.fromLease++
		return fromLease(&k.g, k.spent, now), true
	}
	return Result{}, false
}

// Local decides n > 0 units for key as AllowN would, where that needs no
// store call: from the key's lease when it holds n units still valid, or a
// denial in process until the store's last RetryAfter. ok is false when the
// decision needs the store (no lease, too few valid units, the lease past
// its lifetime, a store call of the key in flight, n <= 0, an invalid key);
// nothing is changed then, and the caller asks AllowN. Local does not wait
// for the store (but for a store call that another decision of the key
// starts while Local waits for the key's lock): a caller can keep deciding
// from what its leases hold while the store stalls, and ask the store,
// bounded by its own deadline, only when they are spent.
func (l *Leased) Local(key string, n int64) (r Result, ok bool) {
	if n <= 0 {
		return Result{}, false
	}
	key, err := storeKey(key)
	if err != nil {
		return Result{}, false
	}
	t := l.instant()
	k := l.lookup(key)
	if k == nil {
		return Result{}, false
	}
	if r, ok := l.fromFast(k, n, t); ok {
		return r, true
	}
	if !k.mu.TryLock() {
		// Another decision of the key holds the lock: briefly, unless it is
		// calling the store (then Local declines rather than wait). One
		// that starts a call after this check is waited for.
		if k.call.Load() != nil {
			return Result{}, false
		}
		k.mu.Lock()
	}
	defer k.mu.Unlock()
	if k.gone {
		return Result{}, false
	}
	l.absorb(k)
	defer l.publish(k)
	var now int64
	if k.g.units > 0 {
		if now = l.at(k, t); l.ends && now-k.g.now >= l.life {
			return Result{}, false // its give-back needs the store
		}
	}
	if r, ok = l.inProcess(k, n, l.avail(k, now), now); ok {
		k.decisions++
	}
	return r, ok
}

// Held returns the units key's lease holds and has not spent (0 without
// a lease), valid or not: what the store counted for this Leased and it
// has not admitted. A Result's Remaining includes them; the store's own
// Remaining is that less Held, as near as concurrent decisions allow (a
// decision under way may have taken some: then Held counts them still).
// Held takes no lock: it never waits for a decision that calls the store.
func (l *Leased) Held(key string) int64 {
	key, err := storeKey(key)
	if err != nil {
		return 0
	}
	k := l.lookup(key)
	if k == nil {
		return 0
	}
	if f := k.fast.Load(); f != nil {
		if w := f.word.Load(); w&fastFrozen == 0 {
			return max(f.g.units-f.base-int64(w&fastUnits), 0)
		}
	}
	return k.held.Load()
}

// fromLease is the Result of a decision at now from lease g, of which
// spent units are spent.
func fromLease(g *grant, spent, now int64) Result {
	r := g.res
	r.Remaining += g.units - spent
	r.ResetAfter = max(r.ResetAfter-time.Duration(now-g.now)*time.Microsecond, 0)
	r.Delay = 0
	return r
}

// observe updates k's rate with the lease that ends at now.
func (l *Leased) observe(k *keyLease, now int64) {
	d := now - k.g.now
	if d <= 0 {
		k.rate = math.Inf(1)
		return
	}
	seen := float64(k.used) * 1e6 / float64(d)
	if k.rate == 0 || math.IsInf(k.rate, 1) {
		k.rate = seen
	} else {
		k.rate = (k.rate + seen) / 2
	}
}

// size is the units k's next lease asks for: the rate seen times
// LeaseTarget, within LeaseSize and the fraction of the limit.
func (l *Leased) size(k *keyLease) int64 {
	want := float64(l.cfg.min)
	if k.rate > 0 {
		want = math.Ceil(k.rate * l.cfg.target.Seconds())
	}
	if math.IsInf(want, 1) || want > float64(l.most) {
		return l.most
	}
	return min(max(int64(want), l.cfg.min), l.most)
}

// giveBack returns the unspent units of k's lease to the store, which
// takes back what its rules allow, and ends the lease.
func (l *Leased) giveBack(ctx context.Context, key string, k *keyLease) error {
	g, u := l.end(k)
	if u <= 0 {
		return nil
	}
	call := k.calling()
	defer k.called(call)
	return l.lim.refund(ctx, key, &g, u)
}

// end ends k's lease and returns it and the units to give back (0 for
// none); k.mu is held. Release and Flush give them back after letting go
// of k.mu, so that no decision of the key waits for their store call: a
// grant made meanwhile is refused only what the give-back has not yet
// returned (a FixedWindow's units back a moment later; a bucket's dropped,
// its level having changed), under-admission, never more.
func (l *Leased) end(k *keyLease) (grant, int64) {
	g, u := k.g, k.g.units-k.used
	k.g, k.spent, k.used = grant{}, 0, 0
	if u > 0 {
		l.stats.giveBacks.Add(1)
	}
	return g, u
}

// Release gives the unspent units of key's lease back to the store, where
// the rules allow (a FixedWindow's window or a SlidingWindow's bucket that
// has not ended; a TokenBucket's or GCRA's level that no other decision has
// changed since the grant; otherwise the units are dropped, as they are
// when no one releases them), and ends the lease.
func (l *Leased) Release(ctx context.Context, key string) error {
	key, err := storeKey(key)
	if err != nil {
		return err
	}
	k := l.lookup(key)
	if k == nil {
		return nil
	}
	k.mu.Lock()
	l.absorb(k)
	g, u := l.end(k)
	k.mu.Unlock()
	if u <= 0 {
		return nil
	}
	return l.lim.refund(ctx, key, &g, u)
}

// Flush ends every lease past its lifetime (LeaseLifetime) or its last
// deadline, giving back its unspent units as Release does, and forgets keys
// without a lease (a Leased keeps about 200 bytes per key it decided until
// then), so that quiet keys return what they hold; AllowN does the same for
// a key it decides. A background goroutine calls it (see LeaseFlushEvery).
// It returns the store errors of the give-backs, joined.
func (l *Leased) Flush(ctx context.Context) error { return l.flush(ctx, false) }

// Close ends every lease, giving back its unspent units as Release does.
// The Leased remains usable: a later decision takes a new lease.
func (l *Leased) Close(ctx context.Context) error { return l.flush(ctx, true) }

func (l *Leased) flush(ctx context.Context, all bool) error {
	var errs []error
	l.statsMu.RLock()
	defer l.statsMu.RUnlock()
	l.keys.Range(func(kv, v any) bool {
		key, k := kv.(string), v.(*keyLease)
		var g grant
		var u int64
		k.mu.Lock()
		if k.g.units > 0 {
			now := l.now(k)
			if all || l.ends && now-k.g.now >= l.life || !l.validUnit(&k.g, k.g.units, now) {
				l.absorb(k)
				g, u = l.end(k)
			}
		}
		if k.g.units == 0 {
			l.keys.CompareAndDelete(key, k)
			k.gone = true
			l.stats.decisions.Add(k.decisions)
			l.stats.fromLease.Add(k.fromLease)
			l.hot.CompareAndSwap(k, nil)
		}
		k.mu.Unlock()
		if u > 0 {
			if err := l.lim.refund(ctx, key, &g, u); err != nil {
				errs = append(errs, err)
			}
		}
		return true
	})
	return errors.Join(errs...)
}
