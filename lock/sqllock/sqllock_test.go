package sqllock_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/internal/testenv"
	"github.com/floodgate-dev/floodgate/lock"
	"github.com/floodgate-dev/floodgate/lock/internal/locktest"
	"github.com/floodgate-dev/floodgate/lock/sqllock"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(childMain()) // the other process of TestMutualExclusionTwoProcesses
	}
	os.Exit(testenv.Main(m))
}

// server is one database under test.
type server struct {
	dialect sqllock.Dialect
	driver  string // database/sql driver name
	dsn     string
	// kill terminates every client connection (nil for shared servers,
	// which tests must not disturb).
	kill func(context.Context) error
}

func sharedPostgres(t testing.TB) server {
	return server{dialect: sqllock.Postgres, driver: "pgx", dsn: testenv.SharedPostgres(t).DSN}
}

func sharedMariaDB(t testing.TB) server {
	return server{dialect: sqllock.MySQL, driver: "mysql", dsn: testenv.SharedMariaDB(t).DSN}
}

// open returns a new *sql.DB (a new pool: another process, as far as the
// database can tell) with the tables migrated; it is closed at cleanup.
func (s server) open(t testing.TB) *sql.DB {
	t.Helper()
	db, err := sql.Open(s.driver, s.dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := sqllock.Migrate(ctx, db, s.dialect); err != nil {
		t.Fatal(err)
	}
	return db
}

// q rewrites $n placeholders for MySQL.
func (s server) q(query string) string {
	if s.dialect == sqllock.Postgres {
		return query
	}
	for i := 9; i >= 1; i-- {
		query = strings.ReplaceAll(query, fmt.Sprintf("$%d", i), "?")
	}
	return query
}

func (s server) backend(t *testing.T, name string, db *sql.DB, ln *sqllock.Listener) locktest.Backend {
	return locktest.Backend{
		Name: name,
		New: func(t testing.TB, name string, opts ...lock.Option) lock.Locker {
			var l lock.Locker
			var err error
			if ln != nil {
				l, err = ln.New(name, opts...)
			} else {
				l, err = sqllock.New(db, s.dialect, name, opts...)
			}
			if err != nil {
				t.Fatal(err)
			}
			return l
		},
		Drop: func(t testing.TB, name string) {
			if _, err := db.ExecContext(context.Background(), s.q("DELETE FROM floodgate_locks WHERE name = $1"), name); err != nil {
				t.Fatal(err)
			}
		},
		Waiters: func(t testing.TB, name string) int {
			var n int
			if err := db.QueryRowContext(context.Background(), s.q("SELECT count(*) FROM floodgate_lock_waiters WHERE name = $1"), name).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		},
	}
}

func newListener(t testing.TB, db *sql.DB) *sqllock.Listener {
	t.Helper()
	ln, err := sqllock.NewListener(db, pgxWait)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

func TestConformancePostgres(t *testing.T) {
	t.Parallel()
	s := sharedPostgres(t)
	db := s.open(t)
	locktest.Run(t, s.backend(t, "postgres", db, newListener(t, db)))
}

// Without a Listener, PostgreSQL waiters only back off, as on MySQL.
func TestConformancePostgresBackoff(t *testing.T) {
	t.Parallel()
	s := sharedPostgres(t)
	locktest.Run(t, s.backend(t, "postgres-backoff", s.open(t), nil))
}

func TestConformanceMariaDB(t *testing.T) {
	t.Parallel()
	s := sharedMariaDB(t)
	locktest.Run(t, s.backend(t, "mariadb", s.open(t), nil))
}

func bothShared(t *testing.T, f func(t *testing.T, s server)) {
	t.Run("postgres", func(t *testing.T) { t.Parallel(); f(t, sharedPostgres(t)) })
	t.Run("mariadb", func(t *testing.T) { t.Parallel(); f(t, sharedMariaDB(t)) })
}

func TestMigrateIdempotent(t *testing.T) {
	bothShared(t, func(t *testing.T, s server) {
		db := s.open(t) // migrates once
		ctx := context.Background()
		name := locktest.Name(t)
		mu, err := sqllock.New(db, s.dialect, name)
		if err != nil {
			t.Fatal(err)
		}
		lease, err := mu.TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		// Again, and concurrently: no error, and existing rows are kept.
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		for range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				errs <- sqllock.Migrate(ctx, db, s.dialect)
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("Migrate again: %v", err)
			}
		}
		if _, err := mu.TryLock(ctx); !errors.Is(err, lock.ErrLocked) {
			t.Fatalf("after Migrate the lock must still be held: %v", err)
		}
		if err := lease.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	})
}

func TestBadArguments(t *testing.T) {
	db, err := sql.Open("pgx", "postgres://nobody@127.0.0.1:1/none")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	cases := []struct {
		what string
		err  func() error
		want string
	}{
		{"nil db", func() error { _, err := sqllock.New(nil, sqllock.Postgres, "x"); return err }, "sqllock: db is nil"},
		{"dialect 0", func() error { _, err := sqllock.New(db, 0, "x"); return err },
			"sqllock: unknown Dialect(0) (want sqllock.Postgres or sqllock.MySQL)"},
		{"dialect 3", func() error { _, err := sqllock.New(db, 3, "x"); return err },
			"sqllock: unknown Dialect(3) (want sqllock.Postgres or sqllock.MySQL)"},
		{"empty name", func() error { _, err := sqllock.New(db, sqllock.MySQL, ""); return err }, "lock: name is empty"},
		{"long name", func() error { _, err := sqllock.New(db, sqllock.MySQL, strings.Repeat("n", 513)); return err },
			"lock: name must be at most 512 bytes, got 513"},
		{"bad TTL", func() error { _, err := sqllock.New(db, sqllock.Postgres, "x", lock.TTL(0)); return err },
			"lock: TTL must be >= 1ms, got 0s"},
		{"NUL in name", func() error { _, err := sqllock.New(db, sqllock.Postgres, "a\x00b"); return err },
			"sqllock: name must be valid UTF-8 without NUL bytes on PostgreSQL"},
		{"invalid UTF-8 owner", func() error {
			_, err := sqllock.New(db, sqllock.Postgres, "x", lock.Owner("\xff"))
			return err
		}, "sqllock: Owner must be valid UTF-8 without NUL bytes on PostgreSQL"},
		{"Migrate nil db", func() error { return sqllock.Migrate(context.Background(), nil, sqllock.MySQL) }, "sqllock: db is nil"},
		{"Migrate dialect", func() error { return sqllock.Migrate(context.Background(), db, 7) },
			"sqllock: unknown Dialect(7) (want sqllock.Postgres or sqllock.MySQL)"},
		{"Listener nil db", func() error { _, err := sqllock.NewListener(nil, pgxWait); return err }, "sqllock: db is nil"},
		{"Listener nil wait", func() error { _, err := sqllock.NewListener(db, nil); return err }, "sqllock: WaitFunc is nil"},
	}
	for _, c := range cases {
		if err := c.err(); err == nil || err.Error() != c.want {
			t.Errorf("%s: %v, want %q", c.what, err, c.want)
		}
	}
	// Any bytes are fine on MySQL; New does not touch the database.
	if _, err := sqllock.New(db, sqllock.MySQL, "a\x00\xff"); err != nil {
		t.Errorf("binary name on MySQL: %v", err)
	}
	if sqllock.Postgres.String() != "Postgres" || sqllock.MySQL.String() != "MySQL" {
		t.Errorf("Dialect names: %v, %v", sqllock.Postgres, sqllock.MySQL)
	}
}

// Tokens keep increasing when the row is deleted (by an operator, or a
// restore): a new row's token comes from the database clock.
func TestTokenSurvivesRowDeletion(t *testing.T) {
	bothShared(t, func(t *testing.T, s server) {
		db := s.open(t)
		name := locktest.Name(t)
		b := s.backend(t, "", db, nil)
		ctx := context.Background()
		var last int64
		for i := range 4 {
			lease, err := b.New(t, name).TryLock(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if lease.Token() <= last {
				t.Fatalf("holding %d: token %d after %d", i, lease.Token(), last)
			}
			last = lease.Token()
			if err := lease.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
			if i%2 == 1 {
				b.Drop(t, name)
			}
		}
	})
}

// Re-entry extends the lease to at least TTL from now, so that the new
// Lease's local deadline is never later than the database's.
func TestReentryExtends(t *testing.T) {
	bothShared(t, func(t *testing.T, s server) {
		db := s.open(t)
		name := locktest.Name(t)
		ctx := context.Background()
		short, _ := sqllock.New(db, s.dialect, name, lock.Owner("me"), lock.TTL(300*time.Millisecond))
		long, _ := sqllock.New(db, s.dialect, name, lock.Owner("me"), lock.TTL(time.Minute))
		other, _ := sqllock.New(db, s.dialect, name)
		l1, err := short.TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		l2, err := long.TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if l1.Token() != l2.Token() {
			t.Fatalf("re-entry changed the token: %d then %d", l1.Token(), l2.Token())
		}
		<-l1.Lost() // the first lease's local deadline passed
		if _, err := other.TryLock(ctx); !errors.Is(err, lock.ErrLocked) {
			t.Fatalf("the re-entered lock ended with its first lease: %v", err)
		}
		if err := l2.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		// l1's Unlock releases the last level: its lease is lost locally
		// but the database still has the holding.
		if err := l1.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		l3, err := other.TryLock(ctx)
		if err != nil {
			t.Fatalf("after both Unlocks: %v", err)
		}
		_ = l3.Unlock(ctx)
	})
}

// critical runs n read-modify-write increments of a counter row under mu
// in each of 8 goroutines, with db's connections.
func critical(ctx context.Context, s server, db *sql.DB, mu lock.Locker, table string, n int) error {
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range n {
				if err := increment(ctx, s, db, mu, table); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func increment(ctx context.Context, s server, db *sql.DB, mu lock.Locker, table string) error {
	lease, err := mu.Lock(ctx)
	if err != nil {
		return err
	}
	var v int64
	if err := db.QueryRowContext(ctx, "SELECT v FROM "+table).Scan(&v); err != nil {
		return err
	}
	time.Sleep(200 * time.Microsecond)
	if _, err := db.ExecContext(ctx, s.q("UPDATE "+table+" SET v = $1"), v+1); err != nil {
		return err
	}
	return lease.Unlock(ctx)
}

// Two pools (as two processes would have) increment a counter without
// transactions, under the lock: no increment may be lost. On PostgreSQL one
// side waits with a Listener and the other without.
func TestMutualExclusionTwoPools(t *testing.T) {
	bothShared(t, func(t *testing.T, s server) {
		db1, db2 := s.open(t), s.open(t)
		table := fmt.Sprintf("sqllock_counter_%d", time.Now().UnixNano())
		ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
		defer cancel()
		if _, err := db1.ExecContext(ctx, "CREATE TABLE "+table+" (v BIGINT NOT NULL)"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = db1.ExecContext(context.Background(), "DROP TABLE "+table) })
		if _, err := db1.ExecContext(ctx, "INSERT INTO "+table+" (v) VALUES (0)"); err != nil {
			t.Fatal(err)
		}
		name := locktest.Name(t)
		opts := []lock.Option{lock.TTL(10 * time.Second), lock.MaxPoll(50 * time.Millisecond)}
		mu1, _ := sqllock.New(db1, s.dialect, name, opts...)
		var mu2 lock.Locker
		if s.dialect == sqllock.Postgres {
			// One side woken by NOTIFY, the other backing off.
			mu2, _ = newListener(t, db2).New(name, opts...)
		} else {
			mu2, _ = sqllock.New(db2, s.dialect, name, opts...)
		}
		const n = 10
		errs := make(chan error, 2)
		go func() { errs <- critical(ctx, s, db1, mu1, table, n) }()
		go func() { errs <- critical(ctx, s, db2, mu2, table, n) }()
		for range 2 {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		var v int64
		if err := db1.QueryRowContext(ctx, "SELECT v FROM "+table).Scan(&v); err != nil {
			t.Fatal(err)
		}
		if v != 2*8*n {
			t.Fatalf("counter = %d after %d locked increments: mutual exclusion failed", v, 2*8*n)
		}
	})
}

// A holder whose connections were killed: its Extend works through a new
// pooled connection while the lease runs, and returns ErrNotHeld once it
// expired and another owner took it; it never frees the other's lock. A
// waiter (woken through a killed Listener connection on PostgreSQL) still
// gets the lock.
func TestKilledConnections(t *testing.T) {
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		srv := testenv.NewPostgres(t)
		testKilled(t, server{dialect: sqllock.Postgres, driver: "pgx", dsn: srv.DSN, kill: srv.KillConnections})
	})
	t.Run("mariadb", func(t *testing.T) {
		t.Parallel()
		srv := testenv.NewMariaDB(t)
		testKilled(t, server{dialect: sqllock.MySQL, driver: "mysql", dsn: srv.DSN, kill: srv.KillConnections})
	})
}

func testKilled(t *testing.T, s server) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db, other := s.open(t), s.open(t)
	var ln *sqllock.Listener
	if s.dialect == sqllock.Postgres {
		ln = newListener(t, other)
	}
	b := s.backend(t, "", db, nil)
	ob := s.backend(t, "", other, ln)
	name := locktest.Name(t)

	// 1. Held through the kill: Extend and Unlock work on new connections.
	lease, err := b.New(t, name, lock.TTL(10*time.Second)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	waited := make(chan error, 1)
	go func() {
		w, err := ob.New(t, name, lock.MaxPoll(time.Minute)).Lock(ctx)
		if err == nil {
			err = w.Unlock(ctx)
		}
		waited <- err
	}()
	time.Sleep(300 * time.Millisecond) // let the waiter queue and listen
	if err := s.kill(ctx); err != nil {
		t.Fatal(err)
	}
	if err := lease.Extend(ctx, 10*time.Second); err != nil {
		t.Fatalf("Extend of a held lease after its connection was killed: %v", err)
	}
	if _, err := ob.New(t, name).TryLock(ctx); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("TryLock while held: %v, want ErrLocked", err)
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Fatalf("Unlock after the connections were killed: %v", err)
	}
	select {
	case err := <-waited:
		if err != nil {
			t.Fatalf("waiter: %v", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the waiter did not get the lock after the release")
	}

	// 2. Expired while its connections were killed: the old holder cannot
	// extend or free the new holder's lock.
	old, err := b.New(t, name, lock.TTL(300*time.Millisecond)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.kill(ctx); err != nil {
		t.Fatal(err)
	}
	<-old.Lost()
	cur, err := ob.New(t, name, lock.TTL(10*time.Second)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if cur.Token() <= old.Token() {
		t.Fatalf("tokens: new holder %d, old %d", cur.Token(), old.Token())
	}
	if err := old.Extend(ctx, time.Minute); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Extend of an expired lease: %v, want ErrNotHeld", err)
	}
	if err := old.Unlock(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Unlock of an expired lease: %v, want ErrNotHeld", err)
	}
	if _, err := b.New(t, name).TryLock(ctx); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("the stale holder freed the new holder's lock: TryLock = %v", err)
	}
	if err := cur.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// A WaitFunc that does not fit the driver: waiters still get the lock
// (they back off), and the Listener backs off too instead of spinning.
func TestListenerWithFailingWaitFunc(t *testing.T) {
	s := sharedPostgres(t)
	db := s.open(t)
	var mu sync.Mutex
	calls := 0
	ln, err := sqllock.NewListener(db, func(context.Context, any) (string, string, error) {
		mu.Lock()
		calls++
		mu.Unlock()
		return "", "", errors.New("no notifications here")
	})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	name := locktest.Name(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, _ := ln.New(name, lock.MaxPoll(100*time.Millisecond))
	holder, err := l.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		time.Sleep(time.Second)
		_ = holder.Unlock(ctx)
	}()
	lease, err := l.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_ = lease.Unlock(ctx)
	mu.Lock()
	defer mu.Unlock()
	// 10ms doubling: about 7 calls in the second of waiting; a loop without
	// back-off would make thousands.
	if calls == 0 || calls > 30 {
		t.Fatalf("%d calls of the WaitFunc while one Lock waited 1s", calls)
	}
}
