// Package breaker is the circuit breakers in front of the server's remote
// stores: while a store is known to be down they fail its calls at once,
// instead of letting each caller wait for the store's timeout.
//
// A hiccup is not an outage. A breaker counts failure events, not failed
// calls: calls that were in flight together and failed (the timeouts of
// one stall, however many callers waited) are one event, and a failure
// counts only when its call started after the last failure counted. It
// opens after Options.Failures consecutive events; any success resets the
// count. Open, it fails every call at once, then lets a single probe call
// through (half-open) after Options.Probe — about one store timeout — and,
// while probes keep failing, after twice as long each time, up to
// Options.Cooldown. The first success closes it, a probe's or a call's
// that was already in flight: a stall of d costs about d plus one probe
// delay of answers the store did not give. A probe ended without an
// outcome (Set.Release) lets the next call probe instead. The closed state
// costs one atomic load per call. A Set is the breakers of one store: one
// per range of hash slots on a Redis Cluster (SlotRanges), a single one
// otherwise.
package breaker

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-dev/floodgate/internal/redisstore"
)

// Options configure the circuit breaker in front of a remote store.
type Options struct {
	// Failures is how many consecutive failure events open the breaker
	// (calls that failed together are one event); 5 by default. A
	// negative value disables the breaker.
	Failures int
	// Probe is how long an open breaker fails calls before its first
	// probe; DefaultProbe when 0 (the server uses the store's timeout).
	Probe time.Duration
	// Cooldown is the longest an open breaker waits between probes while
	// they fail (the wait doubles from Probe up to it); DefaultCooldown
	// when 0. It bounds how long the store, once back, waits to be asked.
	Cooldown time.Duration
	// OnChange, when set, is told when breaker i of a Set opens or closes
	// (under the breaker's lock, so that calls for one breaker come in order:
	// it must not call Allow, Record or Release).
	OnChange func(i int, open bool)
}

// Defaults of Options. A probe is one call: probing a store that is down
// every 100 ms costs a call (a timeout, or a refused connection) every
// 100 ms, and finds the store back within 100 ms of its return.
const (
	DefaultProbe    = 50 * time.Millisecond
	DefaultCooldown = 100 * time.Millisecond
)

// breaker is one circuit breaker (see the package doc).
type breaker struct {
	failures int
	probe    time.Duration
	cooldown time.Duration
	now      func() time.Time
	onChange func(open bool) // nil: nobody

	open atomic.Bool // fast path: false while closed

	fails     atomic.Int64 // consecutive failure events
	lastEvent atomic.Int64 // when the last one was counted, Unix ns

	mu        sync.Mutex
	openUntil time.Time
	wait      time.Duration // before the next probe
	probing   bool
}

func newBreaker(o Options) *breaker {
	if o.Failures == 0 {
		o.Failures = 5
	}
	if o.Cooldown <= 0 {
		o.Cooldown = DefaultCooldown
	}
	if o.Probe <= 0 {
		o.Probe = DefaultProbe
	}
	o.Probe = min(o.Probe, o.Cooldown)
	return &breaker{failures: o.Failures, probe: o.Probe, cooldown: o.Cooldown, now: time.Now}
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

// record reports the outcome of a call that allow let through, started at
// start.
func (b *breaker) record(err error, start time.Time) {
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
			closed := b.open.Swap(false)
			if closed && b.onChange != nil {
				b.onChange(false) // under the lock: in order with the opening
			}
			b.mu.Unlock()
		}
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	if b.probing {
		// The probe failed: wait twice as long, up to the cooldown.
		b.probing = false
		b.wait = min(2*b.wait, b.cooldown)
		b.openUntil = now.Add(b.wait)
		b.lastEvent.Store(now.UnixNano())
		return
	}
	if start.UnixNano() <= b.lastEvent.Load() {
		return // in flight with the failure last counted: the same event
	}
	b.lastEvent.Store(now.UnixNano())
	if b.fails.Add(1) >= int64(b.failures) && !b.open.Load() {
		b.wait = b.probe
		b.openUntil = now.Add(b.wait)
		b.open.Store(true)
		if b.onChange != nil {
			b.onChange(true)
		}
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

// SlotRanges is how many circuit breakers a Redis Cluster store gets: one
// per equal range of hash slots. A Cluster's masters own contiguous ranges,
// so a dead master opens the breakers of its ranges (with 3 masters, about
// 21 of 64) and keys in the others keep their real answers. A range that
// straddles two masters sees both failures and successes, so its breaker
// rarely opens: its dead keys pay the store timeout, as without a breaker.
const SlotRanges = 64

// Set is the circuit breakers of a store: one per slot range on a Redis
// Cluster, a single one otherwise. Safe for concurrent use.
type Set struct {
	b    []*breaker
	slot func(tag string) int // nil: a single breaker
}

// New returns the breakers of a store, each configured by o: SlotRanges of
// them when slot, which gives the hash slot of a key, is not nil; a single
// one otherwise.
func New(o Options, slot func(string) int) *Set {
	n := 1
	if slot != nil {
		n = SlotRanges
	}
	s := &Set{b: make([]*breaker, n), slot: slot}
	for i := range s.b {
		s.b[i] = newBreaker(o)
		if o.OnChange != nil {
			s.b[i].onChange = func(open bool) { o.OnChange(i, open) }
		}
	}
	return s
}

// Of returns the index of the breaker of a state key.
func (s *Set) Of(key string) int {
	if s.slot == nil {
		return 0
	}
	return s.slot(key) * len(s.b) / redisstore.Slots
}

// Allow reports whether a call touching the breakers idx may go to the
// store. When one of them refuses, the probes the others granted are
// handed back.
func (s *Set) Allow(idx []int) bool {
	for i, j := range idx {
		if !s.b[j].allow() {
			for _, k := range idx[:i] {
				s.b[k].release()
			}
			return false
		}
	}
	return true
}

// Record reports the outcome of a call, started at start, that Allow let
// through to each of its breakers.
func (s *Set) Record(idx []int, err error, start time.Time) {
	for _, j := range idx {
		s.b[j].record(err, start)
	}
}

// Release ends a call Allow let through without an outcome that says
// anything about the store (the caller cancelled): a half-open probe so
// ended lets the next call probe instead.
func (s *Set) Release(idx []int) {
	for _, j := range idx {
		s.b[j].release()
	}
}

// Open returns how many breakers are open, of how many.
func (s *Set) Open() (open, total int) {
	for _, b := range s.b {
		if b.isOpen() {
			open++
		}
	}
	return open, len(s.b)
}

// AllOpen reports whether every breaker is open: the whole store is failing.
func (s *Set) AllOpen() bool {
	n, total := s.Open()
	return n == total
}
