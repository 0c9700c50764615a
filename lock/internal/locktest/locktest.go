// Package locktest is the conformance suite that every lock backend must
// pass: Memory and Redis in package lock, SQL in lock/sqllock, ZooKeeper in
// lock/zklock. Each backend's tests call Run with a Backend.
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

// Backend describes a store under test.
type Backend struct {
	Name string
	// New returns a Locker for name. Every call may use a new client
	// connection, as separate processes would.
	New func(t testing.TB, name string, opts ...lock.Option) lock.Locker
	// Drop deletes the lock state of name from the store, as an operator or a
	// failed-over store would.
	Drop func(t testing.TB, name string)
	// MinTTL is the shortest TTL the store honours well (ZooKeeper sessions
	// are coarse); default 200ms.
	MinTTL time.Duration
	// Waiters, if set, returns how many Lock calls wait in the queue of
	// name (Fair waiters at least). The suite then waits until a waiter
	// has queued instead of sleeping for it, which a loaded machine can
	// outlast.
	Waiters func(t testing.TB, name string) int
}

var seq atomic.Int64

// Name returns a lock name unique to this test process.
func Name(t testing.TB) string {
	return fmt.Sprintf("locktest-%d-%d", time.Now().UnixNano()%1e9, seq.Add(1))
}

// Run runs the suite.
func Run(t *testing.T, b Backend) {
	if b.MinTTL == 0 {
		b.MinTTL = 200 * time.Millisecond
	}
	tests := []struct {
		name string
		f    func(*testing.T, Backend)
	}{
		{"MutualExclusion", testMutualExclusion},
		{"TryLock", testTryLock},
		{"OwnerOnlyAfterExpiry", testOwnerOnlyAfterExpiry},
		{"Reentry", testReentry},
		{"TokensIncrease", testTokens},
		{"AutoRenew", testAutoRenew},
		{"LostOnDeletion", testLostOnDeletion},
		{"LostAtDeadline", testLostAtDeadline},
		{"CancelWhileWaiting", testCancelWhileWaiting},
		{"WokenByRelease", testWokenByRelease},
		{"FairOrder", testFairOrder},
		{"LongWaitKeepsPlace", testLongWait},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.f(t, b) })
	}
}

func mustLock(t testing.TB, l lock.Locker) *lock.Lease {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	lease, err := l.Lock(ctx)
	if err != nil {
		t.Fatalf("Lock: %v", err)
	}
	return lease
}

func testMutualExclusion(t *testing.T, b Backend) {
	name := Name(t)
	var inside, maxInside, total atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := range 16 {
		l := b.New(t, name, lock.TTL(10*time.Second))
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
				time.Sleep(time.Millisecond)
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
	if maxInside.Load() != 1 || total.Load() != 80 {
		t.Fatalf("at most %d holders at once (want 1), %d critical sections (want 80)", maxInside.Load(), total.Load())
	}
}

func testTryLock(t *testing.T, b Backend) {
	name := Name(t)
	a, c := b.New(t, name), b.New(t, name)
	ctx := context.Background()
	lease, err := a.TryLock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.TryLock(ctx); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("TryLock while held: %v, want ErrLocked", err)
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := lease.Unlock(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("second Unlock: %v, want ErrNotHeld", err)
	}
	l2, err := c.TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock after Unlock: %v", err)
	}
	_ = l2.Unlock(ctx)
}

func testOwnerOnlyAfterExpiry(t *testing.T, b Backend) {
	name := Name(t)
	ttl := b.MinTTL
	a, c := b.New(t, name, lock.TTL(ttl)), b.New(t, name, lock.TTL(10*time.Second))
	ctx := context.Background()
	old := mustLock(t, a)
	<-old.Lost() // its TTL passed without renewal
	cur := mustLock(t, c)
	if err := old.Extend(ctx, time.Minute); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Extend of an expired lease: %v, want ErrNotHeld", err)
	}
	if err := old.Unlock(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Unlock of an expired lease: %v, want ErrNotHeld", err)
	}
	if _, err := b.New(t, name).TryLock(ctx); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("the stale Unlock freed the new holder's lock: TryLock = %v", err)
	}
	if cur.Token() <= old.Token() {
		t.Fatalf("tokens: new holder %d, old %d", cur.Token(), old.Token())
	}
	if err := cur.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

func testReentry(t *testing.T, b Backend) {
	name := Name(t)
	mine := b.New(t, name, lock.Owner("owner-1"))
	other := b.New(t, name)
	ctx := context.Background()
	l1 := mustLock(t, mine)
	l2, err := mine.TryLock(ctx)
	if err != nil {
		t.Fatalf("re-entry: %v", err)
	}
	if l1.Token() != l2.Token() {
		t.Errorf("re-entry changed the token: %d then %d", l1.Token(), l2.Token())
	}
	if err := l2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := other.TryLock(ctx); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("after one of two Unlocks the lock must still be held: %v", err)
	}
	if err := l1.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l3, err := other.TryLock(ctx)
	if err != nil {
		t.Fatalf("after both Unlocks: %v", err)
	}
	_ = l3.Unlock(ctx)
}

func testTokens(t *testing.T, b Backend) {
	name := Name(t)
	var last int64
	for i := range 5 {
		lease := mustLock(t, b.New(t, name))
		if lease.Token() <= last {
			t.Fatalf("holding %d: token %d after %d", i, lease.Token(), last)
		}
		last = lease.Token()
		if err := lease.Unlock(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

func testAutoRenew(t *testing.T, b Backend) {
	name := Name(t)
	ttl := max(b.MinTTL, autoRenewTTL) // as the RWMutex's and the Semaphore's
	lease := mustLock(t, b.New(t, name, lock.TTL(ttl), lock.AutoRenew()))
	select {
	case <-lease.Lost():
		t.Fatal("lost while renewing")
	case <-time.After(2 * ttl):
	}
	if _, err := b.New(t, name).TryLock(context.Background()); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("after 2×TTL with AutoRenew the lock must be held: %v", err)
	}
	if err := lease.Unlock(context.Background()); err != nil {
		t.Fatalf("Unlock after renewals: %v", err)
	}
}

func testLostOnDeletion(t *testing.T, b Backend) {
	if b.Drop == nil {
		t.Fatal("backend has no Drop")
	}
	name := Name(t)
	ttl := b.MinTTL
	lease := mustLock(t, b.New(t, name, lock.TTL(ttl), lock.AutoRenew()))
	b.Drop(t, name)
	select {
	case <-lease.Lost():
	case <-time.After(10 * ttl):
		t.Fatal("Lost did not close after the lock state was deleted")
	}
	if err := lease.Unlock(context.Background()); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Unlock after deletion: %v, want ErrNotHeld", err)
	}
}

func testLostAtDeadline(t *testing.T, b Backend) {
	lease := mustLock(t, b.New(t, Name(t), lock.TTL(b.MinTTL)))
	select {
	case <-lease.Lost():
	case <-time.After(10 * b.MinTTL):
		t.Fatal("Lost did not close at the deadline without renewal")
	}
	if !time.Now().After(lease.Deadline()) {
		t.Fatal("Lost closed before the deadline")
	}
}

func testCancelWhileWaiting(t *testing.T, b Backend) {
	name := Name(t)
	holder := mustLock(t, b.New(t, name, lock.TTL(time.Minute)))
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	_, err := b.New(t, name, lock.Fair()).Lock(ctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Lock with an expiring context: %v", err)
	}
	// The waiter that gave up must not stand in the queue of a fair lock.
	if err := holder.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	next, err := b.New(t, name, lock.Fair()).Lock(ctx)
	if err != nil {
		t.Fatalf("after a waiter gave up, the next Lock: %v", err)
	}
	_ = next.Unlock(context.Background())
}

func testWokenByRelease(t *testing.T, b Backend) {
	name := Name(t)
	holder := mustLock(t, b.New(t, name, lock.TTL(time.Minute)))
	got := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		// A long poll interval: only the release can wake this waiter in time.
		lease, err := b.New(t, name, lock.MaxPoll(20*time.Second)).Lock(ctx)
		if err == nil {
			err = lease.Unlock(context.Background())
		}
		got <- err
	}()
	time.Sleep(200 * time.Millisecond) // let it queue
	if err := holder.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was not woken by the release")
	}
}

func testFairOrder(t *testing.T, b Backend) {
	name := Name(t)
	holder := mustLock(t, b.New(t, name, lock.TTL(time.Minute)))
	var mu sync.Mutex
	var order []int
	var wg sync.WaitGroup
	for i := range 5 {
		l := b.New(t, name, lock.Fair(), lock.TTL(time.Minute))
		wg.Add(1)
		go func() {
			defer wg.Done()
			lease := mustLock(t, l)
			mu.Lock()
			order = append(order, i)
			mu.Unlock()
			_ = lease.Unlock(context.Background())
		}()
		// Queue in order: wait until this one has queued where the store
		// tells, as a new client (connect, subscribe) under -race and a CPU
		// hog can take longer than any sleep.
		if b.Waiters != nil {
			awaitQueued(t, b.Waiters, name, i+1)
		} else {
			time.Sleep(100 * time.Millisecond)
		}
	}
	if err := holder.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i, w := range order {
		if w != i {
			t.Fatalf("acquisition order %v, want 0 1 2 3 4", order)
		}
	}
}

// testLongWait: a waiter that waits longer than its own TTL still gets the
// lock in its turn, with a live lease.
func testLongWait(t *testing.T, b Backend) {
	name := Name(t)
	ttl := b.MinTTL
	holder := mustLock(t, b.New(t, name, lock.TTL(time.Minute)))
	first := make(chan *lock.Lease, 1)
	go func() { first <- mustLock(t, b.New(t, name, lock.Fair(), lock.TTL(ttl))) }()
	if b.Waiters != nil {
		awaitQueued(t, b.Waiters, name, 1)
	} else {
		time.Sleep(ttl / 2)
	}
	second := make(chan *lock.Lease, 1)
	go func() { second <- mustLock(t, b.New(t, name, lock.Fair(), lock.TTL(time.Minute))) }()
	time.Sleep(2 * ttl) // both wait; the first longer than its TTL
	if err := holder.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	var l1 *lock.Lease
	select {
	case l1 = <-first:
	case l2 := <-second:
		_ = l2.Unlock(context.Background())
		t.Fatal("the later waiter went first: a long wait lost its place")
	case <-time.After(20 * time.Second):
		t.Fatal("nobody acquired after the release")
	}
	select {
	case <-l1.Lost():
		t.Fatal("the lease of a long waiter was lost at once")
	default:
	}
	if err := l1.Unlock(context.Background()); err != nil {
		t.Fatalf("Unlock of the long waiter's lease: %v", err)
	}
	_ = (<-second).Unlock(context.Background())
}

// PassAround has every Locker of ls (one goroutine each) take and release
// the lock each times, with a tiny critical section, and fails t when two
// critical sections overlapped, an acquisition is missing or the tokens,
// in the order the critical sections ran, do not strictly increase. It
// returns those tokens.
func PassAround(t *testing.T, ctx context.Context, ls []lock.Locker, each int) []int64 {
	t.Helper()
	var (
		mu      sync.Mutex // guards tokens; taken inside the critical section
		tokens  []int64
		inside  atomic.Int32
		overlap atomic.Int32
		wg      sync.WaitGroup
	)
	for _, l := range ls {
		wg.Go(func() {
			for range each {
				lease, err := l.Lock(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				if inside.Add(1) != 1 {
					overlap.Add(1)
				}
				mu.Lock()
				tokens = append(tokens, lease.Token())
				mu.Unlock()
				inside.Add(-1)
				if err := lease.Unlock(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if overlap.Load() != 0 {
		t.Fatalf("%d critical sections overlapped", overlap.Load())
	}
	if len(tokens) != len(ls)*each {
		t.Fatalf("%d acquisitions, want %d", len(tokens), len(ls)*each)
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("token %d is %d after %d", i, tokens[i], tokens[i-1])
		}
	}
	return tokens
}

// KeepBusy has every Locker of ls (one goroutine each) take the lock, hold
// it for hold and release it, over and over, until stop is called (stop
// waits for them, and may be called more than once). held counts the
// holdings so far.
func KeepBusy(t *testing.T, ctx context.Context, ls []lock.Locker, hold time.Duration) (held *atomic.Int64, stop func()) {
	t.Helper()
	held = new(atomic.Int64)
	done := make(chan struct{})
	var wg sync.WaitGroup
	for _, l := range ls {
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				lease, err := l.Lock(ctx)
				if err != nil {
					t.Error(err)
					return
				}
				held.Add(1)
				time.Sleep(hold)
				if err := lease.Unlock(ctx); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	var once sync.Once
	return held, func() { once.Do(func() { close(done); wg.Wait() }) }
}
