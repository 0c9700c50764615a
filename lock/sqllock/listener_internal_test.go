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

// A release notifies only the longest live waiter; a waiter that gives up
// while the lock is free passes the wake-up on to the next one. Waiting
// here has no back-off: only a notification can arrive on a subscription.
func TestReleaseNotifiesHeadWaiter(t *testing.T) {
	db, err := sql.Open("pgx", testenv.SharedPostgres(t).DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := Migrate(ctx, db, Postgres); err != nil {
		t.Fatal(err)
	}
	ln, err := NewListener(db, waitPgx)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	o, _ := lock.BuildOptions(nil)
	name := fmt.Sprintf("notify-%d", time.Now().UnixNano())
	d := &dbDriver{db: db, dialect: Postgres, name: name, o: o, ln: ln, channel: channelName(name)}

	if _, _, err := d.try(ctx, "holder", time.Minute, "", "c-holder"); err != nil {
		t.Fatal(err)
	}
	s1, s2 := ln.subscribe(d.channel, "w1"), ln.subscribe(d.channel, "w2")
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
		if _, hint, err := d.try(ctx, "o-"+w, time.Minute, w, "c-"+w); !errors.Is(err, lock.ErrLocked) || hint <= 0 {
			t.Fatalf("%s: %v, hint %v; want ErrLocked and the holder's remaining lease", w, err, hint)
		}
	}
	if err := d.Release(ctx, "holder"); err != nil {
		t.Fatal(err)
	}
	if !received(s1, 10*time.Second) {
		t.Fatal("the head waiter was not notified of the release")
	}
	// Dispatch wakes all subscriptions of a notification at once.
	if received(s2, 0) {
		t.Fatal("the release woke the second waiter too")
	}
	d.leave(ctx, "w1")
	if !received(s2, 10*time.Second) {
		t.Fatal("the waiter that gave up did not pass the wake-up on")
	}
	g, _, err := d.try(ctx, "o-w2", time.Minute, "w2", "c-w2b")
	if err != nil {
		t.Fatal(err)
	}
	if g.Token <= 0 {
		t.Fatalf("token %d", g.Token)
	}
	var n int
	if err := db.QueryRowContext(ctx, "SELECT count(*) FROM floodgate_lock_waiters WHERE name = $1", name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d queue entries left after the last waiter acquired", n)
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
