// Package ratelimit limits how often something may happen per key, with every
// classic algorithm — FixedWindow, SlidingWindow, SlidingLog, TokenBucket,
// LeakyBucket (nginx limit_req) and GCRA — on the in-process Memory backend and
// on Redis, plus a concurrency limit (nginx limit_conn).
//
// A Limiter checks one or more rules in one atomic step: all of them admit the
// request, or nothing is consumed from any. On Redis a decision is one script
// call whose clock is the Redis server's, so clients with skewed clocks agree.
// AllowAll does the same for several keys, each with its own Limiter.
// Charge is the one exception to "nothing is consumed": it records usage
// known only after the fact (LLM tokens, bytes) in full, past the limit as
// debt that the key pays back before it is admitted again.
//
//	lim, err := ratelimit.New(backend.NewMemory(), ratelimit.GCRA{Rate: 10, Per: time.Second, Burst: 20})
//	res, err := lim.Allow(ctx, "user:42")
//	if !res.Allowed { /* 429, Retry-After: res.RetryAfter */ }
//
// # Keys
//
// A key is any non-empty string, of any length: the empty key is refused
// with backend.ErrEmptyKey, and every other key is limited. A key of at
// most backend.MaxKeyLen bytes names its state as it is. A longer one (a
// JWT or a URL taken from a request, say) is counted under its digest: its
// first 256 bytes, "#sha256:" and the hex SHA-256 of the whole key, 328
// bytes in all. So the same long key always shares one state, and two long
// keys that differ anywhere, also past their first MaxKeyLen bytes, are
// counted apart. Limiter, Leased, ConcurrencyLimiter and AllowAll all take
// long keys so; a caller never has to shorten a key, and a key that a
// client makes long never escapes its limit through an error.
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
// release frees nothing more. A Leased's grant resent takes twice (the
// same under-admission); its give-back leaves a mark in the store for the
// life of the key's state, so a resent give-back gives nothing back twice.
package ratelimit

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/internal/longkey"
	"github.com/floodgate-dev/floodgate/internal/memstore"
	"github.com/floodgate-dev/floodgate/internal/redisstore"
	"github.com/floodgate-dev/floodgate/internal/unwrap"
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
	// Fallback marks a decision made without the store, by package
	// ratelimit/fallback while the store could not decide (its Mode says
	// how). A Limiter's own decisions never set it.
	Fallback bool
	// Debt is how many units past its limit the binding rule is after the
	// call, 0 when it is not: usage that Charge recorded beyond the limit
	// (or a limit lowered below what was already spent). While a key is in
	// debt every AllowN is denied, AllowN(ctx, key, 0) included, with the
	// RetryAfter until the debt is paid back (see Charge).
	Debt int64
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
// # State, and changes of limits
//
// A Limiter keeps the state of a key in one place: on Redis one key per
// Limiter and user key (a string holding a value per rule when its rules are
// FixedWindow, TokenBucket, LeakyBucket or GCRA rules, a small hash with
// fields per rule otherwise), plus one sorted set shared by its SlidingLog
// rules. A second rule costs a value in the same key, not another key. The state is named by
// what the rules count, not by their limits: each rule's kind, its grain (the
// Window of FixedWindow and SlidingLog, Window and Buckets of SlidingWindow,
// Per or Every of a drain rule) and its Named name, whatever the order of the
// rules. So:
//
//   - Changing a limit, burst, capacity, rate or LeakyBucket Delay keeps the
//     count: a Limiter built with the new values (a config reload, a rolling
//     deploy where old and new processes run side by side) sees what the old
//     one spent. Raising a limit gives the difference at once; lowering it
//     denies a key that has already spent more, until it is back under the new
//     limit. A drain rule's level is kept as spent units at a time, so a new
//     rate applies from the last decision on. (A key whose state expired
//     under the old rate, before the new one would have drained it, starts
//     afresh.)
//   - Changing a grain, a name or an algorithm (FixedWindow to SlidingWindow,
//     say; TokenBucket, LeakyBucket and GCRA are one algorithm), or adding or
//     removing a rule, names another state: the key starts afresh under the
//     new rules, and the old state expires on its own.
//   - Two Limiters whose rules count the same share the state of a key (the
//     budget of each is checked against what both spent); two whose rule
//     sets differ keep separate states even for a rule they have in common.
//
// Upgrading from floodgate 0.9, whose Redis keys were named by every rule
// parameter: the new version does not read the old keys, so every key starts
// afresh once, and the old keys expire when their windows end. Nothing else
// is needed.
//
// On the Memory backend the state of a key may be evicted when the backend
// reaches its memory bound (backend.WithMaxBytes): keys whose state is back
// to full go first, then the least recently used, which start afresh (a
// client that was limited gets a fresh budget). On Redis, maxmemory and its
// policy decide.
type Limiter struct {
	b      backend.Backend
	specs  []spec
	rules  []Rule // as given to New, without Named and pointers (Rule)
	logTag uint64 // shared log of the SlidingLog rules
	logMax int64  // longest SlidingLog window, µs

	mem      *memstore.Table
	redis    *redisstore.Store
	stateKey string             // suffix of the state key on Redis
	logKey   string             // suffix of the log key, "" without SlidingLog rules
	fast     *redisstore.Script // the generated fast path (gen.go), or nil: limits.lua
	byField  []int              // the rule of each field, which orders the fast path's reply
	reqArgs  []any              // limits.lua's arguments of a request after n
}

//go:embed lua/codec.lua
var luaCodec string

//go:embed lua/limits.lua
var luaLimits string

var (
	// limitsScript decides any Limiter, and several in AllowAll.
	limitsScript = redisstore.NewScript(luaCodec + luaLimits)
)

// New returns a Limiter that admits a request only when every rule admits it.
// It fails with an error naming the rule, field and value when a rule is
// invalid, when two rules are the same, and when two rules are Named alike.
func New(b backend.Backend, rules ...Rule) (*Limiter, error) {
	if b == nil {
		return nil, errors.New("ratelimit: backend is nil")
	}
	if len(rules) == 0 {
		return nil, ErrNoRules
	}
	if len(rules) > MaxRules {
		return nil, fmt.Errorf("ratelimit: New takes at most MaxRules (%d) rules, got %d", MaxRules, len(rules))
	}
	l := &Limiter{b: b, specs: make([]spec, len(rules)), rules: make([]Rule, len(rules))}
	seen := make(map[string]int, len(rules))
	sids := make(map[string]int, len(rules))
	names := make(map[string]int, len(rules))
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
		if s.name != "" {
			if j, dup := names[s.name]; dup {
				return nil, fmt.Errorf("ratelimit: rules[%d] and rules[%d] are both Named %q: Result.RuleName could not tell them apart", j, i, s.name)
			}
			names[s.name] = i
		}
		// Rules that count the same (say two GCRA rules per second with
		// different bursts) keep one state each, told apart by their order
		// among themselves.
		s.sid = s.stateID()
		if c := sids[s.sid]; c > 0 {
			sids[s.sid] = c + 1
			s.sid += "#" + strconv.Itoa(c)
		} else {
			sids[s.sid] = 1
		}
		if s.kind == kindLog {
			l.logMax = max(l.logMax, s.window)
		}
		l.specs[i] = s
		l.rules[i] = plain(r)
	}
	l.nameStates()
	switch b := b.(type) {
	case *backend.Memory:
		// Rate limit state may be evicted when the backend reaches its memory
		// bound: an evicted key starts afresh. Each entry's Expires is when
		// every rule of the key is back to full, so an expired entry costs
		// nothing to forget.
		l.mem = unwrap.Memory(b).EvictableTable("ratelimit")
	case *backend.Redis:
		l.redis = unwrap.Redis(b)
		l.scriptArgs()
	default:
		return nil, fmt.Errorf("ratelimit: unsupported backend %T", b)
	}
	return l, nil
}

// nameStates names the Limiter's state after what its rules count, sorted,
// so that neither their order nor their limits change it: the Redis key
// suffix, each rule's field in it, and the memory tags.
func (l *Limiter) nameStates() {
	sorted := make([]string, len(l.specs))
	for i, s := range l.specs {
		sorted[i] = s.sid
	}
	sort.Strings(sorted)
	prefix := "m"
	if len(l.specs) == 1 {
		prefix = kindLetter[l.specs[0].kind]
	}
	l.stateKey, _ = hashID(prefix, strings.Join(sorted, ","))
	for i := range l.specs {
		s := &l.specs[i]
		s.field = strconv.Itoa(sort.SearchStrings(sorted, s.sid))
		_, s.tag = hashID("", l.stateKey+"/"+s.field)
		if s.kind == kindLog {
			// Every SlidingLog rule keeps its units in the one log.
			l.logKey = l.stateKey + "l"
			_, l.logTag = hashID("", l.logKey)
			s.tag = l.logTag
		}
	}
}

// scriptArgs pre-builds the Limiter's script arguments.
func (l *Limiter) scriptArgs() {
	layout, nkeys := "h", int64(1)
	if l.logKey != "" {
		nkeys = 2
	}
	l.reqArgs = []any{int64(len(l.specs)), layout, nkeys}
	fast := true
	for _, s := range l.specs {
		var p [5]int64
		switch s.kind {
		case kindFixed:
			p = [5]int64{1, s.limit, s.window, 0, 0}
		case kindSliding:
			p = [5]int64{2, s.limit, s.buckets, s.bucket, 0}
			fast = false
		case kindLog:
			p = [5]int64{3, s.limit, s.window, l.logMax, 0}
			fast = false
		case kindDrain:
			p = [5]int64{4, s.capacity, s.per, s.rate, s.delay}
		}
		l.reqArgs = append(l.reqArgs, p[0], s.field, p[1], p[2], p[3], p[4])
	}
	if !fast {
		return
	}
	l.reqArgs[1] = "s"
	l.byField = make([]int, len(l.specs))
	for i, s := range l.specs {
		f, _ := strconv.Atoi(s.field)
		l.byField[f] = i
	}
	ordered := make([]spec, len(l.specs))
	for f, i := range l.byField {
		ordered[f] = l.specs[i]
	}
	l.fast = fastScript(ordered)
}

// redisKeys appends the Redis keys of key's state to keys.
func (l *Limiter) redisKeys(keys []string, key string) []string {
	keys = append(keys, l.redis.Key(key, l.stateKey))
	if l.logKey != "" {
		keys = append(keys, l.redis.Key(key, l.logKey))
	}
	return keys
}

// Rules returns the number of rules.
func (l *Limiter) Rules() int { return len(l.specs) }

// Rule returns l's rule i (0 <= i < Rules(), in the order given to New; a
// Result's Rule is such an index), as a value: a rule given by pointer is
// the value it pointed to at New, and a Named rule is the rule it wraps,
// its name being RuleName(i).
func (l *Limiter) Rule(i int) Rule { return l.rules[i] }

// RuleName returns the Named name of l's rule i, or "".
func (l *Limiter) RuleName(i int) string { return l.specs[i].name }

// plain returns r without its Named wrapper and as a value, for Rule.
func plain(r Rule) Rule {
	switch r := r.(type) {
	case named:
		return plain(r.r)
	case *FixedWindow:
		return *r
	case *SlidingWindow:
		return *r
	case *SlidingLog:
		return *r
	case *TokenBucket:
		return *r
	case *LeakyBucket:
		return *r
	case *GCRA:
		return *r
	}
	return r
}

// Backend returns the backend l keeps its state on: the one given to New.
func (l *Limiter) Backend() backend.Backend { return l.b }

// verdictsIn returns a verdict per rule of l, in buf when they fit (a
// caller's array on its stack: no allocation), else newly allocated.
func (l *Limiter) verdictsIn(buf *[8]verdict) []verdict {
	if len(l.specs) <= len(buf) {
		return buf[:len(l.specs)]
	}
	return make([]verdict, len(l.specs))
}

// checkCall checks a decision's input, as Limiter.AllowN and Leased.AllowN
// do before anything else: the key, n >= 0, and ctx not ended. It returns
// the key the state is kept under (storeKey).
func checkCall(ctx context.Context, key string, n int64) (string, error) {
	key, err := storeKey(key)
	if err != nil {
		return "", err
	}
	if n < 0 {
		return "", fmt.Errorf("%w, got %d", ErrNegativeN, n)
	}
	return key, ctx.Err()
}

// storeKey returns the key that key's state is kept under: key itself, or
// its digest when it is longer than backend.MaxKeyLen (package longkey), so
// that a long key is limited like any other. The empty key is refused with
// backend.ErrEmptyKey.
func storeKey(key string) (string, error) {
	if key == "" {
		return "", backend.ErrEmptyKey
	}
	return longkey.Key(key), nil
}

// Allow is shorthand for AllowN(ctx, key, 1).
func (l *Limiter) Allow(ctx context.Context, key string) (Result, error) {
	return l.AllowN(ctx, key, 1)
}

// AllowN decides whether n units may happen now for key, and consumes them
// from every rule when all rules admit them. n == 0 peeks: it reports the
// state without changing it. When n exceeds what some rule can ever admit,
// Allowed is false and RetryAfter < 0.
//
// A key of any length is limited: see Keys in the package doc.
//
// Errors: backend.ErrEmptyKey, ErrNegativeN, the context's error, and store
// errors (wrapped; on Redis bounded by ctx).
func (l *Limiter) AllowN(ctx context.Context, key string, n int64) (Result, error) {
	var vs [8]verdict
	verdicts := l.verdictsIn(&vs)
	if err := l.decide(ctx, key, n, verdicts, false); err != nil {
		return Result{}, err
	}
	return l.result(verdicts), nil
}

// decide is AllowN's decision of n units for key into verdicts, one per
// rule; each asks the memory backend for every rule's own verdict of a
// denied call (AllowNEach), as Redis always gives.
func (l *Limiter) decide(ctx context.Context, key string, n int64, verdicts []verdict, each bool) error {
	key, err := checkCall(ctx, key, n)
	if err != nil {
		return err
	}
	if l.mem != nil {
		l.allowMemory(key, n, verdicts, each)
		return nil
	}
	return l.allowRedis(ctx, key, n, verdicts)
}

// AllowNEach is AllowN that also reports each rule's own answer to the same
// decision: it returns what AllowN returns, and sets each[i] to rule i's
// Result for i < Rules(). It fails, deciding nothing, when len(each) <
// Rules().
//
// each[i] is what a Limiter of rule i alone would report of the key's state
// after this call: Limit, Remaining, RetryAfter, ResetAfter and Delay of
// rule i, Rule i and RuleName(i), and Allowed when rule i admits n units.
// When the call is admitted, every rule admits, and each[i] counts the n
// units. When it is denied, nothing was consumed from any rule: a rule that
// denies reports its RetryAfter (< 0 when it can never admit n), and a rule
// that would admit reports Allowed with the state as it stands, as a peek
// (n == 0) sees it. So the returned Result is each[Result.Rule], but for
// its Delay when admitted (the longest of the rules'), and the rules that
// deny are the each[i] with Allowed false.
//
// This is how to report several policies at once, such as the IETF
// RateLimit fields of every rule, or to remember the state of every rule of
// a key rather than of the binding one.
//
// Errors: those of AllowN.
func (l *Limiter) AllowNEach(ctx context.Context, key string, n int64, each []Result) (Result, error) {
	if len(each) < len(l.specs) {
		return Result{}, fmt.Errorf("ratelimit: AllowNEach: len(each) is %d, want at least Rules() = %d", len(each), len(l.specs))
	}
	var vs [8]verdict
	verdicts := l.verdictsIn(&vs)
	if err := l.decide(ctx, key, n, verdicts, true); err != nil {
		return Result{}, err
	}
	for i, v := range verdicts {
		each[i] = l.ruleResult(i, v)
	}
	return l.result(verdicts), nil
}

// ruleResult is rule i's own Result of its verdict v.
func (l *Limiter) ruleResult(i int, v verdict) Result {
	r := Result{
		Allowed:    v.status == statusAllowed,
		Limit:      l.specs[i].limit,
		Remaining:  max(v.remaining, 0), // < 0 after a limit was lowered below the count
		ResetAfter: time.Duration(v.reset) * time.Microsecond,
		Debt:       max(-v.remaining, 0),
		Rule:       i,
		RuleName:   l.specs[i].name,
	}
	switch v.status {
	case statusAllowed:
		r.Delay = time.Duration(v.delay) * time.Microsecond
	case statusNever:
		r.RetryAfter = -1
	default:
		r.RetryAfter = time.Duration(v.retry) * time.Microsecond
	}
	return r
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
	r := l.ruleResult(best, vs[best])
	if allowed {
		r.Delay = time.Duration(delay) * time.Microsecond
	}
	return r
}

// allowMemory decides n units for key on Memory into vs, a verdict per
// rule. When the decision is denied, a rule that admits has the verdict of
// its state after n, which were not consumed; with each, it has a peek's
// (n == 0), the state as it stands, as limits.lua and the fast path always
// report it. Only AllowNEach reads the verdicts of rules that do not bind,
// so AllowN does not pay for the peeks.
func (l *Limiter) allowMemory(key string, n int64, vs []verdict, each bool) {
	var pend [8]int64 // what each drain or fixed rule's check computed for its commit
	var pending []int64
	if len(l.specs) <= len(pend) {
		pending = pend[:len(l.specs)]
	} else {
		pending = make([]int64, len(l.specs))
	}
	// Reading the clock outside the lock keeps the critical section short;
	// the shard makes the reading its time (Shard.Time), never earlier than
	// a decision that locked it first, so a call that read its time before
	// another's commit does not see that commit's bucket undrained.
	now := l.mem.NowMicros()
	sh := l.mem.Shard(key)
	sh.Lock()
	now = sh.Time(now)
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
			e = &memstore.Entry{}
			sh.Put(key, e)
		}
		l.commitMemory(e, now, n, pending)
	} else if each && !ok && n > 0 {
		for i := range l.specs {
			if vs[i].status == statusAllowed {
				vs[i], _ = l.checkRule(i, e, lg, now, 0)
			}
		}
	}
	sh.Unlock()
}

// checkRule decides n units against rule i, given the key's entry e (nil when
// the key has no state) and its log lg (nil when none), changing nothing. It
// returns the verdict and, for a drain or fixed-window rule that admits, what
// commitRule stores. The shard of e must be locked.
func (l *Limiter) checkRule(i int, e *memstore.Entry, lg *logState, now, n int64) (verdict, int64) {
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

// commitUntil returns what commitRule(i, e, now, n, pending) will return,
// without changing e, for a rule kept in the state key: 0 for SlidingLog
// rules, whose log has a key of its own. The shard of e must be locked.
func (l *Limiter) commitUntil(i int, e *memstore.Entry, now, pending int64) int64 {
	s := &l.specs[i]
	switch s.kind {
	case kindFixed:
		wid, _ := s.fixedWindow(e, now)
		return (wid + 1) * s.window
	case kindSliding:
		_, _, hi, cur, _ := s.slidingView(s.slidingOf(e), now)
		return (max(hi, cur) + s.buckets + 1) * s.bucket
	case kindLog:
		return 0
	default:
		return now + ceilDiv(pending, s.rate)
	}
}

// commitRule consumes n units from rule i, which checkRule admitted with
// pending, in a state key that lives life µs from now (as limits.lua sets its
// PX: the longest commitUntil of the request's rules, less now, at least 0),
// and returns the time the state is worthless. For a SlidingLog rule it
// appends to the Limiter's shared log, so it must run once per decision for
// all SlidingLog rules. The shard of e must be locked.
func (l *Limiter) commitRule(i int, e *memstore.Entry, now, n, pending, life int64) int64 {
	s := &l.specs[i]
	switch s.kind {
	case kindFixed:
		return s.fixedCommit(e, now, pending)
	case kindSliding:
		return s.slidingCommit(e, now, n)
	case kindLog:
		return logCommit(e, l.logTag, l.logMax, now, n)
	default:
		return s.drainCommit(e, now, pending, life)
	}
}

// commitMemory applies an admitted decision; the shard must be locked. Its
// loop is commitRule's switch, inlined: this is the hot path.
func (l *Limiter) commitMemory(e *memstore.Entry, now, n int64, pending []int64) {
	var life int64
	if len(l.specs) == 1 && l.specs[0].kind == kindDrain {
		life = ceilDiv(pending[0], l.specs[0].rate)
	} else {
		for i := range l.specs {
			life = max(life, l.commitUntil(i, e, now, pending[i])-now)
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
			until = s.slidingCommit(e, now, n)
		case kindLog:
			if logged {
				continue
			}
			until = logCommit(e, l.logTag, l.logMax, now, n)
			logged = true
		case kindDrain:
			until = s.drainCommit(e, now, pending[i], life)
		}
		e.Expires = max(e.Expires, until)
	}
}

func (l *Limiter) allowRedis(ctx context.Context, key string, n int64, vs []verdict) error {
	if l.fast == nil {
		var res [1]Result
		_, err := runAllowAll(ctx, l.redis, []Request{{Limiter: l, Key: key, N: n}}, res[:], modeDecide, vs)
		return err
	}
	want := -1 // one rule: 3 integers when allowed, 4 when denied
	if len(vs) > 1 {
		want = 1 + 5*len(vs)
	}
	ints, err := l.redis.RunInts(ctx, l.fast, []string{l.redis.Key(key, l.stateKey)}, []any{l.redis.NowArg(), n}, want)
	if err != nil {
		return fmt.Errorf("ratelimit: %w", err)
	}
	if len(vs) > 1 {
		for f, i := range l.byField {
			o := 1 + 5*f
			vs[i] = verdict{ints[o], ints[o+1], ints[o+2], ints[o+3], ints[o+4]}
		}
		return nil
	}
	switch len(ints) {
	case 3: // allowed: remaining, reset, delay
		vs[0] = verdict{statusAllowed, ints[0], 0, ints[1], ints[2]}
	case 4: // denied: status, remaining, retry, reset
		vs[0] = verdict{ints[0], ints[1], ints[2], ints[3], 0}
	default:
		return fmt.Errorf("ratelimit: script reply has %d elements, want 3 or 4", len(ints))
	}
	return nil
}

// Reset forgets key's state in every rule, so that the key is back to full.
// For FixedWindow it clears the current window.
func (l *Limiter) Reset(ctx context.Context, key string) error {
	key, err := storeKey(key)
	if err != nil {
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
		now := sh.Now()
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
	var res [1]Result
	_, err = runAllowAll(ctx, l.redis, []Request{{Limiter: l, Key: key}}, res[:], modeReset, nil)
	return err
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
	return waitN(ctx, n, func() (Result, error) { return l.AllowN(ctx, key, n) })
}

// waitN calls allow until it admits, sleeping for each denial's RetryAfter.
func waitN(ctx context.Context, n int64, allow func() (Result, error)) error {
	for {
		r, err := allow()
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

// MemSize implements memstore.Sizer, so that the memory bound counts the rule
// states beyond the entry's inline cell.
func (ms *memState) MemSize() int {
	n := memstore.AllocBytes(int(unsafe.Sizeof(*ms))) +
		memstore.AllocBytes(cap(ms.cells)*int(unsafe.Sizeof(cell{}))) +
		memstore.AllocBytes(cap(ms.windows)*int(unsafe.Sizeof((*slidingState)(nil)))) +
		memstore.AllocBytes(cap(ms.logs)*int(unsafe.Sizeof((*logState)(nil))))
	for _, w := range ms.windows {
		n += memstore.AllocBytes(int(unsafe.Sizeof(*w))) + memstore.AllocBytes(cap(w.counts)*8)
	}
	for _, l := range ms.logs {
		n += memstore.AllocBytes(int(unsafe.Sizeof(*l))) + memstore.AllocBytes(cap(l.ts)*8)
	}
	return n
}
