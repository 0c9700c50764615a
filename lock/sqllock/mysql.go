package sqllock

import (
	"context"
	"database/sql"
	"regexp"
	"strings"
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

// myNowUs is the database clock in µs since 1970 (UTC).
const myNowUs = `TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))`

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
