package sqllock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/floodgate-dev/floodgate/internal/callid"
	"github.com/floodgate-dev/floodgate/lock"
	"github.com/floodgate-dev/floodgate/lock/internal/lockdriver"
)

// Tables of the RWMutex and the Semaphore; fixed, in the connection's
// default schema, created by Migrate.
const (
	// SharedLocksTable holds one row per RWMutex or Semaphore name: the
	// last fencing token handed out and the last queue place. Every
	// operation on the lock locks this row first, which serializes them.
	SharedLocksTable = "floodgate_shared_locks"
	// SharedHoldersTable holds one row per holding: a reader, the writer,
	// a semaphore permit.
	SharedHoldersTable = "floodgate_shared_holders"
	// SharedWaitersTable holds the waiter queue of RWMutexes and
	// Semaphores.
	SharedWaitersTable = "floodgate_shared_waiters"
)

// Kinds of shared locks (the kind column), so that an RWMutex and a
// Semaphore of one name are separate locks.
const (
	kindRW  = "rw"
	kindSem = "sem"
)

// Sides of a holding or a waiter (the side column).
const (
	sideRead  = "r"
	sideWrite = "w"
	sideSem   = "s"
)

// maxGC bounds the expired holdings and dead waiters one call deletes; the
// rest are ignored all the same and deleted by later calls.
const maxGC = 100

// maxNotify bounds the notifications one release sends, one per waiter it
// wakes; past it, one notification with an empty payload wakes every
// waiter of the lock.
const maxNotify = 100

// NewRWMutex returns a readers–writer lock named name in db, whose tables
// Migrate created: many readers or one writer hold it at once. Writers are
// not starved: once a writer waits, new readers queue behind it, and readers
// already waiting before it go first. It is a lock.RWLocker, as
// lock.NewRWMutex returns on Memory and Redis: Lock and TryLock take the
// write side, RLock and TryRLock the read side, and RLocker gives the read
// side as a lock.Locker.
//
// RWMutexes of the same name exclude each other as the lock's rules say,
// whichever process they are in; a Mutex (New), an RWMutex and a Semaphore
// of one name are separate locks. Every holding, read or write, is a lease
// with its own TTL judged by the database clock — a crashed reader's hold
// ends at its TTL like a writer's — and its own fencing token, strictly
// increasing per name across readers and writers. A writer's release wakes
// the readers waiting before the next writer; the last reader's release
// wakes the next writer (on PostgreSQL with a Listener; otherwise waiters
// back off, see the package documentation). With lock.Fair, waiters acquire
// in arrival order, neighbouring readers together; without it a writer may
// take a free lock before the waiters.
//
// With lock.Owner, re-entry is per side, and an owner never waits for
// itself: the writer may also take the read side, and a reader may take the
// write side once no other owner reads (two readers that both try this wait
// for each other until a context or a lease ends).
//
// Options (lock.TTL, AutoRenew, Owner, Fair, MaxPoll) apply to both sides.
// Name and Owner are checked as by New. NewRWMutex does not touch the
// database; the RWLocker is safe for concurrent use.
func NewRWMutex(db *sql.DB, d Dialect, name string, opts ...lock.Option) (lock.RWLocker, error) {
	return newRWMutex(db, d, nil, name, opts)
}

// NewRWMutex returns a PostgreSQL RWMutex like NewRWMutex(db, Postgres,
// name, opts...) whose waiters are also woken by releases, through this
// Listener.
func (l *Listener) NewRWMutex(name string, opts ...lock.Option) (lock.RWLocker, error) {
	return newRWMutex(l.db, Postgres, l, name, opts)
}

func newRWMutex(db *sql.DB, d Dialect, ln *Listener, name string, opts []lock.Option) (lock.RWLocker, error) {
	s, err := newShared(db, d, ln, kindRW, name, 0, opts)
	if err != nil {
		return nil, err
	}
	return lockdriver.NewRWLocker[lock.RWLocker](sharedSide{s: s, side: sideRead}, sharedSide{s: s, side: sideWrite}, s.o), nil
}

// NewSemaphore returns a counting semaphore named name in db, whose tables
// Migrate created: a lock.Locker that at most permits owners hold at once.
// Each permit is a lease with a TTL judged by the database clock, so a
// crashed holder's permit comes back when its lease ends, and only its
// holder can release or extend it; each holding gets a fencing token,
// strictly increasing per name. With lock.Owner the owner re-enters at once,
// keeping its one permit, with a hold count. A release wakes as many waiters
// as the free permits admit (on PostgreSQL with a Listener; otherwise
// waiters back off). With lock.Fair waiters acquire in arrival order;
// without it a newcomer may take a free permit before them.
//
// All Semaphores of one name must use the same permits: each admits against
// its own value. A Mutex, an RWMutex and a Semaphore of one name are separate
// locks. Options, name and Owner are as for New; permits must be between 1
// and lock.MaxPermits. NewSemaphore does not touch the database; the Locker
// is safe for concurrent use.
func NewSemaphore(db *sql.DB, d Dialect, name string, permits int, opts ...lock.Option) (lock.Locker, error) {
	return newSemaphore(db, d, nil, name, permits, opts)
}

// NewSemaphore returns a PostgreSQL Semaphore like NewSemaphore(db,
// Postgres, name, permits, opts...) whose waiters are also woken by
// releases, through this Listener.
func (l *Listener) NewSemaphore(name string, permits int, opts ...lock.Option) (lock.Locker, error) {
	return newSemaphore(l.db, Postgres, l, name, permits, opts)
}

func newSemaphore(db *sql.DB, d Dialect, ln *Listener, name string, permits int, opts []lock.Option) (lock.Locker, error) {
	if permits < 1 || permits > lock.MaxPermits {
		return nil, fmt.Errorf("sqllock: permits must be between 1 and %d, got %d", lock.MaxPermits, permits)
	}
	s, err := newShared(db, d, ln, kindSem, name, permits, opts)
	if err != nil {
		return nil, err
	}
	return lockdriver.NewLocker[lock.Locker](sharedSide{s: s, side: sideSem}, s.o), nil
}

// shared is an RWMutex or a Semaphore of one name. Its state is the name's
// row of SharedLocksTable (fence and queue places), its rows of
// SharedHoldersTable and of SharedWaitersTable. Every operation is one
// transaction that first locks the name's row, then reads the holdings and
// the queue, decides in Go by the rules below, and writes the changes, so
// operations on one name are serialized and each sees the result of the
// last. Time is read from the database after the row lock is taken, in µs
// since 1970 by the database clock; holdings and waiters whose deadline has
// passed are deleted by the operation that finds them, so that no later
// operation can judge them live again.
type shared struct {
	db      *sql.DB
	dialect Dialect
	q       *sharedStmts
	kind    string // kindRW or kindSem
	name    string
	permits int // Semaphore
	o       lockdriver.Options
	ln      *Listener // nil: waiters only back off
	channel string    // PostgreSQL notification channel
}

func newShared(db *sql.DB, d Dialect, ln *Listener, kind, name string, permits int, opts []lock.Option) (*shared, error) {
	if db == nil {
		return nil, errors.New("sqllock: db is nil")
	}
	o, err := checkLock(d, name, opts)
	if err != nil {
		return nil, err
	}
	s := &shared{db: db, dialect: d, kind: kind, name: name, permits: permits, o: o, ln: ln}
	if d == Postgres {
		s.q = &pgShared
		// Names hold no NUL on PostgreSQL: no mutex name maps here.
		s.channel = channelName(kind + "\x00" + name)
	} else {
		s.q = &myShared
	}
	return s, nil
}

func (s *shared) waiterLease() time.Duration { return max(3*s.o.MaxPoll, minWaiterLease) }

// holding is a row of SharedHoldersTable.
type holding struct {
	side, owner string
	holds       int64
	token       int64
	expires     int64  // µs, database clock
	call        string // call id of the acquisition that made or last re-entered it
}

// queued is a row of SharedWaitersTable.
type queued struct {
	waiter, side, owner string
	seq                 int64
	listens             bool
	expires             int64 // µs, database clock
}

// state is what one operation knows of a lock: read at its start, changed
// by its decision, and the statements that write the changes.
type state struct {
	s       *shared
	now     int64 // µs, database clock
	fence   int64 // last token handed out
	place   int64 // last queue place handed out
	holders []*holding
	waiters []*queued // live ones, by place; and the caller's, renewed
	me      *queued   // the caller's queue entry, or nil
	lockRow bool      // fence or place changed
	writes  []write
	wake    []string // waiter ids to notify
}

type write struct {
	query string
	args  []any
	must  bool // the statement must change one row, else errStale
}

func (st *state) exec(query string, args ...any) {
	st.writes = append(st.writes, write{query: query, args: args})
}

// expire deletes h, which the operation judged expired: the statement
// checks that it still is, since Extend runs outside the name's row lock.
func (st *state) expire(h *holding) {
	st.writes = append(st.writes, write{
		query: st.s.q.expireHolder,
		args:  []any{st.s.kind, st.s.name, h.side, h.owner, st.now},
		must:  true,
	})
}

// errStale reports that a holding the operation judged expired was
// extended meanwhile: the operation is rolled back and made again.
var errStale = errors.New("sqllock: a holding was extended during the operation")

// maxStale bounds the operations made again after errStale.
const maxStale = 5

// run is one operation: it locks the name's row, loads the state (with
// waiter as the caller's queue entry, "" for none) and calls decide, which
// changes the state and returns the operation's outcome; then it writes the
// changes and commits. Failures that rolled the transaction back are retried
// as retry says, and so is an operation that found a holding it judged
// expired extended meanwhile (errStale). The outcome lock.ErrLocked commits
// (the caller may have queued); other outcomes that are errors roll back.
func (s *shared) run(ctx context.Context, repeat bool, waiter string, decide func(st *state) error) error {
	for stale := 1; ; stale++ {
		outcome, err := s.attempt(ctx, repeat, waiter, decide)
		if errors.Is(err, errStale) && stale < maxStale && ctx.Err() == nil {
			continue
		}
		if err != nil {
			return err
		}
		return outcome
	}
}

// attempt is one run of an operation, with retry.
func (s *shared) attempt(ctx context.Context, repeat bool, waiter string, decide func(st *state) error) (outcome error, err error) {
	err = retry(ctx, repeat, func() error {
		tx, err := s.begin(ctx)
		if err != nil {
			return err
		}
		defer func() { _ = tx.Rollback() }()
		st, err := s.load(ctx, tx, waiter)
		if errors.Is(err, errNoRow) {
			// First use of the name. The row is made in a statement of
			// its own once this transaction has ended: on MySQL the
			// locking read of a missing row took a gap lock, which two
			// transactions inserting the row would deadlock on.
			_ = tx.Rollback()
			if _, err := s.db.ExecContext(ctx, s.q.create, s.kind, s.name); err != nil {
				return err
			}
			// A new variable for the second transaction: the deferred
			// rollback above holds tx, which must not become nil when
			// begin fails.
			second, berr := s.begin(ctx)
			if berr != nil {
				return berr
			}
			tx = second
			defer func() { _ = second.Rollback() }()
			st, err = s.load(ctx, tx, waiter)
		}
		if err != nil {
			return err
		}
		outcome = decide(st)
		if outcome != nil && !errors.Is(outcome, lock.ErrLocked) {
			return nil // nothing to write: the rollback drops the clean-up too
		}
		if st.lockRow {
			st.exec(s.q.updateLock, st.fence, st.place, s.kind, s.name)
		}
		if len(st.wake) > 0 && s.dialect == Postgres {
			switch {
			case len(st.wake) == 1:
				st.exec(pgNotify, s.channel, st.wake[0])
			case len(st.wake) <= maxNotify:
				st.exec(pgNotifyMany, s.channel, strings.Join(st.wake, ","))
			default:
				st.exec(pgNotify, s.channel, "") // everyone
			}
		}
		for _, w := range st.writes {
			res, err := tx.ExecContext(ctx, w.query, w.args...)
			if err != nil {
				return err
			}
			if w.must {
				if n, err := res.RowsAffected(); err != nil || n != 1 {
					return errors.Join(errStale, err)
				}
			}
		}
		return tx.Commit()
	})
	return outcome, err
}

// begin starts an operation's transaction. On PostgreSQL it is READ
// COMMITTED whatever the server's default, so that the reads that follow the
// row lock see every change committed under it (each statement takes a new
// snapshot). MySQL keeps the session's level: under REPEATABLE READ (the
// default) a transaction takes its snapshot at its first plain read, which
// comes after the row lock, and under READ COMMITTED at every read.
func (s *shared) begin(ctx context.Context) (*sql.Tx, error) {
	if s.dialect == Postgres {
		return s.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	}
	return s.db.BeginTx(ctx, nil)
}

// load locks the name's row (creating it on first use) and reads the
// holdings and the queue. Expired holdings and dead waiters (but the
// caller's entry, which is renewed) are left out, and queued for deletion.
func (s *shared) load(ctx context.Context, tx *sql.Tx, waiter string) (*state, error) {
	st := &state{s: s}
	if err := s.lockRow(ctx, tx, st); err != nil {
		return nil, err
	}
	rows, err := tx.QueryContext(ctx, s.q.load, s.kind, s.name, s.kind, s.name)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var gc int
	for rows.Next() {
		var t, side, owner, waiterID sql.NullString
		var n, token, expires sql.NullInt64
		var listens sql.NullBool
		if err := rows.Scan(&st.now, &t, &side, &owner, &n, &token, &expires, &waiterID, &listens); err != nil {
			return nil, err
		}
		switch {
		case t.String == "h" && expires.Int64 > st.now:
			st.holders = append(st.holders, &holding{side.String, owner.String, n.Int64, token.Int64, expires.Int64, waiterID.String})
		case t.String == "h":
			// Every expired holding the decision may rely on is deleted.
			st.expire(&holding{side: side.String, owner: owner.String})
		case t.String == "q" && waiterID.String == waiter && waiter != "":
			st.me = &queued{waiterID.String, side.String, owner.String, n.Int64, listens.Bool, expires.Int64}
			st.waiters = append(st.waiters, st.me)
		case t.String == "q" && expires.Int64 > st.now:
			st.waiters = append(st.waiters, &queued{waiterID.String, side.String, owner.String, n.Int64, listens.Bool, expires.Int64})
		case t.String == "q" && gc < maxGC:
			gc++
			st.exec(s.q.deleteWaiter, s.kind, s.name, waiterID.String)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if st.now == 0 {
		return nil, errors.New("database clock not read")
	}
	return st, nil
}

// errNoRow reports that a name's row of SharedLocksTable does not exist
// yet: run creates it outside the transaction and begins again.
var errNoRow = errors.New("sqllock: no lock row")

// lockRow locks the name's row of SharedLocksTable by its whole key (a
// record lock only) and reads the fence and the last place. It returns
// errNoRow when the row does not exist yet.
func (s *shared) lockRow(ctx context.Context, tx *sql.Tx, st *state) error {
	err := tx.QueryRowContext(ctx, s.q.lock, s.kind, s.name).Scan(&st.fence, &st.place)
	if errors.Is(err, sql.ErrNoRows) {
		return errNoRow
	}
	return err
}

// holder returns owner's holding of side, or nil.
func (st *state) holder(side, owner string) *holding {
	for _, h := range st.holders {
		if h.side == side && h.owner == owner {
			return h
		}
	}
	return nil
}

// writer returns the holding of the write side, or nil.
func (st *state) writer() *holding {
	for _, h := range st.holders {
		if h.side == sideWrite {
			return h
		}
	}
	return nil
}

// first returns the longest waiter of side, or nil.
func (st *state) first(side string) *queued {
	for _, q := range st.waiters {
		if q.side == side {
			return q
		}
	}
	return nil
}

// ahead reports whether q waits ahead of the caller (a caller that is not
// queued is behind every waiter).
func (st *state) ahead(q *queued) bool {
	return q != nil && q != st.me && (st.me == nil || q.seq < st.me.seq)
}

// take gives owner a new holding of side for call and returns its token:
// max(last token + 1, database clock in µs), as for the mutex.
func (st *state) take(side, owner, call string, ttl time.Duration) int64 {
	token := max(st.fence+1, st.now)
	st.fence, st.lockRow = token, true
	h := &holding{side: side, owner: owner, holds: 1, token: token, expires: st.now + ttl.Microseconds(), call: call}
	st.holders = append(st.holders, h)
	st.exec(st.s.q.insertHolder, st.s.kind, st.s.name, side, owner, h.holds, h.token, h.expires, call)
	return token
}

// reenter adds a hold level to h for call; its lease ends no earlier than
// ttl from now, so that the new Lease's local deadline is never later than
// the database's. When call made h or its last level, this is a replay of
// an attempt that was applied but whose reply was lost: the token is
// returned without another level.
func (st *state) reenter(h *holding, call string, ttl time.Duration) int64 {
	if h.call == call {
		return h.token
	}
	h.holds++
	h.expires = max(h.expires, st.now+ttl.Microseconds())
	h.call = call
	st.exec(st.s.q.reenterHolder, st.now+ttl.Microseconds(), call, st.s.kind, st.s.name, h.side, h.owner)
	return h.token
}

// done ends a successful attempt: the caller leaves the queue.
func (st *state) done(token int64, g *lockdriver.Grant) error {
	if st.me != nil {
		st.exec(st.s.q.deleteWaiter, st.s.kind, st.s.name, st.me.waiter)
		st.dropWaiter(st.me)
	}
	*g = lockdriver.Grant{Token: token}
	return nil
}

// fail ends a failed attempt: a waiting caller (waiter not "") joins the
// queue at the next place, or renews its entry. hint is the blocking
// lease's remaining time in µs, 0 when unknown.
func (st *state) fail(side, owner, waiter string, hint int64, wait *time.Duration) error {
	if waiter != "" {
		lease := st.now + st.s.waiterLease().Microseconds()
		if st.me == nil {
			st.place++
			st.lockRow = true
			st.me = &queued{waiter: waiter, side: side, owner: owner, seq: st.place, listens: st.s.ln != nil, expires: lease}
			st.waiters = append(st.waiters, st.me)
			st.exec(st.s.q.insertWaiter, st.s.kind, st.s.name, waiter, side, owner, st.me.seq, st.me.listens, lease)
		} else {
			st.me.expires = lease
			st.exec(st.s.q.renewWaiter, lease, st.s.kind, st.s.name, waiter)
		}
	}
	*wait = time.Duration(max(hint, 0)) * time.Microsecond
	return lock.ErrLocked
}

func (st *state) dropWaiter(q *queued) {
	for i, x := range st.waiters {
		if x == q {
			st.waiters = append(st.waiters[:i], st.waiters[i+1:]...)
			return
		}
	}
}

func (st *state) dropHolder(h *holding) {
	for i, x := range st.holders {
		if x == h {
			st.holders = append(st.holders[:i], st.holders[i+1:]...)
			return
		}
	}
}

// tryRead is one attempt at the read side: admitted unless another owner
// holds the write side or a writer waits ahead of the caller. The holding
// owner re-enters; the writer may also read.
func (st *state) tryRead(owner, waiter, call string, ttl time.Duration, g *lockdriver.Grant, wait *time.Duration) error {
	if h := st.holder(sideRead, owner); h != nil {
		return st.done(st.reenter(h, call, ttl), g)
	}
	if w := st.writer(); w != nil {
		if w.owner != owner {
			return st.fail(sideRead, owner, waiter, w.expires-st.now, wait)
		}
	} else if st.ahead(st.first(sideWrite)) {
		return st.fail(sideRead, owner, waiter, 0, wait)
	}
	return st.done(st.take(sideRead, owner, call, ttl), g)
}

// tryWrite is one attempt at the write side: admitted when no other owner
// holds either side and, with Fair, no waiter is ahead of the caller. The
// holding owner re-enters; a reader may take the write side once no other
// owner reads.
func (st *state) tryWrite(owner, waiter, call string, ttl time.Duration, fair bool, g *lockdriver.Grant, wait *time.Duration) error {
	if w := st.writer(); w != nil {
		if w.owner == owner {
			return st.done(st.reenter(w, call, ttl), g)
		}
		return st.fail(sideWrite, owner, waiter, w.expires-st.now, wait)
	}
	var last int64
	reading := false
	for _, h := range st.holders {
		if h.owner == owner {
			reading = true
		} else {
			last = max(last, h.expires)
		}
	}
	if last > 0 {
		return st.fail(sideWrite, owner, waiter, last-st.now, wait)
	}
	if fair && !reading && (st.ahead(st.first(sideRead)) || st.ahead(st.first(sideWrite))) {
		return st.fail(sideWrite, owner, waiter, 0, wait)
	}
	return st.done(st.take(sideWrite, owner, call, ttl), g)
}

// trySem is one attempt at a permit: admitted while fewer than permits
// owners hold one and, with Fair, fewer waiters are ahead of the caller than
// permits are free. The holding owner re-enters.
func (st *state) trySem(owner, waiter, call string, ttl time.Duration, fair bool, g *lockdriver.Grant, wait *time.Duration) error {
	if h := st.holder(sideSem, owner); h != nil {
		return st.done(st.reenter(h, call, ttl), g)
	}
	held := len(st.holders)
	if held >= st.s.permits {
		first := st.holders[0].expires
		for _, h := range st.holders {
			first = min(first, h.expires)
		}
		return st.fail(sideSem, owner, waiter, first-st.now, wait)
	}
	if fair {
		before := 0
		for _, q := range st.waiters {
			if st.ahead(q) {
				before++
			}
		}
		if before >= st.s.permits-held {
			return st.fail(sideSem, owner, waiter, 0, wait)
		}
	}
	return st.done(st.take(sideSem, owner, call, ttl), g)
}

// wakeUp records who can go now, to be notified: for an RWMutex, the
// readers queued before the first waiting writer, together, or else that
// writer once no other owner reads; for a Semaphore, as many of the first
// waiters as permits are free. Only waiters that listen are notified.
func (st *state) wakeUp() {
	var ids []*queued
	if st.s.kind == kindSem {
		free := st.s.permits - len(st.holders)
		for _, q := range st.waiters {
			if len(ids) >= free {
				break
			}
			ids = append(ids, q)
		}
	} else if st.writer() == nil {
		fw := st.first(sideWrite)
		for _, q := range st.waiters {
			if q.side == sideRead && (fw == nil || q.seq < fw.seq) {
				ids = append(ids, q)
			}
		}
		if len(ids) == 0 && fw != nil {
			ids = append(ids, fw)
			for _, h := range st.holders {
				if h.owner != fw.owner {
					ids = nil // another owner still reads
					break
				}
			}
		}
	}
	for _, q := range ids {
		if q.listens {
			st.wake = append(st.wake, q.waiter)
		}
	}
}

// sharedSide is the lockdriver.Driver of one side of an RWMutex, or of a
// Semaphore.
type sharedSide struct {
	s    *shared
	side string
}

// try makes one attempt of call for owner; waiter and call are as for
// dbDriver.try: a replayed attempt finds the holding its call made.
func (d sharedSide) try(ctx context.Context, owner string, ttl time.Duration, waiter, call string) (lockdriver.Grant, time.Duration, error) {
	s := d.s
	var g lockdriver.Grant
	var hint time.Duration
	err := s.run(ctx, true, waiter, func(st *state) error {
		g, hint = lockdriver.Grant{}, 0
		switch d.side {
		case sideRead:
			return st.tryRead(owner, waiter, call, ttl, &g, &hint)
		case sideWrite:
			return st.tryWrite(owner, waiter, call, ttl, s.o.Fair, &g, &hint)
		}
		return st.trySem(owner, waiter, call, ttl, s.o.Fair, &g, &hint)
	})
	if err != nil && !errors.Is(err, lock.ErrLocked) {
		return lockdriver.Grant{}, 0, fmt.Errorf("sqllock: acquire %q: %w", s.name, err)
	}
	return g, hint, err
}

// Acquire implements lockdriver.Driver. Every waiting call queues, so that a
// waiting writer keeps new readers out. As for the mutex, the attempts of a
// call carry one call id, and a call that fails with an error other than
// ErrLocked takes back what an attempt whose reply was lost took (undo).
func (d sharedSide) Acquire(ctx context.Context, owner string, ttl time.Duration, wait bool) (g lockdriver.Grant, err error) {
	call := callid.New()
	defer func() {
		if err != nil && !errors.Is(err, lock.ErrLocked) {
			undoInBackground(ctx, ttl, func(ctx context.Context) error { return d.undo(ctx, owner, call) })
		}
	}()
	if !wait {
		g, _, err := d.try(ctx, owner, ttl, "", call)
		return g, err
	}
	w := waitSpec{ln: d.s.ln, channel: d.s.channel, waiter: lockdriver.NewOwnerID(), maxPoll: d.s.o.MaxPoll}
	return waitLoop(ctx, w,
		func(waiter string) (lockdriver.Grant, time.Duration, error) {
			return d.try(ctx, owner, ttl, waiter, call)
		},
		d.leave)
}

// undo takes back the hold level that call took for owner, if an attempt of
// it was applied: a Release matched on the call id. It runs under the
// name's row lock, after any attempt of the call still in flight (every
// attempt holds that lock until its transaction ends, and commits only once
// all its replies arrived). A release clears the call id, so undo may be
// repeated.
func (d sharedSide) undo(ctx context.Context, owner, call string) error {
	return d.s.run(ctx, true, "", func(st *state) error {
		h := st.holder(d.side, owner)
		if h == nil || h.call != call {
			return nil
		}
		if h.holds--; h.holds > 0 {
			st.exec(st.s.q.unholdHolder, st.s.kind, st.s.name, h.side, h.owner)
			return nil
		}
		st.exec(st.s.q.deleteHolder, st.s.kind, st.s.name, h.side, h.owner)
		st.dropHolder(h)
		st.wakeUp()
		return nil
	})
}

// leave takes a waiter that gave up out of the queue and wakes whoever can
// go in its place: readers that only waited behind this writer, or the
// receiver of a wake-up this waiter may have consumed. Errors are ignored:
// the entry then expires after the waiter lease.
func (d sharedSide) leave(ctx context.Context, waiter string) {
	_ = d.s.run(ctx, true, "", func(st *state) error {
		for _, q := range st.waiters {
			if q.waiter == waiter {
				st.exec(st.s.q.deleteWaiter, st.s.kind, st.s.name, waiter)
				st.dropWaiter(q)
				break
			}
		}
		st.wakeUp()
		return nil
	})
}

// Extend implements lockdriver.Driver. It is one statement, outside the name's
// row lock: it only moves the end of a live holding, and an operation that
// judged the holding expired meanwhile finds out when it deletes it (see
// errStale).
func (d sharedSide) Extend(ctx context.Context, owner string, ttl time.Duration) error {
	s := d.s
	var res sql.Result
	err := retry(ctx, true, func() (err error) {
		if s.dialect == Postgres {
			res, err = s.db.ExecContext(ctx, pgExtendShared, ttl.Microseconds(), s.kind, s.name, d.side, owner)
		} else {
			us := ttl.Microseconds()
			res, err = s.db.ExecContext(ctx, myExtendShared, us, us, s.kind, s.name, d.side, owner)
		}
		return err
	})
	return affected(res, err, "extend", s.name)
}

// Release implements lockdriver.Driver. It is not repeated after a terminated
// session: releasing twice could drop another hold level.
func (d sharedSide) Release(ctx context.Context, owner string) error {
	err := d.s.run(ctx, false, "", func(st *state) error {
		h := st.holder(d.side, owner)
		if h == nil {
			return lock.ErrNotHeld
		}
		if h.holds--; h.holds > 0 {
			st.exec(st.s.q.unholdHolder, st.s.kind, st.s.name, h.side, h.owner)
			return nil
		}
		st.exec(st.s.q.deleteHolder, st.s.kind, st.s.name, h.side, h.owner)
		st.dropHolder(h)
		st.wakeUp()
		return nil
	})
	if err != nil && !errors.Is(err, lock.ErrNotHeld) {
		return fmt.Errorf("sqllock: release %q: %w", d.s.name, err)
	}
	return err
}
