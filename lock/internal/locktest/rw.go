package locktest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/lock"
)

// RWBackend describes a store under test for RunRW.
type RWBackend struct {
	Name string
	// New returns a reader/writer lock for name. Every call may use a new
	// client connection, as separate processes would.
	New func(t testing.TB, name string, opts ...lock.Option) lock.RWLocker
	// MinTTL is the shortest TTL the store honours well; default 200ms.
	MinTTL time.Duration
	// Waiters, if set, returns how many Lock calls wait in the queue of
	// name. The suite then waits until waiters have queued instead of
	// sleeping for it, which a loaded machine can outlast.
	Waiters func(t testing.TB, name string) int
}

// RunRW runs the reader/writer lock suite: readers share, a writer excludes
// readers and writers both ways, a waiting writer keeps new readers out and
// gets the lock when the current readers release, a crashed reader's lease
// ends at its TTL, tokens increase across readers and writers, re-entry per
// side, owner-only release, cancellation leaves no ghost waiter, waiters are
// woken by releases (not by polling), and Fair is FIFO.
func RunRW(t *testing.T, b RWBackend) {
	if b.MinTTL == 0 {
		b.MinTTL = 200 * time.Millisecond
	}
	tests := []struct {
		name string
		f    func(*testing.T, RWBackend)
	}{
		{"ReadersShare", testRWReadersShare},
		{"WriterExcludes", testRWWriterExcludes},
		{"Exclusion", testRWExclusion},
		{"WaitingWriterBlocksReaders", testRWWaitingWriter},
		{"CrashedReaderExpires", testRWCrashedReader},
		{"TokensIncrease", testRWTokens},
		{"Reentry", testRWReentry},
		{"Upgrade", testRWUpgrade},
		{"OwnerOnlyAfterExpiry", testRWOwnerOnly},
		{"AutoRenewReader", testRWAutoRenew},
		{"CancelWhileWaiting", testRWCancel},
		{"WokenByRelease", testRWWoken},
		{"FairOrder", testRWFairOrder},
		{"FairNewcomerQueues", testRWFairNewcomer},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.f(t, b) })
	}
}

// mustTry takes l with TryLock and fails the test if it cannot.
func mustTry(t testing.TB, l lock.Locker, what string) *lock.Lease {
	t.Helper()
	lease, err := l.TryLock(context.Background())
	if err != nil {
		t.Fatalf("%s: TryLock: %v", what, err)
	}
	return lease
}

// mustBeLocked fails the test unless TryLock of l returns ErrLocked.
func mustBeLocked(t testing.TB, l lock.Locker, what string) {
	t.Helper()
	lease, err := l.TryLock(context.Background())
	if err == nil {
		_ = lease.Unlock(context.Background())
		t.Fatalf("%s: TryLock succeeded, want ErrLocked", what)
	}
	if !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("%s: TryLock: %v, want ErrLocked", what, err)
	}
}

// lockedWhile asserts that l cannot be taken while held's lease runs: a
// TryLock that returns before held.Deadline() (which is never later than the
// store's own end of the lease) must fail with ErrLocked. One that succeeds
// only after the deadline proves nothing either way — a loaded machine can
// be that slow with a short lease — so it is released and the test goes on.
func lockedWhile(t testing.TB, l lock.Locker, held *lock.Lease, what string) {
	t.Helper()
	lease, err := l.TryLock(context.Background())
	if err == nil {
		returned := time.Now()
		_ = lease.Unlock(context.Background())
		if returned.Before(held.Deadline()) {
			t.Fatalf("%s: TryLock succeeded %v before the lease's deadline, want ErrLocked", what, held.Deadline().Sub(returned))
		}
		t.Logf("%s: TryLock came after the lease's deadline (a slow machine): nothing to check", what)
		return
	}
	if !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("%s: TryLock: %v, want ErrLocked", what, err)
	}
}

// crashTTL is the lease of a holder that a test lets expire: long enough
// that the check made while it runs (lockedWhile) is rarely too late on a
// loaded machine, short enough not to slow the suite much.
func crashTTL(least time.Duration) time.Duration { return max(least, time.Second) }

func mustUnlock(t testing.TB, l *lock.Lease, what string) {
	t.Helper()
	if err := l.Unlock(context.Background()); err != nil {
		t.Fatalf("%s: Unlock: %v", what, err)
	}
}

type result struct {
	lease *lock.Lease
	err   error
	at    time.Time
}

// lockAsync calls l.Lock in a goroutine, with a 30s context.
func lockAsync(l lock.Locker) <-chan result {
	c := make(chan result, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		lease, err := l.Lock(ctx)
		c <- result{lease, err, time.Now()}
	}()
	return c
}

// await returns the result of lockAsync, failing the test when Lock failed
// or took longer than d.
func await(t testing.TB, c <-chan result, d time.Duration, what string) *lock.Lease {
	t.Helper()
	select {
	case r := <-c:
		if r.err != nil {
			t.Fatalf("%s: Lock: %v", what, r.err)
		}
		return r.lease
	case <-time.After(d):
		t.Fatalf("%s: Lock did not return within %v", what, d)
		return nil
	}
}

// pending fails the test if c delivers within d.
func pending(t testing.TB, c <-chan result, d time.Duration, what string) {
	t.Helper()
	select {
	case r := <-c:
		t.Fatalf("%s: Lock returned (%v) while it should wait", what, r.err)
	case <-time.After(d):
	}
}

// waitQueued returns once a writer waits: readers (probe) get in until then,
// while the lock is read-locked. It fails the test after 10s.
func waitQueued(t testing.TB, probe lock.Locker) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		lease, err := probe.TryLock(context.Background())
		if errors.Is(err, lock.ErrLocked) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		mustUnlock(t, lease, "probe reader")
		if time.Now().After(deadline) {
			t.Fatal("a waiting writer did not keep new readers out")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func testRWReadersShare(t *testing.T, b RWBackend) {
	name := Name(t)
	var leases []*lock.Lease
	for i := range 3 {
		leases = append(leases, mustTry(t, b.New(t, name).RLocker(), fmt.Sprintf("reader %d", i)))
	}
	for _, l := range leases {
		mustUnlock(t, l, "reader")
	}
}

func testRWWriterExcludes(t *testing.T, b RWBackend) {
	name := Name(t)
	w := mustTry(t, b.New(t, name), "writer")
	mustBeLocked(t, b.New(t, name).RLocker(), "reader while a writer holds")
	mustBeLocked(t, b.New(t, name), "writer while a writer holds")
	mustUnlock(t, w, "writer")

	r := mustTry(t, b.New(t, name).RLocker(), "reader")
	mustBeLocked(t, b.New(t, name), "writer while a reader holds")
	mustUnlock(t, r, "reader")
	mustUnlock(t, mustTry(t, b.New(t, name), "writer after the reader left"), "writer")
}

// testRWExclusion: 12 readers and 4 writers, 5 holdings each; never a writer
// with anyone else inside.
func testRWExclusion(t *testing.T, b RWBackend) {
	name := Name(t)
	var mu sync.Mutex
	var readers, writers, maxReaders, total int
	var bad []string
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for g := range 16 {
		write := g%4 == 0
		rw := b.New(t, name, lock.TTL(10*time.Second))
		l := rw.RLocker()
		if write {
			l = rw
		}
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
				mu.Lock()
				if write {
					if readers > 0 || writers > 0 {
						bad = append(bad, fmt.Sprintf("writer in with %d readers, %d writers", readers, writers))
					}
					writers++
				} else {
					if writers > 0 {
						bad = append(bad, fmt.Sprintf("reader in with %d writers", writers))
					}
					readers++
					maxReaders = max(maxReaders, readers)
				}
				total++
				mu.Unlock()
				time.Sleep(time.Millisecond)
				mu.Lock()
				if write {
					writers--
				} else {
					readers--
				}
				mu.Unlock()
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
	if len(bad) > 0 || total != 80 {
		t.Fatalf("%d critical sections (want 80); violations: %v", total, bad)
	}
	t.Logf("at most %d readers at once", maxReaders)
}

// testRWWaitingWriter: a waiting writer keeps new readers out, gets the lock
// when the current reader releases, and lets the readers in when it
// releases. MaxPoll(20s): only releases can wake the waiters in time.
func testRWWaitingWriter(t *testing.T, b RWBackend) {
	name := Name(t)
	slow := []lock.Option{lock.MaxPoll(20 * time.Second), lock.TTL(time.Minute)}
	r1 := mustTry(t, b.New(t, name, lock.TTL(time.Minute)).RLocker(), "first reader")
	wc := lockAsync(b.New(t, name, slow...))
	waitQueued(t, b.New(t, name).RLocker())
	rc := lockAsync(b.New(t, name, slow...).RLocker())
	pending(t, wc, 100*time.Millisecond, "writer while a reader holds")
	pending(t, rc, 0, "new reader while a writer waits")
	mustUnlock(t, r1, "first reader")
	w := await(t, wc, 10*time.Second, "writer after the reader released")
	pending(t, rc, 100*time.Millisecond, "new reader while the writer holds")
	mustUnlock(t, w, "writer")
	r2 := await(t, rc, 10*time.Second, "new reader after the writer released")
	mustUnlock(t, r2, "new reader")
}

// testRWCrashedReader: a reader that never releases holds until its TTL;
// then the waiting writer gets in (woken by the lease's end, not by MaxPoll).
func testRWCrashedReader(t *testing.T, b RWBackend) {
	name := Name(t)
	crashed := mustTry(t, b.New(t, name, lock.TTL(crashTTL(b.MinTTL))).RLocker(), "reader")
	lockedWhile(t, b.New(t, name), crashed, "writer while the reader's lease runs")
	w := await(t, lockAsync(b.New(t, name, lock.MaxPoll(20*time.Second))), 10*time.Second, "writer")
	if !time.Now().After(crashed.Deadline()) {
		t.Fatal("the writer got in before the reader's lease ended")
	}
	if err := crashed.Unlock(context.Background()); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Unlock of the expired reader: %v, want ErrNotHeld", err)
	}
	mustUnlock(t, w, "writer")
}

func testRWTokens(t *testing.T, b RWBackend) {
	name := Name(t)
	var last int64
	check := func(l *lock.Lease, what string) {
		t.Helper()
		if l.Token() <= last {
			t.Fatalf("%s: token %d after %d", what, l.Token(), last)
		}
		last = l.Token()
	}
	for i := range 3 {
		r1 := mustTry(t, b.New(t, name).RLocker(), "reader 1")
		check(r1, fmt.Sprintf("round %d, reader 1", i))
		r2 := mustTry(t, b.New(t, name).RLocker(), "reader 2")
		check(r2, fmt.Sprintf("round %d, reader 2 (sharing)", i))
		mustUnlock(t, r1, "reader 1")
		mustUnlock(t, r2, "reader 2")
		w := mustTry(t, b.New(t, name), "writer")
		check(w, fmt.Sprintf("round %d, writer", i))
		mustUnlock(t, w, "writer")
	}
}

func testRWReentry(t *testing.T, b RWBackend) {
	name := Name(t)
	mine := b.New(t, name, lock.Owner("owner-1"))
	other := b.New(t, name)
	// Read side.
	r1 := mustTry(t, mine.RLocker(), "read")
	r2 := mustTry(t, mine.RLocker(), "read again")
	if r1.Token() != r2.Token() {
		t.Errorf("read re-entry changed the token: %d then %d", r1.Token(), r2.Token())
	}
	mustUnlock(t, r2, "inner read")
	mustBeLocked(t, other, "writer after one of two read Unlocks")
	mustUnlock(t, r1, "outer read")
	// Write side.
	w1 := mustTry(t, mine, "write")
	w2 := mustTry(t, mine, "write again")
	if w1.Token() != w2.Token() {
		t.Errorf("write re-entry changed the token: %d then %d", w1.Token(), w2.Token())
	}
	mustUnlock(t, w2, "inner write")
	mustBeLocked(t, other.RLocker(), "reader after one of two write Unlocks")
	mustBeLocked(t, other, "writer after one of two write Unlocks")
	// The writer may read too (an owner never waits for itself).
	r3 := mustTry(t, mine.RLocker(), "read while writing")
	if r3.Token() <= w1.Token() {
		t.Errorf("read while writing: token %d after %d", r3.Token(), w1.Token())
	}
	mustUnlock(t, w1, "outer write")
	o := mustTry(t, other.RLocker(), "another reader beside the downgraded owner")
	mustBeLocked(t, other, "writer while the owner still reads")
	mustUnlock(t, o, "another reader")
	mustUnlock(t, r3, "read")
	mustUnlock(t, mustTry(t, other, "writer after every Unlock"), "writer")
}

func testRWOwnerOnly(t *testing.T, b RWBackend) {
	name := Name(t)
	ctx := context.Background()
	old := mustTry(t, b.New(t, name, lock.TTL(b.MinTTL)).RLocker(), "reader")
	<-old.Lost() // its TTL passed without renewal
	w := await(t, lockAsync(b.New(t, name, lock.TTL(10*time.Second))), 10*time.Second, "writer")
	if err := old.Extend(ctx, time.Minute); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Extend of an expired reader: %v, want ErrNotHeld", err)
	}
	if err := old.Unlock(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Unlock of an expired reader: %v, want ErrNotHeld", err)
	}
	mustBeLocked(t, b.New(t, name).RLocker(), "reader after the stale Unlock")
	if w.Token() <= old.Token() {
		t.Fatalf("tokens: writer %d, old reader %d", w.Token(), old.Token())
	}
	mustUnlock(t, w, "writer")
}

// autoRenewTTL is the shortest TTL of the AutoRenew tests: renewals every
// TTL/3 must not miss the deadline on a loaded machine running -race (with
// 1s, a PostgreSQL renewal under a CPU hog once took over the 667ms left).
// The tests hold the lease for 2×TTL: past its first deadline twice.
const autoRenewTTL = 2 * time.Second

func testRWAutoRenew(t *testing.T, b RWBackend) {
	name := Name(t)
	ttl := max(b.MinTTL, autoRenewTTL)
	r := mustTry(t, b.New(t, name, lock.TTL(ttl), lock.AutoRenew()).RLocker(), "reader")
	select {
	case <-r.Lost():
		_, err := b.New(t, name).TryLock(context.Background())
		t.Fatalf("lost while renewing; deadline %v ago; writer TryLock now: %v", time.Since(r.Deadline()), err)
	case <-time.After(2 * ttl):
	}
	mustBeLocked(t, b.New(t, name), "writer after 2×TTL of a renewed reader")
	mustUnlock(t, r, "reader")
}

// testRWCancel: waiters that give up leave no ghost in the queue: a ghost
// writer would keep new readers out, a ghost reader would stand ahead of a
// fair writer.
func testRWCancel(t *testing.T, b RWBackend) {
	name := Name(t)
	fair := []lock.Option{lock.Fair(), lock.TTL(time.Minute)}
	r := mustTry(t, b.New(t, name, fair...).RLocker(), "reader")
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	_, err := b.New(t, name, fair...).Lock(ctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("writer Lock with an expiring context: %v", err)
	}
	r2 := mustTry(t, b.New(t, name, fair...).RLocker(), "reader after a writer gave up")
	mustUnlock(t, r2, "second reader")
	mustUnlock(t, r, "reader")

	w := mustTry(t, b.New(t, name, fair...), "writer")
	ctx, cancel = context.WithTimeout(context.Background(), 100*time.Millisecond)
	_, err = b.New(t, name, fair...).RLocker().Lock(ctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("reader Lock with an expiring context: %v", err)
	}
	mustUnlock(t, w, "writer")
	mustUnlock(t, mustTry(t, b.New(t, name, fair...), "fair writer after a reader gave up"), "writer")
}

// testRWWoken: MaxPoll(20s) and leases of a minute, so only the release can
// wake the waiters within the test's 10s.
func testRWWoken(t *testing.T, b RWBackend) {
	name := Name(t)
	slow := []lock.Option{lock.MaxPoll(20 * time.Second), lock.TTL(time.Minute)}
	// The last reader's release wakes the writer.
	r1 := mustTry(t, b.New(t, name, slow...).RLocker(), "reader 1")
	r2 := mustTry(t, b.New(t, name, slow...).RLocker(), "reader 2")
	wc := lockAsync(b.New(t, name, slow...))
	pending(t, wc, 200*time.Millisecond, "writer")
	mustUnlock(t, r1, "reader 1")
	pending(t, wc, 100*time.Millisecond, "writer while reader 2 holds")
	mustUnlock(t, r2, "reader 2")
	w := await(t, wc, 10*time.Second, "writer woken by the last reader")
	// The writer's release wakes every waiting reader, together.
	var cs []<-chan result
	for range 3 {
		cs = append(cs, lockAsync(b.New(t, name, slow...).RLocker()))
	}
	awaitQueued(t, b.Waiters, name, 3)
	mustUnlock(t, w, "writer")
	var rs []*lock.Lease
	for i, c := range cs {
		rs = append(rs, await(t, c, 10*time.Second, fmt.Sprintf("reader %d woken by the writer", i)))
	}
	for _, r := range rs {
		mustUnlock(t, r, "reader")
	}
}

// testRWFairOrder: with Fair, waiters go in arrival order; neighbouring
// readers go together.
func testRWFairOrder(t *testing.T, b RWBackend) {
	name := Name(t)
	fair := []lock.Option{lock.Fair(), lock.TTL(time.Minute)}
	holder := mustTry(t, b.New(t, name, fair...), "holder")
	var mu sync.Mutex
	var order []string
	var wg sync.WaitGroup
	errs := make(chan error, 5)
	for i, who := range []string{"W1", "R1", "R2", "W2", "R3"} {
		rw := b.New(t, name, fair...)
		var l lock.Locker = rw
		if who[0] == 'R' {
			l = rw.RLocker()
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			lease, err := l.Lock(ctx)
			if err != nil {
				errs <- fmt.Errorf("%s: %w", who, err)
				return
			}
			mu.Lock()
			order = append(order, who)
			mu.Unlock()
			time.Sleep(50 * time.Millisecond)
			if err := lease.Unlock(context.Background()); err != nil {
				errs <- fmt.Errorf("%s: %w", who, err)
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
	got := fmt.Sprint(order)
	if got != "[W1 R1 R2 W2 R3]" && got != "[W1 R2 R1 W2 R3]" {
		t.Fatalf("acquisition order %s, want W1, then R1 and R2, then W2, then R3", got)
	}
}

// testRWFairNewcomer: with Fair, a writer that arrives just as the lock is
// released does not overtake the writer that was waiting: right after the
// release the waiter either holds the lock or stands first in the queue.
func testRWFairNewcomer(t *testing.T, b RWBackend) {
	name := Name(t)
	fair := []lock.Option{lock.Fair(), lock.TTL(time.Minute)}
	for i := range 3 {
		holder := mustTry(t, b.New(t, name, fair...).RLocker(), "reading holder")
		wc := lockAsync(b.New(t, name, fair...))
		newcomer := b.New(t, name, fair...)
		mustBeLocked(t, newcomer, "newcomer while held") // and connected
		waitQueued(t, b.New(t, name).RLocker())
		mustUnlock(t, holder, "holder")
		mustBeLocked(t, newcomer, fmt.Sprintf("round %d: a fair newcomer writer just after the release", i))
		mustUnlock(t, await(t, wc, 10*time.Second, "waiting writer"), "waiting writer")
	}
}

// testRWUpgrade: an owner that reads may take the write side once no other
// owner reads; the other reader's release wakes it (MaxPoll(20s)).
func testRWUpgrade(t *testing.T, b RWBackend) {
	name := Name(t)
	slow := []lock.Option{lock.Owner("owner-1"), lock.MaxPoll(20 * time.Second), lock.TTL(time.Minute)}
	mine := b.New(t, name, slow...)
	r := mustTry(t, mine.RLocker(), "read")
	w := mustTry(t, mine, "write while only this owner reads")
	mustBeLocked(t, b.New(t, name).RLocker(), "another reader while the owner writes")
	mustUnlock(t, w, "write")
	other := mustTry(t, b.New(t, name).RLocker(), "another reader")
	mustBeLocked(t, mine, "write while another owner reads")
	wc := lockAsync(mine)
	pending(t, wc, 100*time.Millisecond, "upgrade while another owner reads")
	mustUnlock(t, other, "another reader")
	w = await(t, wc, 10*time.Second, "upgrade woken by the other reader's release")
	mustUnlock(t, w, "write")
	mustUnlock(t, r, "read")
	mustUnlock(t, mustTry(t, b.New(t, name), "writer after every Unlock"), "writer")
}

// awaitQueued returns once n Lock calls wait in the queue of name, as
// waiters (if not nil) reports; without it, it sleeps 200ms. It fails the
// test after 10s.
func awaitQueued(t testing.TB, waiters func(testing.TB, string) int, name string, n int) {
	t.Helper()
	if waiters == nil {
		time.Sleep(200 * time.Millisecond)
		return
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := waiters(t, name)
		if got >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d waiters queued after 10s, want %d", got, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
