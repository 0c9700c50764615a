// Package httplimit is net/http middleware over floodgate's limiters: nginx's
// limit_req (a ratelimit.Limiter, with a LeakyBucket's delay applied by
// holding the request) and limit_conn (a ratelimit.ConcurrencyLimiter),
// answering 429 Too Many Requests with Retry-After and the RateLimit header
// fields of draft-ietf-httpapi-ratelimit-headers-10.
//
//	lim, err := ratelimit.New(b, ratelimit.Named("permin", ratelimit.FixedWindow{Limit: 60, Window: time.Minute}))
//	mw, err := httplimit.New(lim,
//		httplimit.KeyByIP(httplimit.TrustedProxies("10.0.0.0/8")),
//		httplimit.PolicyWindow(time.Minute))
//	http.ListenAndServe(":8080", mw.Handler(mux))
//
// Requests are keyed by client IP address by default (KeyByIP); KeyByHeader
// and KeyFunc key them otherwise. When the store fails, requests are served
// (FailOpen, the default) or refused (FailClosed), and the error goes to the
// OnError hook; or, with Fallback, a ratelimit/fallback Limiter decides
// them (in process on this process's share of the limits, say). DryRun decides and reports without ever refusing.
//
// # Keys
//
// A request whose key is empty (KeyByHeader: the header is missing or
// empty) or whose key function failed has no key: it gets 400 Bad Request,
// or is served unlimited with PassWithoutKey (see ErrNoKey). Every other
// key is limited, whatever its length. A key longer than backend.MaxKeyLen
// (a JWT or a long API key from a header, say) is counted under a
// fixed-length digest of the whole key (see Keys in package ratelimit): the
// same long key always draws on one budget, and two long keys that differ
// anywhere, also past their first MaxKeyLen bytes, on two. A client cannot
// escape its limit by making its key long, with or without PassWithoutKey.
package httplimit

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/floodgate-dev/floodgate/ratelimit"
)

// Middleware limits the requests of an http.Handler with a ratelimit.Limiter
// (see New) or a ratelimit.ConcurrencyLimiter (see NewConcurrency). Wrap
// handlers with Handler. A Middleware has no state of its own: any number of
// handlers may share one, and it is safe for concurrent use. Its zero value
// is not usable.
type Middleware struct {
	lim  *ratelimit.Limiter
	conc *ratelimit.ConcurrencyLimiter
	c    config

	// sleep holds a request for a LeakyBucket delay; tests replace it.
	sleep func(ctx context.Context, d time.Duration) error
}

// New returns middleware with limit_req semantics on the Limiter l. For each
// request not exempted by Skip it finds the key (KeyByIP by default), takes
// one unit from l, and then:
//
//   - allowed: writes the rate-limit fields (see HeaderStyle), waits for
//     Result.Delay when a LeakyBucket asks to (traffic shaping: the request
//     was admitted and is served late), and calls the handler. If the
//     request's context ends during the wait the handler is not called and
//     the response is 503 Service Unavailable (the client has usually gone;
//     nginx logs such requests as 499). A wait that would outlast the
//     context's deadline ends at once the same way.
//   - denied: writes the rate-limit fields, Retry-After (the whole seconds
//     until a retry can succeed, rounded up; left out when the request can
//     never be admitted) and 429 Too Many Requests (see ProblemJSON,
//     DenyWith). A denied request consumes nothing.
//   - no key (empty, or the key function failed): 400 Bad Request, or
//     served with PassWithoutKey. A long key is a key (see Keys above).
//   - store error: served (FailOpen, the default) or 503 (FailClosed), with
//     no rate-limit fields. If the request's context has ended, 503. With
//     the Fallback option, the fallback decides instead (see Fallback).
//
// New returns an error naming the option for invalid options, for a nil
// Limiter, and for PolicyWindows with more entries than l has rules.
func New(l *ratelimit.Limiter, opts ...Option) (*Middleware, error) {
	if l == nil {
		return nil, errors.New("httplimit: New: Limiter is nil")
	}
	c, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	if c.fallback != nil && c.fallback.Limiter() != l {
		return nil, errors.New("httplimit: Fallback: the fallback.Limiter wraps another Limiter than New's")
	}
	if len(c.windows) > l.Rules() {
		return nil, fmt.Errorf("httplimit: PolicyWindows has %d entries for %d rules", len(c.windows), l.Rules())
	}
	return &Middleware{lim: l, c: c, sleep: sleep}, nil
}

// NewConcurrency returns middleware with limit_conn semantics on the
// ConcurrencyLimiter c: a request takes a slot of its key before the handler
// runs and gives it back when the handler returns, also when it panics (the
// panic then goes on up). A request finding every slot taken gets 429 Too
// Many Requests without Retry-After, since holders usually finish long before
// their lease ends. The rate-limit fields describe the slots, e.g.
//
//	RateLimit-Policy: "default";q=10;qu="concurrent-requests"
//	RateLimit: "default";r=9
//
// Keys, store errors and the options behave as for New; PolicyWindow,
// PolicyWindows and the reset fields do not apply. Giving a slot back is
// bounded by ReleaseTimeout; a failure goes to OnError and the slot frees
// itself when its lease ends. NewConcurrency returns an error naming the
// option for invalid options and for a nil ConcurrencyLimiter.
func NewConcurrency(c *ratelimit.ConcurrencyLimiter, opts ...Option) (*Middleware, error) {
	if c == nil {
		return nil, errors.New("httplimit: NewConcurrency: ConcurrencyLimiter is nil")
	}
	cfg, err := newConfig(opts)
	if err != nil {
		return nil, err
	}
	return &Middleware{conc: c, c: cfg, sleep: sleep}, nil
}

// Limit is New for use in a handler chain such as
// router.Use(httplimit.Limit(lim)). It never panics: if New fails, every
// request gets 500 Internal Server Error with the configuration error in the
// body. Call New to see the error at start-up instead.
func Limit(l *ratelimit.Limiter, opts ...Option) func(http.Handler) http.Handler {
	return chain(New(l, opts...))
}

// LimitConcurrency is NewConcurrency for use in a handler chain, reporting a
// configuration error like Limit.
func LimitConcurrency(c *ratelimit.ConcurrencyLimiter, opts ...Option) func(http.Handler) http.Handler {
	return chain(NewConcurrency(c, opts...))
}

func chain(m *Middleware, err error) func(http.Handler) http.Handler {
	if err != nil {
		return func(http.Handler) http.Handler {
			return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				http.Error(w, "rate limiter misconfigured: "+err.Error(), http.StatusInternalServerError)
			})
		}
	}
	return m.Handler
}

// Handler returns next wrapped by the middleware. next must not be nil.
func (m *Middleware) Handler(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		m.serve(w, r, next)
	})
}

func (m *Middleware) report(r *http.Request, err error) {
	if m.c.onError != nil {
		m.c.onError(r, err)
	}
}

// key returns the request's key, or an error wrapping ErrNoKey.
func (m *Middleware) key(r *http.Request) (string, error) {
	key, err := m.c.key(r)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrNoKey, err)
	}
	return key, keyError(key)
}

func (m *Middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	if m.c.skip != nil && m.c.skip(r) {
		next.ServeHTTP(w, r)
		return
	}
	key, err := m.key(r)
	if err != nil {
		m.report(r, err)
		if m.c.passNoKey || m.c.dryRun {
			next.ServeHTTP(w, r)
		} else {
			m.fail(w, http.StatusBadRequest, "the request has no rate-limit key")
		}
		return
	}
	ctx := r.Context()
	var (
		res     ratelimit.Result
		release func(context.Context) error
	)
	if m.conc != nil {
		release, res, err = m.conc.Acquire(ctx, key)
	} else if m.c.fallback != nil {
		res, err = m.c.fallback.Allow(ctx, key)
	} else {
		res, err = m.lim.Allow(ctx, key)
	}
	if err != nil {
		m.report(r, err)
		switch {
		case ctx.Err() != nil && !m.c.dryRun:
			m.fail(w, http.StatusServiceUnavailable, "the request ended before the rate limiter decided")
		case m.c.failure == FailOpen || m.c.dryRun:
			next.ServeHTTP(w, r)
		default:
			m.fail(w, http.StatusServiceUnavailable, "the rate limiter is unavailable")
		}
		return
	}
	if m.c.onDecision != nil {
		m.c.onDecision(r, res)
	}
	m.setHeaders(w.Header(), res)
	if m.c.dryRun {
		res.Allowed, res.Delay = true, 0
	}
	if !res.Allowed {
		m.deny(w, r, res)
		return
	}
	if release != nil {
		defer m.release(r, release)
	}
	if res.Delay > 0 {
		if err := m.wait(ctx, res.Delay); err != nil {
			m.report(r, err)
			m.fail(w, http.StatusServiceUnavailable, "the request ended while it was delayed")
			return
		}
	}
	next.ServeHTTP(w, r)
}

// release gives a concurrency slot back, with a context that outlives the
// request's (which is often cancelled by now) but is bounded by
// ReleaseTimeout.
func (m *Middleware) release(r *http.Request, release func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), m.c.releaseTimeout)
	defer cancel()
	if err := release(ctx); err != nil {
		m.report(r, err)
	}
}

// wait holds a request for d, or until ctx ends. It gives up at once when
// ctx's deadline comes before d has passed.
func (m *Middleware) wait(ctx context.Context, d time.Duration) error {
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < d {
		return fmt.Errorf("httplimit: delay of %v is beyond the request's deadline: %w", d, context.DeadlineExceeded)
	}
	if err := m.sleep(ctx, d); err != nil {
		return fmt.Errorf("httplimit: delay of %v cut short: %w", d, err)
	}
	return nil
}

// sleep waits for d or until ctx ends, and returns ctx's error in the latter
// case.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
