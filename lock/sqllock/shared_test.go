package sqllock_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/internal/testenv"
	"github.com/floodgate-dev/floodgate/lock"
	"github.com/floodgate-dev/floodgate/lock/internal/locktest"
	"github.com/floodgate-dev/floodgate/lock/sqllock"
)

// sharedMinTTL is the shortest TTL of the RWMutex and Semaphore suites: an
// operation is a transaction of several statements, which on a loaded
// machine can take a good part of a shorter lease (the lease counts from
// the request).
const sharedMinTTL = time.Second

// waiters returns a function that counts the queue of a lock of kind.
func (s server) waiters(db *sql.DB, kind string) func(t testing.TB, name string) int {
	return func(t testing.TB, name string) int {
		var n int
		err := db.QueryRowContext(context.Background(),
			s.q("SELECT count(*) FROM floodgate_shared_waiters WHERE kind = $1 AND name = $2"), kind, name).Scan(&n)
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
}

func (s server) rwBackend(name string, db *sql.DB, ln *sqllock.Listener) locktest.RWBackend {
	return locktest.RWBackend{
		Name:    name,
		MinTTL:  sharedMinTTL,
		Waiters: s.waiters(db, "rw"),
		New: func(t testing.TB, name string, opts ...lock.Option) lock.RWLocker {
			var m lock.RWLocker
			var err error
			if ln != nil {
				m, err = ln.NewRWMutex(name, opts...)
			} else {
				m, err = sqllock.NewRWMutex(db, s.dialect, name, opts...)
			}
			if err != nil {
				t.Fatal(err)
			}
			return m
		},
	}
}

func (s server) semBackend(name string, db *sql.DB, ln *sqllock.Listener) locktest.SemBackend {
	return locktest.SemBackend{
		Name:    name,
		MinTTL:  sharedMinTTL,
		Waiters: s.waiters(db, "sem"),
		New: func(t testing.TB, name string, permits int, opts ...lock.Option) lock.Locker {
			var l lock.Locker
			var err error
			if ln != nil {
				l, err = ln.NewSemaphore(name, permits, opts...)
			} else {
				l, err = sqllock.NewSemaphore(db, s.dialect, name, permits, opts...)
			}
			if err != nil {
				t.Fatal(err)
			}
			return l
		},
	}
}

// The RWMutex and Semaphore suites run on PostgreSQL with a Listener
// (waiters woken by NOTIFY) and on MariaDB (waiters back off).

func TestRWMutexPostgres(t *testing.T) {
	t.Parallel()
	s := sharedPostgres(t)
	db := s.open(t)
	locktest.RunRW(t, s.rwBackend("postgres", db, newListener(t, db)))
}

func TestRWMutexMariaDB(t *testing.T) {
	t.Parallel()
	s := sharedMariaDB(t)
	locktest.RunRW(t, s.rwBackend("mariadb", s.open(t), nil))
}

func TestSemaphorePostgres(t *testing.T) {
	t.Parallel()
	s := sharedPostgres(t)
	db := s.open(t)
	locktest.RunSemaphore(t, s.semBackend("postgres", db, newListener(t, db)))
}

func TestSemaphoreMariaDB(t *testing.T) {
	t.Parallel()
	s := sharedMariaDB(t)
	locktest.RunSemaphore(t, s.semBackend("mariadb", s.open(t), nil))
}

// A Mutex, an RWMutex and a Semaphore of one name are separate locks.
func TestKindsAreSeparate(t *testing.T) {
	bothShared(t, func(t *testing.T, s server) {
		db := s.open(t)
		ctx := context.Background()
		name := locktest.Name(t)
		mu, err := sqllock.New(db, s.dialect, name)
		if err != nil {
			t.Fatal(err)
		}
		rw, err := sqllock.NewRWMutex(db, s.dialect, name)
		if err != nil {
			t.Fatal(err)
		}
		sem, err := sqllock.NewSemaphore(db, s.dialect, name, 1)
		if err != nil {
			t.Fatal(err)
		}
		var leases []*lock.Lease
		for what, l := range map[string]lock.Locker{"mutex": mu, "write side": rw, "semaphore": sem} {
			lease, err := l.TryLock(ctx)
			if err != nil {
				t.Fatalf("%s of a name whose other kinds are held: %v", what, err)
			}
			leases = append(leases, lease)
		}
		for _, l := range leases {
			if err := l.Unlock(ctx); err != nil {
				t.Fatal(err)
			}
		}
	})
}

func TestSharedBadArguments(t *testing.T) {
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
		{"rw nil db", func() error { _, err := sqllock.NewRWMutex(nil, sqllock.Postgres, "x"); return err }, "sqllock: db is nil"},
		{"rw dialect", func() error { _, err := sqllock.NewRWMutex(db, 0, "x"); return err },
			"sqllock: unknown Dialect(0) (want sqllock.Postgres or sqllock.MySQL)"},
		{"rw empty name", func() error { _, err := sqllock.NewRWMutex(db, sqllock.MySQL, ""); return err }, "lock: name is empty"},
		{"rw NUL", func() error { _, err := sqllock.NewRWMutex(db, sqllock.Postgres, "a\x00"); return err },
			"sqllock: name must be valid UTF-8 without NUL bytes on PostgreSQL"},
		{"sem nil db", func() error { _, err := sqllock.NewSemaphore(nil, sqllock.MySQL, "x", 1); return err }, "sqllock: db is nil"},
		{"sem permits 0", func() error { _, err := sqllock.NewSemaphore(db, sqllock.MySQL, "x", 0); return err },
			fmt.Sprintf("sqllock: permits must be between 1 and %d, got 0", lock.MaxPermits)},
		{"sem permits too many", func() error { _, err := sqllock.NewSemaphore(db, sqllock.MySQL, "x", lock.MaxPermits+1); return err },
			fmt.Sprintf("sqllock: permits must be between 1 and %d, got %d", lock.MaxPermits, lock.MaxPermits+1)},
		{"sem TTL", func() error { _, err := sqllock.NewSemaphore(db, sqllock.MySQL, "x", 1, lock.TTL(0)); return err },
			"lock: TTL must be >= 1ms, got 0s"},
		{"sem bad owner", func() error {
			_, err := sqllock.NewSemaphore(db, sqllock.Postgres, "x", 1, lock.Owner("\xff"))
			return err
		}, "sqllock: Owner must be valid UTF-8 without NUL bytes on PostgreSQL"},
	}
	for _, c := range cases {
		if err := c.err(); err == nil || err.Error() != c.want {
			t.Errorf("%s: %v, want %q", c.what, err, c.want)
		}
	}
}

// A holder's rows and the queue live in the database: a holding that was
// deleted (by an operator) is lost, and its Extend says so.
func TestSharedLostOnDeletion(t *testing.T) {
	bothShared(t, func(t *testing.T, s server) {
		db := s.open(t)
		ctx := context.Background()
		name := locktest.Name(t)
		sem, _ := sqllock.NewSemaphore(db, s.dialect, name, 2, lock.TTL(time.Minute))
		lease, err := sem.TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := db.ExecContext(ctx, s.q("DELETE FROM floodgate_shared_holders WHERE kind = 'sem' AND name = $1"), name); err != nil {
			t.Fatal(err)
		}
		if err := lease.Extend(ctx, time.Minute); !errors.Is(err, lock.ErrNotHeld) {
			t.Fatalf("Extend of a deleted permit: %v, want ErrNotHeld", err)
		}
		select {
		case <-lease.Lost():
		default:
			t.Fatal("Lost not closed after Extend found the permit gone")
		}
	})
}

// Tables made by the Migrate of the mutex-only release (floodgate_locks and
// floodgate_lock_waiters, with rows) are kept by today's Migrate, which
// adds the tables of the RWMutex and the Semaphore; a held mutex stays held.
func TestMigrateFromMutexOnlyTables(t *testing.T) {
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		srv := testenv.SharedPostgres(t)
		schema := fmt.Sprintf("migrate_%d", time.Now().UnixNano())
		admin := server{dialect: sqllock.Postgres, driver: "pgx", dsn: srv.DSN}.openRaw(t)
		if _, err := admin.Exec("CREATE SCHEMA " + schema); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = admin.Exec("DROP SCHEMA " + schema + " CASCADE") })
		dsn := srv.DSN + "&search_path=" + schema
		testMigrateFrom(t, server{dialect: sqllock.Postgres, driver: "pgx", dsn: dsn}, oldPostgresSchema)
	})
	t.Run("mariadb", func(t *testing.T) {
		t.Parallel()
		srv := testenv.SharedMariaDB(t)
		dbName := fmt.Sprintf("migrate_%d", time.Now().UnixNano())
		admin := server{dialect: sqllock.MySQL, driver: "mysql", dsn: srv.DSN}.openRaw(t)
		if _, err := admin.Exec("CREATE DATABASE " + dbName); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _, _ = admin.Exec("DROP DATABASE " + dbName) })
		dsn := strings.Replace(srv.DSN, "/"+testenv.MariaDBDatabase, "/"+dbName, 1)
		if dsn == srv.DSN {
			t.Fatalf("cannot point %q at another database", srv.DSN)
		}
		testMigrateFrom(t, server{dialect: sqllock.MySQL, driver: "mysql", dsn: dsn}, oldMySQLSchema)
	})
}

// openRaw opens s without migrating; closed at cleanup.
func (s server) openRaw(t testing.TB) *sql.DB {
	t.Helper()
	db, err := sql.Open(s.driver, s.dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func testMigrateFrom(t *testing.T, s server, old []string) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	db := s.openRaw(t)
	for _, stmt := range old {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			t.Fatalf("old schema: %v", err)
		}
	}
	// A mutex held by the old version. This version needs Migrate before it
	// takes a lock (the column call_id, issue 13), so the row is written as
	// the old version wrote it.
	until := "clock_timestamp() + interval '1 minute'"
	if s.dialect == sqllock.MySQL {
		until = "UTC_TIMESTAMP(6) + INTERVAL 1 MINUTE"
	}
	if _, err := db.ExecContext(ctx, "INSERT INTO floodgate_locks (name, owner, holds, token, expires_at) VALUES ('kept', 'old', 1, 1, "+until+")"); err != nil {
		t.Fatalf("mutex on the old tables: %v", err)
	}
	mu, err := sqllock.New(db, s.dialect, "kept")
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := sqllock.Migrate(ctx, db, s.dialect); err != nil {
			t.Fatalf("Migrate over the old tables: %v", err)
		}
	}
	if _, err := mu.TryLock(ctx); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("after Migrate the mutex must still be held: %v", err)
	}
	rw, _ := sqllock.NewRWMutex(db, s.dialect, "kept")
	r, err := rw.TryRLock(ctx)
	if err != nil {
		t.Fatalf("RWMutex after Migrate: %v", err)
	}
	sem, _ := sqllock.NewSemaphore(db, s.dialect, "kept", 1)
	p, err := sem.TryLock(ctx)
	if err != nil {
		t.Fatalf("Semaphore after Migrate: %v", err)
	}
	for _, l := range []*lock.Lease{r, p} {
		if err := l.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// The tables as the first release's Migrate created them.
var oldPostgresSchema = []string{
	`CREATE TABLE floodgate_locks (
	name       text        PRIMARY KEY,
	owner      text        NOT NULL DEFAULT '',
	holds      integer     NOT NULL DEFAULT 0,
	token      bigint      NOT NULL DEFAULT 0,
	expires_at timestamptz NOT NULL
)`,
	`CREATE TABLE floodgate_lock_waiters (
	name       text        NOT NULL,
	waiter     text        NOT NULL,
	seq        bigserial   NOT NULL,
	expires_at timestamptz NOT NULL,
	PRIMARY KEY (name, waiter)
)`,
}

var oldMySQLSchema = []string{
	`CREATE TABLE floodgate_locks (
	name       VARBINARY(512) NOT NULL,
	owner      VARBINARY(256) NOT NULL DEFAULT '',
	holds      INT            NOT NULL DEFAULT 0,
	token      BIGINT         NOT NULL DEFAULT 0,
	expires_at DATETIME(6)    NOT NULL,
	PRIMARY KEY (name)
) ENGINE=InnoDB`,
	`CREATE TABLE floodgate_lock_waiters (
	name       VARBINARY(512) NOT NULL,
	waiter     VARBINARY(64)  NOT NULL,
	seq        BIGINT         NOT NULL AUTO_INCREMENT,
	expires_at DATETIME(6)    NOT NULL,
	PRIMARY KEY (name, waiter),
	UNIQUE KEY floodgate_lock_waiters_seq (seq)
) ENGINE=InnoDB`,
}
