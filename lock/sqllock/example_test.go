package sqllock_test

import (
	"context"
	"database/sql"
	"fmt"
	"log"
	"time"

	_ "github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/floodgate-dev/floodgate/lock"
	"github.com/floodgate-dev/floodgate/lock/sqllock"
)

// pgxWait is the WaitFunc for github.com/jackc/pgx/v5/stdlib: the only
// driver-specific code a Listener needs.
func pgxWait(ctx context.Context, driverConn any) (channel, payload string, err error) {
	c, ok := driverConn.(*stdlib.Conn)
	if !ok {
		return "", "", fmt.Errorf("not a pgx connection: %T", driverConn)
	}
	n, err := c.Conn().WaitForNotification(ctx)
	if err != nil {
		return "", "", err
	}
	return n.Channel, n.Payload, nil
}

// A lock on PostgreSQL whose waiters are woken by LISTEN/NOTIFY, protecting
// a write with its fencing token. It needs a server, so it has no output to
// check.
func Example() {
	ctx := context.Background()
	db, err := sql.Open("pgx", "postgres://app@127.0.0.1:5432/app?sslmode=disable")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if err := sqllock.Migrate(ctx, db, sqllock.Postgres); err != nil {
		log.Fatal(err)
	}
	ln, err := sqllock.NewListener(db, pgxWait)
	if err != nil {
		log.Fatal(err)
	}
	defer ln.Close()

	mu, err := ln.New("invoice:42", lock.TTL(10*time.Second), lock.AutoRenew())
	if err != nil {
		log.Fatal(err)
	}
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	lease, err := mu.Lock(lctx)
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Unlock(ctx)

	// The resource accepts the write only with a token not lower than the
	// last one it saw, so a holder paused past its lease cannot overwrite a
	// newer holder's work.
	res, err := db.ExecContext(ctx,
		`UPDATE invoices SET status = 'paid', fence = $1 WHERE id = 42 AND fence <= $1`, lease.Token())
	if err != nil {
		log.Fatal(err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		log.Print("stale lock holder: write refused")
	}
}

// A lock on MySQL or MariaDB: a waiting Lock blocks on the lock's gate (a
// GET_LOCK held by the holder's session) and is handed it by the release;
// it also wakes at the holder's lease end and at least every lock.MaxPoll.
func ExampleNew() {
	ctx := context.Background()
	db, err := sql.Open("mysql", "app@tcp(127.0.0.1:3306)/app")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if err := sqllock.Migrate(ctx, db, sqllock.MySQL); err != nil {
		log.Fatal(err)
	}
	mu, err := sqllock.New(db, sqllock.MySQL, "nightly-report", lock.TTL(time.Minute), lock.MaxPoll(500*time.Millisecond))
	if err != nil {
		log.Fatal(err)
	}
	lease, err := mu.TryLock(ctx)
	if err != nil {
		log.Print("another instance runs the report: ", err)
		return
	}
	defer lease.Unlock(ctx)
	// ... run the report, stopping if <-lease.Lost() ...
}

// A readers–writer lock on MySQL or MariaDB: many instances read the
// configuration at once, and a writer that waits keeps new readers out
// until it has written.
func ExampleNewRWMutex() {
	ctx := context.Background()
	db, err := sql.Open("mysql", "app@tcp(127.0.0.1:3306)/app?interpolateParams=true")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if err := sqllock.Migrate(ctx, db, sqllock.MySQL); err != nil {
		log.Fatal(err)
	}
	rw, err := sqllock.NewRWMutex(db, sqllock.MySQL, "config", lock.TTL(30*time.Second), lock.AutoRenew())
	if err != nil {
		log.Fatal(err)
	}
	r, err := rw.RLock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	// ... read the configuration ...
	_ = r.Unlock(ctx)

	w, err := rw.Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer w.Unlock(ctx)
	// ... write it, passing w.Token() to the store ...
}

// A semaphore on PostgreSQL: at most 4 exports run at once across every
// instance, and a finished export wakes the next waiter through NOTIFY.
func ExampleListener_NewSemaphore() {
	ctx := context.Background()
	db, err := sql.Open("pgx", "postgres://app@127.0.0.1:5432/app?sslmode=disable")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if err := sqllock.Migrate(ctx, db, sqllock.Postgres); err != nil {
		log.Fatal(err)
	}
	ln, err := sqllock.NewListener(db, pgxWait)
	if err != nil {
		log.Fatal(err)
	}
	defer ln.Close()
	exports, err := ln.NewSemaphore("exports", 4, lock.TTL(time.Minute), lock.AutoRenew(), lock.Fair())
	if err != nil {
		log.Fatal(err)
	}
	permit, err := exports.Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer permit.Unlock(ctx)
	// ... run the export, stopping if <-permit.Lost() ...
}
