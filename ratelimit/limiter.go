// Package ratelimit limits how often something may happen per key, with every
// classic algorithm — FixedWindow, SlidingWindow, SlidingLog, TokenBucket,
// LeakyBucket (nginx limit_req) and GCRA — on the in-process Memory backend and
// on Redis, plus a concurrency limit (nginx limit_conn).
//
// A Limiter checks one or more rules in one atomic step: all of them admit the
// request, or nothing is consumed from any. On Redis a decision is one script
// call whose clock is the Redis server's, so clients with skewed clocks agree.
// AllowAll does the same for several keys, each with its own Limiter.
//
//	lim, err := ratelimit.New(backend.NewMemory(), ratelimit.GCRA{Rate: 10, Per: time.Second, Burst: 20})
//	res, err := lim.Allow(ctx, "user:42")
//	if !res.Allowed { /* 429, Retry-After: res.RetryAfter */ }
//
// # Lost replies and retries
//
// A decision whose reply is lost on the network has still been made, and a
// client library may resend it (go-redis does, MaxRetries times after a read
// timeout). A resent decision is decided again: it may spend a second time,
// and the caller gets the second answer. That can only deny more — what the
// limiter has spent is never less than what it has admitted, and the rules
// bound what is spent — so a retry never admits more than a rule allows; its
// cost is under-admission while replies are being lost. floodgate keeps no
// record per decision to tell a resend apart, which would double the cost of
// every decision; TestReplayedDecisionOnlyDenies shows the bound with every
// call run twice. ConcurrencyLimiter is exact under resends: its lease id is
// the caller's, so a resent Acquire holds one slot, not two, and a resent
// release frees nothing more.
package ratelimit

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/floodgate-dev/floodgate/backend"
)

// Result is the decision of one call. Every field is exact for every rule; the
// doc comment of each rule type says what Remaining, RetryAfter and ResetAfter
// mean for it.
type Result struct {
	Allowed    bool
	Limit      int64         // of the binding rule
	Remaining  int64         // of the binding rule, after this call
	RetryAfter time.Duration // 0 when allowed; < 0 when n can never be admitted
	ResetAfter time.Duration // until the binding rule is back to full
	Delay      time.Duration // LeakyBucket: how long to hold the request before serving it
	Rule       int           // index of the binding rule: the violated one when denied, the tightest when allowed
	RuleName   string        // the binding rule's Named name, or ""
}

// Errors returned for invalid calls.
var (
	ErrNegativeN = errors.New("ratelimit: n must be >= 0")
	ErrNoRules   = errors.New("ratelimit: New needs at least one rule")
)

// Limiter decides requests against a set of rules. Create it with New; it is
// safe for concurrent use. Allow and AllowN decide without waiting; Wait blocks
// until admitted.
//
// The state of a rule is identified by the key and the rule's parameters (and
// Named name): two Limiters with the same rule on one backend share the budget
// of a key.
//
// On the Memory backend the state of a key may be evicted when the backend
// reaches its memory bound (backend.WithMaxBytes): keys whose state is back
// to full go first, then the least recently used, which start afresh (a
// client that was limited gets a fresh budget). On Redis, maxmemory and its
// policy decide.
type Limiter struct {
	b      backend.Backend
	specs  []spec
	logTag uint64 // shared log of the SlidingLog rules
	logMax int64  // longest SlidingLog window, µs

	mem      *backend.Table
	redis    *backend.Redis
	script   *backend.Script // allow.lua with the algorithms this Limiter uses
	params   []any           // ARGV[4...] of the script
	ruleArgs []any           // every rule's 5 parameters, as allow.lua takes them (AllowAll)
	mask     uint8           // bit k set when a rule has kind k (AllowAll)
}

//go:embed lua/common.lua
var luaCommon string

//go:embed lua/drain.lua
var luaDrain string

//go:embed lua/fixed.lua
var luaFixed string

//go:embed lua/sliding.lua
var luaSliding string

//go:embed lua/log.lua
var luaLog string

//go:embed lua/allow.lua
var luaAllow string

//go:embed lua/one_drain.lua
var luaOneDrain string

//go:embed lua/one_fixed.lua
var luaOneFixed string

// The fast paths of a Limiter with a single drain or fixed-window rule.
var (
	oneDrainScript = backend.NewScript(luaOneDrain)
	oneFixedScript = backend.NewScript(luaOneFixed)
)

var (
	scriptsMu sync.Mutex
	scripts   = map[uint8]*backend.Script{}
)

// allowScript returns allow.lua preceded by the algorithms whose kinds are in
// mask (bit k for kind k), so that a call defines only the functions it may
// run. There are at most 16 such scripts.
func allowScript(mask uint8) *backend.Script {
	return composeScript(scripts, mask, luaAllow)
}

// composeScript returns main preceded by common.lua and the algorithms whose
// kinds are in mask, from cache or built and cached there. cache is guarded by
// scriptsMu.
func composeScript(cache map[uint8]*backend.Script, mask uint8, main string) *backend.Script {
	scriptsMu.Lock()
	defer scriptsMu.Unlock()
	if s, ok := cache[mask]; ok {
		return s
	}
	parts := []string{luaCommon}
	for k, src := range map[kind]string{kindFixed: luaFixed, kindSliding: luaSliding, kindLog: luaLog, kindDrain: luaDrain} {
		if mask&(1<<k) != 0 {
			parts = append(parts, src)
		}
	}
	sort.Strings(parts[1:])
	s := backend.NewScript(strings.Join(append(parts, main), "\n"))
	cache[mask] = s
	return s
}

// New returns a Limiter that admits a request only when every rule admits it.
// It fails with an error naming the rule, field and value when a rule is
// invalid, and when two rules are the same.
func New(b backend.Backend, rules ...Rule) (*Limiter, error) {
	if b == nil {
		return nil, errors.New("ratelimit: backend is nil")
	}
	if len(rules) == 0 {
		return nil, ErrNoRules
	}
	l := &Limiter{b: b, specs: make([]spec, len(rules))}
	seen := make(map[string]int, len(rules))
	var logIDs []string
	for i, r := range rules {
		if r == nil {
			return nil, fmt.Errorf("ratelimit: rules[%d] is nil", i)
		}
		s, err := r.compile()
		if err != nil {
			return nil, fmt.Errorf("%w (rules[%d])", err, i)
		}
		id := s.identity()
		if j, dup := seen[id]; dup {
			return nil, fmt.Errorf("ratelimit: rules[%d] repeats rules[%d]", i, j)
		}
		seen[id] = i
		if s.kind == kindLog {
			logIDs = append(logIDs, id)
			l.logMax = max(l.logMax, s.window)
		} else {
			s.id, s.tag = hashID(kindPrefix[s.kind], id)
		}
		l.specs[i] = s
	}
	if logIDs != nil {
		id, tag := hashID("l", strings.Join(logIDs, ","))
		l.logTag = tag
		for i := range l.specs {
			if l.specs[i].kind == kindLog {
				l.specs[i].id, l.specs[i].tag = id, tag
			}
		}
	}
	ids := make(map[string]int, len(l.specs))
	for i, s := range l.specs {
		if j, dup := ids[s.id]; dup && (s.kind != kindLog || l.specs[j].kind != kindLog) {
			return nil, fmt.Errorf("ratelimit: rules[%d] and rules[%d] hash to the same state key %q; rename one with Named", j, i, s.id)
		}
		ids[s.id] = i
	}
	switch b := b.(type) {
	case *backend.Memory:
		// Rate limit state may be evicted when the backend reaches its memory
		// bound: an evicted key starts afresh. Each entry's Expires is when
		// every rule of the key is back to full, so an expired entry costs
		// nothing to forget.
		l.mem = b.EvictableTable("ratelimit")
	case *backend.Redis:
		l.redis = b
		l.params = l.scriptParams()
		l.ruleArgs = l.params // the fast paths below trim params; AllowAll needs them all
		var mask uint8
		for _, s := range l.specs {
			mask |= 1 << s.kind
		}
		l.mask = mask
		l.script = allowScript(mask)
		if len(l.specs) == 1 {
			switch l.specs[0].kind {
			case kindDrain:
				l.script, l.params = oneDrainScript, l.params[1:] // no kind
			case kindFixed:
				l.script, l.params = oneFixedScript, l.params[1:3]
			}
		}
	default:
		return nil, fmt.Errorf("ratelimit: unsupported backend %T", b)
	}
	return l, nil
}

var kindPrefix = map[kind]string{kindFixed: "f", kindSliding: "s", kindDrain: "d"}

// Rules returns the number of rules.
func (l *Limiter) Rules() int { return len(l.specs) }

// Allow is shorthand for AllowN(ctx, key, 1).
func (l *Limiter) Allow(ctx context.Context, key string) (Result, error) {
	return l.AllowN(ctx, key, 1)
}

// AllowN decides whether n units may happen now for key, and consumes them
// from every rule when all rules admit them. n == 0 peeks: it reports the
// state without changing it. When n exceeds what some rule can ever admit,
// Allowed is false and RetryAfter < 0.
//
// Errors: backend.ErrEmptyKey, backend.ErrKeyTooLong, ErrNegativeN, the
// context's error, and store errors (wrapped; on Redis bounded by ctx).
func (l *Limiter) AllowN(ctx context.Context, key string, n int64) (Result, error) {
	if err := backend.CheckKey(key); err != nil {
		return Result{}, err
	}
	if n < 0 {
		return Result{}, fmt.Errorf("%w, got %d", ErrNegativeN, n)
	}
	if err := ctx.Err(); err != nil {
		return Result{}, err
	}
	var vs [8]verdict
	var verdicts []verdict
	if len(l.specs) <= len(vs) {
		verdicts = vs[:len(l.specs)]
	} else {
		verdicts = make([]verdict, len(l.specs))
	}
	if l.mem != nil {
		l.allowMemory(key, n, verdicts)
	} else if err := l.allowRedis(ctx, key, n, verdicts); err != nil {
		return Result{}, err
	}
	return l.result(verdicts), nil
}

// result picks the binding rule: when denied, the rule that can never admit
// (the first such) or else the one with the longest RetryAfter; when allowed,
// the one with the least Remaining. Ties go to the lower index.
func (l *Limiter) result(vs []verdict) Result {
	allowed := true
	for _, v := range vs {
		if v.status != statusAllowed {
			allowed = false
			break
		}
	}
	best := -1
	var delay int64
	for i, v := range vs {
		switch {
		case allowed:
			delay = max(delay, v.delay)
			if best < 0 || v.remaining < vs[best].remaining {
				best = i
			}
		case v.status == statusNever:
			if best < 0 || vs[best].status != statusNever {
				best = i
			}
		case v.status == statusDenied:
			if best < 0 || vs[best].status == statusDenied && v.retry > vs[best].retry {
				best = i
			}
		}
	}
	v := vs[best]
	r := Result{
		Allowed:    allowed,
		Limit:      l.specs[best].limit,
		Remaining:  v.remaining,
		ResetAfter: time.Duration(v.reset) * time.Microsecond,
		Rule:       best,
		RuleName:   l.specs[best].name,
	}
	switch {
	case allowed:
		r.Delay = time.Duration(delay) * time.Microsecond
	case v.status == statusNever:
		r.RetryAfter = -1
	default:
		r.RetryAfter = time.Duration(v.retry) * time.Microsecond
	}
	return r
}

func (l *Limiter) allowMemory(key string, n int64, vs []verdict) {
	var pend [8]int64 // what each drain or fixed rule's check computed for its commit
	var pending []int64
	if len(l.specs) <= len(pend) {
		pending = pend[:len(l.specs)]
	} else {
		pending = make([]int64, len(l.specs))
	}
	// Reading the clock outside the lock keeps the critical section short; a
	// call that read an earlier time but locks later sees a fuller bucket,
	// which errs on the safe side.
	now := l.mem.NowMicros()
	sh := l.mem.Shard(key)
	sh.Lock()
	e := sh.Get(key)
	var lg *logState
	if l.logTag != 0 {
		lg = logOf(e, l.logTag)
	}
	ok := true
	for i := range l.specs {
		// checkRule's switch, inlined: this is the hot path.
		s := &l.specs[i]
		switch s.kind {
		case kindFixed:
			vs[i], pending[i] = s.fixedCheck(e, now, n)
		case kindSliding:
			vs[i] = s.slidingCheck(e, now, n)
		case kindLog:
			vs[i] = s.logCheck(lg, now, n)
		case kindDrain:
			vs[i], pending[i] = s.drainCheck(e, now, n)
		}
		ok = ok && vs[i].status == statusAllowed
	}
	if ok && n > 0 {
		if e == nil {
			e = &backend.Entry{}
			sh.Put(key, e)
		}
		l.commitMemory(e, now, n, pending)
	}
	sh.Unlock()
}

// checkRule decides n units against rule i, given the key's entry e (nil when
// the key has no state) and its log lg (nil when none), changing nothing. It
// returns the verdict and, for a drain or fixed-window rule that admits, what
// commitRule stores. The shard of e must be locked.
func (l *Limiter) checkRule(i int, e *backend.Entry, lg *logState, now, n int64) (verdict, int64) {
	s := &l.specs[i]
	switch s.kind {
	case kindFixed:
		return s.fixedCheck(e, now, n)
	case kindSliding:
		return s.slidingCheck(e, now, n), 0
	case kindLog:
		return s.logCheck(lg, now, n), 0
	default:
		return s.drainCheck(e, now, n)
	}
}

// commitRule consumes n units from rule i, which checkRule admitted with
// pending, and returns the time the state is worthless. For a SlidingLog rule
// it appends to the Limiter's shared log, so it must run once per decision for
// all SlidingLog rules. The shard of e must be locked.
func (l *Limiter) commitRule(i int, e *backend.Entry, now, n, pending int64) int64 {
	s := &l.specs[i]
	switch s.kind {
	case kindFixed:
		return s.fixedCommit(e, now, pending)
	case kindSliding:
		return s.slidingCommit(e, now, n)
	case kindLog:
		return logCommit(e, l.logTag, l.logMax, now, n)
	default:
		return s.drainCommit(e, now, pending)
	}
}

// commitMemory applies an admitted decision; the shard must be locked. Its
// loop is commitRule's switch, inlined: this is the hot path.
func (l *Limiter) commitMemory(e *backend.Entry, now, n int64, pending []int64) {
	logged := false
	for i := range l.specs {
		s := &l.specs[i]
		var until int64
		switch s.kind {
		case kindFixed:
			until = s.fixedCommit(e, now, pending[i])
		case kindSliding:
			until = s.slidingCommit(e, now, n)
		case kindLog:
			if logged {
				continue
			}
			until = logCommit(e, l.logTag, l.logMax, now, n)
			logged = true
		case kindDrain:
			until = s.drainCommit(e, now, pending[i])
		}
		e.Expires = max(e.Expires, until)
	}
}

// scriptParams encodes the rules for allow.lua's ARGV[4...].
func (l *Limiter) scriptParams() []any {
	var out []any
	for _, s := range l.specs {
		var p [5]int64
		switch s.kind {
		case kindFixed:
			p = [5]int64{1, s.limit, s.window, 0, 0}
		case kindSliding:
			p = [5]int64{2, s.limit, s.buckets, s.bucket, 0}
		case kindLog:
			p = [5]int64{3, s.limit, s.window, l.logMax, 0}
		case kindDrain:
			p = [5]int64{4, s.capacity, s.per, s.rate, s.delay}
		}
		for _, v := range p {
			out = append(out, strconv.FormatInt(v, 10))
		}
	}
	return out
}

func (l *Limiter) keys(key string) []string {
	keys := make([]string, len(l.specs))
	for i, s := range l.specs {
		keys[i] = l.redis.Key(key, s.id)
	}
	return keys
}

func (l *Limiter) call(ctx context.Context, key string, n int64, mode string) (any, error) {
	args := make([]any, 3, 3+len(l.params))
	args[0], args[1], args[2] = l.redis.NowArg(), n, mode
	return l.redis.RunArgs(ctx, l.script, l.keys(key), append(args, l.params...))
}

func (l *Limiter) allowRedis(ctx context.Context, key string, n int64, vs []verdict) error {
	reply, err := l.call(ctx, key, n, "0")
	if err != nil {
		return fmt.Errorf("ratelimit: %w", err)
	}
	ints, err := backend.ReplyInts(reply, 1+5*len(l.specs))
	if err != nil {
		return fmt.Errorf("ratelimit: %w", err)
	}
	for i := range vs {
		o := 1 + 5*i
		vs[i] = verdict{ints[o], ints[o+1], ints[o+2], ints[o+3], ints[o+4]}
	}
	return nil
}

// Reset forgets key's state in every rule, so that the key is back to full.
// For FixedWindow it clears the current window.
func (l *Limiter) Reset(ctx context.Context, key string) error {
	if err := backend.CheckKey(key); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if l.mem != nil {
		sh := l.mem.Shard(key)
		sh.Lock()
		defer sh.Unlock()
		e := sh.Get(key)
		if e == nil {
			return nil
		}
		now := l.mem.NowMicros()
		for i := range l.specs {
			s := &l.specs[i]
			switch s.kind {
			case kindFixed:
				s.fixedReset(e, now)
			case kindDrain:
				if a, b := cellOf(e, s.tag); a != nil {
					*a, *b = 0, 0
				}
			case kindSliding:
				if w := s.slidingOf(e); w != nil {
					w.nonexists = true
				}
			case kindLog:
				if lg := logOf(e, l.logTag); lg != nil {
					lg.ts = lg.ts[:0]
				}
			}
		}
		return nil
	}
	if _, err := l.call(ctx, key, 0, "1"); err != nil {
		return fmt.Errorf("ratelimit: %w", err)
	}
	return nil
}

// Wait blocks until one unit for key is admitted (and consumes it), or ctx
// ends. It sleeps for the RetryAfter of each denial, so it does not spin. It
// returns ctx's error when ctx ends first, and an error at once when a unit can
// never be admitted or when ctx's deadline is sooner than the next chance.
func (l *Limiter) Wait(ctx context.Context, key string) error {
	return l.WaitN(ctx, key, 1)
}

// WaitN is Wait for n units.
func (l *Limiter) WaitN(ctx context.Context, key string, n int64) error {
	for {
		r, err := l.AllowN(ctx, key, n)
		if err != nil {
			return err
		}
		if r.Allowed {
			return nil
		}
		if r.RetryAfter < 0 {
			return fmt.Errorf("ratelimit: %d units exceed what rule %d can ever admit", n, r.Rule)
		}
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < r.RetryAfter {
			return fmt.Errorf("ratelimit: would wait %v, beyond the context deadline: %w", r.RetryAfter, context.DeadlineExceeded)
		}
		t := time.NewTimer(max(r.RetryAfter, time.Millisecond))
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

// MemSize implements backend.Sizer, so that the memory bound counts the rule
// states beyond the entry's inline cell.
func (ms *memState) MemSize() int {
	n := backend.AllocBytes(int(unsafe.Sizeof(*ms))) +
		backend.AllocBytes(cap(ms.cells)*int(unsafe.Sizeof(cell{}))) +
		backend.AllocBytes(cap(ms.windows)*int(unsafe.Sizeof((*slidingState)(nil)))) +
		backend.AllocBytes(cap(ms.logs)*int(unsafe.Sizeof((*logState)(nil))))
	for _, w := range ms.windows {
		n += backend.AllocBytes(int(unsafe.Sizeof(*w))) + backend.AllocBytes(cap(w.counts)*8)
	}
	for _, l := range ms.logs {
		n += backend.AllocBytes(int(unsafe.Sizeof(*l))) + backend.AllocBytes(cap(l.ts)*8)
	}
	return n
}
