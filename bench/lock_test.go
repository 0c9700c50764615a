package bench

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bsm/redislock"
	"github.com/go-redsync/redsync/v4"
	redsyncgoredis "github.com/go-redsync/redsync/v4/redis/goredis/v9"
	_ "github.com/go-sql-driver/mysql"
	"github.com/go-zookeeper/zk"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/backend/rueidisadapter"
	"github.com/floodgate-dev/floodgate/internal/testenv"
	"github.com/floodgate-dev/floodgate/lock"
	"github.com/floodgate-dev/floodgate/lock/sqllock"
	"github.com/floodgate-dev/floodgate/lock/zklock"
)

// Lock benchmarks: floodgate's mutex on each of its stores against
// go-redsync/redsync and bsm/redislock on the same private Redis.
//
//	BenchmarkLockUncontended/lib=L  ns/op of Lock + Unlock by one goroutine, same name every time
//	BenchmarkLockContended/lib=L    acquisitions/s of 16 goroutines on one name; wait p50/p99
//	BenchmarkWakeup/lib=L           p50-ms, p99-ms from the holder's Unlock returning to the waiter's Lock returning
//
// Every floodgate lock uses lock.TTL(10s) (no longer than the ZooKeeper
// session timeout, as zklock's documentation asks), redislock a 10s TTL,
// redsync its defaults (8s expiry). Servers other than Redis are started only
// by the sub-benchmarks that use them.

const (
	lockTTL        = 10 * time.Second
	lockGoroutines = 16
	// wakeupHold is how long the holder keeps the lock once the waiter has
	// been started: long enough for the waiter to queue and block. sqllock's
	// waiter also backs off (retries about 10, 30, 70, 150, 310ms after its
	// first attempt), so after a release at 200ms a poll would wake it about
	// 110ms late: a wake-up within a few ms can only be the notification.
	wakeupHold = 200 * time.Millisecond
	// wakeupMaxPoll keeps the fallback poll out of the wake-up measurement.
	wakeupMaxPoll = 10 * time.Second
	// lockCtxTimeout bounds the lock calls of one sub-benchmark.
	lockCtxTimeout = 10 * time.Minute
)

// benchLock is one lock handle; lock blocks (or retries, for the peers)
// until held and returns the matching unlock.
type benchLock interface {
	lock(ctx context.Context) (unlock func(context.Context) error, err error)
}

// lockLib makes lock handles of one library. open is called once per
// sub-benchmark (connections, backends); the function it returns once per
// goroutine (redsync's Mutex is not safe for concurrent use). contended asks
// the peers for their retry options (floodgate's Lock always waits).
type lockLib struct {
	name string
	open func(b *testing.B) func(name string, contended bool) benchLock
	// redis: the library runs on the shared Redis (server CPU is reported).
	redis bool
}

// floodgateLock adapts a lock.Locker.
type floodgateLock struct{ l lock.Locker }

func (f floodgateLock) lock(ctx context.Context) (func(context.Context) error, error) {
	lease, err := f.l.Lock(ctx)
	if err != nil {
		return nil, err
	}
	return lease.Unlock, nil
}

// floodgateTryLock is floodgateLock with TryLock: no subscription, one
// script call. Only the uncontended benchmark uses it.
type floodgateTryLock struct{ l lock.Locker }

func (f floodgateTryLock) lock(ctx context.Context) (func(context.Context) error, error) {
	lease, err := f.l.TryLock(ctx)
	if err != nil {
		return nil, err
	}
	return lease.Unlock, nil
}

type redsyncLock struct{ m *redsync.Mutex }

func (r redsyncLock) lock(ctx context.Context) (func(context.Context) error, error) {
	if err := r.m.LockContext(ctx); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error {
		ok, err := r.m.UnlockContext(ctx)
		if err == nil && !ok {
			err = errors.New("redsync: unlock failed")
		}
		return err
	}, nil
}

type redislockLock struct {
	c    *redislock.Client
	name string
	opt  *redislock.Options
}

func (r redislockLock) lock(ctx context.Context) (func(context.Context) error, error) {
	l, err := r.c.Obtain(ctx, r.name, lockTTL, r.opt)
	if err != nil {
		return nil, err
	}
	return l.Release, nil
}

// --- stores ---------------------------------------------------------------

// redisLockBackend returns a floodgate backend over the shared go-redis or
// rueidis client. Each sub-benchmark gets its own (one pub/sub connection
// each), closed at its end.
func redisLockBackend(b *testing.B, rueidisClient bool) *backend.Redis {
	b.Helper()
	c := redisClients(b)
	var be *backend.Redis
	var err error
	if rueidisClient {
		be, err = rueidisadapter.New(c.rued)
	} else {
		be, err = backend.NewRedis(c.gored)
	}
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = be.Close() })
	return be
}

// onceDB opens a *sql.DB on a shared server once per test binary.
type onceDB struct {
	once sync.Once
	db   *sql.DB
	ln   *sqllock.Listener // PostgreSQL only
	err  error
}

var pgLocks, myLocks onceDB

// pgxWait is the sqllock.WaitFunc for pgx's database/sql driver, as in
// lock/sqllock's example.
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

// postgresLocks starts the shared PostgreSQL (once), migrates the lock
// tables and returns the pool and its Listener. The pool is database/sql's
// default (no limit on open connections).
func postgresLocks(b *testing.B) (*sql.DB, *sqllock.Listener) {
	b.Helper()
	srv := testenv.SharedPostgres(b)
	pgLocks.once.Do(func() {
		pgLocks.db, pgLocks.err = sql.Open("pgx", srv.DSN)
		if pgLocks.err != nil {
			return
		}
		pgLocks.db.SetMaxIdleConns(lockGoroutines + 4)
		if pgLocks.err = sqllock.Migrate(context.Background(), pgLocks.db, sqllock.Postgres); pgLocks.err != nil {
			return
		}
		pgLocks.ln, pgLocks.err = sqllock.NewListener(pgLocks.db, pgxWait)
	})
	if pgLocks.err != nil {
		b.Fatalf("postgres: %v", pgLocks.err)
	}
	return pgLocks.db, pgLocks.ln
}

// mysqlLocks starts the shared MariaDB (once) and migrates the lock tables.
// interpolateParams=true, as sqllock's documentation advises, saves a round
// trip per statement.
func mysqlLocks(b *testing.B) *sql.DB {
	b.Helper()
	srv := testenv.SharedMariaDB(b)
	myLocks.once.Do(func() {
		myLocks.db, myLocks.err = sql.Open("mysql", srv.DSN+"&interpolateParams=true")
		if myLocks.err != nil {
			return
		}
		myLocks.db.SetMaxIdleConns(lockGoroutines + 4)
		myLocks.err = sqllock.Migrate(context.Background(), myLocks.db, sqllock.MySQL)
	})
	if myLocks.err != nil {
		b.Fatalf("mariadb: %v", myLocks.err)
	}
	return myLocks.db
}

type zkNop struct{}

func (zkNop) Printf(string, ...any) {}

// zkSessionTimeout is the session timeout asked of ZooKeeper (testenv's
// server grants 1s to 20s); lockTTL is no longer.
const zkSessionTimeout = 10 * time.Second

var (
	zkOnce sync.Once
	zkConn *zk.Conn
	zkErr  error
)

// zkConnect opens a ZooKeeper session on addr and waits until it has one.
func zkConnect(addr string) (*zk.Conn, error) {
	conn, events, err := zk.Connect([]string{addr}, zkSessionTimeout, zk.WithLogger(zkNop{}))
	if err != nil {
		return nil, err
	}
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev := <-events:
			if ev.State == zk.StateHasSession {
				return conn, nil
			}
		case <-timeout:
			conn.Close()
			return nil, fmt.Errorf("no session on %s", addr)
		}
	}
}

// sharedZK is one session for the throughput benchmarks: every goroutine's
// Locker shares it, as they would in one process.
func sharedZK(b *testing.B) *zk.Conn {
	b.Helper()
	srv := testenv.SharedZooKeeper(b)
	zkOnce.Do(func() { zkConn, zkErr = zkConnect(srv.Addr) })
	if zkErr != nil {
		b.Fatalf("zookeeper: %v", zkErr)
	}
	return zkConn
}

// newZK opens a session closed at the end of the sub-benchmark.
func newZK(b *testing.B) *zk.Conn {
	b.Helper()
	conn, err := zkConnect(testenv.SharedZooKeeper(b).Addr)
	if err != nil {
		b.Fatalf("zookeeper: %v", err)
	}
	b.Cleanup(conn.Close)
	return conn
}

// zkPath maps a lock name to a ZooKeeper path of this test binary.
var zkRoot = fmt.Sprintf("/floodgate-bench-%d-%d", os.Getpid(), time.Now().UnixNano())

func zkPath(name string) string { return zkRoot + "/" + name }

func mustLocker(b *testing.B) func(lock.Locker, error) lock.Locker {
	return func(l lock.Locker, err error) lock.Locker {
		b.Helper()
		if err != nil {
			b.Fatal(err)
		}
		return l
	}
}

// --- libraries -------------------------------------------------------------

func floodgateRedisLib(name string, rueidisClient, try bool) lockLib {
	return lockLib{name: name, redis: true, open: func(b *testing.B) func(string, bool) benchLock {
		be := redisLockBackend(b, rueidisClient) // one pub/sub connection for every goroutine
		return func(n string, _ bool) benchLock {
			l := mustLocker(b)(lock.NewMutex(be, n, lock.TTL(lockTTL)))
			if try {
				return floodgateTryLock{l}
			}
			return floodgateLock{l}
		}
	}}
}

// redsync: one pool on the shared go-redis client. Uncontended, its default
// options; contended, a fixed 1ms retry delay (its default is a random
// 50–250ms) and enough tries never to give up, since it cannot wait for a
// release.
var redsyncLib = lockLib{name: "redsync", redis: true, open: func(b *testing.B) func(string, bool) benchLock {
	rs := redsync.New(redsyncgoredis.NewPool(redisClients(b).gored))
	return func(n string, contended bool) benchLock {
		var opts []redsync.Option
		if contended {
			opts = append(opts, redsync.WithRetryDelay(time.Millisecond), redsync.WithTries(math.MaxInt32))
		}
		return redsyncLock{rs.NewMutex(n, opts...)}
	}
}}

// redislock: Obtain + Release on the shared go-redis client. Uncontended,
// no retry (its default); contended, LinearBackoff(1ms), since it cannot
// wait for a release. Lock calls carry a deadline, so Obtain retries until
// then (without one it stops after the TTL).
var redislockLib = lockLib{name: "bsm-redislock", redis: true, open: func(b *testing.B) func(string, bool) benchLock {
	c := redislock.New(redisClients(b).gored)
	return func(n string, contended bool) benchLock {
		var opt *redislock.Options
		if contended {
			opt = &redislock.Options{RetryStrategy: redislock.LinearBackoff(time.Millisecond)}
		}
		return redislockLock{c: c, name: n, opt: opt}
	}
}}

var lockLibs = []lockLib{
	floodgateRedisLib("floodgate-redis", false, false),
	floodgateRedisLib("floodgate-rueidis", true, false),
	redsyncLib,
	redislockLib,
	{name: "floodgate-memory", open: func(b *testing.B) func(string, bool) benchLock {
		m := backend.NewMemory()
		b.Cleanup(func() { _ = m.Close() })
		return func(n string, _ bool) benchLock {
			return floodgateLock{mustLocker(b)(lock.NewMutex(m, n, lock.TTL(lockTTL)))}
		}
	}},
	{name: "floodgate-postgres", open: func(b *testing.B) func(string, bool) benchLock {
		_, ln := postgresLocks(b)
		return func(n string, _ bool) benchLock {
			return floodgateLock{mustLocker(b)(ln.New(n, lock.TTL(lockTTL)))}
		}
	}},
	{name: "floodgate-mysql", open: func(b *testing.B) func(string, bool) benchLock {
		db := mysqlLocks(b)
		return func(n string, _ bool) benchLock {
			return floodgateLock{mustLocker(b)(sqllock.New(db, sqllock.MySQL, n, lock.TTL(lockTTL)))}
		}
	}},
	{name: "floodgate-zookeeper", open: func(b *testing.B) func(string, bool) benchLock {
		conn := sharedZK(b)
		return func(n string, _ bool) benchLock {
			return floodgateLock{mustLocker(b)(zklock.New(conn, zkPath(n), lock.TTL(lockTTL)))}
		}
	}},
}

// floodgateRedisKind is floodgate-redis with another lock kind on the same
// backend: the read side of an RWMutex, or a Semaphore of permits.
func floodgateRedisKind(name string, mk func(b *testing.B, be *backend.Redis, n string) lock.Locker) lockLib {
	return lockLib{name: name, redis: true, open: func(b *testing.B) func(string, bool) benchLock {
		be := redisLockBackend(b, false)
		return func(n string, _ bool) benchLock { return floodgateLock{mk(b, be, n)} }
	}}
}

var (
	// floodgateRLock: RLock + RUnlock of an RWMutex (readers share it).
	floodgateRLock = floodgateRedisKind("floodgate-redis-rlock", func(b *testing.B, be *backend.Redis, n string) lock.Locker {
		m, err := lock.NewRWMutex(be, n, lock.TTL(lockTTL))
		if err != nil {
			b.Fatal(err)
		}
		return m.RLocker()
	})
	// floodgateSemaphore: a Semaphore of 4 permits (uncontended) and of 1
	// (contended, so that critical sections must not overlap).
	floodgateSemaphore = func(permits int) lockLib {
		return floodgateRedisKind(fmt.Sprintf("floodgate-redis-semaphore%d", permits), func(b *testing.B, be *backend.Redis, n string) lock.Locker {
			return mustLocker(b)(lock.NewSemaphore(be, n, permits, lock.TTL(lockTTL)))
		})
	}
)

// uncontendedLibs adds floodgate-redis with TryLock, to show what Lock's
// subscription costs when nobody holds the lock, and the read side of an
// RWMutex and a Semaphore on Redis.
var uncontendedLibs = append(append(append([]lockLib(nil), lockLibs[:2]...),
	floodgateRedisLib("floodgate-redis-trylock", false, true), floodgateRLock, floodgateSemaphore(4)), lockLibs[2:]...)

// contendedLibs adds a Semaphore of one permit on Redis.
var contendedLibs = append(append(append([]lockLib(nil), lockLibs[:2]...), floodgateSemaphore(1)), lockLibs[2:]...)

// --- benchmarks ------------------------------------------------------------

// redisStats reads the shared Redis's CPU time and script statistics.
func redisStats(b *testing.B) (float64, scriptStats) {
	return redisClients(b).serverCPU(b), redisClients(b).scriptStats(b)
}

// reportRedis reports, per operation since redisStats gave cpu0 and
// scripts0, the Redis main thread's CPU (server-µs/op), the scripts run
// (scripts/op) and the time Redis spent in them (script-µs/op).
func reportRedis(b *testing.B, cpu0 float64, scripts0 scriptStats) {
	cpu, st := redisStats(b)
	b.ReportMetric((cpu-cpu0)*1e6/float64(b.N), "server-µs/op")
	b.ReportMetric(float64(st.calls-scripts0.calls)/float64(b.N), "scripts/op")
	b.ReportMetric(float64(st.usec-scripts0.usec)/float64(b.N), "script-µs/op")
}

// BenchmarkLockUncontended: one goroutine locks and unlocks the same name b.N
// times; ns/op is one Lock plus one Unlock (two round trips for the Redis
// libraries). For the Redis libraries it also reports the Redis main
// thread's CPU (server-µs/op), the scripts run and the time Redis spent in
// them (script-µs/op, INFO commandstats) per Lock + Unlock.
func BenchmarkLockUncontended(b *testing.B) {
	for _, lib := range uncontendedLibs {
		b.Run("lib="+lib.name, func(b *testing.B) {
			bl := lib.open(b)("bench-uncontended-"+lib.name, false)
			ctx, cancel := context.WithTimeout(context.Background(), lockCtxTimeout)
			defer cancel()
			once := func() error {
				unlock, err := bl.lock(ctx)
				if err != nil {
					return fmt.Errorf("lock: %w", err)
				}
				if err := unlock(ctx); err != nil {
					return fmt.Errorf("unlock: %w", err)
				}
				return nil
			}
			if err := once(); err != nil { // connections, scripts, tables
				b.Fatal(err)
			}
			var cpu0 float64
			var scripts0 scriptStats
			if lib.redis {
				cpu0, scripts0 = redisStats(b)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for range b.N {
				if err := once(); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Microseconds())/float64(b.N), "µs/op")
			if lib.redis {
				reportRedis(b, cpu0, scripts0)
			}
		})
	}
}

// BenchmarkLockContended: 16 goroutines, each with its own lock handle, on
// one name; each acquisition runs a tiny critical section (increment a
// counter) and unlocks. b.N acquisitions are split evenly among the
// goroutines. Reports acquisitions/s, the p50/p99 time of a Lock call (the
// wait: only zklock is fair, so with the others the goroutine that just
// unlocked often takes the lock again at once and the p50 is small),
// overlaps (critical sections seen to overlap: must be 0) and, for the
// Redis libraries, the Redis main thread's CPU per acquisition
// (server-µs/op), the scripts (EVAL/EVALSHA) run per acquisition and the
// time Redis spent in them (script-µs/op; redsync's acquire attempt is a
// plain SET NX, not a script).
func BenchmarkLockContended(b *testing.B) {
	for _, lib := range contendedLibs {
		b.Run("lib="+lib.name, func(b *testing.B) {
			name := "bench-contended-" + lib.name
			newLock := lib.open(b)
			locks := make([]benchLock, lockGoroutines)
			for i := range locks {
				locks[i] = newLock(name, true)
			}
			ctx, cancel := context.WithTimeout(context.Background(), lockCtxTimeout)
			defer cancel()
			// Warm every handle up (connections, scripts, tables, paths).
			for _, bl := range locks {
				unlock, err := bl.lock(ctx)
				if err != nil {
					b.Fatal(err)
				}
				if err := unlock(ctx); err != nil {
					b.Fatal(err)
				}
			}
			var (
				wg       sync.WaitGroup
				start    = make(chan struct{})
				hists    = make([]*histogram, lockGoroutines)
				inside   atomic.Int32
				overlaps atomic.Int64
				counter  atomic.Int64
				errOnce  sync.Once
				firstErr error
			)
			for i, bl := range locks {
				n := b.N / lockGoroutines
				if i < b.N%lockGoroutines {
					n++
				}
				h := new(histogram)
				hists[i] = h
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					for range n {
						t0 := time.Now()
						unlock, err := bl.lock(ctx)
						h.record(time.Since(t0))
						if err != nil {
							errOnce.Do(func() { firstErr = fmt.Errorf("lock: %w", err) })
							return
						}
						if inside.Add(1) != 1 {
							overlaps.Add(1)
						}
						counter.Add(1)
						inside.Add(-1)
						if err := unlock(ctx); err != nil {
							errOnce.Do(func() { firstErr = fmt.Errorf("unlock: %w", err) })
							return
						}
					}
				}()
			}
			var cpu0 float64
			var scripts0 scriptStats
			if lib.redis {
				cpu0, scripts0 = redisStats(b)
			}
			b.ResetTimer()
			t0 := time.Now()
			close(start)
			wg.Wait()
			elapsed := time.Since(t0)
			b.StopTimer()
			if firstErr != nil {
				b.Fatal(firstErr)
			}
			if got := counter.Load(); got != int64(b.N) {
				b.Fatalf("counter = %d, want %d", got, b.N)
			}
			all := new(histogram)
			for _, h := range hists {
				all.merge(h)
			}
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "acquisitions/s")
			b.ReportMetric(all.quantile(0.50).Seconds()*1e3, "wait-p50-ms")
			b.ReportMetric(all.quantile(0.99).Seconds()*1e3, "wait-p99-ms")
			b.ReportMetric(float64(overlaps.Load()), "overlaps")
			if lib.redis {
				reportRedis(b, cpu0, scripts0)
			}
		})
	}
}

// wakeupCase is a holder and a waiter on one lock name, in different
// sessions (Redis backends with their own pub/sub connection, ZooKeeper
// sessions; PostgreSQL: one pool and Listener, MySQL: one pool, as in one
// process).
type wakeupCase struct {
	name string
	make func(b *testing.B, name string) (holder, waiter lock.Locker)
}

var wakeupCases = []wakeupCase{
	{"floodgate-redis", func(b *testing.B, n string) (lock.Locker, lock.Locker) {
		must := mustLocker(b)
		opts := []lock.Option{lock.TTL(lockTTL), lock.MaxPoll(wakeupMaxPoll)}
		return must(lock.NewMutex(redisLockBackend(b, false), n, opts...)),
			must(lock.NewMutex(redisLockBackend(b, false), n, opts...))
	}},
	{"floodgate-postgres", func(b *testing.B, n string) (lock.Locker, lock.Locker) {
		must := mustLocker(b)
		_, ln := postgresLocks(b)
		opts := []lock.Option{lock.TTL(lockTTL), lock.MaxPoll(wakeupMaxPoll)}
		return must(ln.New(n, opts...)), must(ln.New(n, opts...))
	}},
	{"floodgate-mysql", func(b *testing.B, n string) (lock.Locker, lock.Locker) {
		must := mustLocker(b)
		db := mysqlLocks(b)
		opts := []lock.Option{lock.TTL(lockTTL), lock.MaxPoll(wakeupMaxPoll)}
		return must(sqllock.New(db, sqllock.MySQL, n, opts...)), must(sqllock.New(db, sqllock.MySQL, n, opts...))
	}},
	{"floodgate-zookeeper", func(b *testing.B, n string) (lock.Locker, lock.Locker) {
		must := mustLocker(b)
		opts := []lock.Option{lock.TTL(lockTTL), lock.MaxPoll(wakeupMaxPoll)}
		hc, wc := newZK(b), newZK(b)
		return must(zklock.New(hc, zkPath(n), opts...)), must(zklock.New(wc, zkPath(n), opts...))
	}},
}

// BenchmarkWakeup: per round, the holder locks, a waiter starts Lock (with
// MaxPoll(10s), so that only the release can wake it promptly), the holder
// keeps the lock for wakeupHold and unlocks. Reports the delay from the
// holder's Unlock returning to the waiter's Lock returning (p50-ms, p99-ms;
// a waiter that returns first counts as 0) and the Unlock call itself
// (unlock-p50-ms). ns/op is dominated by wakeupHold and means nothing.
func BenchmarkWakeup(b *testing.B) {
	for _, wc := range wakeupCases {
		b.Run("lib="+wc.name, func(b *testing.B) {
			holder, waiter := wc.make(b, "bench-wakeup-"+wc.name)
			ctx, cancel := context.WithTimeout(context.Background(), lockCtxTimeout)
			defer cancel()
			type got struct {
				lease *lock.Lease
				at    time.Time
				err   error
			}
			round := func(delay, unlockTime *histogram) error {
				held, err := holder.Lock(ctx)
				if err != nil {
					return fmt.Errorf("holder lock: %w", err)
				}
				c := make(chan got, 1)
				go func() {
					l, err := waiter.Lock(ctx)
					c <- got{l, time.Now(), err}
				}()
				time.Sleep(wakeupHold)
				select {
				case g := <-c:
					return fmt.Errorf("waiter returned while the lock was held: %v", g.err)
				default:
				}
				t0 := time.Now()
				if err := held.Unlock(ctx); err != nil {
					return fmt.Errorf("holder unlock: %w", err)
				}
				t1 := time.Now()
				g := <-c
				if g.err != nil {
					return fmt.Errorf("waiter lock: %w", g.err)
				}
				delay.record(g.at.Sub(t1))
				unlockTime.record(t1.Sub(t0))
				return g.lease.Unlock(ctx)
			}
			// One round untimed: connections, the Listener's LISTEN, paths.
			if err := round(new(histogram), new(histogram)); err != nil {
				b.Fatal(err)
			}
			delay, unlockTime := new(histogram), new(histogram)
			b.ResetTimer()
			for range b.N {
				if err := round(delay, unlockTime); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(delay.quantile(0.50).Seconds()*1e3, "p50-ms")
			b.ReportMetric(delay.quantile(0.99).Seconds()*1e3, "p99-ms")
			b.ReportMetric(unlockTime.quantile(0.50).Seconds()*1e3, "unlock-p50-ms")
		})
	}
}
