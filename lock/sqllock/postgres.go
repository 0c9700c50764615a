package sqllock

import (
	"context"
	"database/sql"
	"time"

	"github.com/floodgate-dev/floodgate/lock"
	"github.com/floodgate-dev/floodgate/lock/internal/lockdriver"
)

// PostgreSQL statements. Each is one statement, hence one transaction in
// autocommit, with its time taken once from clock_timestamp() (the CTE c).
// Under READ COMMITTED, INSERT ... ON CONFLICT DO UPDATE locks the
// conflicting row and evaluates its WHERE on the latest committed version,
// so two acquisitions of one name are serialized by the row lock.

// pgMigrateLock is the advisory lock key that serializes concurrent
// migrations ("floodgat" in ASCII): CREATE TABLE IF NOT EXISTS can fail with a
// unique violation when two sessions run it at once.
const pgMigrateLock = 0x666c6f6f64676174

var pgSchema = []string{
	`CREATE TABLE IF NOT EXISTS floodgate_locks (
	name       text        PRIMARY KEY,
	owner      text        NOT NULL DEFAULT '',
	holds      integer     NOT NULL DEFAULT 0,
	token      bigint      NOT NULL DEFAULT 0,
	expires_at timestamptz NOT NULL,
	call_id    text        NOT NULL DEFAULT ''
)`,
	// Tables made before call ids (issue 13) get the column.
	`ALTER TABLE floodgate_locks ADD COLUMN IF NOT EXISTS call_id text NOT NULL DEFAULT ''`,
	`CREATE TABLE IF NOT EXISTS floodgate_lock_waiters (
	name       text        NOT NULL,
	waiter     text        NOT NULL,
	seq        bigserial   NOT NULL,
	expires_at timestamptz NOT NULL,
	owner      text        NOT NULL DEFAULT '',
	ttl_us     bigint      NOT NULL DEFAULT 0,
	PRIMARY KEY (name, waiter)
)`,
	// Tables made before hand-off on release (issue 17) get the columns
	// that name whom to hand the lock to.
	`ALTER TABLE floodgate_lock_waiters ADD COLUMN IF NOT EXISTS owner text NOT NULL DEFAULT ''`,
	`ALTER TABLE floodgate_lock_waiters ADD COLUMN IF NOT EXISTS ttl_us bigint NOT NULL DEFAULT 0`,
	// RWMutex and Semaphore (see shared.go). Deadlines are µs since 1970
	// by the database clock, as the Go code computes with them.
	`CREATE TABLE IF NOT EXISTS floodgate_shared_locks (
	kind  text   NOT NULL,
	name  text   NOT NULL,
	token bigint NOT NULL DEFAULT 0,
	place bigint NOT NULL DEFAULT 0,
	PRIMARY KEY (kind, name)
)`,
	`CREATE TABLE IF NOT EXISTS floodgate_shared_holders (
	kind       text    NOT NULL,
	name       text    NOT NULL,
	side       text    NOT NULL,
	owner      text    NOT NULL,
	holds      integer NOT NULL,
	token      bigint  NOT NULL,
	expires_us bigint  NOT NULL,
	call_id    text    NOT NULL DEFAULT '',
	PRIMARY KEY (kind, name, side, owner)
)`,
	`ALTER TABLE floodgate_shared_holders ADD COLUMN IF NOT EXISTS call_id text NOT NULL DEFAULT ''`,
	`CREATE TABLE IF NOT EXISTS floodgate_shared_waiters (
	kind       text    NOT NULL,
	name       text    NOT NULL,
	waiter     text    NOT NULL,
	side       text    NOT NULL,
	owner      text    NOT NULL,
	seq        bigint  NOT NULL,
	listens    boolean NOT NULL,
	expires_us bigint  NOT NULL,
	PRIMARY KEY (kind, name, waiter)
)`,
}

func pgMigrate(ctx context.Context, db *sql.DB) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, "SELECT pg_advisory_xact_lock($1)", int64(pgMigrateLock)); err != nil {
		return err
	}
	for _, s := range pgSchema {
		if _, err := tx.ExecContext(ctx, s); err != nil {
			return err
		}
	}
	return tx.Commit()
}

// pgAcquire: $1 name, $2 owner, $3 ttl µs, $4 fair, $5 waiter ("" = do not
// queue), $6 waiter lease µs, $7 call id, $8 whether the waiter listens (a
// release may then hand it the lock: its entry names owner and ttl).
// Reply: the token (NULL when not acquired); the holder's remaining lease in
// µs before the statement (NULL when free or absent).
//
// R (re-entry): the row is held by this owner and unexpired: one more hold
// level, same token, lease end = max(current, now + ttl). P (replay): R, and
// the holding was made or last re-entered by this call ($7), whose earlier
// attempt was applied but its reply lost: as R, without another level.
// T (take-over): the row is free (owner ”) or expired, and, when fair, no
// live waiter queued before this one: a new holding with the next token.
// An attempt that finds the lock held by another owner's live lease (in
// the statement's snapshot) does not touch the row, so that it does not
// hold the row lock, which the release and the confirmation of a hand-off
// wait for, until its COMMIT; a lock released since the snapshot was taken
// is handed to the head waiter or found by the next attempt.
// A failed waiting attempt joins the queue or refreshes its entry (q); a
// successful one leaves it and drops expired entries (d). A waiter the
// lock was handed to (see pgRelease) finds it as P, with its call id.
const pgAcquire = `WITH c AS (SELECT clock_timestamp() AS now),
a AS (
	INSERT INTO floodgate_locks AS l (name, owner, holds, token, expires_at, call_id)
	SELECT $1, $2, 1, GREATEST(1, (extract(epoch FROM c.now) * 1000000)::bigint), c.now + $3::bigint * interval '1 microsecond', $7
	FROM c
	WHERE NOT EXISTS (SELECT 1 FROM floodgate_locks x
		WHERE x.name = $1 AND x.owner <> '' AND x.owner <> $2 AND x.expires_at > c.now)
	ON CONFLICT (name) DO UPDATE SET
		token = CASE WHEN l.owner = EXCLUDED.owner AND l.expires_at > (SELECT now FROM c)
			THEN l.token ELSE GREATEST(l.token + 1, EXCLUDED.token) END,
		holds = CASE WHEN l.owner = EXCLUDED.owner AND l.expires_at > (SELECT now FROM c)
			THEN l.holds + CASE WHEN l.call_id = EXCLUDED.call_id THEN 0 ELSE 1 END ELSE 1 END,
		call_id = EXCLUDED.call_id,
		expires_at = CASE WHEN l.owner = EXCLUDED.owner AND l.expires_at > (SELECT now FROM c)
			THEN GREATEST(l.expires_at, EXCLUDED.expires_at) ELSE EXCLUDED.expires_at END,
		owner = EXCLUDED.owner
	WHERE (l.owner = EXCLUDED.owner AND l.expires_at > (SELECT now FROM c))
		OR ((l.owner = '' OR l.expires_at <= (SELECT now FROM c))
			AND (NOT $4::boolean OR NOT EXISTS (
				SELECT 1 FROM floodgate_lock_waiters w
				WHERE w.name = $1 AND w.waiter <> $5 AND w.expires_at > (SELECT now FROM c)
					AND w.seq < COALESCE(
						(SELECT m.seq FROM floodgate_lock_waiters m WHERE m.name = $1 AND m.waiter = $5),
						9223372036854775807))))
	RETURNING l.token
),
q AS (
	INSERT INTO floodgate_lock_waiters (name, waiter, expires_at, owner, ttl_us)
	SELECT $1, $5, c.now + $6::bigint * interval '1 microsecond', CASE WHEN $8::boolean THEN $2 ELSE '' END, $3 FROM c
	WHERE $5 <> '' AND NOT EXISTS (SELECT 1 FROM a)
	ON CONFLICT (name, waiter) DO UPDATE SET expires_at = EXCLUDED.expires_at
),
d AS (
	DELETE FROM floodgate_lock_waiters w USING c
	WHERE w.name = $1 AND (w.waiter = $5 OR w.expires_at <= c.now) AND EXISTS (SELECT 1 FROM a)
)
SELECT (SELECT token FROM a),
	(SELECT (extract(epoch FROM x.expires_at - c.now) * 1000000)::bigint
		FROM floodgate_locks x, c WHERE x.name = $1 AND x.owner <> '')`

// pgRelease: $1 name, $2 owner, $3 channel, $4 hand-off grace µs.
// Reply: the hold count left (NULL when not held; after a hand-off, the new
// holder's 1); whether a waiter was notified; the token of a local
// receiver (always NULL here, see pgReleaseLocal).
//
// A level that is not the last only lowers the hold count. The last one
// hands the lock to the longest live waiter (h) if that waiter listens (its
// entry names its owner): the row gets the waiter's owner, the next token,
// the waiter's call id (its waiter id, see waitLoop) and a lease of
// min(its ttl, grace), which the waiter makes its full TTL when it has the
// notification (pgConfirm); its queue entry is deleted (d). A waiter gone
// without leaving the queue therefore keeps the lock for the grace at most.
// Otherwise the row is freed (owner ”, expires_at now, token kept). The
// head waiter is notified on the lock's channel in the same transaction,
// so it is delivered once the release is committed: its id followed by "!"
// when the lock was handed to it. Without live waiters nothing is notified
// (NOTIFY serializes committing transactions database-wide).
var pgRelease = `WITH c AS (SELECT clock_timestamp() AS now),` + pgHead + pgHandOff("l.call_id") + `
	WHERE l.name = $1 AND l.owner = $2 AND l.holds > 0 AND l.expires_at > c.now
	RETURNING l.owner, l.holds, l.token
),` + pgHandOffNotify

// pgReleaseLocal is pgRelease with a waiter of the releasing process in
// hand (see cohort.Queue): $5 its owner, $6 its ttl µs, $7 its call id.
// When no live waiter stands in floodgate_lock_waiters (no other process
// waits, as far as the queue tells), the last level hands the lock to that
// waiter instead of freeing it: its owner, the next token, its call id and
// its full ttl as lease; nobody is notified, and the waiter gets the token
// in the reply (third column). Otherwise it is pgRelease: the store's head
// waiter goes first and the local waiter makes attempts of its own.
var pgReleaseLocal = `WITH c AS (SELECT clock_timestamp() AS now),` + pgHeadOrLocal + pgHandOff("l.call_id") + `
	WHERE l.name = $1 AND l.owner = $2 AND l.holds > 0 AND l.expires_at > c.now
	RETURNING l.owner, l.holds, l.token
),` + pgHandOffNotify

// pgHead is h of pgRelease and pgUndo: the longest live waiter, the lease
// a hand-off gives it (its ttl, at most the grace $4) and whether it is
// notified.
const pgHead = `
h AS (
	SELECT w.waiter, w.owner, LEAST(w.ttl_us, $4::bigint) AS lease_us, true AS notify
	FROM floodgate_lock_waiters w, c
	WHERE w.name = $1 AND w.expires_at > c.now
	ORDER BY w.seq LIMIT 1
),`

// pgHeadOrLocal is h of pgReleaseLocal: pgHead's waiter, or else the
// local waiter ($5 owner, $6 ttl µs, $7 call id), with its full ttl and
// no notification.
const pgHeadOrLocal = `
q AS (
	SELECT w.waiter, w.owner, LEAST(w.ttl_us, $4::bigint) AS lease_us, true AS notify
	FROM floodgate_lock_waiters w, c
	WHERE w.name = $1 AND w.expires_at > c.now
	ORDER BY w.seq LIMIT 1
),
h AS (
	SELECT * FROM q
	UNION ALL
	SELECT $7::text, $5::text, $6::bigint, false WHERE NOT EXISTS (SELECT 1 FROM q)
),`

// pgHandOff is r of pgRelease, pgReleaseLocal and pgUndo, which sets the
// row from h (one of the above); its WHERE and RETURNING follow. callKept
// is the call id the row keeps when it is not handed on.
func pgHandOff(callKept string) string {
	return `
r AS (
	UPDATE floodgate_locks l SET
		holds = CASE WHEN l.holds > 1 THEN l.holds - 1 WHEN h.owner <> '' THEN 1 ELSE 0 END,
		owner = CASE WHEN l.holds > 1 THEN l.owner WHEN h.owner <> '' THEN h.owner ELSE '' END,
		token = CASE WHEN l.holds <= 1 AND h.owner <> ''
			THEN GREATEST(l.token + 1, (extract(epoch FROM c.now) * 1000000)::bigint) ELSE l.token END,
		expires_at = CASE WHEN l.holds > 1 THEN l.expires_at
			WHEN h.owner <> '' THEN c.now + h.lease_us * interval '1 microsecond'
			ELSE c.now END,
		call_id = CASE WHEN l.holds <= 1 AND h.owner <> '' THEN h.waiter ELSE ` + callKept + ` END
	FROM c LEFT JOIN h ON true`
}

// pgHandOffNotify ends pgRelease, pgReleaseLocal and pgUndo: the
// handed-off waiter leaves the queue, the head waiter is notified, and the
// reply; the token is that of a holding handed to a local waiter.
const pgHandOffNotify = `
d AS (
	DELETE FROM floodgate_lock_waiters w USING r, h
	WHERE w.name = $1 AND w.waiter = h.waiter AND h.owner <> '' AND r.owner = h.owner
),
n AS (
	SELECT pg_notify($3, h.waiter || CASE WHEN r.owner = h.owner THEN '!' ELSE '' END)
	FROM h, r WHERE r.owner <> $2 AND h.notify
)
SELECT (SELECT holds FROM r), (SELECT count(*) FROM n),
	(SELECT r.token FROM r, h WHERE NOT h.notify AND r.owner = h.owner)`

// pgTouch makes sure a lock's row exists, as a free row, before pgUndo:
// an INSERT waits for a transaction that is inserting the same name, where
// an UPDATE would not see that row, so that pgUndo runs after any
// acquisition of the call that is still in flight has ended. $1 name.
const pgTouch = `INSERT INTO floodgate_locks (name, owner, holds, token, expires_at)
VALUES ($1, '', 0, 0, clock_timestamp()) ON CONFLICT (name) DO NOTHING`

// pgUndo takes back the hold level that call $5 of owner $2 took, if it
// did: it is pgRelease matched on the call id, which it clears (unless it
// hands the lock on), so that it may be repeated. $1 name, $2 owner, $3
// channel, $4 hand-off grace µs, $5 call id.
var pgUndo = `WITH c AS (SELECT clock_timestamp() AS now),` + pgHead + pgHandOff("''") + `
	WHERE l.name = $1 AND l.owner = $2 AND l.call_id = $5 AND l.holds > 0 AND l.expires_at > c.now
	RETURNING l.owner, l.holds, l.token
),` + pgHandOffNotify

// pgConfirm: $1 name, $2 owner, $3 call id (= waiter id), $4 ttl µs. The
// waiter a release handed the lock to (notified with "!") takes it: its
// lease, of the hand-off grace, becomes ttl from now, and its queue entry
// goes (d): an attempt of the waiter whose snapshot was older than the
// hand-off may have queued it again after the release deleted it, and a
// release would hand the lock to it once more. Reply: the token, no row
// when the lock was not handed to this call or its grace passed.
const pgConfirm = `WITH u AS (
	UPDATE floodgate_locks
	SET expires_at = GREATEST(expires_at, clock_timestamp() + $4::bigint * interval '1 microsecond')
	WHERE name = $1 AND owner = $2 AND call_id = $3 AND holds > 0 AND expires_at > clock_timestamp()
	RETURNING token
),
d AS (DELETE FROM floodgate_lock_waiters w WHERE w.name = $1 AND w.waiter = $3 AND EXISTS (SELECT 1 FROM u))
SELECT token FROM u`

// pgLeave: $1 name, $2 waiter, $3 channel. The waiter leaves the queue;
// when the lock is free, the next live waiter is notified in its place (it
// may have consumed that waiter's wake-up).
const pgLeave = `WITH c AS (SELECT clock_timestamp() AS now),
d AS (DELETE FROM floodgate_lock_waiters WHERE name = $1 AND waiter = $2),
h AS (
	SELECT w.waiter FROM floodgate_lock_waiters w, c
	WHERE w.name = $1 AND w.waiter <> $2 AND w.expires_at > c.now
		AND NOT EXISTS (SELECT 1 FROM floodgate_locks l WHERE l.name = $1 AND l.owner <> '' AND l.expires_at > c.now)
	ORDER BY w.seq LIMIT 1
),
n AS (SELECT pg_notify($3, h.waiter) FROM h)
SELECT count(*) FROM n`

// pgExtend: $1 name, $2 owner, $3 ttl µs. Matches only the owner's
// unexpired holding, so it never re-acquires.
const pgExtend = `UPDATE floodgate_locks SET expires_at = clock_timestamp() + $3::bigint * interval '1 microsecond'
WHERE name = $1 AND owner = $2 AND holds > 0 AND expires_at > clock_timestamp()`

// pgTry makes one attempt of call, in a transaction of its own although it
// is one statement: COMMIT is sent only once the statement's reply arrived,
// so an attempt whose reply was lost either committed before the call
// failed or never commits — the statement may still reach the server later
// (held in a proxy or a socket buffer), but its transaction then ends with
// the connection, uncommitted. That is what lets undo, which waits for the
// row lock, remove whatever the call took. READ COMMITTED, whatever the
// server's default, is what the statement was written for (see above).
func (d *dbDriver) pgTry(ctx context.Context, owner string, ttl time.Duration, waiter, call string) (g lockdriver.Grant, hint time.Duration, err error) {
	tx, err := d.db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		return lockdriver.Grant{}, 0, err
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback()
		}
	}()
	var token, remaining sql.NullInt64
	err = tx.QueryRowContext(ctx, pgAcquire,
		d.name, owner, ttl.Microseconds(), d.o.Fair, waiter, d.waiterLease().Microseconds(), call, d.ln != nil,
	).Scan(&token, &remaining)
	if err != nil {
		return lockdriver.Grant{}, 0, err
	}
	if err = tx.Commit(); err != nil {
		return lockdriver.Grant{}, 0, err
	}
	if token.Valid {
		return lockdriver.Grant{Token: token.Int64}, 0, nil
	}
	return lockdriver.Grant{}, hintOf(remaining), lock.ErrLocked
}

// Statements of the RWMutex and the Semaphore (see shared.go). Each $n
// appears once, in order, so that the MySQL forms are the same text with ?.
var sharedCommon = sharedStmts{
	insertHolder: `INSERT INTO floodgate_shared_holders (kind, name, side, owner, holds, token, expires_us, call_id)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
	// Holdings are changed relative to their current row (hold count,
	// GREATEST), never set from what the operation read: Extend changes
	// them outside the name's row lock.
	// The call id is that of the last acquisition (see dbDriver.undo); a
	// release clears it, so that an undo cannot take a level twice.
	reenterHolder: `UPDATE floodgate_shared_holders SET holds = holds + 1, expires_us = GREATEST(expires_us, $1), call_id = $2
WHERE kind = $3 AND name = $4 AND side = $5 AND owner = $6`,
	unholdHolder: `UPDATE floodgate_shared_holders SET holds = holds - 1, call_id = ''
WHERE kind = $1 AND name = $2 AND side = $3 AND owner = $4`,
	deleteHolder: `DELETE FROM floodgate_shared_holders WHERE kind = $1 AND name = $2 AND side = $3 AND owner = $4`,
	expireHolder: `DELETE FROM floodgate_shared_holders
WHERE kind = $1 AND name = $2 AND side = $3 AND owner = $4 AND expires_us <= $5`,
	insertWaiter: `INSERT INTO floodgate_shared_waiters (kind, name, waiter, side, owner, seq, listens, expires_us)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8)`,
	renewWaiter:  `UPDATE floodgate_shared_waiters SET expires_us = $1 WHERE kind = $2 AND name = $3 AND waiter = $4`,
	deleteWaiter: `DELETE FROM floodgate_shared_waiters WHERE kind = $1 AND name = $2 AND waiter = $3`,
	updateLock:   `UPDATE floodgate_shared_locks SET token = $1, place = $2 WHERE kind = $3 AND name = $4`,
	lock:         `SELECT token, place FROM floodgate_shared_locks WHERE kind = $1 AND name = $2 FOR UPDATE`,
}

// sharedStmts are the statements of the RWMutex and the Semaphore in one
// dialect.
type sharedStmts struct {
	// lock locks a name's row by its whole key: its fence and last place.
	lock string
	// create makes a name's row if it does not exist.
	create string
	// load returns the database clock (µs since 1970) in every row, the
	// holdings of a name (t 'h'; n the hold count; waiter the call id)
	// and its queue (t 'q'; n the place), waiters by place; one row of NULLs but the clock when
	// there are neither. Run after lock, so the clock and the rows are
	// read after the row lock is taken. Arguments: kind, name, kind, name.
	load                                      string
	insertHolder, reenterHolder, unholdHolder string
	deleteHolder, expireHolder                string
	insertWaiter, renewWaiter, deleteWaiter   string
	updateLock                                string
}

var pgShared = func() sharedStmts {
	q := sharedCommon
	q.create = `INSERT INTO floodgate_shared_locks (kind, name) VALUES ($1, $2) ON CONFLICT (kind, name) DO NOTHING`
	q.load = `SELECT c.now, x.t, x.side, x.owner, x.n, x.token, x.expires_us, x.waiter, x.listens
FROM (SELECT (extract(epoch FROM clock_timestamp()) * 1000000)::bigint AS now) c
LEFT JOIN (
	SELECT 'h' AS t, side, owner, holds::bigint AS n, token, expires_us, call_id AS waiter, false AS listens
	FROM floodgate_shared_holders WHERE kind = $1 AND name = $2
	UNION ALL
	SELECT 'q', side, owner, seq, 0, expires_us, waiter, listens
	FROM floodgate_shared_waiters WHERE kind = $3 AND name = $4
) x ON true
ORDER BY x.t, x.n`
	return q
}()

// pgExtendShared: $1 ttl µs, $2 kind, $3 name, $4 side, $5 owner. Matches
// only the owner's unexpired holding, so it never re-acquires.
const pgExtendShared = `UPDATE floodgate_shared_holders
SET expires_us = (extract(epoch FROM clock_timestamp()) * 1000000)::bigint + $1
WHERE kind = $2 AND name = $3 AND side = $4 AND owner = $5
	AND expires_us > (extract(epoch FROM clock_timestamp()) * 1000000)::bigint`

// pgNotify sends one notification: $1 channel, $2 payload (a waiter id, or
// "" for every waiter of the lock).
const pgNotify = `SELECT pg_notify($1, $2)`

// pgNotifyMany sends a notification per waiter id: $1 channel, $2 waiter ids
// separated by commas (ids are hex).
const pgNotifyMany = `SELECT pg_notify($1, w) FROM unnest(string_to_array($2, ',')) AS w`
