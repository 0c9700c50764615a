package sqllock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/internal/testenv"
	"github.com/floodgate-dev/floodgate/lock"
)

// openMariaDB opens a pool on the shared MariaDB with the tables migrated.
func openMariaDB(t *testing.T, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("mysql", dsn+"&interpolateParams=true")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := Migrate(ctx, db, MySQL); err != nil {
		t.Fatal(err)
	}
	return db
}

// gateHolder returns the connection id of the session that holds the gate
// of name, 0 when none does.
func gateHolder(t *testing.T, db *sql.DB, name string) int64 {
	t.Helper()
	var id sql.NullInt64
	if err := db.QueryRow(`SELECT IS_USED_LOCK(`+myGate+`)`, name).Scan(&id); err != nil {
		t.Fatal(err)
	}
	return id.Int64
}

// blockedOnGate counts the sessions waiting in GET_LOCK (MariaDB's state
// "User lock").
func blockedOnGate(t *testing.T, db *sql.DB) int {
	t.Helper()
	var n int
	err := db.QueryRow(`SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE STATE = 'User lock'`).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("not within 10s: %s", what)
		}
	}
}

// A MySQL holder keeps the lock's gate in its session; a waiter blocks in
// GET_LOCK on it (it does not poll), the release hands the gate to it, and
// the last Unlock gives the gate and the connection back.
func TestMySQLWaiterBlocksOnGate(t *testing.T) {
	db := openMariaDB(t, testenv.SharedMariaDB(t).DSN)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	name := fmt.Sprintf("gate-%d", time.Now().UnixNano())
	holder, err := New(db, MySQL, name, lock.TTL(time.Minute))
	if err != nil {
		t.Fatal(err)
	}
	waiter, _ := New(db, MySQL, name, lock.TTL(time.Minute), lock.MaxPoll(time.Minute))
	held, err := holder.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	first := gateHolder(t, db, name)
	if first == 0 {
		t.Fatal("the holder's session does not hold the gate")
	}
	before := blockedOnGate(t, db)
	got := make(chan *lock.Lease, 1)
	go func() {
		l, err := waiter.Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	eventually(t, "the waiter blocks in GET_LOCK", func() bool { return blockedOnGate(t, db) > before })
	if _, err := waiter.TryLock(ctx); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("TryLock while held: %v, want ErrLocked", err)
	}
	if err := held.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	// MaxPoll is a minute and the holder's lease as long: only the release
	// can have woken the waiter in time.
	var l *lock.Lease
	select {
	case l = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was not woken by the release")
	}
	if l == nil {
		t.FailNow()
	}
	if l.Token() <= held.Token() {
		t.Fatalf("token %d after %d", l.Token(), held.Token())
	}
	if id := gateHolder(t, db, name); id == 0 || id == first {
		t.Fatalf("gate held by %d after the hand-over (first holder %d), want the new holder's session", id, first)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if id := gateHolder(t, db, name); id != 0 {
		t.Fatalf("gate still held by %d after the last Unlock", id)
	}
	if pins.has(pinKey{db, name, ""}) || len(pinsOf(db)) != 0 {
		t.Fatal("a pin is left after the last Unlock")
	}
}

func pinsOf(db *sql.DB) []*pin {
	pins.mu.Lock()
	defer pins.mu.Unlock()
	var ps []*pin
	for k, p := range pins.m {
		if k.db == db {
			ps = append(ps, p)
		}
	}
	return ps
}

// A holder that never unlocks does not keep the gate past its lease: the
// gate goes at the lease's local deadline, and a waiter blocked on it takes
// the expired lease then, long before MaxPoll.
func TestMySQLGateEndsWithTheLease(t *testing.T) {
	db := openMariaDB(t, testenv.SharedMariaDB(t).DSN)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	name := fmt.Sprintf("gate-lease-%d", time.Now().UnixNano())
	holder, _ := New(db, MySQL, name, lock.TTL(500*time.Millisecond))
	waiter, _ := New(db, MySQL, name, lock.TTL(time.Minute), lock.MaxPoll(time.Minute))
	held, err := holder.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	l, err := waiter.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock(ctx)
	if !time.Now().After(held.Deadline()) {
		t.Fatal("the waiter took the lock before the holder's lease ended")
	}
	if l.Token() <= held.Token() {
		t.Fatalf("token %d after %d", l.Token(), held.Token())
	}
	if waited := time.Since(start); waited > 10*time.Second {
		t.Fatalf("the waiter waited %v for a lease of 500ms (MaxPoll 1m)", waited)
	}
	if err := held.Unlock(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Unlock of the expired lease: %v, want ErrNotHeld", err)
	}
	if id := gateHolder(t, db, name); id == 0 {
		t.Fatal("the new holder has no gate")
	}
}

// The holder's connections are killed while it holds the lock: its lease
// survives (no one takes the lock before it ends), its gate does not, and
// the waiter, handed the gate at once, takes the lock when the lease ends.
func TestMySQLKilledHolderLeaseSurvives(t *testing.T) {
	srv := testenv.NewMariaDB(t)
	db := openMariaDB(t, srv.DSN)
	other := openMariaDB(t, srv.DSN)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	name := fmt.Sprintf("gate-killed-%d", time.Now().UnixNano())
	holder, _ := New(db, MySQL, name, lock.TTL(2*time.Second))
	waiter, _ := New(other, MySQL, name, lock.TTL(time.Minute), lock.MaxPoll(time.Minute))
	held, err := holder.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *lock.Lease, 1)
	go func() {
		l, err := waiter.Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	time.Sleep(200 * time.Millisecond) // let the waiter block
	if err := srv.KillConnections(ctx); err != nil {
		t.Fatal(err)
	}
	var l *lock.Lease
	select {
	case l = <-got:
	case <-time.After(15 * time.Second):
		t.Fatal("the waiter did not get the lock after the killed holder's lease ended")
	}
	if l == nil {
		t.FailNow()
	}
	// The lease's local deadline is never later than the database's.
	if !time.Now().After(held.Deadline()) {
		t.Fatal("the waiter took the lock while the killed holder's lease ran")
	}
	if l.Token() <= held.Token() {
		t.Fatalf("token %d after %d", l.Token(), held.Token())
	}
	_ = l.Unlock(ctx)
}

// Waiters block on the gate with a connection each, and the holder's
// Unlock needs one from the same pool: with a pool smaller than the number
// of waiters, waiters that would take its last connection back off instead
// of blocking, and those that block give theirs back between waits, so the
// lock keeps changing hands (without that, an Unlock would wait for the
// pool until a lease ended).
func TestMySQLGateSmallPool(t *testing.T) {
	db := openMariaDB(t, testenv.SharedMariaDB(t).DSN)
	db.SetMaxOpenConns(3)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	name := fmt.Sprintf("gate-pool-%d", time.Now().UnixNano())
	const goroutines, n = 8, 10
	errs := make(chan error, goroutines)
	var inside, total atomic.Int64
	for range goroutines {
		l, err := New(db, MySQL, name, lock.TTL(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		go func() {
			for range n {
				lease, err := l.Lock(ctx)
				if err != nil {
					errs <- err
					return
				}
				if inside.Add(1) != 1 {
					errs <- errors.New("two holders at once")
					return
				}
				total.Add(1)
				inside.Add(-1)
				if err := lease.Unlock(ctx); err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range goroutines {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if total.Load() != goroutines*n {
		t.Fatalf("%d critical sections, want %d", total.Load(), goroutines*n)
	}
}
