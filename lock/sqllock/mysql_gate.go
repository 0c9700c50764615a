package sqllock

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"sync"
	"time"

	"github.com/floodgate-dev/floodgate/lock"
	"github.com/floodgate-dev/floodgate/lock/internal/lockdriver"
)

// Waiting on MySQL/MariaDB: the gate.
//
// The lease, the hold count and the fencing token stay in floodgate_locks,
// as before; the gate only decides who is woken. It is a user-level lock
// (GET_LOCK) per lock name, held by the holder's session from the
// acquisition to the release: a waiter blocks in GET_LOCK on the gate, and
// the release (one UPDATE that frees the row and calls RELEASE_LOCK) hands
// the gate to exactly one waiter, which MySQL picks in the order they asked;
// that waiter locks the row next, so it waits for the release's commit. It
// holds the gate when it takes the row, so it becomes the next holder with
// the gate already in its session: every contended acquisition is a
// hand-off with one wake-up, no poll and no thundering herd.
//
// Rules that keep the gate and the row in step:
//
//   - A free row (owner ”) is taken only by a session that holds the gate,
//     so a newcomer cannot take the lock from under a waiter that was just
//     handed the gate.
//   - An expired holding (owner set, lease over) is taken over by anyone,
//     gate or not: the lease ends by its TTL, never by a session, so that a
//     holder whose session hangs on cannot keep the lock.
//   - Re-entry and replays need no gate.
//
// The gate is never needed for correctness: it can be lost (the holder's
// connection is killed, its lease expired and the gate's own timer released
// it) or missing (a holder that took over an expired lease, a pool limited
// to one connection, which does not use the gate, or an older version of
// this package). A waiter that is handed the gate while someone holds the
// row without it cannot be woken by that holder's release; it keeps the
// gate and retries with the bounded back-off, capped by the holder's
// remaining lease, until it takes the row. Waiters blocked in GET_LOCK also
// wake at the holder's lease end and at least every MaxPoll, to take over
// an expired lease.
//
// The gate's name is 'fgl_' and the SHA-1 of the current database and the
// lock name (44 characters, under MySQL's 64), so that one name in two
// databases of a server are two gates.
const myGate = `CONCAT('fgl_', SHA1(CONCAT(IFNULL(DATABASE(), ''), 0x00, ?)))`

// myLockRow locks the lock's row and reads it, taking the gate first when
// asked (GET_LOCK with timeout 0: it never waits, so it cannot deadlock with
// the row lock): the gate (1 taken, 0 held by another session, NULL not
// asked), owner, holds, token, call id, the remaining lease in µs, the
// database clock in µs, and, when asked, the live waiters queued before
// waiter. Args: ask gate (0/1), name (gate), count ahead (0/1), name,
// waiter, name, waiter, name. No row: the lock was never taken (or its row
// was deleted).
const myLockRow = `SELECT IF(? = 1, GET_LOCK(` + myGate + `, 0), NULL),
	owner, holds, token, call_id, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at), ` + myNowUs + `,
	IF(? = 1, (SELECT COUNT(*) FROM floodgate_lock_waiters w
		WHERE w.name = ? AND w.waiter <> ? AND w.expires_at > UTC_TIMESTAMP(6)
			AND w.seq < COALESCE((SELECT m.seq FROM floodgate_lock_waiters m WHERE m.name = ? AND m.waiter = ?),
				9223372036854775807)), 0)
FROM floodgate_locks WHERE name = ? FOR UPDATE`

// myTake writes a new holding: owner, token, call id, ttl µs, name.
const myTake = `UPDATE floodgate_locks SET owner = ?, holds = 1, token = ?, call_id = ?,
	expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND
WHERE name = ?`

// myReenter adds a hold level (or none, for a replay): holds, call id, ttl
// µs, name. The lease ends no earlier than ttl from now.
const myReenter = `UPDATE floodgate_locks SET holds = ?, call_id = ?,
	expires_at = GREATEST(expires_at, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)
WHERE name = ?`

// myGateWait blocks until the gate is free and takes it, or the timeout (in
// seconds; fractions are honoured by MariaDB 10.1.2 and later, MySQL rounds
// them) passes: whether the gate was free when asked, and 1 taken, 0 timed
// out. Args: name, name, timeout.
const myGateWait = `SELECT IS_FREE_LOCK(` + myGate + `), GET_LOCK(` + myGate + `, ?)`

// myReleaseGate is myRelease run on the holder's pinned session: the last
// level also releases the gate, within the statement, so that an Unlock
// stays one round trip. The waiter the gate goes to locks the row next and
// so waits for this statement's commit, which frees the row. RELEASE_LOCK
// sits in the first assignment, which reads holds before it is assigned
// (also under MariaDB's SIMULTANEOUS_ASSIGNMENT); OR evaluates it only for
// the last level. (With binlog_format=STATEMENT the server logs the
// statement as unsafe for replication: a locking function in an UPDATE;
// MIXED and ROW log the row.) Args: name (gate), name, owner.
const myReleaseGate = `UPDATE floodgate_locks SET
	owner = IF(holds > 1 OR COALESCE(RELEASE_LOCK(` + myGate + `), 1) < 0, owner, ''),
	expires_at = IF(holds > 1, expires_at, UTC_TIMESTAMP(6)),
	holds = holds - 1
WHERE name = ? AND owner = ? AND holds > 0 AND expires_at > UTC_TIMESTAMP(6)`

// myGateRelease releases the gate unconditionally. Arg: name.
const myGateRelease = `DO RELEASE_LOCK(` + myGate + `)`

// myGateReleaseIfFree releases the gate unless owner still holds the lock
// (a re-entered level is left): 0 kept, 1 released, NULL not held. Args:
// name, owner, name.
const myGateReleaseIfFree = `SELECT IF(EXISTS(SELECT 1 FROM floodgate_locks
	WHERE name = ? AND owner = ? AND holds > 0 AND expires_at > UTC_TIMESTAMP(6)), 0, RELEASE_LOCK(` + myGate + `))`

// gated reports whether the driver's Lockers use the gate. A pool limited
// to one connection does not: the holder's session would keep the pool's
// only connection, and the holder's own statements would wait for it.
func (d *dbDriver) gated() bool { return d.db.Stats().MaxOpenConnections != 1 }

// mySession is the connection one MySQL Acquire call works on, and whether
// its session holds the gate. The gate is held at most once per session
// (GET_LOCK counts), and a session that may hold it is never returned to
// the pool: it becomes the holder's pin, or releases the gate, or is
// discarded (closing a session releases its user-level locks).
type mySession struct {
	d    *dbDriver
	conn *sql.Conn
	gate bool
}

func (d *dbDriver) mySession(ctx context.Context) (*mySession, error) {
	c, err := d.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	return &mySession{d: d, conn: c}, nil
}

// close ends the session: the gate is released (or the connection
// discarded, which releases it) and the connection goes back to the pool.
func (s *mySession) close() {
	if s.conn == nil {
		return
	}
	if s.gate {
		ctx, cancel := context.WithTimeout(context.Background(), leaveTimeout)
		_, err := s.conn.ExecContext(ctx, myGateRelease, s.d.name)
		cancel()
		if err != nil {
			s.discard()
			return
		}
		s.gate = false
	}
	_ = s.conn.Close()
	s.conn = nil
}

// discard closes the connection instead of returning it to the pool: its
// state (the gate, a transaction) is unknown.
func (s *mySession) discard() {
	if s.conn == nil {
		return
	}
	discardConn(s.conn)
	s.conn, s.gate = nil, false
}

// renew replaces a discarded connection.
func (s *mySession) renew(ctx context.Context) error {
	if s.conn != nil {
		return nil
	}
	c, err := s.d.db.Conn(ctx)
	if err != nil {
		return err
	}
	s.conn = c
	return nil
}

func discardConn(c *sql.Conn) {
	_ = c.Raw(func(any) error { return driver.ErrBadConn })
	_ = c.Close()
}

// myTry makes one attempt of call for owner on a session of its own: the
// non-waiting Acquire (TryLock), and the attempts of the tests.
func (d *dbDriver) myTry(ctx context.Context, owner string, ttl time.Duration, waiter, call string) (lockdriver.Grant, time.Duration, error) {
	s, err := d.mySession(ctx)
	if err != nil {
		return lockdriver.Grant{}, 0, err
	}
	defer s.close()
	return s.try(ctx, owner, ttl, waiter, call)
}

// try makes one attempt, retried as retry says on a new connection; when
// it took the lock with the gate in its session, the session becomes the
// holding's pin.
func (s *mySession) try(ctx context.Context, owner string, ttl time.Duration, waiter, call string) (g lockdriver.Grant, hint time.Duration, err error) {
	err = retry(ctx, true, func() error {
		if err := s.renew(ctx); err != nil {
			return err
		}
		start := time.Now()
		var fresh bool
		g, hint, fresh, err = s.attempt(ctx, owner, ttl, waiter, call, false)
		switch {
		case err == nil:
			k := pinKey{s.d.db, s.d.name, owner}
			if s.gate && fresh && pins.add(k, s.conn, start.Add(ttl)) {
				s.conn, s.gate = nil, false // the pin holds the gate now
			} else if p := pins.get(k); p != nil && !fresh {
				p.extend(start.Add(ttl), true) // a re-entry may lengthen the lease
			}
		case !errors.Is(err, lock.ErrLocked):
			s.discard() // a transaction or a gate in an unknown state
		}
		return err
	})
	return g, hint, err
}

// attempt is one transaction on the session: lock and read the row (taking
// the gate if the session has none and the lock needs it), decide, write.
// fresh reports a new holding (not a re-entry or a replay). COMMIT is sent
// only once every reply arrived (see Lost replies).
func (s *mySession) attempt(ctx context.Context, owner string, ttl time.Duration, waiter, call string, touched bool) (g lockdriver.Grant, hint time.Duration, fresh bool, err error) {
	d := s.d
	gated := d.gated()
	// A pin of this owner means this process holds the lock with the gate:
	// this is a re-entry or a replay, which needs no gate.
	askGate := gated && !s.gate && !pins.has(pinKey{d.db, d.name, owner})
	tx, err := s.conn.BeginTx(ctx, nil)
	if err != nil {
		return lockdriver.Grant{}, 0, false, err
	}
	defer func() {
		if tx != nil {
			_ = tx.Rollback()
		}
	}()
	var (
		gate                    sql.NullInt64
		rowOwner, rowCall       []byte
		holds                   int64
		token, remaining, nowUs int64
		ahead                   int64
	)
	err = tx.QueryRowContext(ctx, myLockRow, boolInt(askGate), d.name, boolInt(d.o.Fair), d.name, waiter, d.name, waiter, d.name).
		Scan(&gate, &rowOwner, &holds, &token, &rowCall, &remaining, &nowUs, &ahead)
	if errors.Is(err, sql.ErrNoRows) && !touched {
		// First use of the name: make the row, free, and lock it again.
		// (A locking read of a missing row takes a gap lock, which two
		// sessions inserting the row would deadlock on.)
		_ = tx.Rollback()
		tx = nil
		if _, err = s.conn.ExecContext(ctx, myTouch, d.name); err != nil {
			return lockdriver.Grant{}, 0, false, err
		}
		return s.attempt(ctx, owner, ttl, waiter, call, true)
	}
	if err != nil {
		return lockdriver.Grant{}, 0, false, err
	}
	if gate.Valid && gate.Int64 == 1 {
		s.gate = true
	}
	live := remaining > 0
	mine := live && string(rowOwner) == owner
	free := string(rowOwner) == "" || !live
	switch {
	case mine:
		if string(rowCall) != call {
			holds++ // a replay of call keeps the level it made
		}
		_, err = tx.ExecContext(ctx, myReenter, holds, call, ttl.Microseconds(), d.name)
	case free && (string(rowOwner) != "" || s.gate || !gated) && ahead == 0:
		token = max(token+1, nowUs)
		fresh = true
		_, err = tx.ExecContext(ctx, myTake, owner, token, call, ttl.Microseconds(), d.name)
	default:
		if waiter == "" {
			return lockdriver.Grant{}, hintOf(sql.NullInt64{Int64: remaining, Valid: !free}), false, lock.ErrLocked
		}
		lease := d.waiterLease().Microseconds()
		if _, err = tx.ExecContext(ctx, myEnqueue, d.name, waiter, lease, lease); err != nil {
			return lockdriver.Grant{}, 0, false, err
		}
		err = tx.Commit()
		tx = nil
		if err != nil {
			return lockdriver.Grant{}, 0, false, err
		}
		return lockdriver.Grant{}, hintOf(sql.NullInt64{Int64: remaining, Valid: !free}), false, lock.ErrLocked
	}
	if err != nil {
		return lockdriver.Grant{}, 0, false, err
	}
	if waiter != "" {
		if _, err = tx.ExecContext(ctx, myDequeue, d.name, waiter); err != nil {
			return lockdriver.Grant{}, 0, false, err
		}
	}
	err = tx.Commit()
	tx = nil
	if err != nil {
		return lockdriver.Grant{}, 0, false, err
	}
	return lockdriver.Grant{Token: token}, 0, fresh, nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// Pacing of MySQL waiters that hold the gate but cannot take the row.
const (
	// gateMaxBackoff caps the back-off of a waiter that holds the gate
	// while another session holds the row without it (see myGate): only
	// that waiter retries, the others block on the gate.
	gateMaxBackoff = 250 * time.Millisecond
)

// myAcquireWait is the waiting Acquire on MySQL with the gate: attempts
// alternate with blocking on the gate, all on one connection.
func (d *dbDriver) myAcquireWait(ctx context.Context, owner string, ttl time.Duration, call string) (lockdriver.Grant, error) {
	s, err := d.mySession(ctx)
	if err != nil {
		return lockdriver.Grant{}, err
	}
	defer s.close()
	waiter := ""
	if d.o.Fair {
		waiter = lockdriver.NewOwnerID()
	}
	queued := false
	defer func() {
		if queued {
			ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), leaveTimeout)
			defer cancel()
			d.leave(ctx, waiter)
		}
	}()
	backoff := minBackoff
	poll := minBackoff // back-off while the pool is tight
	gateFirst := d.busy.Load() && d.o.Owner == "" && waiter == "" && !d.poolTight()
	if gateFirst {
		// The last Lock found the lock taken: queue for the gate before
		// the first attempt, which would fail (without Owner a new call
		// cannot re-enter; an expired lease is taken over after the gate
		// wait, at MaxPoll at most).
		if err := s.waitGate(ctx, 0); err != nil {
			return lockdriver.Grant{}, err
		}
	}
	for first := true; ; first = false {
		g, hint, err := s.try(ctx, owner, ttl, waiter, call)
		if err == nil {
			queued = false // the acquisition left the queue
			if first && !gateFirst {
				d.busy.Store(false) // taken at once (after the gate wait, waitGate says)
			}
			return g, nil
		}
		d.busy.Store(true)
		if ctx.Err() != nil {
			return lockdriver.Grant{}, ctx.Err()
		}
		if !errors.Is(err, lock.ErrLocked) {
			return lockdriver.Grant{}, err
		}
		queued = waiter != ""
		if s.gate && hint > 0 {
			// Held without the gate: its release will not wake us.
			delay := min(backoff, d.o.MaxPoll, gateMaxBackoff, hint+time.Millisecond)
			backoff = min(2*backoff, gateMaxBackoff)
			if err := sleepCtx(ctx, delay); err != nil {
				return lockdriver.Grant{}, err
			}
			continue
		}
		if s.gate {
			// Free, but Fair waiters are ahead: hand the gate on, and
			// queue for it again after a pause that grows while this
			// repeats (the waiter ahead may be gone).
			if _, err := s.conn.ExecContext(ctx, myGateRelease, d.name); err != nil {
				s.discard()
			}
			s.gate = false
			if err := sleepCtx(ctx, backoff); err != nil {
				return lockdriver.Grant{}, err
			}
			backoff = min(2*backoff, gateMaxBackoff)
		} else {
			backoff = minBackoff
		}
		if d.poolTight() {
			// Blocking would keep a connection that the holder's Unlock
			// (or anyone) may need from a pool at its limit: give it back
			// and back off instead.
			s.close()
			delay := min(poll, d.o.MaxPoll)
			if hint > 0 {
				delay = min(delay, hint+time.Millisecond)
			}
			poll = min(2*poll, d.o.MaxPoll)
			if err := sleepCtx(ctx, delay); err != nil {
				return lockdriver.Grant{}, err
			}
			continue
		}
		poll = minBackoff
		if err := s.waitGate(ctx, hint); err != nil {
			return lockdriver.Grant{}, err
		}
		if !s.gate && d.db.Stats().MaxOpenConnections > 0 {
			s.close() // timed out: let a limited pool have the connection between waits
		}
	}
}

// poolTight reports whether the pool is limited and all its connections
// are in use: a waiter then does not block on the gate with one of them.
func (d *dbDriver) poolTight() bool {
	st := d.db.Stats()
	return st.MaxOpenConnections > 0 && st.InUse >= st.MaxOpenConnections
}

// waitGate blocks on the gate until it is handed over, the holder's lease
// ends (hint, when known), MaxPoll passes or ctx ends. A connection that
// fails while blocked (killed) is replaced: blocking changes nothing but
// the session's gate, which ends with it.
func (s *mySession) waitGate(ctx context.Context, hint time.Duration) error {
	if err := s.renew(ctx); err != nil {
		return err
	}
	wait := s.d.o.MaxPoll
	if hint > 0 {
		wait = min(wait, hint+time.Millisecond)
	}
	if dl, ok := ctx.Deadline(); ok {
		wait = min(wait, time.Until(dl))
	}
	var free, got sql.NullInt64
	err := s.conn.QueryRowContext(ctx, myGateWait, s.d.name, s.d.name, max(wait, time.Millisecond).Seconds()).Scan(&free, &got)
	if err != nil {
		s.discard()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return nil // the next attempt, on a new connection, reports a lasting failure
	}
	s.gate = got.Valid && got.Int64 == 1
	s.d.busy.Store(!free.Valid || free.Int64 != 1)
	return nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Pins: the sessions that hold a lock's gate for its holder.

type pinKey struct {
	db          *sql.DB
	name, owner string
}

// pin is the session that holds the gate for the holding of key: it is
// released by the owner's last release, or at the lease's local deadline
// (a holder that never unlocks does not keep a connection and the gate).
type pin struct {
	key      pinKey
	mu       sync.Mutex // serializes the statements on conn
	conn     *sql.Conn  // nil once released
	timer    *time.Timer
	deadline time.Time
}

var pins = pinSet{m: make(map[pinKey]*pin)}

type pinSet struct {
	mu sync.Mutex
	m  map[pinKey]*pin
}

func (ps *pinSet) has(k pinKey) bool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.m[k] != nil
}

func (ps *pinSet) get(k pinKey) *pin {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	return ps.m[k]
}

// add makes conn the pin of k until deadline; false when k has a pin
// already (the caller keeps conn).
func (ps *pinSet) add(k pinKey, conn *sql.Conn, deadline time.Time) bool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.m[k] != nil {
		return false
	}
	p := &pin{key: k, conn: conn, deadline: deadline}
	// The timer may fire at once (a deadline already past): p.expire waits
	// for p.mu, so it sees p.timer set.
	p.mu.Lock()
	p.timer = time.AfterFunc(time.Until(deadline), p.expire)
	p.mu.Unlock()
	ps.m[k] = p
	return true
}

func (ps *pinSet) drop(p *pin) {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if ps.m[p.key] == p {
		delete(ps.m, p.key)
	}
}

// extend moves the pin's deadline (an Extend, or a re-entry when later).
func (p *pin) extend(deadline time.Time, later bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn == nil || (later && !deadline.After(p.deadline)) {
		return
	}
	p.deadline = deadline
	p.timer.Reset(time.Until(deadline))
}

// expire releases the gate at the lease's local deadline.
func (p *pin) expire() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn == nil || time.Now().Before(p.deadline) {
		return // released, or extended meanwhile
	}
	p.closeLocked(context.Background(), false)
}

// unlock releases one level of the owner's holding on the pin's session
// (myReleaseGate), and with the last level the gate and the pin. single
// says the holding has one level (a Locker without Owner). used is false
// when the pin was released already, or its session failed: the pin is
// then discarded (and the gate with its session), and err is the failure;
// the statement may or may not have been applied.
func (p *pin) unlock(ctx context.Context, single bool) (res sql.Result, used bool, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn == nil {
		return nil, false, nil
	}
	res, err = p.conn.ExecContext(ctx, myReleaseGate, p.key.name, p.key.name, p.key.owner)
	if err != nil {
		discardConn(p.conn)
		p.dropLocked()
		return nil, false, err
	}
	n, err := res.RowsAffected()
	switch {
	case err != nil || n == 0:
		// Not held: the statement did not touch the gate.
		p.closeLocked(ctx, false)
	case single:
		_ = p.conn.Close() // the statement released the gate
		p.dropLocked()
	default:
		p.closeLocked(ctx, true) // unless a level is left
	}
	return res, true, nil
}

// release releases the gate once the owner no longer holds the lock (its
// last level was released, or the lease is gone).
func (p *pin) release(ctx context.Context) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conn != nil {
		p.closeLocked(ctx, true)
	}
}

// closeLocked releases the gate (if ifFree, only when the owner no longer
// holds the lock) and gives the connection back, or discards it when the
// statement failed. It requires p.mu.
func (p *pin) closeLocked(ctx context.Context, ifFree bool) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), leaveTimeout)
	defer cancel()
	if ifFree {
		var r sql.NullInt64
		err := p.conn.QueryRowContext(ctx, myGateReleaseIfFree, p.key.name, p.key.owner, p.key.name).Scan(&r)
		if err == nil && r.Valid && r.Int64 == 0 {
			return // still held: a re-entered level is left
		}
		if err != nil {
			discardConn(p.conn)
		} else {
			_ = p.conn.Close()
		}
	} else if _, err := p.conn.ExecContext(ctx, myGateRelease, p.key.name); err != nil {
		discardConn(p.conn)
	} else {
		_ = p.conn.Close()
	}
	p.dropLocked()
}

// dropLocked forgets the pin once its connection is closed or discarded.
// It requires p.mu.
func (p *pin) dropLocked() {
	p.conn = nil
	p.timer.Stop()
	pins.drop(p)
}
