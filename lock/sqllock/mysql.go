package sqllock

import (
	"context"
	"database/sql"
	"regexp"
	"strings"
	"time"

	"github.com/floodgate-dev/floodgate/lock"
)

// MySQL/MariaDB statements. Time is UTC_TIMESTAMP(6), which MySQL evaluates
// once per statement, in UTC whatever the session's time zone. DATETIME(6)
// holds microseconds. Names are VARBINARY, compared byte for byte.

var mySchema = []string{
	`CREATE TABLE IF NOT EXISTS floodgate_locks (
	name       VARBINARY(512) NOT NULL,
	owner      VARBINARY(256) NOT NULL DEFAULT '',
	holds      INT            NOT NULL DEFAULT 0,
	token      BIGINT         NOT NULL DEFAULT 0,
	expires_at DATETIME(6)    NOT NULL,
	call_id    VARBINARY(64)  NOT NULL DEFAULT '',
	PRIMARY KEY (name)
) ENGINE=InnoDB`,
	`CREATE TABLE IF NOT EXISTS floodgate_lock_waiters (
	name       VARBINARY(512) NOT NULL,
	waiter     VARBINARY(64)  NOT NULL,
	seq        BIGINT         NOT NULL AUTO_INCREMENT,
	expires_at DATETIME(6)    NOT NULL,
	PRIMARY KEY (name, waiter),
	UNIQUE KEY floodgate_lock_waiters_seq (seq)
) ENGINE=InnoDB`,
	// RWMutex and Semaphore (see shared.go). Deadlines are µs since 1970
	// by the database clock (UTC), as the Go code computes with them.
	`CREATE TABLE IF NOT EXISTS floodgate_shared_locks (
	kind  VARBINARY(8)   NOT NULL,
	name  VARBINARY(512) NOT NULL,
	token BIGINT         NOT NULL DEFAULT 0,
	place BIGINT         NOT NULL DEFAULT 0,
	PRIMARY KEY (kind, name)
) ENGINE=InnoDB`,
	`CREATE TABLE IF NOT EXISTS floodgate_shared_holders (
	kind       VARBINARY(8)   NOT NULL,
	name       VARBINARY(512) NOT NULL,
	side       VARBINARY(1)   NOT NULL,
	owner      VARBINARY(256) NOT NULL,
	holds      INT            NOT NULL,
	token      BIGINT         NOT NULL,
	expires_us BIGINT         NOT NULL,
	call_id    VARBINARY(64)  NOT NULL DEFAULT '',
	PRIMARY KEY (kind, name, side, owner)
) ENGINE=InnoDB`,
	`CREATE TABLE IF NOT EXISTS floodgate_shared_waiters (
	kind       VARBINARY(8)   NOT NULL,
	name       VARBINARY(512) NOT NULL,
	waiter     VARBINARY(64)  NOT NULL,
	side       VARBINARY(1)   NOT NULL,
	owner      VARBINARY(256) NOT NULL,
	seq        BIGINT         NOT NULL,
	listens    BOOLEAN        NOT NULL,
	expires_us BIGINT         NOT NULL,
	PRIMARY KEY (kind, name, waiter)
) ENGINE=InnoDB`,
}

// myCallColumns are the tables that tables made before call ids (issue 13)
// lack the column call_id of.
var myCallColumns = []string{"floodgate_locks", "floodgate_shared_holders"}

func myMigrate(ctx context.Context, db *sql.DB) error {
	for _, s := range mySchema {
		if _, err := db.ExecContext(ctx, s); err != nil {
			return err
		}
	}
	// MySQL has no ADD COLUMN IF NOT EXISTS (MariaDB has): look first,
	// and take error 1060 (duplicate column) from a concurrent migration
	// as success.
	for _, table := range myCallColumns {
		var n int
		err := db.QueryRowContext(ctx, `SELECT COUNT(*) FROM information_schema.columns
WHERE table_schema = DATABASE() AND table_name = ? AND column_name = 'call_id'`, table).Scan(&n)
		if err != nil {
			return err
		}
		if n > 0 {
			continue
		}
		_, err = db.ExecContext(ctx, "ALTER TABLE "+table+" ADD COLUMN call_id VARBINARY(64) NOT NULL DEFAULT ''")
		if err != nil && !strings.HasPrefix(errorText(err), "Error 1060") {
			return err
		}
	}
	return nil
}

const (
	myNow    = `UTC_TIMESTAMP(6)`
	myNowUs  = `TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))`
	myReent  = `(owner = ? AND expires_at > UTC_TIMESTAMP(6))`              // R; arg: owner
	myTakeUp = `((owner = '' OR expires_at <= UTC_TIMESTAMP(6)) AND ? = 1)` // T; arg: fair ok
)

// myAcquire: one INSERT ... ON DUPLICATE KEY UPDATE. R (re-entry), P
// (replay) and T (take-over) are as for PostgreSQL; the fairness condition
// is computed before, in the same transaction, and passed as a parameter.
//
// MySQL evaluates the assignments left to right, each seeing the columns
// already assigned. R and T read only owner and expires_at, so token and
// holds are assigned first; owner is assigned before expires_at, and
// re-evaluating R and T with the new owner gives the same branch: after
// re-entry the owner is unchanged; after a take-over R' holds only if the
// old lease was still running, which T excludes (owner ” has expires_at in
// the past, set by the release), and T' is still true. The statement is also
// correct if the assignments were simultaneous. call_id comes last: it is
// set when the owner holds the row after the other assignments, that is
// after R or T.
const myAcquire = `INSERT INTO floodgate_locks (name, owner, holds, token, expires_at, call_id)
VALUES (?, ?, 1, GREATEST(1, ` + myNowUs + `), ` + myNow + ` + INTERVAL ? MICROSECOND, ?)
ON DUPLICATE KEY UPDATE
	token = IF(` + myReent + `, token, IF(` + myTakeUp + `, GREATEST(token + 1, ` + myNowUs + `), token)),
	holds = IF(` + myReent + `, holds + IF(call_id = ?, 0, 1), IF(` + myTakeUp + `, 1, holds)),
	owner = IF(` + myReent + ` OR ` + myTakeUp + `, ?, owner),
	expires_at = IF(` + myReent + `, GREATEST(expires_at, ` + myNow + ` + INTERVAL ? MICROSECOND),
		IF(` + myTakeUp + `, ` + myNow + ` + INTERVAL ? MICROSECOND, expires_at)),
	call_id = IF(` + myReent + `, ?, call_id)`

func myAcquireArgs(name, owner string, ttlUs int64, fairOK int, call string) []any {
	return []any{
		name, owner, ttlUs, call,
		owner, fairOK, // token
		owner, call, fairOK, // holds
		owner, fairOK, owner, // owner
		owner, ttlUs, fairOK, ttlUs, // expires_at
		owner, call, // call_id
	}
}

// myAhead counts the live waiters queued before waiter (all of them when it
// is not queued).
const myAhead = `SELECT COUNT(*) FROM floodgate_lock_waiters w
WHERE w.name = ? AND w.waiter <> ? AND w.expires_at > UTC_TIMESTAMP(6)
	AND w.seq < COALESCE((SELECT m.seq FROM floodgate_lock_waiters m WHERE m.name = ? AND m.waiter = ?), 9223372036854775807)`

// myReadBack reads the row the acquisition locked: whether owner holds it,
// the token, the remaining lease in µs (NULL when free).
const myReadBack = `SELECT owner = ? AND expires_at > UTC_TIMESTAMP(6), token,
	IF(owner = '', NULL, TIMESTAMPDIFF(MICROSECOND, UTC_TIMESTAMP(6), expires_at))
FROM floodgate_locks WHERE name = ? FOR UPDATE`

// myEnqueue joins the queue (seq from AUTO_INCREMENT) or refreshes the entry.
const myEnqueue = `INSERT INTO floodgate_lock_waiters (name, waiter, expires_at)
VALUES (?, ?, UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)
ON DUPLICATE KEY UPDATE expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND`

// myDequeue removes the waiter that acquired, and expired entries.
const myDequeue = `DELETE FROM floodgate_lock_waiters
WHERE name = ? AND (waiter = ? OR expires_at <= UTC_TIMESTAMP(6))`

const myLeave = `DELETE FROM floodgate_lock_waiters WHERE name = ? AND waiter = ?`

// myTouch makes sure a lock's row exists before myUndo, as pgTouch does.
const myTouch = `INSERT INTO floodgate_locks (name, owner, holds, token, expires_at)
VALUES (?, '', 0, 0, UTC_TIMESTAMP(6)) ON DUPLICATE KEY UPDATE token = token`

// myUndo takes back the hold level that a call of the owner took, if it
// did: myRelease matched on the call id, which it clears. Args: name,
// owner, call id.
const myUndo = `UPDATE floodgate_locks SET
	owner = IF(holds > 1, owner, ''),
	expires_at = IF(holds > 1, expires_at, UTC_TIMESTAMP(6)),
	holds = holds - 1,
	call_id = ''
WHERE name = ? AND owner = ? AND call_id = ? AND holds > 0 AND expires_at > UTC_TIMESTAMP(6)`

// myRelease drops one hold level of the owner's unexpired holding; the last
// one frees the row, keeping the token. owner and expires_at are assigned
// before holds, which their conditions read.
const myRelease = `UPDATE floodgate_locks SET
	owner = IF(holds > 1, owner, ''),
	expires_at = IF(holds > 1, expires_at, UTC_TIMESTAMP(6)),
	holds = holds - 1
WHERE name = ? AND owner = ? AND holds > 0 AND expires_at > UTC_TIMESTAMP(6)`

// myExtend sets the owner's unexpired lease to end ttl from now. MySQL
// reports changed rows, not matched ones, so in the rare case where the new
// end equals the old one it is moved by 1µs, and one row always counts.
const myExtend = `UPDATE floodgate_locks SET expires_at = IF(
	expires_at = UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND,
	expires_at + INTERVAL 1 MICROSECOND,
	UTC_TIMESTAMP(6) + INTERVAL ? MICROSECOND)
WHERE name = ? AND owner = ? AND holds > 0 AND expires_at > UTC_TIMESTAMP(6)`

// myTry makes one attempt in a transaction: [fairness check], the upsert,
// the read-back under the row lock the upsert took, and the queue update.
// COMMIT is sent only once every reply arrived (see pgTry).
func (d *dbDriver) myTry(ctx context.Context, owner string, ttl time.Duration, waiter, call string) (g lock.Grant, hint time.Duration, err error) {
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return lock.Grant{}, 0, err
	}
	defer func() {
		if err != nil && tx != nil {
			_ = tx.Rollback()
		}
	}()
	fairOK := 1
	if d.o.Fair {
		var ahead int64
		if err = tx.QueryRowContext(ctx, myAhead, d.name, waiter, d.name, waiter).Scan(&ahead); err != nil {
			return lock.Grant{}, 0, err
		}
		if ahead > 0 {
			fairOK = 0
		}
	}
	if _, err = tx.ExecContext(ctx, myAcquire, myAcquireArgs(d.name, owner, ttl.Microseconds(), fairOK, call)...); err != nil {
		return lock.Grant{}, 0, err
	}
	var held bool
	var token int64
	var remaining sql.NullInt64
	if err = tx.QueryRowContext(ctx, myReadBack, owner, d.name).Scan(&held, &token, &remaining); err != nil {
		return lock.Grant{}, 0, err
	}
	if waiter != "" {
		if held {
			_, err = tx.ExecContext(ctx, myDequeue, d.name, waiter)
		} else {
			lease := d.waiterLease().Microseconds()
			_, err = tx.ExecContext(ctx, myEnqueue, d.name, waiter, lease, lease)
		}
		if err != nil {
			return lock.Grant{}, 0, err
		}
	}
	err = tx.Commit()
	tx = nil
	if err != nil {
		return lock.Grant{}, 0, err
	}
	if held {
		return lock.Grant{Token: token}, 0, nil
	}
	return lock.Grant{}, hintOf(remaining), lock.ErrLocked
}

// myShared are the statements of the RWMutex and the Semaphore on MySQL:
// the PostgreSQL ones with ? placeholders, but for the two below. No
// statement takes a lock on a range of rows (only the name's row, by its
// whole key, and rows written by their whole key), so that operations on
// different names never wait for each other's gap locks; reads of the
// holdings and the queue are plain reads made after the name's row is
// locked, so they see every change committed under that lock.
var myShared = func() sharedStmts {
	q := sharedCommon
	for _, s := range []*string{
		&q.insertHolder, &q.reenterHolder, &q.unholdHolder, &q.deleteHolder, &q.expireHolder,
		&q.insertWaiter, &q.renewWaiter, &q.deleteWaiter, &q.updateLock, &q.lock,
	} {
		*s = placeholders.ReplaceAllString(*s, "?")
	}
	q.create = `INSERT INTO floodgate_shared_locks (kind, name) VALUES (?, ?) ON DUPLICATE KEY UPDATE token = token`
	q.load = `SELECT c.now, x.t, x.side, x.owner, x.n, x.token, x.expires_us, x.waiter, x.listens
FROM (SELECT ` + myNowUs + ` AS now) c
LEFT JOIN (
	SELECT 'h' AS t, side, owner, holds AS n, token, expires_us, call_id AS waiter, FALSE AS listens
	FROM floodgate_shared_holders WHERE kind = ? AND name = ?
	UNION ALL
	SELECT 'q', side, owner, seq, 0, expires_us, waiter, listens
	FROM floodgate_shared_waiters WHERE kind = ? AND name = ?
) x ON TRUE
ORDER BY x.t, x.n`
	return q
}()

// myExtendShared: ttl µs twice, kind, name, side, owner. As myExtend, it
// moves a deadline that would not change by 1µs, so that the one matched row
// always counts as changed.
const myExtendShared = `UPDATE floodgate_shared_holders SET expires_us = IF(
	expires_us = ` + myNowUs + ` + ?,
	expires_us + 1,
	` + myNowUs + ` + ?)
WHERE kind = ? AND name = ? AND side = ? AND owner = ? AND expires_us > ` + myNowUs

var placeholders = regexp.MustCompile(`\$[0-9]+`)
