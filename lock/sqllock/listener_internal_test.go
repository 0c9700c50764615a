package sqllock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/stdlib"

	"github.com/floodgate-dev/floodgate/internal/testenv"
	"github.com/floodgate-dev/floodgate/lock"
	"github.com/floodgate-dev/floodgate/lock/internal/cohort"
	"github.com/floodgate-dev/floodgate/lock/internal/lockdriver"
)

func waitPgx(ctx context.Context, driverConn any) (string, string, error) {
	n, err := driverConn.(*stdlib.Conn).Conn().WaitForNotification(ctx)
	if err != nil {
		return "", "", err
	}
	return n.Channel, n.Payload, nil
}

func received(s *subscription, within time.Duration) bool {
	select {
	case <-s.c:
		return true
	case <-time.After(within):
		return false
	}
}

// pgDriver returns a mutex driver on the shared PostgreSQL (migrated), with
// a Listener, on a lock name of its own made from prefix, and its pool;
// both close with t.
func pgDriver(t *testing.T, ctx context.Context, prefix string) (*sql.DB, *dbDriver) {
	t.Helper()
	db, err := sql.Open("pgx", testenv.SharedPostgres(t).DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := Migrate(ctx, db, Postgres); err != nil {
		t.Fatal(err)
	}
	ln, err := NewListener(db, waitPgx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	o, _ := lockdriver.BuildOptions[lock.Option](nil)
	name := fmt.Sprintf("%s-%d", prefix, time.Now().UnixNano())
	return db, &dbDriver{db: db, dialect: Postgres, name: name, o: o, ln: ln, channel: channelName(name)}
}

// A release hands the lock to the longest live waiter that listens and
// notifies only that one; the waiter confirms with pgConfirm. A waiter
// that gives up after the hand-off passes the lock on to the next (its
// undo is a release matched on its call id). Waiting here has no back-off:
// only a notification can arrive on a subscription.
func TestReleaseHandsOffToHeadWaiter(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	db, d := pgDriver(t, ctx, "notify")

	held, _, err := d.try(ctx, "holder", time.Minute, "", "c-holder")
	if err != nil {
		t.Fatal(err)
	}
	// Waiter ids are their calls' ids, as in dbDriver.Acquire.
	s1, s2 := d.ln.subscribe(d.channel, "w1"), d.ln.subscribe(d.channel, "w2")
	defer s1.close()
	defer s2.close()
	for _, s := range []*subscription{s1, s2} {
		select {
		case <-s.ready:
		case <-ctx.Done():
			t.Fatal("LISTEN did not take effect")
		}
	}
	for _, w := range []string{"w1", "w2"} {
		if _, hint, err := d.try(ctx, "o-"+w, time.Minute, w, w); !errors.Is(err, lock.ErrLocked) || hint <= 0 {
			t.Fatalf("%s: %v, hint %v; want ErrLocked and the holder's remaining lease", w, err, hint)
		}
	}
	if err := d.Release(ctx, "holder"); err != nil {
		t.Fatal(err)
	}
	if !received(s1, 10*time.Second) || !s1.handed.Load() {
		t.Fatal("the head waiter was not notified of a hand-off")
	}
	// Dispatch wakes all subscriptions of a notification at once.
	if received(s2, 0) {
		t.Fatal("the release woke the second waiter too")
	}
	// The lock is w1's now: a newcomer cannot take it.
	if _, _, err := d.try(ctx, "newcomer", time.Minute, "", "c-newcomer"); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("TryLock after the hand-off: %v, want ErrLocked", err)
	}

	// w1 gives up before confirming: leaving and undoing its call hands
	// the lock on to w2.
	d.leave(ctx, "w1")
	if err := d.undo(ctx, "o-w1", "w1"); err != nil {
		t.Fatal(err)
	}
	if !received(s2, 10*time.Second) || !s2.handed.Load() {
		t.Fatal("the waiter that gave up did not pass the lock on")
	}
	if _, ok, err := d.confirm(ctx, "o-w1", "w1", time.Minute); err != nil || ok {
		t.Fatalf("confirm of the waiter that gave up: %v, %v; want not handed", ok, err)
	}
	// An attempt of w2 whose snapshot predates the hand-off may queue w2
	// again after the release deleted its entry (found by the contended
	// benchmark: a later release handed the lock to the stale entry and the
	// lock sat for the grace); the confirmation removes it.
	if _, err := db.ExecContext(ctx, `INSERT INTO floodgate_lock_waiters (name, waiter, expires_at, owner, ttl_us)
VALUES ($1, 'w2', clock_timestamp() + interval '1 minute', 'o-w2', 60000000)`, d.name); err != nil {
		t.Fatal(err)
	}
	g, ok, err := d.confirm(ctx, "o-w2", "w2", time.Minute)
	if err != nil || !ok {
		t.Fatalf("confirm of the hand-off: %v, %v", ok, err)
	}
	if g.Token <= held.Token {
		t.Fatalf("token %d after %d", g.Token, held.Token)
	}
	var n int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM floodgate_lock_waiters WHERE name = $1", d.name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d queue entries left after the last waiter acquired", n)
	}
	// A replayed attempt of w2's call finds the same holding.
	if again, _, err := d.try(ctx, "o-w2", time.Minute, "w2", "w2"); err != nil || again.Token != g.Token {
		t.Fatalf("replay after the hand-off: %v, token %d, want %d", err, again.Token, g.Token)
	}
	if err := d.Release(ctx, "o-w2"); err != nil {
		t.Fatal(err)
	}
	if err := d.Release(ctx, "o-w2"); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("second release: %v, want ErrNotHeld (the replay added a level)", err)
	}
}

// A waiter that stopped without leaving the queue (its process died) and
// is handed the lock never confirms: the lock is free again after the
// hand-off's grace, not the waiter's TTL.
func TestHandOffToDeadWaiterEndsAfterGrace(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, d := pgDriver(t, ctx, "dead-waiter")
	if _, _, err := d.try(ctx, "holder", time.Minute, "", "c-holder"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.try(ctx, "o-dead", time.Hour, "dead", "dead"); !errors.Is(err, lock.ErrLocked) {
		t.Fatal(err)
	}
	released := time.Now()
	if err := d.Release(ctx, "holder"); err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.try(ctx, "other", time.Minute, "", "c-other-1"); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("TryLock right after the hand-off: %v, want ErrLocked", err)
	}
	for {
		_, _, err := d.try(ctx, "other", time.Minute, "", "c-other-2")
		if err == nil {
			break
		}
		if !errors.Is(err, lock.ErrLocked) {
			t.Fatal(err)
		}
		if time.Since(released) > handOffGrace+5*time.Second {
			t.Fatalf("the lock handed to a dead waiter is still held %v after the release", time.Since(released))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if waited := time.Since(released); waited < handOffGrace-100*time.Millisecond {
		t.Fatalf("free %v after the hand-off, before its grace %v", waited, handOffGrace)
	}
}

// The Listener gives its connection back once nobody waits, and Close
// stops it.
func TestListenerStops(t *testing.T) {
	db, err := sql.Open("pgx", testenv.SharedPostgres(t).DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ln, _ := NewListener(db, waitPgx)
	s := ln.subscribe(channelName("x"), "w")
	select {
	case <-s.ready:
	case <-time.After(10 * time.Second):
		t.Fatal("LISTEN did not take effect")
	}
	if n := db.Stats().InUse; n != 1 {
		t.Fatalf("%d connections in use while listening, want 1", n)
	}
	s.close()
	ln.mu.Lock()
	done := ln.done
	ln.mu.Unlock()
	select {
	case <-done:
	case <-time.After(listenerLinger + 10*time.Second):
		t.Fatal("the Listener did not stop after its last waiter left")
	}
	if n := db.Stats().InUse; n != 0 {
		t.Fatalf("%d connections in use after the Listener stopped", n)
	}
	s = ln.subscribe(channelName("x"), "w")
	<-s.ready
	if err := ln.Close(); err != nil {
		t.Fatal(err)
	}
	s.close()
	if n := db.Stats().InUse; n != 0 {
		t.Fatalf("%d connections in use after Close", n)
	}
}

// A local hand-off whose reply was lost (applied, but the releasing side
// does not know it) leaves the waiter to its own attempts: the holding the
// hand-off made carries the waiter's call id, so the attempt is a replay
// of its call, with the same token and no second hold level.
func TestLocalHandOffLostReply(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	db, d := pgDriver(t, ctx, "local-lost")
	d.o.MaxPoll = time.Minute
	d.useLocal = true
	d.local = cohort.New(localStore{db, d.ln}, d.name)

	if _, err := d.Acquire(ctx, "holder", time.Minute, true); err != nil {
		t.Fatal(err)
	}
	type result struct {
		g   lockdriver.Grant
		err error
	}
	got := make(chan result, 1)
	go func() {
		g, err := d.Acquire(ctx, "waiter", time.Minute, true)
		got <- result{g, err}
	}()
	var w *cohort.Waiter
	for w == nil {
		if ctx.Err() != nil {
			t.Fatal("the waiter did not queue in the process")
		}
		time.Sleep(10 * time.Millisecond)
		w = d.local.Handing("holder")
	}
	var holds, token sql.NullInt64
	var notified int64
	if err := db.QueryRowContext(ctx, pgReleaseLocal, d.name, "holder", d.channel, handOffGrace.Microseconds(),
		w.Owner(), w.TTL().Microseconds(), w.Call()).Scan(&holds, &notified, &token); err != nil {
		t.Fatal(err)
	}
	if !token.Valid || notified != 0 {
		t.Fatalf("local hand-off: token %v, %d notified; want a token and no notification", token, notified)
	}
	if !d.local.HandedTo(w, 0) { // the reply "was lost"
		t.Fatal("the waiter gave up")
	}
	r := <-got
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.g.Token != token.Int64 {
		t.Fatalf("the waiter's attempt got token %d, want %d, the hand-off's (a replay)", r.g.Token, token.Int64)
	}
	if err := d.Release(ctx, "waiter"); err != nil {
		t.Fatal(err)
	}
	if err := d.Release(ctx, "waiter"); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("second release: %v, want ErrNotHeld (the replay added a level)", err)
	}
}
