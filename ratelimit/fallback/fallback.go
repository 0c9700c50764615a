// Package fallback decides rate limits when a ratelimit.Limiter's store
// cannot: a Redis that is down, stalled, failing over or too slow. A
// Limiter alone returns the store's error; a fallback Limiter wraps it and
// answers as its Options.Mode says:
//
//   - Error (the default): the store's error, as the Limiter alone.
//   - Allow: every request is admitted (fail open).
//   - Deny: every request is refused (fail closed).
//   - Degraded: every request is decided in this process on its share of
//     each rule — the limit divided by the processes sharing the store
//     (Options.Servers), rounded down — starting each key from what the
//     store last said of it, and the store is told afterwards what was
//     admitted without it. The decision server's failure mode degraded is
//     the same mechanism.
//
// A Result decided by the fallback has Result.Fallback set; every other
// field means what it means for the Limiter (for Degraded, Limit and
// Remaining are those of this process's share).
//
// # What is a store failure
//
// Only an error of the store call falls back. The caller's own context
// ending (cancelled, or its deadline passed) is returned as an error in
// every mode, and so are invalid calls: an empty key
// (backend.ErrEmptyKey) and a negative n (ratelimit.ErrNegativeN).
//
// # Latency
//
// A store that is down can hold a call for the client's whole timeout
// (go-redis: 3 s of read timeout by default, and retries) before failing.
// Set Options.Timeout, a bound on each store call, to a little above the
// store's usual latency (tens of milliseconds): a call that takes longer
// is a store failure, answered by the mode at once.
//
// # The bound of Degraded
//
// Each key owes the store what this process admitted for it without the
// store (a debt, kept in process until it no longer matters: the end of a
// fixed window, or the time a rule takes to forget an admission). The
// next call for the key once the store is back carries its debt in its
// cost, so the store counts every admission, and a window is never
// admitted twice: when the debt does not fit, the call is refused and
// spends what the limit has left. With N processes that agree on N
// (Options.Servers), what they all admit in a window of a limit is at most
// the limit — the store's count and every process's share of what the
// store had left, which together never exceed it — plus the store's own
// count of the calls whose replies were lost in the failure (those were
// decided here too, so they are under-admitted). A process that counts
// more processes than there are under-admits; one that counts fewer
// over-admits by the shares it takes too many. A key whose remembered
// result was forgotten (Options.MemoBytes bounds them, least recently
// used first), or whose result is no longer current, starts afresh with
// its share. What the store "had left" is what it last told each process,
// so the bound assumes every process sees its part of a key's traffic: a
// process that calls for a key rarely starts an outage from an older
// count, and the window in progress can then admit up to its share of
// what the others spent since (windows that begin in the outage are exact).
//
// For a Limiter of several rules the bound holds for each rule: each is
// cut to its share, the store is asked for every rule's answer, not only
// the binding one's (ratelimit.Limiter.AllowNEach), and each rule of a key
// starts from its share of what the store last said remained of it while
// that answer is current (until that rule's reset), else from its share
// afresh. So an outage that outlasts a short rule's window does not give
// a longer rule back what the store had counted of it: 10 a second and 100
// a minute, of which the store had counted 95 this minute, leave this
// process at most its share of the 5 for the rest of the minute.
package fallback

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/internal/degraded"
	"github.com/floodgate-dev/floodgate/ratelimit"
)

// Mode says how a Limiter answers while its store cannot decide.
type Mode int

const (
	// Error returns the store's error, as the ratelimit.Limiter alone
	// does. It is the default.
	Error Mode = iota
	// Degraded decides in process on this process's share of each rule,
	// and has the store count what it admitted once it is back (see the
	// package doc for the bound).
	Degraded
	// Allow admits every request: fail open.
	Allow
	// Deny refuses every request: fail closed.
	Deny
)

// String returns the name of the mode's constant.
func (m Mode) String() string {
	switch m {
	case Error:
		return "Error"
	case Degraded:
		return "Degraded"
	case Allow:
		return "Allow"
	case Deny:
		return "Deny"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Options configure a Limiter. The zero value is the Limiter's own
// behaviour: store errors are returned.
type Options struct {
	// Mode says how requests are answered while the store fails.
	Mode Mode
	// Servers returns how many processes share the store and its limits,
	// this one included (Degraded: each decides on its share). nil, or a
	// value below 1, means 1. It is called at each decision the fallback
	// makes, so it may follow a changing fleet: CountServers counts the
	// processes by their heartbeats in the store.
	Servers func() int
	// Timeout bounds each store call (context.WithTimeout around it); a
	// call that takes longer is a store failure. 0 sets no bound of its
	// own: the caller's context and the store client's timeouts decide.
	// See Latency in the package doc.
	Timeout time.Duration
	// MemoBytes bounds the memory of the store answers Degraded remembers
	// (each key's last one); 0 means 8 MiB, about 80,000 keys of 50
	// bytes for a Limiter of one rule (each rule more takes 16 bytes a
	// key). Other modes remember nothing.
	MemoBytes int
	// OnFallback, when set, is called with the store's error for each
	// request the fallback answered (not in mode Error, whose caller gets
	// the error), on the caller's goroutine: to log or count the failures.
	OnFallback func(key string, err error)
}

// Limiter is a ratelimit.Limiter with a fallback for store failures. Make
// it with New; it is safe for concurrent use. Close it when done.
type Limiter struct {
	lim    *ratelimit.Limiter
	o      Options
	rules  []ratelimit.Rule
	names  []string
	window time.Duration // how long an admission matters to the rules
	limits *degraded.Limits
}

// New returns l with the fallback of o. l's rules are read once, here. It
// fails on a nil Limiter or a Mode it does not know.
func New(l *ratelimit.Limiter, o Options) (*Limiter, error) {
	if l == nil {
		return nil, errors.New("fallback: New: the Limiter is nil")
	}
	if o.Mode < Error || o.Mode > Deny {
		return nil, fmt.Errorf("fallback: New: unknown Mode %d", int(o.Mode))
	}
	f := &Limiter{lim: l, o: o}
	for i := range l.Rules() {
		r := l.Rule(i)
		f.rules = append(f.rules, r)
		f.names = append(f.names, l.RuleName(i))
		f.window = max(f.window, degraded.Lasting(r))
	}
	var clk clock.Clock
	if c := l.Backend().Clock(); c != nil {
		clk = c
	}
	if o.Mode == Degraded {
		f.limits = degraded.New(degraded.Options{Servers: o.Servers, MemoBytes: o.MemoBytes, Clock: clk})
	}
	return f, nil
}

// HeartbeatInterval is how often CountServers tells the store its process
// is live; a process is counted for three intervals after its last beat.
const HeartbeatInterval = time.Second

// CountServers counts the processes that share b's store, for
// Options.Servers: it tells the store every HeartbeatInterval, until ctx
// ends, that this process is live, and the function it returns gives the
// most processes its last three beats counted (a process is live for three
// beats). Every process that counts so on the same store and key prefix
// counts the others — floodgate serve's servers too, which beat the same
// way — so a fleet of processes sharing the limits agrees on its number
// while the store answers, and keeps the last count through an outage.
// The first beat is made before CountServers returns (bounded by ctx and
// HeartbeatInterval); until one is answered, the count is 1. On the
// memory backend, which no other process shares, it is 1.
//
// Call it once per process and store, not per Limiter: every call beats as
// a process of its own.
func CountServers(ctx context.Context, b backend.Backend) func() int {
	bt := degraded.NewBeater(b, HeartbeatInterval)
	var n atomic.Int64
	set := func(v int) { n.Store(int64(v)) }
	n.Store(1)
	if v, ok := bt.Beat(ctx); ok {
		set(v)
	}
	go func() {
		t := time.NewTimer(HeartbeatInterval)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		bt.Run(ctx, set)
	}()
	return func() int { return int(n.Load()) }
}

// Limiter returns the ratelimit.Limiter f wraps.
func (f *Limiter) Limiter() *ratelimit.Limiter { return f.lim }

// Close releases the in-process state of Degraded. The wrapped Limiter
// stays usable.
func (f *Limiter) Close() error {
	if f.limits != nil {
		return f.limits.Close()
	}
	return nil
}

// Allow is shorthand for AllowN(ctx, key, 1).
func (f *Limiter) Allow(ctx context.Context, key string) (ratelimit.Result, error) {
	return f.AllowN(ctx, key, 1)
}

// AllowN decides n units for key as ratelimit.Limiter.AllowN does, on the
// store; when the store fails, as the Mode says, with Result.Fallback set.
//
// Errors: backend.ErrEmptyKey, ratelimit.ErrNegativeN and the context's
// error in every mode; the store's error (wrapped) in mode Error.
func (f *Limiter) AllowN(ctx context.Context, key string, n int64) (ratelimit.Result, error) {
	if key == "" {
		return ratelimit.Result{}, backend.ErrEmptyKey
	}
	if n < 0 {
		return ratelimit.Result{}, fmt.Errorf("%w, got %d", ratelimit.ErrNegativeN, n)
	}
	if err := ctx.Err(); err != nil {
		return ratelimit.Result{}, err
	}
	if f.limits == nil {
		res, err := f.call(ctx, key, n, nil)
		if err == nil || f.o.Mode == Error || ctx.Err() != nil {
			return res, err
		}
		f.report(key, err)
		return f.fixed(), nil
	}
	return f.degraded(ctx, key, n)
}

// call is the store's decision of n units for key, under Options.Timeout,
// with its rules' own results in each unless each is nil.
func (f *Limiter) call(ctx context.Context, key string, n int64, each []ratelimit.Result) (ratelimit.Result, error) {
	if f.o.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, f.o.Timeout)
		defer cancel()
	}
	if each != nil {
		return f.lim.AllowNEach(ctx, key, n, each)
	}
	return f.lim.AllowN(ctx, key, n)
}

func (f *Limiter) report(key string, err error) {
	if f.o.OnFallback != nil {
		f.o.OnFallback(key, err)
	}
}

// fixed is the answer of Allow and Deny: the first rule's limit, nothing
// known of what remains; a refusal may be retried after a second.
func (f *Limiter) fixed() ratelimit.Result {
	r := ratelimit.Result{Fallback: true, RuleName: f.names[0]}
	if f.o.Mode == Allow {
		r.Allowed = true
		return r
	}
	r.RetryAfter, r.ResetAfter = time.Second, time.Second
	return r
}

// degraded is AllowN in mode Degraded: the store's decision with the key's
// debt added (and its answer remembered, every rule's), or the in-process
// one when the store fails.
func (f *Limiter) degraded(ctx context.Context, key string, n int64) (ratelimit.Result, error) {
	reqs := []ratelimit.Request{{Limiter: f.lim, Key: key, N: n}}
	results := make([]ratelimit.Result, 1)
	// Every rule's own result, for the memo; a Result of one rule is its
	// rule's.
	var each []ratelimit.Result
	var eachReq [][]ratelimit.Result
	if len(f.rules) > 1 {
		each = make([]ratelimit.Result, len(f.rules))
		eachReq = [][]ratelimit.Result{each}
	}
	err := f.limits.Call(ctx, reqs, results, eachReq,
		func() ([][]ratelimit.Rule, []time.Duration) {
			return [][]ratelimit.Rule{f.rules}, []time.Duration{f.window}
		},
		func() (err error) {
			results[0], err = f.call(ctx, key, reqs[0].N, each)
			return err
		},
		func(_ int, part int64) (ratelimit.Result, bool) {
			r, err := f.call(ctx, key, part, nil)
			return r, err == nil && r.Allowed
		})
	if err == nil {
		return results[0], nil
	}
	if ctx.Err() != nil || errors.Is(err, backend.ErrEmptyKey) || errors.Is(err, ratelimit.ErrNegativeN) {
		return ratelimit.Result{}, err
	}
	f.report(key, err)
	if _, derr := f.limits.Decide(ctx, reqs, [][]ratelimit.Rule{f.rules}, []time.Duration{f.window}, results); derr != nil {
		if ctx.Err() != nil {
			return ratelimit.Result{}, derr
		}
		return ratelimit.Result{}, fmt.Errorf("fallback: deciding in process after %w: %v", err, derr)
	}
	res := results[0]
	res.Fallback = true
	if res.Rule >= 0 && res.Rule < len(f.names) {
		res.RuleName = f.names[res.Rule]
	}
	return res, nil
}
