package server

import (
	"sync"
	"sync/atomic"
	"time"
)

// BreakerOptions configure the circuit breaker in front of a remote store.
type BreakerOptions struct {
	// Failures is how many consecutive failed calls open the breaker; 5 by
	// default. A negative value disables the breaker.
	Failures int
	// Cooldown is how long an open breaker fails calls at once before it lets
	// one probe through; 1s by default.
	Cooldown time.Duration
}

// breaker fails calls fast while the store is known to be down: after
// Failures consecutive failures it opens for Cooldown, then lets a single
// probe call through (half-open); the probe's success closes it, its failure
// opens it again. The closed state costs one atomic load per call.
type breaker struct {
	failures int
	cooldown time.Duration
	now      func() time.Time

	open atomic.Bool // fast path: false while closed

	fails atomic.Int64 // consecutive failures

	mu        sync.Mutex
	openUntil time.Time
	probing   bool
}

func newBreaker(o BreakerOptions) *breaker {
	if o.Failures == 0 {
		o.Failures = 5
	}
	if o.Cooldown <= 0 {
		o.Cooldown = time.Second
	}
	return &breaker{failures: o.Failures, cooldown: o.Cooldown, now: time.Now}
}

// allow reports whether a call may go to the store now.
func (b *breaker) allow() bool {
	if b.failures < 0 || !b.open.Load() {
		return true
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.open.Load() {
		return true
	}
	if b.probing || b.now().Before(b.openUntil) {
		return false
	}
	b.probing = true
	return true
}

// record reports the outcome of a call that allow let through.
func (b *breaker) record(err error) {
	if b.failures < 0 {
		return
	}
	if err == nil {
		if b.fails.Load() != 0 {
			b.fails.Store(0)
		}
		if b.open.Load() {
			b.mu.Lock()
			b.probing = false
			b.open.Store(false)
			b.mu.Unlock()
		}
		return
	}
	fails := b.fails.Add(1)
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.probing || fails >= int64(b.failures) {
		b.probing = false
		b.openUntil = b.now().Add(b.cooldown)
		b.open.Store(true)
	}
}

// release ends a call that allow let through without an outcome that says
// anything about the store (the caller cancelled). A half-open probe so
// ended lets the next call probe instead.
func (b *breaker) release() {
	if b.failures < 0 || !b.open.Load() {
		return
	}
	b.mu.Lock()
	b.probing = false
	b.mu.Unlock()
}

// isOpen reports whether calls are being failed fast.
func (b *breaker) isOpen() bool { return b.failures >= 0 && b.open.Load() }
