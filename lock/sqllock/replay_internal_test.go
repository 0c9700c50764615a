package sqllock

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"

	"github.com/floodgate-dev/floodgate/internal/testenv"
	"github.com/floodgate-dev/floodgate/lock"
	"github.com/floodgate-dev/floodgate/lock/internal/lockdriver"
)

// acquirer is the part of a driver that the replay tests drive: one attempt
// of a call, and the undo of a call.
type acquirer interface {
	lockdriver.Driver
	try(ctx context.Context, owner string, ttl time.Duration, waiter, call string) (lockdriver.Grant, time.Duration, error)
	undo(ctx context.Context, owner, call string) error
}

// A replayed attempt of a call (its first attempt was applied, its reply
// lost) returns the same lease without another hold level; undo takes back
// exactly the level its call took, once, and leaves other calls' levels.
func TestReplayAndUndo(t *testing.T) {
	t.Parallel()
	for _, dialect := range []Dialect{Postgres, MySQL} {
		t.Run(dialect.String(), func(t *testing.T) {
			t.Parallel()
			driver, dsn := "pgx", ""
			if dialect == Postgres {
				dsn = testenv.SharedPostgres(t).DSN
			} else {
				driver, dsn = "mysql", testenv.SharedMariaDB(t).DSN
			}
			db, err := sql.Open(driver, dsn)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { db.Close() })
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := Migrate(ctx, db, dialect); err != nil {
				t.Fatal(err)
			}
			o, _ := lockdriver.BuildOptions[lock.Option](nil)
			for _, kind := range []string{"mutex", kindRW, kindSem} {
				name := fmt.Sprintf("replay-%s-%d", kind, time.Now().UnixNano())
				var d acquirer
				switch kind {
				case "mutex":
					d = &dbDriver{db: db, dialect: dialect, name: name, o: o}
				default:
					s, err := newShared(db, dialect, nil, kind, name, 1, nil)
					if err != nil {
						t.Fatal(err)
					}
					side := sideSem
					if kind == kindRW {
						side = sideWrite
					}
					d = sharedSide{s: s, side: side}
				}
				t.Run(kind, func(t *testing.T) { testReplayAndUndo(ctx, t, d) })
			}
		})
	}
}

func testReplayAndUndo(ctx context.Context, t *testing.T, d acquirer) {
	try := func(owner, call string) int64 {
		t.Helper()
		g, _, err := d.try(ctx, owner, time.Minute, "", call)
		if err != nil {
			t.Fatalf("%s, call %s: %v", owner, call, err)
		}
		return g.Token
	}
	free := func() bool {
		t.Helper()
		_, _, err := d.try(ctx, "probe", time.Minute, "", "probe-"+lockdriver.NewOwnerID())
		if errors.Is(err, lock.ErrLocked) {
			return false
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Release(ctx, "probe"); err != nil {
			t.Fatal(err)
		}
		return true
	}

	// Replay: one level.
	first := try("a", "call-1")
	if again := try("a", "call-1"); again != first {
		t.Fatalf("replay returned token %d, want the first attempt's %d", again, first)
	}
	if err := d.Release(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if err := d.Release(ctx, "a"); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("second Release after a replay: %v, want ErrNotHeld (the replay added a level)", err)
	}

	// Undo of a call that took the lock frees it; undo again does nothing.
	try("b", "call-2")
	for range 2 {
		if err := d.undo(ctx, "b", "call-2"); err != nil {
			t.Fatal(err)
		}
	}
	if !free() {
		t.Fatal("the lock is held after its call was undone")
	}

	// Undo after a re-entry takes back that level only, once.
	try("c", "call-3")
	try("c", "call-4")
	for range 2 {
		if err := d.undo(ctx, "c", "call-4"); err != nil {
			t.Fatal(err)
		}
	}
	if free() {
		t.Fatal("undoing the re-entry freed the first holding")
	}
	// An undo of a call that took nothing, or of another owner, changes
	// nothing.
	if err := d.undo(ctx, "c", "call-never"); err != nil {
		t.Fatal(err)
	}
	if err := d.undo(ctx, "x", "call-3"); err != nil {
		t.Fatal(err)
	}
	if err := d.Release(ctx, "c"); err != nil {
		t.Fatal(err)
	}
	if !free() {
		t.Fatal("the lock is held after its one level was released")
	}
}
