// Package clock is the source of time for floodgate's primitives.
//
// Production code uses Real. Tests inject a *Fake, whose time moves only when
// the test calls Set or Advance, so every decision of a limiter or a lock can
// be driven step by step. Redis-backed primitives take their time from the
// Redis server unless a Clock is injected explicitly (see backend.WithClock).
package clock

import (
	"sync"
	"time"
)

// Clock tells the current time. Implementations must be safe for concurrent use.
type Clock interface {
	Now() time.Time
}

// Real is the system clock: Now returns time.Now().
type Real struct{}

// Now returns time.Now().
func (Real) Now() time.Time { return time.Now() }

// Fake is a manually driven clock for tests. Its zero value is not usable;
// create one with NewFake. It is safe for concurrent use.
type Fake struct {
	mu  sync.Mutex
	now time.Time
}

// NewFake returns a Fake clock that reads t until it is moved.
func NewFake(t time.Time) *Fake { return &Fake{now: t} }

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// Set moves the clock to t, forwards or backwards.
func (f *Fake) Set(t time.Time) {
	f.mu.Lock()
	f.now = t
	f.mu.Unlock()
}

// Advance moves the clock forward by d (backwards when d < 0) and returns the new time.
func (f *Fake) Advance(d time.Duration) time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = f.now.Add(d)
	return f.now
}
