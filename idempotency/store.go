// Package idempotency makes operations take effect once, on a Memory or Redis
// backend: one-time tokens, and idempotency keys whose first result is stored
// and replayed.
//
// Tokens guard a form or a link against double submission. IssueToken returns
// a random 128-bit token kept for the Store's TTL; ConsumeToken deletes it and
// reports whether it was there, in one atomic step (the delete-first scheme),
// so of any number of concurrent consumers exactly one sees true.
//
// Keys make a retried request safe. Do(ctx, key, fn) runs fn once per key and
// stores its result for the TTL; later calls with the key get the stored
// result back with replayed = true, without running fn. While fn runs, the key
// holds an in-flight marker that is a lease, renewed while fn runs: a
// concurrent duplicate gets ErrInFlight at once (or waits for the result with
// WaitForResult), and the key of a runner that crashed becomes retryable when
// its lease ends. Errors from fn are not stored, so a retry runs fn again,
// unless StoreErrors says otherwise.
//
//	s, _ := idempotency.New(b, idempotency.TTL(24*time.Hour))
//	res, replayed, err := s.Do(ctx, "charge:"+orderID, func(ctx context.Context) ([]byte, error) {
//		return chargeCard(ctx, orderID)
//	})
//
// Middleware does the same for HTTP requests carrying an Idempotency-Key
// header (draft-ietf-httpapi-idempotency-key-header): it stores and replays
// the status, headers and body of the first response.
//
// On Redis every call is one script on keys that share the hash tag of the
// user key (Cluster-safe), time comes from the Redis server, and waiters are
// woken through pub/sub. Records carry their own deadlines, so correctness
// does not depend on when Redis expires keys.
//
// # Keys
//
// A key is any non-empty string, of any length: the empty key is refused
// with an error wrapping backend.ErrEmptyKey, and every other key is
// deduplicated. A key of at most backend.MaxKeyLen bytes names its record as
// it is. A longer one (a request's body or URL used as the key, say) is kept
// under its digest: its first 256 bytes, "#sha256:" and the hex SHA-256 of
// the whole key, 328 bytes in all, as package ratelimit does. So the same
// long key always runs fn once and replays its result, and two long keys
// that differ anywhere, also past their first MaxKeyLen bytes, are apart.
// (Middleware takes keys of at most MaxHeaderKeyLen bytes from the header,
// and answers 400 to a longer one.)
//
// # Lost replies and resends
//
// A script whose reply is lost (a connection cut, a read timeout while Redis
// stalls) has still run, and go-redis resends it (MaxRetries, 3 by default),
// so any script may run twice. Each one knows a second run of the same call
// and answers it as the first did, without acting again:
//
//   - Do draws an owner per call. A resent claim finds the call's own
//     in-flight marker and claims (not ErrInFlight); a resent renewal renews
//     again; a resent store of the result finds the result stored by this
//     owner (the record keeps it, for the TTL) and succeeds, so ErrLeaseLost
//     means the result is not stored; a resent removal of the marker after
//     an error finds it freed by this owner (an aborted marker, kept until
//     the lease would have ended) and changes nothing.
//   - IssueToken draws the token before the script runs, so a live token
//     with its value is this call's: success, one token.
//   - ConsumeToken carries a call ID (callid.New); the token is not
//     deleted but marked consumed by that call for ReplayWindow (a minute,
//     less if the token expires sooner), so a resend answers true again
//     while any other call gets false.
//
// Nothing is kept longer than the record it belongs to: about 30 bytes more
// per stored result (its owner), and a consumed token stays, marked, for at
// most ReplayWindow (about 120 bytes on Redis). When the client gives up
// (every resend failed) the call returns the store's error: Do returns fn's
// result with it, and the key becomes retryable when the lease ends unless
// the result was stored; ConsumeToken's token is then in an unknown state.
package idempotency

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"time"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/internal/longkey"
	"github.com/floodgate-dev/floodgate/internal/unwrap"
)

// Sentinel errors. Compare with errors.Is.
var (
	// ErrInFlight is returned by Do when another caller is running fn for the
	// key, at once or, with WaitForResult, when the wait ended first.
	ErrInFlight = errors.New("idempotency: another call with this key is in flight")
	// ErrMismatch is returned by Do when the key was first used with another
	// request fingerprint: by Middleware for a different request, or by
	// Middleware while Do uses the key (Do's fingerprint is empty).
	ErrMismatch = errors.New("idempotency: key was used with a different request")
	// ErrLeaseLost is returned by Do when fn ran but its result could not be
	// stored because the runner's lease had ended: the runner was paused, or
	// cut off from the store, for longer than the lease, and another caller
	// may have run fn since. The result fn returned is still returned. It
	// means the result is not stored: a resend of the store after a lost
	// reply that finds this call's result is a success. It is
	// also the cause (context.Cause) of the cancellation of fn's context when
	// the lease may have passed to another caller.
	ErrLeaseLost = errors.New("idempotency: lease lost before the result was stored")
)

// StoredError is the error Do returns, with replayed = true, when it replays
// a failure that StoreErrors chose to keep. Message is the text of the
// original error; its type is not kept. Match it with errors.As.
type StoredError struct {
	Message string
}

func (e *StoredError) Error() string { return e.Message }

// Defaults and limits of the options.
const (
	DefaultTTL     = 24 * time.Hour
	DefaultLease   = 10 * time.Second
	DefaultMaxPoll = time.Second
	// MaxTTL bounds TTL and Lease (ten years), so that deadlines in
	// microseconds stay exact in Lua's doubles.
	MaxTTL = 87600 * time.Hour
	// MaxNamespaceLen is the longest Namespace, in bytes.
	MaxNamespaceLen = 128
)

// Option configures a Store.
type Option func(*config)

type config struct {
	ttl      time.Duration
	lease    time.Duration
	wait     time.Duration
	maxPoll  time.Duration
	storeErr func(error) bool // nil: errors are not stored
	ns       string
}

// TTL sets how long tokens and stored results are kept (default 24h). It
// must be between 1ms and MaxTTL. A key whose result has expired runs fn
// again.
func TTL(d time.Duration) Option { return func(c *config) { c.ttl = d } }

// Lease sets the length of the in-flight marker's lease (default 10s), which
// Do renews every Lease/3 while fn runs. When a runner dies, its key becomes
// retryable when the lease ends; a runner cut off from the store for longer
// than the lease loses it (ErrLeaseLost). It must be between 1ms and MaxTTL.
func Lease(d time.Duration) Option { return func(c *config) { c.lease = d } }

// WaitForResult makes Do wait up to maxWait for a concurrent runner of the
// same key instead of returning ErrInFlight at once (default 0: no wait).
// The waiter is woken when the result is stored (pub/sub on Redis), with a
// fallback poll bounded by MaxPoll, and then returns the stored result with
// replayed = true. If the runner fails without storing a result, or its
// lease ends, the waiter claims the key and runs its own fn. It must be >= 0.
func WaitForResult(maxWait time.Duration) Option { return func(c *config) { c.wait = maxWait } }

// MaxPoll bounds how long a waiter sleeps between looks at the key when no
// wake-up arrives (default 1s): a lost message or a runner that died costs
// at most this much extra wait. It must be >= 1ms.
func MaxPoll(d time.Duration) Option { return func(c *config) { c.maxPoll = d } }

// StoreErrors makes Do store errors from fn for which keep returns true, as
// it stores results: later calls replay the result fn returned together with
// a *StoredError holding the error's text. keep == nil stores every error.
// Without this option no error is stored: the marker is removed and the next
// call with the key runs fn again.
func StoreErrors(keep func(err error) bool) Option {
	return func(c *config) {
		if keep == nil {
			keep = func(error) bool { return true }
		}
		c.storeErr = keep
	}
}

// Namespace separates the keys and tokens of this Store from those of other
// Stores on the same backend (default ""). At most MaxNamespaceLen bytes.
func Namespace(ns string) Option { return func(c *config) { c.ns = ns } }

func buildConfig(opts []Option) (config, error) {
	c := config{ttl: DefaultTTL, lease: DefaultLease, maxPoll: DefaultMaxPoll}
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	switch {
	case c.ttl < time.Millisecond || c.ttl > MaxTTL:
		return c, fmt.Errorf("idempotency: TTL must be between 1ms and %v, got %v", MaxTTL, c.ttl)
	case c.lease < time.Millisecond || c.lease > MaxTTL:
		return c, fmt.Errorf("idempotency: Lease must be between 1ms and %v, got %v", MaxTTL, c.lease)
	case c.wait < 0:
		return c, fmt.Errorf("idempotency: WaitForResult must be >= 0, got %v", c.wait)
	case c.maxPoll < time.Millisecond:
		return c, fmt.Errorf("idempotency: MaxPoll must be >= 1ms, got %v", c.maxPoll)
	case len(c.ns) > MaxNamespaceLen:
		return c, fmt.Errorf("idempotency: Namespace must be at most %d bytes, got %d", MaxNamespaceLen, len(c.ns))
	}
	return c, nil
}

// Store holds one-time tokens and idempotency keys on a backend. Create it
// with New; the zero value is not usable. A Store is safe for concurrent use,
// and Stores in different processes on the same Redis (with the same
// Namespace) share their tokens and keys. Most callers want Do, or
// Middleware for HTTP.
type Store struct {
	cfg config
	d   driver

	noRenew bool // tests: simulate a runner whose process died
}

// New returns a Store on a Memory or Redis backend. Options: TTL, Lease,
// WaitForResult, MaxPoll, StoreErrors, Namespace. It returns an error naming
// the option when one is out of range, and for a nil or unknown backend.
func New(b backend.Backend, opts ...Option) (*Store, error) {
	if b == nil {
		return nil, errors.New("idempotency: backend is nil")
	}
	cfg, err := buildConfig(opts)
	if err != nil {
		return nil, err
	}
	s := &Store{cfg: cfg}
	switch b := b.(type) {
	case *backend.Memory:
		s.d = newMemDriver(unwrap.Memory(b), cfg.ns)
	case *backend.Redis:
		s.d = newRedisDriver(unwrap.Redis(b), cfg.ns)
	default:
		return nil, fmt.Errorf("idempotency: unsupported backend %T", b)
	}
	return s, nil
}

// driver is the store side of a Store. Every method is atomic in the store
// and judges deadlines by the backend's clock.
type driver interface {
	// begin looks at key: claims it for owner (a new in-flight record with
	// fingerprint fp and a lease), or reports it in flight, done or used
	// with another fingerprint. waiting marks that a waiter wants a wake-up.
	// owner is drawn once per Do call; begin finding owner's own live
	// in-flight record (a replay of its claim) reports it claimed.
	//
	// Every method is safe to run twice with the same arguments, as a
	// client does when it resends a call whose reply was lost: the second
	// run changes nothing the first did not and answers the same (renew:
	// with a later deadline).
	begin(ctx context.Context, key, owner, fp string, lease time.Duration, waiting bool) (outcome, error)
	// renew moves owner's lease to now + lease; false when owner no longer
	// holds a live lease on key.
	renew(ctx context.Context, key, owner string, lease time.Duration) (bool, error)
	// complete replaces owner's live in-flight record by the result, kept
	// for ttl, and wakes waiters; false when owner no longer holds it. True
	// with no change when owner's result is stored already (a replay).
	complete(ctx context.Context, key, owner string, ttl time.Duration, r result) (bool, error)
	// abort frees owner's live in-flight record and wakes waiters; true
	// with no change when this owner freed it already (a replay).
	abort(ctx context.Context, key, owner string) (bool, error)
	// subscribe returns a channel of wake-ups for waiters on key, or a nil
	// channel when wake-ups come through outcome.wake instead.
	subscribe(ctx context.Context, key string) (<-chan string, func(), error)
	// issue stores a token for ttl; true also when the live token exists
	// (the token is drawn for one call: a replay), false if it was consumed.
	issue(ctx context.Context, token string, ttl time.Duration) (bool, error)
	// consume consumes token for the call (an ID its replays share) and
	// reports whether it existed and was live; a replay of the call that
	// consumed it reports true again, any other call false.
	consume(ctx context.Context, token, call string) (bool, error)
}

// state is what begin found.
type state int

const (
	claimed  state = iota // the caller owns the key and must run fn
	inFlight              // another owner's live lease
	done                  // a stored result
	mismatch              // the key was used with another fingerprint
)

// outcome is the reply of begin.
type outcome struct {
	state state
	hint  time.Duration   // inFlight: until the lease ends, by the store's clock
	wake  <-chan struct{} // inFlight on Memory: closed when the runner finishes
	res   result          // done
}

// result is a stored result: fn's bytes and, when StoreErrors kept it, the
// text of fn's error.
type result struct {
	val    []byte
	failed bool
	msg    string
}

func (r result) err() error {
	if !r.failed {
		return nil
	}
	return &StoredError{Message: r.msg}
}

// errString is a sentinel-wrapping error with its own message.
type errString struct {
	msg string
	err error
}

func (e errString) Error() string { return e.msg }
func (e errString) Unwrap() error { return e.err }

// storeKey returns the key that key's record is kept under: key itself, or
// its digest when it is longer than backend.MaxKeyLen (package longkey), so
// that a long key is deduplicated like any other (see Keys in the package
// doc). The empty key is refused with an error wrapping
// backend.ErrEmptyKey.
func storeKey(key string) (string, error) {
	if key == "" {
		return "", errString{"idempotency: key is empty", backend.ErrEmptyKey}
	}
	return longkey.Key(key), nil
}

// Do runs fn once per key and returns its result; a call with a key whose
// result is stored returns that result with replayed = true and does not run
// fn.
//
// The first caller claims the key with an in-flight marker, a lease of
// length Lease renewed every Lease/3 while fn runs. A concurrent caller with
// the same key gets ErrInFlight at once, or with WaitForResult waits for the
// stored result (see there). fn's context is ctx, cancelled with cause
// ErrLeaseLost when the lease may have passed to another caller (a renewal
// found it taken, or renewals failed until its deadline).
//
// When fn returns a nil error, res is stored for TTL. When fn returns an
// error, Do returns fn's res and error as they are; the error is stored only
// if StoreErrors keeps it, and otherwise the marker is removed so that the
// next call runs fn again. If fn panics, the marker is removed and the panic
// goes on. Storing the result is not cut short by ctx ending (a result fn
// produced is worth keeping); it is bounded by the lease length, or 1s if
// longer. If the
// store fails while storing, Do returns fn's res with an error wrapping the
// store's, and the key becomes retryable when the lease ends; ErrLeaseLost
// when the lease had already ended.
//
// A key of any length is deduplicated: see Keys in the package doc.
//
// Do returns an error naming the problem for an empty key (wrapping
// backend.ErrEmptyKey) and a nil fn, ErrMismatch when Middleware uses the
// key, and store errors wrapped. The replayed slice is the caller's own copy.
func (s *Store) Do(ctx context.Context, key string, fn func(context.Context) ([]byte, error)) (res []byte, replayed bool, err error) {
	return s.do(ctx, key, "", s.cfg.wait, s.cfg.storeErr, fn)
}

// do is Do with a request fingerprint (checked against the one stored with
// the key), a wait, and a choice of errors to store (nil: none).
func (s *Store) do(ctx context.Context, key, fp string, wait time.Duration, keep func(error) bool,
	fn func(context.Context) ([]byte, error)) ([]byte, bool, error) {
	key, err := storeKey(key)
	if err != nil {
		return nil, false, err
	}
	if fn == nil {
		return nil, false, errors.New("idempotency: fn is nil")
	}
	if err := ctx.Err(); err != nil {
		return nil, false, err
	}
	owner := rand.Text()
	var (
		msgs  <-chan string
		until time.Time
	)
	if wait > 0 {
		until = time.Now().Add(wait)
		// Subscribe before the first look, so that a result stored between
		// the look and the wait is not missed.
		c, stop, err := s.d.subscribe(ctx, key)
		if err != nil {
			return nil, false, fmt.Errorf("idempotency: %w", err)
		}
		defer stop()
		msgs = c
	}
	for {
		start := time.Now()
		o, err := s.d.begin(ctx, key, owner, fp, s.cfg.lease, wait > 0)
		if err != nil {
			return nil, false, fmt.Errorf("idempotency: %w", err)
		}
		switch o.state {
		case claimed:
			return s.run(ctx, key, owner, start, keep, fn)
		case done:
			return o.res.val, true, o.res.err()
		case mismatch:
			return nil, false, ErrMismatch
		}
		left := time.Until(until)
		if wait <= 0 || left <= 0 {
			return nil, false, ErrInFlight
		}
		// Sleep until woken, until the runner's lease should have ended, or
		// at most MaxPoll; then look again.
		pause := min(left, s.cfg.maxPoll, o.hint+time.Millisecond)
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, false, ctx.Err()
		case <-msgs:
		case <-o.wake:
		case <-t.C:
		}
		t.Stop()
	}
}

// run runs fn for a claimed key under a renewed lease and stores or drops
// its result. start is when the claim was sent: the lease ends no earlier
// than start + Lease by the store's clock.
func (s *Store) run(ctx context.Context, key, owner string, start time.Time, keep func(error) bool,
	fn func(context.Context) ([]byte, error)) (res []byte, _ bool, err error) {
	l := s.startLease(ctx, key, owner, start)
	finished := false
	defer func() {
		if !finished { // fn panicked: free the key for a retry, then go on panicking
			l.end()
			cctx, cancel := s.cleanupContext(ctx)
			defer cancel()
			_, _ = s.d.abort(cctx, key, owner)
		}
	}()
	res, ferr := fn(l.ctx)
	finished = true
	l.end()
	cctx, cancel := s.cleanupContext(ctx)
	defer cancel()
	if ferr != nil && (keep == nil || !keep(ferr)) {
		if _, err := s.d.abort(cctx, key, owner); err != nil {
			return res, false, errors.Join(ferr, fmt.Errorf("idempotency: removing the in-flight marker: %w", err))
		}
		return res, false, ferr
	}
	r := result{val: res}
	if ferr != nil {
		r.failed, r.msg = true, ferr.Error()
	}
	ok, err := s.d.complete(cctx, key, owner, s.cfg.ttl, r)
	switch {
	case err != nil:
		return res, false, errors.Join(ferr, fmt.Errorf("idempotency: storing the result: %w", err))
	case !ok:
		return res, false, errors.Join(ferr, ErrLeaseLost)
	}
	return res, false, ferr
}

// cleanupContext bounds storing a result or removing a marker by the lease
// length rather than by ctx, which may have ended.
func (s *Store) cleanupContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), max(s.cfg.lease, time.Second))
}
