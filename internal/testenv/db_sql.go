package testenv

import (
	"context"
	"database/sql"
	"fmt"
	"time"
)

// withSQLConn opens one connection to dsn through database/sql's driver
// driverName, runs f on it, and closes everything. ctx bounds connecting
// and should bound f's queries.
func withSQLConn(ctx context.Context, driverName, dsn string, f func(*sql.Conn) error) error {
	db, err := sql.Open(driverName, dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	db.SetMaxOpenConns(1)
	conn, err := db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	return f(conn)
}

// waitGone polls count (the number of the killed connections still listed
// by the server) until it reports none, so that KillConnections returns
// only once the connections are really closed.
func waitGone(ctx context.Context, count func(context.Context) (int, error)) error {
	for {
		n, err := count(ctx)
		if err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testenv: %d killed connections still open: %w", n, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// withDefaultTimeout gives ctx a 10 s deadline if it has none.
func withDefaultTimeout(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, 10*time.Second)
}
