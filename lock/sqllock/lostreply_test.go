package sqllock_test

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/internal/testenv"
	"github.com/floodgate-dev/floodgate/lock"
	"github.com/floodgate-dev/floodgate/lock/sqllock"
)

// lockKinds are the Lockers a failed acquisition is tested on: the mutex
// (one statement) and the shared locks (a transaction of several).
var lockKinds = []struct {
	name string
	new  func(db *sql.DB, d sqllock.Dialect, name string, opts ...lock.Option) (lock.Locker, error)
}{
	{"mutex", sqllock.New},
	{"rwmutex", func(db *sql.DB, d sqllock.Dialect, name string, opts ...lock.Option) (lock.Locker, error) {
		rw, err := sqllock.NewRWMutex(db, d, name, opts...)
		if err != nil {
			return nil, err
		}
		return rw, nil
	}},
	{"semaphore", func(db *sql.DB, d sqllock.Dialect, name string, opts ...lock.Option) (lock.Locker, error) {
		return sqllock.NewSemaphore(db, d, name, 1, opts...)
	}},
}

// proxied is a database under test, reached directly and through a
// fault-injecting proxy.
type proxied struct {
	s      server
	direct *sql.DB // migrated
	via    *sql.DB // through p, one connection
	p      *testenv.Proxy
}

func newProxied(t *testing.T, dialect sqllock.Dialect) proxied {
	var s server
	var addr string
	if dialect == sqllock.Postgres {
		pg := testenv.SharedPostgres(t)
		s, addr = server{dialect: sqllock.Postgres, driver: "pgx", dsn: pg.DSN}, pg.Addr
	} else {
		m := testenv.SharedMariaDB(t)
		s, addr = server{dialect: sqllock.MySQL, driver: "mysql", dsn: m.DSN}, m.Addr
	}
	p := testenv.NewProxy(t, addr)
	direct := s.open(t)
	viaDSN := strings.Replace(s.dsn, addr, p.Addr(), 1)
	if viaDSN == s.dsn {
		t.Fatalf("cannot point %q at the proxy", s.dsn)
	}
	via := server{dialect: s.dialect, driver: s.driver, dsn: viaDSN}.openRaw(t)
	via.SetMaxOpenConns(1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := via.PingContext(ctx); err != nil {
		t.Fatal(err)
	}
	return proxied{s: s, direct: direct, via: via, p: p}
}

// freedWithin waits until l, on another handle, takes the lock, for at most
// within, and fails the test if it does not.
func freedWithin(t *testing.T, l lock.Locker, within time.Duration) {
	t.Helper()
	end := time.Now().Add(within)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		lease, err := l.TryLock(ctx)
		cancel()
		if err == nil {
			_ = lease.Unlock(context.Background())
			return
		}
		if !errors.Is(err, lock.ErrLocked) {
			t.Fatal(err)
		}
		if time.Now().After(end) {
			t.Fatalf("the lock is still held %v after the failed Lock (lease TTL %v)", within, lostTTL)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// lostTTL is the lease of the failed Locks: far longer than the tests, so
// that expiry cannot be what frees the lock.
const lostTTL = 30 * time.Second

// A Lock that fails while the database is unreachable (its traffic stalled)
// holds nothing once the database is back, well before its lease's TTL,
// although its statements reach the server after it gave up.
func TestFailedLockStalledHoldsNothing(t *testing.T) {
	t.Parallel()
	for _, dialect := range []sqllock.Dialect{sqllock.Postgres, sqllock.MySQL} {
		t.Run(dialect.String(), func(t *testing.T) {
			t.Parallel()
			px := newProxied(t, dialect)
			for _, k := range lockKinds {
				t.Run(k.name, func(t *testing.T) {
					name := fmt.Sprintf("stalled-%s-%d", k.name, time.Now().UnixNano())
					l, err := k.new(px.via, dialect, name, lock.TTL(lostTTL))
					if err != nil {
						t.Fatal(err)
					}
					other, _ := k.new(px.direct, dialect, name, lock.TTL(lostTTL))
					px.p.Stall()
					ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
					lease, err := l.Lock(ctx)
					cancel()
					px.p.Resume()
					if err == nil {
						_ = lease.Unlock(context.Background())
						t.Fatal("Lock succeeded through a stalled connection")
					}
					freedWithin(t, other, 10*time.Second)
				})
			}
		})
	}
}

// errReplyLost is what lossyTx.Commit returns for a COMMIT that was
// applied: the reply that said so did not arrive.
var errReplyLost = errors.New("test: the reply of COMMIT was lost")

// lossyDriver wraps a database/sql driver so that a test can lose the reply
// of the next COMMIT: the real COMMIT runs and succeeds, and the caller gets
// an error, as when the connection drops between the commit and its reply.
// (The proxy cannot aim at one reply of a conversation of several; this
// can.)
type lossyDriver struct {
	driver.Driver
	loseCommit atomic.Bool
	lost       atomic.Int32 // COMMITs applied whose reply was lost
}

func (l *lossyDriver) Open(name string) (driver.Conn, error) {
	c, err := l.Driver.Open(name)
	if err != nil {
		return nil, err
	}
	fc, ok := c.(fullConn)
	if !ok {
		c.Close()
		return nil, fmt.Errorf("test: %T lacks an interface of fullConn", c)
	}
	return &lossyConn{fullConn: fc, l: l}, nil
}

type dsnConnector struct {
	dsn string
	d   *lossyDriver
}

func (c dsnConnector) Connect(context.Context) (driver.Conn, error) { return c.d.Open(c.dsn) }
func (c dsnConnector) Driver() driver.Driver                        { return c.d }

// fullConn is what pgx's and go-sql-driver/mysql's connections implement.
type fullConn interface {
	driver.Conn
	driver.ConnBeginTx
	driver.ConnPrepareContext
	driver.ExecerContext
	driver.QueryerContext
	driver.NamedValueChecker
	driver.Pinger
	driver.SessionResetter
}

type lossyConn struct {
	fullConn
	l *lossyDriver
}

func (c *lossyConn) BeginTx(ctx context.Context, o driver.TxOptions) (driver.Tx, error) {
	tx, err := c.fullConn.BeginTx(ctx, o)
	if err != nil {
		return nil, err
	}
	return lossyTx{tx, c.l}, nil
}

type lossyTx struct {
	driver.Tx
	l *lossyDriver
}

func (tx lossyTx) Commit() error {
	err := tx.Tx.Commit()
	if err == nil && tx.l.loseCommit.CompareAndSwap(true, false) {
		tx.l.lost.Add(1)
		return errReplyLost
	}
	return err
}

// openLossy opens s through a lossyDriver.
func openLossy(t *testing.T, s server) (*sql.DB, *lossyDriver) {
	plain := s.open(t) // migrated
	l := &lossyDriver{Driver: plain.Driver()}
	db := sql.OpenDB(dsnConnector{dsn: s.dsn, d: l})
	t.Cleanup(func() { db.Close() })
	return db, l
}

// A Lock whose acquisition committed but whose COMMIT reply was lost
// returns an error and holds nothing: its undo frees the lock well before
// the lease's TTL.
func TestFailedLockCommittedHoldsNothing(t *testing.T) {
	t.Parallel()
	for _, s := range []func(testing.TB) server{sharedPostgres, sharedMariaDB} {
		srv := s(t)
		t.Run(srv.dialect.String(), func(t *testing.T) {
			t.Parallel()
			db, lossy := openLossy(t, srv)
			direct := srv.open(t)
			for _, k := range lockKinds {
				t.Run(k.name, func(t *testing.T) {
					name := fmt.Sprintf("committed-%s-%d", k.name, time.Now().UnixNano())
					l, err := k.new(db, srv.dialect, name, lock.TTL(lostTTL))
					if err != nil {
						t.Fatal(err)
					}
					other, _ := k.new(direct, srv.dialect, name, lock.TTL(lostTTL))
					ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
					defer cancel()
					before := lossy.lost.Load()
					lossy.loseCommit.Store(true)
					lease, err := l.Lock(ctx)
					if err == nil {
						_ = lease.Unlock(ctx)
						t.Fatalf("Lock succeeded although the reply of its COMMIT was lost")
					}
					if !errors.Is(err, errReplyLost) {
						t.Fatalf("Lock: %v, want the lost reply", err)
					}
					if lossy.lost.Load() != before+1 {
						t.Fatal("no COMMIT was applied")
					}
					freedWithin(t, other, 10*time.Second)
				})
			}
		})
	}
}

// The same on MySQL with the gate (a pool of more than one connection):
// a waiting Lock whose traffic stalls, and whose session takes the gate or
// the row's lock once it resumes, leaves neither behind. First while the
// lock is free (its attempt), then while another holds it (its wait on the
// gate).
func TestFailedLockStalledHoldsNothingGated(t *testing.T) {
	t.Parallel()
	px := newProxied(t, sqllock.MySQL)
	px.via.SetMaxOpenConns(4)
	for _, held := range []bool{false, true} {
		t.Run(fmt.Sprintf("held=%v", held), func(t *testing.T) {
			name := fmt.Sprintf("stalled-gated-%v-%d", held, time.Now().UnixNano())
			l, _ := sqllock.New(px.via, sqllock.MySQL, name, lock.TTL(lostTTL))
			other, _ := sqllock.New(px.direct, sqllock.MySQL, name, lock.TTL(lostTTL))
			var holder *lock.Lease
			if held {
				var err error
				if holder, err = other.TryLock(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			px.p.Stall()
			ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			lease, err := l.Lock(ctx)
			cancel()
			px.p.Resume()
			if err == nil {
				_ = lease.Unlock(context.Background())
				t.Fatal("Lock succeeded through a stalled connection")
			}
			if holder != nil {
				if err := holder.Unlock(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			freedWithin(t, other, 10*time.Second)
		})
	}
}
