package sqllock_test

import (
	"context"
	"database/sql"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/internal/testenv"
	"github.com/floodgate-dev/floodgate/lock"
	"github.com/floodgate-dev/floodgate/lock/internal/locktest"
	"github.com/floodgate-dev/floodgate/lock/sqllock"
)

// countingListener returns a Listener on db whose WaitFunc counts the
// notifications it receives.
func countingListener(t *testing.T, db *sql.DB) (*sqllock.Listener, *atomic.Int64) {
	t.Helper()
	var n atomic.Int64
	ln, err := sqllock.NewListener(db, func(ctx context.Context, conn any) (string, string, error) {
		ch, p, err := pgxWait(ctx, conn)
		if err == nil {
			n.Add(1)
		}
		return ch, p, err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln, &n
}

func newLocal(t testing.TB, ln *sqllock.Listener, name string, opts ...lock.Option) lock.Locker {
	t.Helper()
	l, err := ln.New(name, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func storeWaiters(t testing.TB, db *sql.DB, name string) int {
	t.Helper()
	var n int
	if err := db.QueryRow("SELECT count(*) FROM floodgate_lock_waiters WHERE name = $1", name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// Lock calls of one process (one pool and Listener) on one name wait in
// the process and are handed the lock by the release, in the order they
// came, with strictly increasing tokens: no queue entry in the database and
// no notification.
func TestLocalHandOffFIFO(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db := sharedPostgres(t).open(t)
	ln, notified := countingListener(t, db)
	name := locktest.Name(t)
	opts := []lock.Option{lock.TTL(time.Minute), lock.MaxPoll(time.Minute)}

	first, err := newLocal(t, ln, name, opts...).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	const waiters = 6
	var (
		mu     sync.Mutex
		order  []int
		tokens = []int64{first.Token()}
		wg     sync.WaitGroup
	)
	for i := range waiters {
		l := newLocal(t, ln, name, opts...)
		wg.Go(func() {
			lease, err := l.Lock(ctx)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			order = append(order, i)
			tokens = append(tokens, lease.Token())
			mu.Unlock()
			if err := lease.Unlock(ctx); err != nil {
				t.Error(err)
			}
		})
		time.Sleep(100 * time.Millisecond) // queued before the next comes
	}
	if n := storeWaiters(t, db, name); n != 0 {
		t.Errorf("%d waiters queued in the database, want 0 (they wait in the process)", n)
	}
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	for i, w := range order {
		if w != i {
			t.Fatalf("acquisition order %v, want FIFO", order)
		}
	}
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("tokens %v do not strictly increase", tokens)
		}
	}
	if n := notified.Load(); n != 0 {
		t.Errorf("%d notifications for local hand-offs, want 0", n)
	}
	// The last holder freed the lock.
	if l, err := newLocal(t, ln, name).TryLock(ctx); err != nil {
		t.Fatalf("TryLock after the last Unlock: %v", err)
	} else {
		_ = l.Unlock(ctx)
	}
}

// 16 goroutines of one process, each with its own Locker, pass the lock
// among themselves: mutual exclusion, strictly increasing tokens in the
// order of the holdings, and no notification.
func TestLocalHandOffContended(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	db := sharedPostgres(t).open(t)
	ln, notified := countingListener(t, db)
	name := locktest.Name(t)
	const goroutines, each = 16, 20
	ls := make([]lock.Locker, goroutines)
	for i := range ls {
		ls[i] = newLocal(t, ln, name, lock.TTL(10*time.Second), lock.MaxPoll(10*time.Second))
	}
	locktest.PassAround(t, ctx, ls, each)
	if n := notified.Load(); n != 0 {
		t.Errorf("%d notifications, want 0", n)
	}
}

// A waiter whose call returns (its ctx ends) while a release is handing it
// the lock does not keep the lock: the release passes it on to the next
// local waiter. The release is held up on the lock's row by a transaction
// of the test, so that the waiter gives up in the middle of the hand-off.
func TestLocalHandOffAbandoned(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db := sharedPostgres(t).open(t)
	ln := newListener(t, db)
	name := locktest.Name(t)
	opts := []lock.Option{lock.TTL(time.Minute), lock.MaxPoll(time.Minute)}

	holder, err := newLocal(t, ln, name, opts...).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	wctx, wcancel := context.WithCancel(ctx)
	gaveUp := make(chan error, 1)
	go func() {
		lease, err := newLocal(t, ln, name, opts...).Lock(wctx)
		if err == nil {
			_ = lease.Unlock(ctx)
		}
		gaveUp <- err
	}()
	time.Sleep(100 * time.Millisecond)
	next := make(chan *lock.Lease, 1)
	go func() {
		lease, err := newLocal(t, ln, name, opts...).Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		next <- lease
	}()
	time.Sleep(100 * time.Millisecond)

	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "SELECT 1 FROM floodgate_locks WHERE name = $1 FOR UPDATE", name); err != nil {
		t.Fatal(err)
	}
	unlocked := make(chan error, 1)
	go func() { unlocked <- holder.Unlock(ctx) }()
	time.Sleep(300 * time.Millisecond) // the release waits for the row
	wcancel()
	if err := <-gaveUp; !errors.Is(err, context.Canceled) {
		t.Fatalf("the waiter that gave up: %v, want context.Canceled", err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := <-unlocked; err != nil {
		t.Fatal(err)
	}
	select {
	case lease := <-next:
		if lease == nil {
			t.FailNow()
		}
		if lease.Token() <= holder.Token() {
			t.Fatalf("token %d after %d", lease.Token(), holder.Token())
		}
		if err := lease.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the lock handed to a waiter that gave up was not passed on")
	}
	if l, err := newLocal(t, ln, name).TryLock(ctx); err != nil {
		t.Fatalf("TryLock after the last Unlock: %v", err)
	} else {
		_ = l.Unlock(ctx)
	}
}

// A holder that never unlocks and whose connections are killed keeps its
// lease until its TTL, and the other Lock calls of its process waiting
// locally get the lock when it ends, not after their MaxPoll. A lease
// handed over locally also survives the kill.
func TestLocalHolderDies(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	srv := testenv.NewPostgres(t)
	s := server{dialect: sqllock.Postgres, driver: "pgx", dsn: srv.DSN, kill: srv.KillConnections}
	db, other := s.open(t), s.open(t)
	ln := newListener(t, db)
	name := locktest.Name(t)
	const ttl = time.Second

	stuck, err := newLocal(t, ln, name, lock.TTL(ttl)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *lock.Lease, 2)
	for range 2 {
		l := newLocal(t, ln, name, lock.TTL(time.Minute), lock.MaxPoll(time.Minute))
		go func() {
			lease, err := l.Lock(ctx)
			if err != nil {
				t.Error(err)
			}
			got <- lease
		}()
	}
	time.Sleep(100 * time.Millisecond)
	if err := s.kill(ctx); err != nil {
		t.Fatal(err)
	}
	var first *lock.Lease
	select {
	case first = <-got:
	case <-time.After(ttl + 5*time.Second):
		t.Fatal("the local waiters did not get the lock after the stuck holder's lease ended")
	}
	if first == nil {
		t.FailNow()
	}
	if first.Token() <= stuck.Token() {
		t.Fatalf("token %d after %d", first.Token(), stuck.Token())
	}
	<-stuck.Lost()
	if err := stuck.Unlock(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Unlock of the expired lease: %v, want ErrNotHeld", err)
	}
	// first hands the lock to the other waiter; its connections are killed
	// afterwards: the lease is in the row, another process cannot take it.
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	second := <-got
	if second == nil {
		t.FailNow()
	}
	if second.Token() <= first.Token() {
		t.Fatalf("token %d after %d", second.Token(), first.Token())
	}
	if err := s.kill(ctx); err != nil {
		t.Fatal(err)
	}
	ol, err := sqllock.New(other, sqllock.Postgres, name)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ol.TryLock(ctx); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("TryLock of another process while the handed lease is held: %v, want ErrLocked", err)
	}
	if err := second.Extend(ctx, time.Minute); err != nil {
		t.Fatalf("Extend of the handed lease after the kill: %v", err)
	}
	if err := second.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	lease, err := ol.TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock after the last Unlock: %v", err)
	}
	_ = lease.Unlock(ctx)
}

// While 8 goroutines of one process pass the lock among themselves, Lock
// calls of another process (another pool and Listener) get it too: the
// release hands it to them, queued in the database, before the local
// waiters.
func TestLocalHandOffRemoteNotStarved(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	s := sharedPostgres(t)
	local, remote := s.open(t), s.open(t)
	lln, rln := newListener(t, local), newListener(t, remote)
	name := locktest.Name(t)
	ls := make([]lock.Locker, 8)
	for i := range ls {
		ls[i] = newLocal(t, lln, name, lock.TTL(10*time.Second))
	}
	localHeld, stop := locktest.KeepBusy(t, ctx, ls, time.Millisecond)
	defer stop()
	time.Sleep(200 * time.Millisecond)
	r := newLocal(t, rln, name, lock.TTL(10*time.Second))
	const want = 10
	start := time.Now()
	for range want {
		lease, err := r.Lock(ctx)
		if err != nil {
			t.Fatalf("the other process: %v", err)
		}
		if err := lease.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
	took := time.Since(start)
	stop()
	t.Logf("the other process locked %d times in %v; the local goroutines %d times", want, took, localHeld.Load())
	if took > 20*time.Second {
		t.Fatalf("the other process took %v for %d locks", took, want)
	}
}
