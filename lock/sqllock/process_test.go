package sqllock_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/lock"
	"github.com/floodgate-dev/floodgate/lock/internal/locktest"
	"github.com/floodgate-dev/floodgate/lock/sqllock"
)

// The two-process test: this process and a child (this test binary re-run
// with childEnv set) each run 8 goroutines that take the same lock and do a
// read-modify-write of a counter row without a transaction inside it.
// Without mutual exclusion across processes, increments would be lost.
const childEnv = "FLOODGATE_SQLLOCK_CHILD"

// childJob is what the child is told to do, as JSON in childEnv.
type childJob struct {
	Dialect  sqllock.Dialect
	Driver   string
	DSN      string
	Kind     string // "mutex" or "rw" (the write side of an RWMutex)
	Name     string // lock name
	Table    string // counter table
	N        int    // increments per goroutine
	Listener bool   // PostgreSQL: wait through a Listener
}

// locker returns the lock of the job on db.
func (j childJob) locker(db *sql.DB) (lock.Locker, error) {
	opts := []lock.Option{lock.TTL(10 * time.Second), lock.MaxPoll(100 * time.Millisecond)}
	var ln *sqllock.Listener
	if j.Listener {
		var err error
		if ln, err = sqllock.NewListener(db, pgxWait); err != nil {
			return nil, err
		}
	}
	switch {
	case j.Kind == "rw" && ln != nil:
		rw, err := ln.NewRWMutex(j.Name, opts...)
		if err != nil {
			return nil, err
		}
		return rw, nil
	case j.Kind == "rw":
		rw, err := sqllock.NewRWMutex(db, j.Dialect, j.Name, opts...)
		if err != nil {
			return nil, err
		}
		return rw, nil
	case ln != nil:
		return ln.New(j.Name, opts...)
	}
	return sqllock.New(db, j.Dialect, j.Name, opts...)
}

// childMain runs the child's half of the job; the exit code says whether it
// went through.
func childMain() int {
	var j childJob
	if err := json.Unmarshal([]byte(os.Getenv(childEnv)), &j); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	db, err := sql.Open(j.Driver, j.DSN)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	defer db.Close()
	mu, err := j.locker(db)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	s := server{dialect: j.Dialect, driver: j.Driver, dsn: j.DSN}
	if err := critical(ctx, s, db, mu, j.Table, j.N); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	return 0
}

func TestMutualExclusionTwoProcesses(t *testing.T) {
	for _, kind := range []string{"mutex", "rw"} {
		t.Run(kind, func(t *testing.T) {
			bothShared(t, func(t *testing.T, s server) { testTwoProcesses(t, s, kind) })
		})
	}
}

func testTwoProcesses(t *testing.T, s server, kind string) {
	db := s.open(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	table := fmt.Sprintf("sqllock_proc_%d", time.Now().UnixNano())
	if _, err := db.ExecContext(ctx, "CREATE TABLE "+table+" (v BIGINT NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _, _ = db.ExecContext(context.Background(), "DROP TABLE "+table) })
	if _, err := db.ExecContext(ctx, "INSERT INTO "+table+" (v) VALUES (0)"); err != nil {
		t.Fatal(err)
	}
	const n = 8
	job := childJob{Dialect: s.dialect, Driver: s.driver, DSN: s.dsn, Kind: kind, Name: locktest.Name(t), Table: table, N: n}
	// On PostgreSQL the child waits through a Listener, this process by
	// backing off: a release must reach waiters of either kind.
	child := job
	child.Listener = s.dialect == sqllock.Postgres
	env, err := json.Marshal(child)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+string(env))
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	mu, err := job.locker(db)
	if err != nil {
		t.Fatal(err)
	}
	errParent := critical(ctx, s, db, mu, table, n)
	errChild := cmd.Wait()
	if errParent != nil {
		t.Fatal(errParent)
	}
	if errChild != nil {
		t.Fatalf("child: %v", errChild)
	}
	var v int64
	if err := db.QueryRowContext(ctx, "SELECT v FROM "+table).Scan(&v); err != nil {
		t.Fatal(err)
	}
	if v != 2*8*n {
		t.Fatalf("counter = %d after %d locked increments in two processes: mutual exclusion failed", v, 2*8*n)
	}
}
