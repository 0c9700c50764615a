// Package sqllock provides distributed locks on PostgreSQL and MySQL/MariaDB
// through database/sql, with the contract of package lock: leases with a TTL,
// owner-only release and extend, re-entry, AutoRenew and Lost, fencing
// tokens, waiting and Fair order. It offers a mutex (New), a readers–writer
// lock (NewRWMutex) and a counting semaphore (NewSemaphore); see Readers,
// writers and semaphores below for the last two. It imports no SQL driver:
// open the *sql.DB with the driver of your choice (the tests use
// github.com/jackc/pgx/v5/stdlib and github.com/go-sql-driver/mysql).
//
// # Tables
//
// A lock is a row of the table floodgate_locks, keyed by the lock name
// (primary key), in the connection's default schema (PostgreSQL: the first
// schema of search_path; MySQL: the current database):
//
//	name        the lock name (PostgreSQL text; MySQL VARBINARY(512))
//	owner       the holder's owner id, '' when free
//	holds       the hold count of a reentrant owner, 0 when free
//	token       the fencing token of the current or last holding
//	expires_at  end of the lease (PostgreSQL timestamptz; MySQL DATETIME(6) in UTC)
//	call_id     the call that made the holding or its last level (see Lost replies)
//
// Waiters that need a place in a queue stand in floodgate_lock_waiters
// (name, waiter, seq, expires_at, and, for PostgreSQL waiters that listen,
// the owner and ttl_us a release hands the lock to). Rows of
// floodgate_locks are never deleted, so that tokens keep increasing: a
// store keeps one small row per lock name ever used. RWMutexes and
// Semaphores have tables of their own (see Readers, writers and
// semaphores). Migrate creates every table; the names are fixed.
//
// # Clocks and expiry
//
// Every deadline is computed and judged by the database's clock, never by
// the client's: PostgreSQL's clock_timestamp(), MySQL's UTC_TIMESTAMP(6)
// (UTC, so sessions with different time zones agree). Clients with skewed
// clocks therefore agree on who holds a lock. A lease whose expires_at has
// passed is free: the next Lock or TryLock takes it over atomically, and the
// old holder's Extend and Unlock return lock.ErrNotHeld. The Lease keeps its
// own deadline on the local monotonic clock (time of the request + TTL,
// never later than the database's) and closes Lost when it passes.
//
// # Atomicity
//
// On PostgreSQL an acquisition is one statement, in a transaction of its
// own (see Lost replies): INSERT ... ON CONFLICT (name) DO UPDATE ... WHERE
// the row is free, expired or held by the same owner, which also joins or
// leaves the waiter queue. On MySQL it is a transaction that locks the row
// (SELECT ... FOR UPDATE, which also reads the database clock) and writes
// the holding the rules decide (one UPDATE). Release and Extend are one
// UPDATE each that matches only the owner's unexpired row, so a stale holder
// can never free or extend another owner's lock.
//
// What an operation costs, in round trips (statements) on the default
// paths, with database/sql, pgx (which prepares and caches statements) and
// go-sql-driver/mysql with interpolateParams=true:
//
//	                       PostgreSQL (Listener)        MySQL/MariaDB
//	TryLock, free          3: BEGIN, INSERT, COMMIT    4: BEGIN, SELECT FOR UPDATE, UPDATE, COMMIT
//	TryLock, held          3 (the row is not locked)   3: BEGIN, SELECT FOR UPDATE, ROLLBACK
//	Unlock                 1: UPDATE (+ NOTIFY)        1: UPDATE (+ RELEASE_LOCK of the gate)
//	Extend                 1                           1
//	Lock, handed the lock  1: pgConfirm                4 once the gate is handed over
//	Lock, handed locally   0: the release's UPDATE     (no local hand-off)
//	Lock, waiting          3 to queue; then nothing    1: GET_LOCK, blocking; at most every
//	                       until a notification        MaxPoll, or at the holder's lease end
//
// Fair, and the first use of a name, add a statement; a PostgreSQL Lock
// that subscribes to a channel not yet LISTENed makes one attempt more once
// LISTEN is in effect. "Handed locally" is a Lock that waited behind a
// holder of its own process (see Local hand-off): the release's one
// statement both frees the lock and gives it to that Lock.
//
// A statement that failed with a deadlock or serialization failure is
// retried (at most 3 attempts in all), and so are acquisitions and renewals
// whose PostgreSQL session was terminated (SQLSTATE 57P01, 57P02: the pool
// gives another connection), as replays of their call; a release is not, as
// applying it twice could drop another hold level. Other errors are returned.
//
// # Lost replies
//
// A statement whose reply is lost (the connection drops, the context ends)
// may still have been applied. Every acquisition therefore carries a call id,
// one per Lock or TryLock call and the same for all its attempts, stored with
// the holding it makes (column call_id):
//
//   - An attempt repeated after a terminated session is a replay: it finds
//     the holding its call made and returns the same lease (same token, no
//     further hold level). Re-entry, a new hold level, comes only from
//     another call of the same explicit lock.Owner.
//   - A call that returns an error other than lock.ErrLocked holds nothing:
//     before returning it starts an undo, in the background, that takes back
//     the holding (or the hold level) carrying its call id, retried while the
//     database is unreachable until the lease's TTL has passed; an undo
//     after the lock passed to someone else changes nothing.
//   - An acquisition is a transaction whose COMMIT is sent only after the
//     replies of its statements arrived, so a statement that reaches the
//     server after its call gave up (held in a proxy or a socket buffer)
//     cannot commit: its transaction ends, rolled back, with its connection.
//     Undo waits for the lock's row (and, by an INSERT, for a row still being
//     inserted), so it runs after any attempt in flight: a failed call holds
//     nothing by construction, not because a timer ran out. A lease the call
//     did commit ends, at the latest, at its TTL counted from before the call
//     failed; that is when undo stops trying.
//
// With an explicit Owner, if the same owner re-enters in another call after
// a failed call's attempt committed and before its undo ran, the undo cannot
// tell the levels apart and takes back none: the extra level then ends with
// the owner's last Unlock or at the TTL.
//
// database/sql retries a statement by itself only when the driver returns
// driver.ErrBadConn, and pgx (stdlib) and go-sql-driver/mysql return it only
// when nothing was sent on the connection (pgconn.SafeToRetry; the MySQL
// driver's errBadConnNoWrite, or an error reply the server refused the
// statement with): those retries cannot apply a statement twice. The
// package's own retries are the ones described above.
//
// # Fencing
//
// Lease.Token is strictly increasing per lock name across all holders: each
// new holding sets token = max(token+1, database clock in microseconds since
// 1970), and re-entry keeps it. Because the row outlives its holdings and the
// token follows the database clock, tokens keep increasing even if the row
// is deleted or restored from an older backup, as long as fewer than one lock
// per microsecond was taken on average and the database clock does not go
// back. Pass the token to the resource and let it reject lower tokens (see
// lock.Fence).
//
// # Waiting
//
// Waiters do not poll on a growing back-off; each database wakes them
// itself, and the lease stays in the row: a holder whose connection is
// killed keeps its lock until its TTL, and its waiters get it when the
// lease ends.
//
// MySQL/MariaDB: each lock name has a gate, a user-level lock (GET_LOCK)
// named after the database and the lock name, which the holder's session keeps
// from the acquisition to the release (a held lock keeps one connection of
// the pool out of it; waiting Locks keep one each, but with a limited pool
// a waiter that would take its last connection backs off instead, and
// blocked waiters give theirs back between waits, at least every MaxPoll,
// so that an Unlock is not left waiting for a connection). A Lock that
// finds the lock taken blocks in GET_LOCK on the gate; the release, one
// UPDATE on the holder's session, frees the row and releases the gate,
// which MySQL hands to one waiter, the longest blocked (the waiter then
// locks the row, so it waits for the release to commit); that waiter
// takes the row with the gate in its session and so becomes the next
// holder. A free row is taken only by a session holding the gate, so that
// a newcomer cannot take the lock from the waiter the gate was handed to;
// an expired lease is taken over by anyone. Blocked
// waiters also wake at the holder's lease end and at least every
// lock.MaxPoll (default 1s), to take over an expired lease. When the holder
// has no gate (its connection was killed, it took over an expired lease
// while a hung session kept the gate, or it runs an older version of this
// package), the waiter that gets the gate retries alone with a back-off from
// 10ms to 250ms (at most MaxPoll, at most the holder's remaining lease)
// while the others stay blocked. A pool limited to one connection
// (SetMaxOpenConns(1)) does not use the gate: its waiters back off as
// PostgreSQL's without a Listener do. GET_LOCK needs MySQL 5.7 or MariaDB
// 10.0.2 for several user-level locks per session; MySQL rounds the
// timeout to whole seconds (MariaDB 10.1.2 and later does not), which can
// delay the take-over of an expired lease by up to a second. With
// binlog_format=STATEMENT the server notes the release UPDATE as unsafe for
// replication (it calls RELEASE_LOCK); MIXED and ROW log its row.
//
// PostgreSQL: Lockers made by a Listener are woken by the release itself,
// through LISTEN/NOTIFY: their waiters queue in floodgate_lock_waiters, and
// the statement that releases a lock hands it to the longest live waiter
// that listens (owner, next token, the waiter's call id, a lease of its TTL
// but at most 2s) and notifies that waiter only, on a channel of that lock
// (committed with the release), so there is no thundering herd and no
// newcomer can take the lock between the release and the waiter. The
// waiter takes its full TTL with one UPDATE when the notification arrives;
// a waiter that died without leaving the queue keeps the lock for those 2s,
// not for its TTL, and one that gives up passes the lock on (its undo is a
// release). A notification that was missed (the Listener reconnected) is
// made up by the waiter's next attempt, which finds the holding made for
// its call. database/sql has no API for notifications, so a Listener needs
// a small driver-specific function (see WaitFunc); the package itself
// depends on database/sql only. A Listener needs session-level connections
// (not PgBouncer's transaction pooling).
//
// # Local hand-off
//
// On PostgreSQL, Lock calls (not TryLock) on Lockers of one Listener
// without Owner and without Fair take turns in the process first, per lock
// name, through cohort.Queue, the queue the Redis mutex uses: while a call of
// the process holds the lock or is trying to take it, the others wait in the
// process, not in floodgate_lock_waiters. When the holder unlocks and no live
// waiter is queued in floodgate_lock_waiters, the release statement itself
// hands the lock to the longest-waiting of them: the row gets that call's
// owner, the next token, its call id and a lease of its full TTL, and the
// call has its lease once the statement's reply arrives: no NOTIFY, no
// round trip through the Listener's session, no confirmation. An
// acquisition passed on inside a process costs one statement, the release.
//
// When waiters of other processes are queued in the database, the release
// hands the lock to the first of them, as above, and the next local call
// queues behind them in the database: contended processes take turns, none
// starves. (A non-Fair Locker without a Listener does not queue, so a
// release cannot see it: it waits until the process stops handing the lock
// on, as it already does behind Listener waiters.) A local waiter goes to
// the database by itself once its wait passes the local holder's lease end
// or MaxPoll, whichever is sooner, so a holder that stalled, died or lost
// its lease keeps the process's other calls no longer than it would keep
// other waiters. A call whose context ends while a release is handing it
// the lock holds nothing: the releasing side releases what it got (handing
// it on). A hand-off whose reply was lost is found by the waiter's own
// attempt, as a replay of its call (the holding carries its call id), or
// undone when that call fails.
//
// Without a Listener, a PostgreSQL Lock retries with a bounded exponential
// back-off: 10ms, doubling, each wait capped by the holder's remaining lease
// and by lock.MaxPoll, so a dead holder's lock is taken soon after it
// expires and there is never a fixed fast poll. Listener waiters keep that
// back-off too, in case a notification is lost, but from 50ms on once they
// listen: a notification is missed only when a release did not see the
// waiter's queue entry yet.
//
// # Fair
//
// With lock.Fair, waiters acquire in the order they first failed to acquire
// (a sequence number from the database), on both dialects. A fair Lock or
// TryLock does not take a free lock while a live waiter queued before it.
// The queue holds the fair waiters and, on PostgreSQL with a Listener, every
// waiter; Lockers without Fair never wait for it. A waiter keeps its place
// while it retries (at least every MaxPoll); one that stops (crashed, or its
// clean-up failed) loses it after max(3×MaxPoll, 1s). The queue is
// consulted only while the lock's row exists, that is from the first
// acquisition of the name on, unless someone deletes the row.
//
// # Readers, writers and semaphores
//
// An RWMutex or a Semaphore may have several holders at once, so its state
// takes several rows, in three tables keyed by (kind, name), where kind is
// 'rw' or 'sem' (a Mutex, an RWMutex and a Semaphore of one name are separate
// locks):
//
//	floodgate_shared_locks    one row per name: token, the last fencing token
//	                          handed out; place, the last queue place
//	floodgate_shared_holders  one row per holding: side ('r' reader, 'w' writer,
//	                          's' permit), owner, holds, token, expires_us,
//	                          call_id
//	floodgate_shared_waiters  the queue: waiter (one per waiting Lock call),
//	                          side, owner, seq, listens, expires_us
//
// Deadlines (expires_us) are microseconds since 1970 by the database clock,
// as above. Every acquisition, release, and departure of a waiter is one
// transaction that first locks the name's row of floodgate_shared_locks
// (SELECT ... FOR UPDATE, by its whole key), then reads the holdings and the
// queue and the database clock, decides by the lock's rules, and writes the
// changes: operations on one name are serialized. The reads that follow the
// row lock see every change committed under it: on PostgreSQL the
// transaction is READ COMMITTED, on MySQL REPEATABLE READ (the default) or
// READ COMMITTED. On MySQL no statement locks a range of rows, so operations
// on different names never wait for each other's gap locks.
// Extend is one UPDATE of the owner's unexpired holding, outside the row
// lock; an operation that judged a holding expired deletes it with a
// statement that checks it still is, and starts again if it was extended
// meanwhile. Holdings whose lease ended are deleted by the next operation on
// the name, and dead waiters too, so that no operation judges them live
// again. An operation costs about five statements, a few times a Mutex's.
//
// The rules are those of lock.NewRWMutex and lock.NewSemaphore: a reader is
// admitted unless another owner holds the write side or a writer waits
// ahead of it, so that once a writer waits, new readers queue behind it and
// writers are not starved; a writer is admitted when no other owner holds
// either side; a permit while fewer than permits owners hold one. Every
// waiting Lock call queues, as it must for a waiting writer to keep readers
// out; with lock.Fair, writers and permits also respect the queue's order.
// Fencing tokens are max(last token + 1, database clock in µs), strictly
// increasing per name across readers and writers. A crashed holder's
// holding, read, write or permit, ends at its TTL.
//
// A release (and a waiter that gives up) wakes whoever can go next: the
// readers queued before the first waiting writer, together, or that writer
// once no other owner reads; as many semaphore waiters as permits are free.
// On PostgreSQL, waiters of Lockers made by a Listener (Listener.NewRWMutex,
// Listener.NewSemaphore) are woken by a NOTIFY per waiter, committed with
// the release; every other waiter backs off as described under Waiting.
//
// # Drivers
//
// PostgreSQL: any database/sql driver; the Listener's WaitFunc below is for
// github.com/jackc/pgx/v5/stdlib. MySQL: github.com/go-sql-driver/mysql
// needs no special DSN option (no time values are scanned), and
// interpolateParams=true saves a round trip per statement. Tested with
// PostgreSQL 15 and MariaDB 10.11.
//
// # Upgrading
//
// Run Migrate before the new version takes locks: on PostgreSQL it adds the
// columns owner and ttl_us to floodgate_lock_waiters (issue 17). Versions
// can be mixed during a rolling upgrade: an older PostgreSQL release frees
// the lock and notifies as before, which newer waiters handle; an older
// MySQL holder or newcomer takes no gate, which newer waiters handle with
// the back-off described under Waiting.
package sqllock

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/floodgate-dev/floodgate/internal/callid"
	"github.com/floodgate-dev/floodgate/lock"
	"github.com/floodgate-dev/floodgate/lock/internal/cohort"
	"github.com/floodgate-dev/floodgate/lock/internal/lockdriver"
)

// Dialect is the SQL dialect of a database: Postgres or MySQL.
type Dialect int

const (
	// Postgres is PostgreSQL 9.5 or later (for INSERT ... ON CONFLICT).
	Postgres Dialect = iota + 1
	// MySQL is MySQL 5.7 or later, or MariaDB 10.2 or later, with InnoDB
	// tables.
	MySQL
)

// String returns "Postgres" or "MySQL".
func (d Dialect) String() string {
	switch d {
	case Postgres:
		return "Postgres"
	case MySQL:
		return "MySQL"
	}
	return fmt.Sprintf("Dialect(%d)", int(d))
}

func (d Dialect) check() error {
	if d != Postgres && d != MySQL {
		return fmt.Errorf("sqllock: unknown %v (want sqllock.Postgres or sqllock.MySQL)", d)
	}
	return nil
}

// Table names; fixed, in the connection's default schema.
const (
	// LocksTable holds one row per lock name.
	LocksTable = "floodgate_locks"
	// WaitersTable holds the waiter queue of Fair locks (and, on
	// PostgreSQL with a Listener, of every waiter that does not wait in
	// its process's local queue, so that a release wakes only one).
	WaitersTable = "floodgate_lock_waiters"
)

// Migrate creates the tables LocksTable and WaitersTable (the Mutex) and
// SharedLocksTable, SharedHoldersTable and SharedWaitersTable (the RWMutex
// and the Semaphore) in db if they do not exist, and adds the column call_id
// (see Lost replies) to tables made by earlier versions, which this version
// needs before it takes a lock. It only ever adds tables and columns: it is
// idempotent, keeps the rows of tables made by earlier versions, and is
// safe to run from several processes at once (on PostgreSQL concurrent runs
// are serialized by an advisory lock; one the database rolls back for a
// deadlock with other sessions is run again). It needs the privilege to create and
// alter tables; run it once at deployment, or at start-up, before New.
func Migrate(ctx context.Context, db *sql.DB, d Dialect) error {
	if db == nil {
		return errors.New("sqllock: db is nil")
	}
	if err := d.check(); err != nil {
		return err
	}
	// Its DDL runs beside other sessions' locks on the same tables: a
	// deadlock or serialization failure rolls the migration back, and it
	// is run again (it is idempotent).
	var err error
	for attempt := range migrateAttempts {
		if d == Postgres {
			err = pgMigrate(ctx, db)
		} else {
			err = myMigrate(ctx, db)
		}
		if err == nil || retryable(err) != rolledBack || ctx.Err() != nil {
			break
		}
		time.Sleep(time.Duration(attempt+1) * 10 * time.Millisecond)
	}
	if err != nil {
		return fmt.Errorf("sqllock: migrate: %w", err)
	}
	return nil
}

// migrateAttempts bounds Migrate's runs when the database rolls it back.
const migrateAttempts = 5

// New returns a mutual exclusion lock named name in db, whose tables
// Migrate created. Lockers of the same name on the same database exclude
// each other, whichever process they are in. Options: lock.TTL, AutoRenew,
// Owner, Fair and MaxPoll; see the package documentation for what holds.
//
// Waiters of a Locker from New retry with a bounded exponential back-off
// (see Waiting); on PostgreSQL, Listener.New returns Lockers that are also
// woken by the release. The Locker is safe for concurrent use. New does not
// touch the database.
//
// On PostgreSQL, name and the Owner id must be valid UTF-8 without NUL
// bytes (they are stored as text); on MySQL any bytes are allowed.
func New(db *sql.DB, d Dialect, name string, opts ...lock.Option) (lock.Locker, error) {
	return newLocker(db, d, nil, name, opts)
}

func newLocker(db *sql.DB, d Dialect, ln *Listener, name string, opts []lock.Option) (lock.Locker, error) {
	if db == nil {
		return nil, errors.New("sqllock: db is nil")
	}
	o, err := checkLock(d, name, opts)
	if err != nil {
		return nil, err
	}
	dr := &dbDriver{db: db, dialect: d, name: name, o: o, ln: ln}
	if d == Postgres {
		dr.channel = channelName(name)
		if ln != nil && o.Owner == "" && !o.Fair {
			dr.useLocal = true
			dr.local = cohort.New(localStore{db, ln}, name)
		}
	}
	return lockdriver.NewLocker[lock.Locker](dr, o), nil
}

// checkLock validates the dialect, the lock name and the options of a new
// lock, and returns the options.
func checkLock(d Dialect, name string, opts []lock.Option) (lockdriver.Options, error) {
	if err := d.check(); err != nil {
		return lockdriver.Options{}, err
	}
	if err := lockdriver.CheckName(name); err != nil {
		return lockdriver.Options{}, err
	}
	o, err := lockdriver.BuildOptions(opts)
	if err != nil {
		return lockdriver.Options{}, err
	}
	if d == Postgres {
		if !validText(name) {
			return lockdriver.Options{}, errors.New("sqllock: name must be valid UTF-8 without NUL bytes on PostgreSQL")
		}
		if !validText(o.Owner) {
			return lockdriver.Options{}, errors.New("sqllock: Owner must be valid UTF-8 without NUL bytes on PostgreSQL")
		}
	}
	return o, nil
}

func validText(s string) bool { return utf8.ValidString(s) && !strings.ContainsRune(s, 0) }

// channelName is the PostgreSQL notification channel of a lock name: a
// lower-case identifier of 36 bytes (the limit is 63), whatever the name.
func channelName(name string) string {
	h := sha256.Sum256([]byte(name))
	return "fglock_" + hex.EncodeToString(h[:15])
}

// Waiting back-off.
const (
	minBackoff = 10 * time.Millisecond
	// minWaiterLease is the shortest life of a queue entry between two
	// retries of its waiter; it is max(3×MaxPoll, minWaiterLease).
	minWaiterLease = time.Second
	// leaveTimeout bounds the clean-up of a waiter that gave up.
	leaveTimeout = time.Second
	// maxAttempts bounds the attempts of a statement that failed without
	// effect (see retryable).
	maxAttempts = 3
	// minListeningPoll is the shortest poll of a PostgreSQL waiter that
	// listens for the hand-off (see waitLoop).
	minListeningPoll = 50 * time.Millisecond
)

// dbDriver implements lockdriver.Driver on one lock name.
type dbDriver struct {
	db      *sql.DB
	dialect Dialect
	name    string
	o       lockdriver.Options
	ln      *Listener // nil: waiters only back off
	channel string    // PostgreSQL notification channel
	// busy: MySQL, the last Lock found the lock taken (see myAcquireWait).
	busy atomic.Bool
	// local: PostgreSQL with a Listener, without Owner and Fair: Lock calls
	// of the process take turns in the process's queue of the name, and a
	// release hands the lock to the next of them in its statement (see
	// Local hand-off in the package documentation).
	local    cohort.Queue
	useLocal bool
}

// localStore identifies the store of a local queue (cohort.Queue): the pool
// and the Listener (the tables are fixed).
type localStore struct {
	db *sql.DB
	ln *Listener
}

func (d *dbDriver) waiterLease() time.Duration { return max(3*d.o.MaxPoll, minWaiterLease) }

// try makes one attempt of call for owner. waiter is "" for an attempt that
// must not join the queue; otherwise a failed attempt joins it (or
// refreshes the entry) and a successful one leaves it. On failure it returns
// ErrLocked and the holder's remaining lease (0 when the lock is free but
// queued waiters come first, or unknown). An attempt repeated after its
// session was terminated is a replay of call: if the first was applied, the
// second finds the holding call made and returns its token without another
// hold level.
func (d *dbDriver) try(ctx context.Context, owner string, ttl time.Duration, waiter, call string) (lockdriver.Grant, time.Duration, error) {
	var g lockdriver.Grant
	var hint time.Duration
	var err error
	if d.dialect == Postgres {
		err = retry(ctx, true, func() (err error) {
			g, hint, err = d.pgTry(ctx, owner, ttl, waiter, call)
			return err
		})
	} else {
		g, hint, err = d.myTry(ctx, owner, ttl, waiter, call) // retries by itself
	}
	if err != nil && !errors.Is(err, lock.ErrLocked) {
		return lockdriver.Grant{}, 0, fmt.Errorf("sqllock: acquire %q: %w", d.name, err)
	}
	return g, hint, err
}

// retry runs f, the execution of one statement or transaction, again (at
// most maxAttempts in all) while it fails with an error that a new attempt
// may not meet (see retryable). Only a statement that may be applied twice
// without harm is retried after a terminated session (repeat true): the
// session may, rarely, end after the commit but before the reply.
func retry(ctx context.Context, repeat bool, f func() error) error {
	for attempt := 1; ; attempt++ {
		err := f()
		if err == nil || attempt == maxAttempts || ctx.Err() != nil {
			return err
		}
		switch retryable(err) {
		case rolledBack:
		case terminated:
			if !repeat {
				return err
			}
		default:
			return err
		}
	}
}

// Acquire implements lockdriver.Driver. A Lock on a local queue first waits for
// its turn in the process (see Local hand-off), which may come with the
// lock, handed over by the release of the process's previous holder.
func (d *dbDriver) Acquire(ctx context.Context, owner string, ttl time.Duration, wait bool) (lockdriver.Grant, error) {
	call := callid.New()
	if !wait || !d.useLocal {
		return d.acquire(ctx, owner, ttl, wait, call)
	}
	// A hand-off writes call into the holding, so that an attempt of this
	// call after a lost reply finds it (a replay), and an undo too.
	token, err := d.local.WaitTurn(ctx, owner, call, ttl, d.o.MaxPoll)
	if err != nil {
		return lockdriver.Grant{}, err // holds nothing: see cohort.Queue.WaitTurn
	}
	g := lockdriver.Grant{Token: token}
	if token == 0 {
		g, err = d.acquire(ctx, owner, ttl, wait, call)
	}
	d.local.Done(owner, err == nil, time.Now().Add(ttl))
	return g, err
}

// acquire is Acquire in the database. Every attempt of the call carries
// one call id (see try); when the call fails with an error other than
// ErrLocked, an attempt may have been applied without its reply arriving,
// and undo takes back what the call took.
func (d *dbDriver) acquire(ctx context.Context, owner string, ttl time.Duration, wait bool, call string) (g lockdriver.Grant, err error) {
	defer func() {
		if err != nil && !errors.Is(err, lock.ErrLocked) {
			undoInBackground(ctx, ttl, func(ctx context.Context) error { return d.undo(ctx, owner, call) })
		}
	}()
	if !wait {
		g, _, err := d.try(ctx, owner, ttl, "", call)
		return g, err
	}
	if d.dialect == MySQL && d.gated() {
		g, err := d.myAcquireWait(ctx, owner, ttl, call)
		if err != nil && ctx.Err() == nil {
			err = fmt.Errorf("sqllock: acquire %q: %w", d.name, err)
		}
		return g, err
	}
	waiter := ""
	if d.o.Fair || d.ln != nil {
		// This call's place in the queue: its call id, which a release
		// that hands the lock to it writes into the row (see pgRelease),
		// so that a replay of its attempt and its undo find the holding.
		waiter = call
	}
	w := waitSpec{ln: d.ln, channel: d.channel, waiter: waiter, maxPoll: d.o.MaxPoll}
	if d.ln != nil {
		w.confirm = func() (lockdriver.Grant, bool, error) { return d.confirm(ctx, owner, call, ttl) }
	}
	return waitLoop(ctx, w,
		func(waiter string) (lockdriver.Grant, time.Duration, error) {
			return d.try(ctx, owner, ttl, waiter, call)
		},
		d.leave)
}

// handOffGrace bounds the lease a PostgreSQL release hands to a waiter
// until the waiter confirms it (pgConfirm), so that a waiter that died
// without leaving the queue blocks the lock for this long, not its TTL.
const handOffGrace = 2 * time.Second

// confirm takes a lock a release handed to call (see pgRelease): ok is
// false when it was not, or the hand-off's grace passed.
func (d *dbDriver) confirm(ctx context.Context, owner, call string, ttl time.Duration) (g lockdriver.Grant, ok bool, err error) {
	err = retry(ctx, true, func() error {
		return d.db.QueryRowContext(ctx, pgConfirm, d.name, owner, call, ttl.Microseconds()).Scan(&g.Token)
	})
	if errors.Is(err, sql.ErrNoRows) {
		return lockdriver.Grant{}, false, nil
	}
	if err != nil {
		return lockdriver.Grant{}, false, fmt.Errorf("sqllock: acquire %q: %w", d.name, err)
	}
	return g, true, nil
}

// undo takes back the hold level that call took for owner, if an attempt
// of it was applied: the holding is freed (or, after a re-entry, loses one
// level) when its call id is still call. It first makes sure that the row
// exists (see pgTouch), which waits for an attempt still in flight, so that
// no attempt of the call commits after undo. It may be repeated.
func (d *dbDriver) undo(ctx context.Context, owner, call string) error {
	return retry(ctx, true, func() error {
		if d.dialect == Postgres {
			if _, err := d.db.ExecContext(ctx, pgTouch, d.name); err != nil {
				return err
			}
			var holds, token sql.NullInt64
			var notified int64
			return d.db.QueryRowContext(ctx, pgUndo, d.name, owner, d.channel, handOffGrace.Microseconds(), call).
				Scan(&holds, &notified, &token)
		}
		if _, err := d.db.ExecContext(ctx, myTouch, d.name); err != nil {
			return err
		}
		if _, err := d.db.ExecContext(ctx, myUndo, d.name, owner, call); err != nil {
			return err
		}
		if p := pins.get(pinKey{d.db, d.name, owner}); p != nil {
			p.release(ctx) // the gate, if owner no longer holds the lock
		}
		return nil
	})
}

// Pacing of undoInBackground.
const (
	undoAttemptTimeout = 5 * time.Second
	undoMaxBackoff     = time.Second
)

// undoInBackground runs undo, the clean-up of an acquisition that failed,
// in a goroutine, and retries it while it fails (the database may be
// unreachable: that is often why the acquisition failed) until ttl has
// passed. By then a holding the call may have taken has expired by itself:
// an attempt that committed had its statement applied before the call
// failed, so its lease ends within ttl of that.
func undoInBackground(ctx context.Context, ttl time.Duration, undo func(context.Context) error) {
	ctx = context.WithoutCancel(ctx)
	end := time.Now().Add(ttl)
	go func() {
		backoff := 50 * time.Millisecond
		for {
			left := time.Until(end)
			if left <= 0 {
				return
			}
			actx, cancel := context.WithTimeout(ctx, min(left, undoAttemptTimeout))
			err := undo(actx)
			cancel()
			if err == nil {
				return
			}
			t := time.NewTimer(backoff)
			<-t.C
			backoff = min(2*backoff, undoMaxBackoff)
		}
	}()
}

// waitSpec says how a waiting Acquire waits.
type waitSpec struct {
	ln      *Listener // nil: back-off only
	channel string    // PostgreSQL notification channel of the lock
	waiter  string    // the call's id in the queue; "": it does not queue
	maxPoll time.Duration
	// confirm, if set, takes a lock that a release handed to the waiter
	// (a notification flagged as a hand-off); ok false: it was not.
	confirm func() (g lockdriver.Grant, ok bool, err error)
}

// waitLoop is the waiting Acquire of every lock of the package. try makes
// one attempt for waiter (see dbDriver.try); on ErrLocked it returns the
// blocking lease's remaining time, or 0. Attempts are repeated with a
// bounded exponential back-off (minBackoff, doubling, capped by maxPoll and
// by the hint), and, with a Listener, as soon as a notification for waiter
// arrives. When the call ends without the lock, a waiter that may have been
// queued leaves the queue through leave, which also passes on a wake-up it
// may have consumed.
func waitLoop(ctx context.Context, w waitSpec, try func(waiter string) (lockdriver.Grant, time.Duration, error),
	leave func(ctx context.Context, waiter string)) (lockdriver.Grant, error) {
	queued := false
	defer func() {
		if queued {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), leaveTimeout)
			defer cancel()
			leave(ctx, w.waiter)
		}
	}()
	var sub *subscription
	var wake, listening <-chan struct{}
	if w.ln != nil && w.waiter != "" {
		// The lock's channel is LISTENed already (others wait): subscribe
		// before the first attempt, so that a release right after it
		// reaches this waiter without an attempt more.
		if sub = w.ln.subscribeListening(w.channel, w.waiter); sub != nil {
			defer sub.close()
			wake = sub.c
		}
	}
	backoff := minBackoff
	for {
		g, hint, err := try(w.waiter)
		if err == nil {
			queued = false // the acquisition left the queue
			return g, nil
		}
		if ctx.Err() != nil {
			return lockdriver.Grant{}, ctx.Err()
		}
		if !errors.Is(err, lock.ErrLocked) {
			return lockdriver.Grant{}, err
		}
		queued = w.waiter != ""
		if w.ln != nil && wake == nil {
			// Listen only once the lock was found taken, so that an
			// uncontended Lock costs no listening. A release between
			// that attempt and the LISTEN is caught by the attempt made
			// as soon as the LISTEN is in effect (or by the back-off).
			sub = w.ln.subscribe(w.channel, w.waiter)
			defer sub.close()
			wake, listening = sub.c, sub.ready
		}
		delay := min(backoff, w.maxPoll)
		if sub != nil && listening == nil && w.confirm != nil {
			// Listening, on a lock whose release hands it on: the poll
			// only makes up for a notification that was missed (a release
			// that did not see this waiter's queue entry yet), and a
			// waiter's turn in the queue often takes longer than
			// minBackoff, so the poll starts later.
			delay = min(max(delay, minListeningPoll), w.maxPoll)
		}
		if hint > 0 {
			delay = min(delay, hint+time.Millisecond)
		}
		backoff = min(2*backoff, w.maxPoll)
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return lockdriver.Grant{}, ctx.Err()
		case <-wake:
			if sub.handed.Swap(false) && w.confirm != nil {
				g, ok, err := w.confirm()
				if err != nil {
					return lockdriver.Grant{}, err
				}
				if ok {
					queued = false // the release took the waiter out of the queue
					return g, nil
				}
			}
		case <-listening:
			listening = nil
		case <-t.C:
		}
		t.Stop()
	}
}

// leave takes a waiter that gave up out of the queue; on PostgreSQL it also
// passes on a wake-up it may have consumed. Errors are ignored: the entry
// then expires after waiterLease.
func (d *dbDriver) leave(ctx context.Context, waiter string) {
	_ = retry(ctx, true, func() (err error) {
		if d.dialect == Postgres {
			_, err = d.db.ExecContext(ctx, pgLeave, d.name, waiter, d.channel)
		} else {
			_, err = d.db.ExecContext(ctx, myLeave, d.name, waiter)
		}
		return err
	})
}

// Extend implements lockdriver.Driver.
func (d *dbDriver) Extend(ctx context.Context, owner string, ttl time.Duration) error {
	var res sql.Result
	start := time.Now()
	err := retry(ctx, true, func() (err error) {
		if d.dialect == Postgres {
			res, err = d.db.ExecContext(ctx, pgExtend, d.name, owner, ttl.Microseconds())
		} else {
			us := ttl.Microseconds()
			res, err = d.db.ExecContext(ctx, myExtend, us, us, d.name, owner)
		}
		return err
	})
	err = affected(res, err, "extend", d.name)
	if d.useLocal {
		switch {
		case err == nil:
			d.local.Extended(owner, start.Add(ttl))
		case errors.Is(err, lock.ErrNotHeld):
			d.local.Released(owner)
		}
	}
	if d.dialect == MySQL {
		if p := pins.get(pinKey{d.db, d.name, owner}); p != nil {
			switch {
			case err == nil:
				p.extend(start.Add(ttl), false)
			case errors.Is(err, lock.ErrNotHeld):
				p.release(ctx)
			}
		}
	}
	return err
}

// Release implements lockdriver.Driver.
func (d *dbDriver) Release(ctx context.Context, owner string) error {
	if d.useLocal {
		if w := d.local.Handing(owner); w != nil {
			return d.handOffLocal(ctx, owner, w)
		}
		// Whatever the answer, this process's holding is over: the next
		// local caller goes to the database.
		defer d.local.Released(owner)
	}
	if d.dialect == Postgres {
		var holds, token sql.NullInt64
		var notified int64
		// Not repeated after a terminated session: releasing twice could
		// drop another hold level of a reentrant owner.
		err := retry(ctx, false, func() error {
			return d.db.QueryRowContext(ctx, pgRelease, d.name, owner, d.channel, handOffGrace.Microseconds()).
				Scan(&holds, &notified, &token)
		})
		if err != nil {
			return fmt.Errorf("sqllock: release %q: %w", d.name, err)
		}
		if !holds.Valid {
			return lock.ErrNotHeld
		}
		return nil
	}
	if p := pins.get(pinKey{d.db, d.name, owner}); p != nil {
		// On the session that holds the gate: one statement releases the
		// level and, with the last one, the gate.
		res, used, err := p.unlock(ctx, d.o.Owner == "")
		if used {
			return affected(res, nil, "release", d.name)
		}
		if err != nil && d.o.Owner != "" {
			// Not repeated: it may have been applied, and a second
			// release could drop another hold level.
			return fmt.Errorf("sqllock: release %q: %w", d.name, err)
		}
		// The session failed (killed, most likely: then nothing was
		// applied). A holding without Owner has one level, so the
		// release may be made again on the pool; if the first was
		// applied after all, this one reports ErrNotHeld.
	}
	var res sql.Result
	err := retry(ctx, false, func() (err error) {
		res, err = d.db.ExecContext(ctx, myRelease, d.name, owner)
		return err
	})
	return affected(res, err, "release", d.name)
}

// handOffLocal releases owner's holding with pgReleaseLocal, which hands
// the lock to w, a Lock call of this process waiting in the local queue,
// when no waiter of another process is queued in the database. w learns
// the outcome through its turn: the lock, or attempts of its own (which,
// after a lost reply, find the holding if the hand-off was applied: it
// carries w's call id, so the attempt is a replay). When w's call has
// returned meanwhile, what it got is given up here.
func (d *dbDriver) handOffLocal(ctx context.Context, owner string, w *cohort.Waiter) error {
	var holds, token sql.NullInt64
	var notified int64
	// Not repeated after a terminated session, as pgRelease.
	err := retry(ctx, false, func() error {
		return d.db.QueryRowContext(ctx, pgReleaseLocal, d.name, owner, d.channel, handOffGrace.Microseconds(),
			w.Owner(), w.TTL().Microseconds(), w.Call()).Scan(&holds, &notified, &token)
	})
	if err != nil {
		if !d.local.HandedTo(w, 0) {
			// w is gone and the hand-off may have been applied: undo
			// it, as w's call would have.
			undoInBackground(ctx, w.TTL(), func(ctx context.Context) error { return d.undo(ctx, w.Owner(), w.Call()) })
			d.local.Done(w.Owner(), false, time.Time{})
		}
		return fmt.Errorf("sqllock: release %q: %w", d.name, err)
	}
	if !d.local.HandedTo(w, token.Int64) {
		held := token.Valid
		d.local.Done(w.Owner(), held, time.Now().Add(w.TTL()))
		if held {
			// w's call returned without it: release it, handing it on.
			go func() {
				ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), leaveTimeout)
				defer cancel()
				_ = d.Release(ctx, w.Owner())
			}()
		}
	}
	if !holds.Valid {
		return lock.ErrNotHeld
	}
	return nil
}

// affected maps an UPDATE of the owner's unexpired row to nil (one row) or
// ErrNotHeld (none).
func affected(res sql.Result, err error, op, name string) error {
	if err != nil {
		return fmt.Errorf("sqllock: %s %q: %w", op, name, err)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return fmt.Errorf("sqllock: %s %q: %w", op, name, err)
	}
	if n == 0 {
		return lock.ErrNotHeld
	}
	return nil
}

// Kinds of retryable errors.
const (
	permanent  = iota
	rolledBack // deadlock or serialization failure: the transaction was rolled back
	terminated // the session was terminated; the pool gives another connection
)

// retryable classifies err, for retry:
//
//   - rolledBack: 40001 serialization failure, 40P01 deadlock (PostgreSQL),
//     and MySQL's error 1213 deadlock;
//   - terminated: 57P01 and 57P02, the PostgreSQL session was terminated
//     (by pg_terminate_backend or a server shutdown).
//
// Codes are read through an SQLState() string method (pgx's errors have
// one); go-sql-driver/mysql's errors have none, so its deadlock is
// recognized by its message ("Error 1213 ..."), as this package imports no
// driver. A lost connection without a server error (EOF, timeout) is not
// retried: the statement may have been committed. MySQL connections found
// dead before a statement is sent are retried by database/sql itself
// (driver.ErrBadConn).
func retryable(err error) int {
	var st interface{ SQLState() string }
	if errors.As(err, &st) {
		switch st.SQLState() {
		case "40001", "40P01":
			return rolledBack
		case "57P01", "57P02":
			return terminated
		}
		return permanent
	}
	if strings.HasPrefix(errorText(err), "Error 1213") {
		return rolledBack
	}
	return permanent
}

// errorText returns the message of the innermost wrapped error.
func errorText(err error) string {
	for {
		u := errors.Unwrap(err)
		if u == nil {
			return err.Error()
		}
		err = u
	}
}

func hintOf(us sql.NullInt64) time.Duration {
	if !us.Valid || us.Int64 <= 0 {
		return 0
	}
	return time.Duration(us.Int64) * time.Microsecond
}
