package locktest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/lock"
)

// SemBackend describes a store under test for RunSemaphore.
type SemBackend struct {
	Name string
	// New returns a semaphore of permits for name. Every call may use a new
	// client connection, as separate processes would.
	New func(t testing.TB, name string, permits int, opts ...lock.Option) lock.Locker
	// MinTTL is the shortest TTL the store honours well; default 200ms.
	MinTTL time.Duration
	// Waiters, if set, returns how many Lock calls wait in the queue of
	// name. The suite then waits until waiters have queued instead of
	// sleeping for it, which a loaded machine can outlast.
	Waiters func(t testing.TB, name string) int
}

// RunSemaphore runs the semaphore suite: exactly permits holders at most
// under 16 goroutines, TryLock ErrLocked when full, an expired permit comes
// back, re-entry holds one permit, tokens increase, owner-only release,
// cancellation leaves no ghost waiter, waiters are woken by releases (not by
// polling), and Fair is FIFO.
func RunSemaphore(t *testing.T, b SemBackend) {
	if b.MinTTL == 0 {
		b.MinTTL = 200 * time.Millisecond
	}
	tests := []struct {
		name string
		f    func(*testing.T, SemBackend)
	}{
		{"AdmitsPermits", testSemAdmits},
		{"TryLockWhenFull", testSemFull},
		{"ExpiredPermitReturns", testSemExpired},
		{"Reentry", testSemReentry},
		{"TokensIncrease", testSemTokens},
		{"AutoRenew", testSemAutoRenew},
		{"CancelWhileWaiting", testSemCancel},
		{"WokenByRelease", testSemWoken},
		{"FairOrder", testSemFairOrder},
		{"FairNewcomerQueues", testSemFairNewcomer},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.f(t, b) })
	}
}

// testSemAdmits: 16 goroutines, 5 holdings each, on 3 permits: never more
// than 3 inside, and 3 at some point. Each holding lasts 20ms, and until 3
// holders have overlapped once (at most a second), so that they do overlap
// even where a store serializes the operations of one name (SQL) on a
// loaded machine.
func testSemAdmits(t *testing.T, b SemBackend) {
	const permits = 3
	name := Name(t)
	var inside, maxInside, total atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := range 16 {
		l := b.New(t, name, permits, lock.TTL(10*time.Second))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 5 {
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				lease, err := l.Lock(ctx)
				cancel()
				if err != nil {
					errs <- fmt.Errorf("goroutine %d: %w", g, err)
					return
				}
				n := inside.Add(1)
				for {
					m := maxInside.Load()
					if n <= m || maxInside.CompareAndSwap(m, n) {
						break
					}
				}
				total.Add(1)
				// Hold 20ms, and until permits holders have overlapped once
				// (at most 1s): on a loaded machine an acquisition through a
				// store's wake-up can take longer than 20ms.
				held := time.Now()
				time.Sleep(20 * time.Millisecond)
				for maxInside.Load() < permits && time.Since(held) < time.Second {
					time.Sleep(time.Millisecond)
				}
				inside.Add(-1)
				if err := lease.Unlock(context.Background()); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if maxInside.Load() != permits || total.Load() != 80 {
		t.Fatalf("at most %d holders at once (want %d), %d holdings (want 80)", maxInside.Load(), permits, total.Load())
	}
}

func testSemFull(t *testing.T, b SemBackend) {
	name := Name(t)
	a := mustTry(t, b.New(t, name, 2), "first permit")
	c := mustTry(t, b.New(t, name, 2), "second permit")
	mustBeLocked(t, b.New(t, name, 2), "third holder of 2 permits")
	mustUnlock(t, a, "first permit")
	if err := a.Unlock(context.Background()); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("second Unlock: %v, want ErrNotHeld", err)
	}
	d := mustTry(t, b.New(t, name, 2), "after a release")
	mustBeLocked(t, b.New(t, name, 2), "full again")
	mustUnlock(t, c, "second permit")
	mustUnlock(t, d, "third permit")
}

// testSemExpired: a holder that never releases loses its permit at its TTL;
// the waiter gets it then (woken by the lease's end, not by MaxPoll), and the
// stale holder can neither release nor extend it.
func testSemExpired(t *testing.T, b SemBackend) {
	name := Name(t)
	ctx := context.Background()
	crashed := mustTry(t, b.New(t, name, 1, lock.TTL(crashTTL(b.MinTTL))), "holder")
	lockedWhile(t, b.New(t, name, 1), crashed, "while the holder's lease runs")
	l := await(t, lockAsync(b.New(t, name, 1, lock.MaxPoll(20*time.Second), lock.TTL(10*time.Second))), 10*time.Second, "waiter")
	if !time.Now().After(crashed.Deadline()) {
		t.Fatal("the waiter got in before the holder's lease ended")
	}
	if err := crashed.Extend(ctx, time.Minute); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Extend of an expired permit: %v, want ErrNotHeld", err)
	}
	if err := crashed.Unlock(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Unlock of an expired permit: %v, want ErrNotHeld", err)
	}
	mustBeLocked(t, b.New(t, name, 1), "after the stale Unlock")
	if l.Token() <= crashed.Token() {
		t.Fatalf("tokens: new holder %d, old %d", l.Token(), crashed.Token())
	}
	mustUnlock(t, l, "new holder")
}

// testSemReentry: an owner that locks twice holds one permit, with a count.
func testSemReentry(t *testing.T, b SemBackend) {
	name := Name(t)
	mine := b.New(t, name, 2, lock.Owner("owner-1"))
	l1 := mustTry(t, mine, "lock")
	l2 := mustTry(t, mine, "lock again")
	if l1.Token() != l2.Token() {
		t.Errorf("re-entry changed the token: %d then %d", l1.Token(), l2.Token())
	}
	other := mustTry(t, b.New(t, name, 2), "the second permit beside a re-entered owner")
	mustBeLocked(t, b.New(t, name, 2), "a third owner")
	mustUnlock(t, l2, "inner")
	mustBeLocked(t, b.New(t, name, 2), "a third owner after one of two Unlocks")
	mustUnlock(t, l1, "outer")
	mustUnlock(t, mustTry(t, b.New(t, name, 2), "a third owner after both Unlocks"), "third")
	mustUnlock(t, other, "other")
}

func testSemTokens(t *testing.T, b SemBackend) {
	name := Name(t)
	var last int64
	for round := range 3 {
		var ls []*lock.Lease
		for i := range 3 {
			l := mustTry(t, b.New(t, name, 3), "permit")
			if l.Token() <= last {
				t.Fatalf("round %d, permit %d: token %d after %d", round, i, l.Token(), last)
			}
			last = l.Token()
			ls = append(ls, l)
		}
		for _, l := range ls {
			mustUnlock(t, l, "permit")
		}
	}
}

func testSemAutoRenew(t *testing.T, b SemBackend) {
	name := Name(t)
	ttl := max(b.MinTTL, autoRenewTTL)
	l := mustTry(t, b.New(t, name, 1, lock.TTL(ttl), lock.AutoRenew()), "holder")
	select {
	case <-l.Lost():
		_, err := b.New(t, name, 1).TryLock(context.Background())
		t.Fatalf("lost while renewing; deadline %v ago; TryLock now: %v", time.Since(l.Deadline()), err)
	case <-time.After(2 * ttl):
	}
	mustBeLocked(t, b.New(t, name, 1), "after 2×TTL with AutoRenew")
	mustUnlock(t, l, "holder")
}

// testSemCancel: a waiter that gives up leaves no ghost ahead of a fair
// newcomer.
func testSemCancel(t *testing.T, b SemBackend) {
	name := Name(t)
	fair := []lock.Option{lock.Fair(), lock.TTL(time.Minute)}
	holder := mustTry(t, b.New(t, name, 1, fair...), "holder")
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	_, err := b.New(t, name, 1, fair...).Lock(ctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock with an expiring context: %v", err)
	}
	mustUnlock(t, holder, "holder")
	mustUnlock(t, mustTry(t, b.New(t, name, 1, fair...), "fair newcomer after a waiter gave up"), "newcomer")
}

// testSemWoken: MaxPoll(20s) and leases of a minute, so only releases can
// wake the waiters within the test's 10s; each release wakes one.
func testSemWoken(t *testing.T, b SemBackend) {
	name := Name(t)
	slow := []lock.Option{lock.MaxPoll(20 * time.Second), lock.TTL(time.Minute)}
	a := mustTry(t, b.New(t, name, 2, slow...), "first permit")
	c := mustTry(t, b.New(t, name, 2, slow...), "second permit")
	w1 := lockAsync(b.New(t, name, 2, slow...))
	w2 := lockAsync(b.New(t, name, 2, slow...))
	awaitQueued(t, b.Waiters, name, 2)
	mustUnlock(t, a, "first permit")
	var got *lock.Lease
	var rest <-chan result
	select {
	case r := <-w1:
		got, rest = r.lease, w2
		if r.err != nil {
			t.Fatal(r.err)
		}
	case r := <-w2:
		got, rest = r.lease, w1
		if r.err != nil {
			t.Fatal(r.err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no waiter was woken by the first release")
	}
	pending(t, rest, 100*time.Millisecond, "second waiter while the semaphore is full")
	mustUnlock(t, c, "second permit")
	mustUnlock(t, await(t, rest, 10*time.Second, "second waiter woken by the second release"), "second waiter")
	mustUnlock(t, got, "first waiter")
}

func testSemFairOrder(t *testing.T, b SemBackend) {
	name := Name(t)
	fair := []lock.Option{lock.Fair(), lock.TTL(time.Minute)}
	holder := mustTry(t, b.New(t, name, 1, fair...), "holder")
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	errs := make(chan error, 5)
	for i := range 5 {
		l := b.New(t, name, 1, fair...)
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			lease, err := l.Lock(ctx)
			if err != nil {
				errs <- fmt.Errorf("waiter %d: %w", i, err)
				return
			}
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			if err := lease.Unlock(context.Background()); err != nil {
				errs <- fmt.Errorf("waiter %d: %w", i, err)
			}
		}()
		awaitQueued(t, b.Waiters, name, i+1) // queue in order
	}
	mustUnlock(t, holder, "holder")
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i, w := range order {
		if w != i {
			t.Fatalf("acquisition order %v, want 0 1 2 3 4", order)
		}
	}
}

// testSemFairNewcomer: with Fair, a caller that arrives just as a permit is
// released does not overtake the waiter: right after the release the waiter
// either holds the permit or stands first in the queue.
func testSemFairNewcomer(t *testing.T, b SemBackend) {
	name := Name(t)
	fair := []lock.Option{lock.Fair(), lock.TTL(time.Minute)}
	for i := range 3 {
		holder := mustTry(t, b.New(t, name, 1, fair...), "holder")
		wc := lockAsync(b.New(t, name, 1, fair...))
		newcomer := b.New(t, name, 1, fair...)
		mustBeLocked(t, newcomer, "newcomer while held") // and connected
		awaitQueued(t, b.Waiters, name, 1)
		pending(t, wc, 100*time.Millisecond, "waiter")
		mustUnlock(t, holder, "holder")
		mustBeLocked(t, newcomer, fmt.Sprintf("round %d: a fair newcomer just after the release", i))
		mustUnlock(t, await(t, wc, 10*time.Second, "waiter"), "waiter")
	}
}
