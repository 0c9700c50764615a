package sqllock_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/internal/testenv"
	"github.com/floodgate-dev/floodgate/lock"
	"github.com/floodgate-dev/floodgate/lock/internal/locktest"
	"github.com/floodgate-dev/floodgate/lock/sqllock"
)

// sqlRegister is the protected resource in PostgreSQL, checking fencing
// tokens in the statement itself as docs/locks.md shows: a read records its
// token (so that a stale holder cannot write a value computed from a
// superseded read), a write is admitted only with a token not lower than the
// highest seen. It is reached through a pool of its own, which the faults do
// not touch: the fault is in the lock clients' sessions.
type sqlRegister struct {
	db       *sql.DB
	id       string
	unfenced bool // admit every token: the negative control
}

var (
	registerOnce  sync.Once
	registerTable error
)

func newSQLRegister(t *testing.T, db *sql.DB, unfenced bool) *sqlRegister {
	t.Helper()
	ctx := context.Background()
	registerOnce.Do(func() {
		// Once per test binary: concurrent CREATE TABLE IF NOT EXISTS can
		// fail on PostgreSQL.
		_, registerTable = db.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS sqllock_test_register (
	id text PRIMARY KEY, v bigint NOT NULL DEFAULT 0, fence bigint NOT NULL DEFAULT 0)`)
	})
	if registerTable != nil {
		t.Fatal(registerTable)
	}
	r := &sqlRegister{db: db, id: locktest.Name(t), unfenced: unfenced}
	if _, err := db.ExecContext(ctx, `INSERT INTO sqllock_test_register (id) VALUES ($1)`, r.id); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *sqlRegister) Read(ctx context.Context, token int64) (int64, bool, error) {
	q := `UPDATE sqllock_test_register SET fence = $1 WHERE id = $2 AND fence <= $1 RETURNING v`
	if r.unfenced {
		q = `UPDATE sqllock_test_register SET fence = GREATEST(fence, $1) WHERE id = $2 RETURNING v`
	}
	var v int64
	err := r.db.QueryRowContext(ctx, q, token, r.id).Scan(&v)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, false, nil // a stale token
	}
	return v, err == nil, err
}

func (r *sqlRegister) Write(ctx context.Context, token, v int64) (bool, error) {
	q := `UPDATE sqllock_test_register SET v = $1, fence = $2 WHERE id = $3 AND fence <= $2`
	if r.unfenced {
		q = `UPDATE sqllock_test_register SET v = $1, fence = GREATEST(fence, $2) WHERE id = $3`
	}
	res, err := r.db.ExecContext(ctx, q, v, token, r.id)
	if err != nil {
		return false, err
	}
	n, err := res.RowsAffected()
	return n == 1, err
}

// pgClients opens database pools whose sessions carry an application_name
// of their own, so that a test can terminate the sessions of one client
// (pg_terminate_backend) as a network cut or a server-side kill would.
type pgClients struct {
	dsn   string
	admin *sql.DB
	tag   string
}

func newPGClients(t *testing.T) *pgClients {
	srv := testenv.SharedPostgres(t)
	admin, err := sql.Open("pgx", srv.DSN)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { admin.Close() })
	return &pgClients{dsn: srv.DSN, admin: admin, tag: fmt.Sprintf("fglin%d", time.Now().UnixNano()%1e9)}
}

func (p *pgClients) appName(client int) string { return fmt.Sprintf("%s-%d", p.tag, client) }

// open returns the pool of client, with the lock tables migrated.
func (p *pgClients) open(t *testing.T, client int) *sql.DB {
	t.Helper()
	return server{dialect: sqllock.Postgres, driver: "pgx", dsn: p.dsn + "&application_name=" + p.appName(client)}.open(t)
}

// kill terminates every session of client's pool and returns how many.
func (p *pgClients) kill(ctx context.Context, client int) (int, error) {
	var n int
	err := p.admin.QueryRowContext(ctx,
		`SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity WHERE application_name = $1`,
		p.appName(client)).Scan(&n)
	return n, err
}

// TestLinearizableUnderKilledConnections: four clients, each with a pool of
// its own as separate processes would have (two wait through a Listener,
// two back off), increment a fenced register under one PostgreSQL lock
// while their sessions are terminated: the holder's own sessions in the
// middle of its critical section, and everyone's (waiters, Listener
// connections) from the side. Holders sometimes also stall past their TTL
// there, so the lock passes on and their late writes must be refused by the
// fencing check. The history must be linearizable, with no refusal of a
// holder whose lease was live (exclusion held through the kills).
func TestLinearizableUnderKilledConnections(t *testing.T) {
	t.Parallel()
	pc := newPGClients(t)
	reg := newSQLRegister(t, pc.admin, false)
	h := &locktest.History{}
	name := locktest.Name(t)
	const ttl = 300 * time.Millisecond
	const clients, ops = 4, 10

	var kills atomic.Int64
	killer := func(ctx context.Context, client int) {
		if n, err := pc.kill(ctx, client); err != nil {
			t.Errorf("kill: %v", err)
		} else {
			kills.Add(int64(n))
		}
	}
	var lockErrs atomic.Int64
	var wg sync.WaitGroup
	for c := range clients {
		db := pc.open(t, c)
		opts := []lock.Option{lock.TTL(ttl), lock.MaxPoll(50 * time.Millisecond)}
		var mu lock.Locker
		var err error
		if c < 2 {
			mu, err = newListener(t, db).New(name, opts...)
		} else {
			mu, err = sqllock.New(db, sqllock.Postgres, name, opts...)
		}
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), 7))
			for i := range ops {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				lease, err := mu.Lock(ctx)
				if err != nil {
					// A session killed under a statement that cannot be
					// repeated safely: no operation.
					lockErrs.Add(1)
					cancel()
					continue
				}
				stall := (c == 0 && i == 1) || rng.IntN(4) == 0
				h.Increment(ctx, c, lease, reg, func() {
					if rng.IntN(2) == 0 || stall {
						killer(ctx, c) // the holder's own sessions
					}
					if stall {
						time.Sleep(3 * ttl) // a GC pause, a swapped-out process...
					}
				})
				_ = lease.Unlock(ctx)
				cancel()
			}
		}()
	}
	// From the side: every client's sessions, waiters and Listeners too.
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 8 {
			time.Sleep(250 * time.Millisecond)
			killer(context.Background(), rand.IntN(clients))
		}
	}()
	wg.Wait()
	<-done
	if kills.Load() == 0 {
		t.Fatal("no session was terminated: the fault was not injected")
	}
	if n := lockErrs.Load(); n > clients*ops/2 {
		t.Fatalf("%d of %d Lock calls failed under the kills", n, clients*ops)
	}
	t.Logf("%d sessions terminated, %d Lock calls failed", kills.Load(), lockErrs.Load())
	if h.Refused() == 0 {
		t.Fatal("no late write was refused: the stalls did not let the lock pass on")
	}
	h.Check(t, reg, true)
}

// TestLinearizabilityCheckCatchesLateWriteAfterKill is the negative control
// of the test above, in the same fault: a holder reads, its sessions are
// killed and it stalls until its lease is lost, the next holder reads and
// writes, and the old holder writes late. Against a register that ignores
// tokens the checker must reject the history; the fenced register refuses
// the late write.
func TestLinearizabilityCheckCatchesLateWriteAfterKill(t *testing.T) {
	t.Parallel()
	pc := newPGClients(t)
	regs := []*sqlRegister{newSQLRegister(t, pc.admin, true), newSQLRegister(t, pc.admin, false)}
	hs := []*locktest.History{{}, {}}
	name := locktest.Name(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	old, _ := sqllock.New(pc.open(t, 0), sqllock.Postgres, name, lock.TTL(300*time.Millisecond))
	next, _ := newListener(t, pc.open(t, 1)).New(name, lock.TTL(10*time.Second))

	a, err := old.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	callA := time.Now()
	var readA [2]int64
	for i, r := range regs {
		var err error
		if readA[i], _, err = r.Read(ctx, a.Token()); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := pc.kill(ctx, 0); err != nil || n == 0 {
		t.Fatalf("killing the holder's sessions: %d killed, %v", n, err)
	}
	<-a.Lost() // stalled past its TTL
	b, err := next.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if b.Token() <= a.Token() {
		t.Fatalf("tokens: next holder %d, old %d", b.Token(), a.Token())
	}
	for i, r := range regs {
		hs[i].Increment(ctx, 1, b, r, nil)
	}
	for i, r := range regs {
		wrote, err := r.Write(ctx, a.Token(), readA[i]+1)
		if err != nil {
			t.Fatal(err)
		}
		hs[i].Add(0, callA, time.Now(), locktest.IncOutput{Read: readA[i], ReadOK: true, Wrote: wrote, Lost: true})
	}
	if hs[0].Linearizable() {
		t.Fatal("two increments from the same read were judged linearizable")
	}
	if !hs[1].Linearizable() {
		t.Fatal("the fenced history is not linearizable")
	}
	if v, _, _ := regs[1].Read(ctx, 1<<62); v != 1 {
		t.Fatalf("the fenced register holds %d, want 1: it admitted the late write", v)
	}
	// The old holder's Unlock fails: ErrNotHeld, or the error of its killed
	// session (a release is not repeated, see the package documentation).
	// Either way the new holder keeps the lock.
	if err := a.Unlock(ctx); err == nil {
		t.Fatal("the old holder's Unlock succeeded after its lease was lost")
	}
	if _, err := next.TryLock(ctx); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("after the old holder's Unlock, TryLock: %v, want ErrLocked", err)
	}
	if err := b.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestLinearizableMariaDBUnderKilledConnections is the test above on
// MariaDB, whose waiters block on the gate (a GET_LOCK held by the
// holder's session): four clients, each with a pool of its own, increment
// the fenced register (in PostgreSQL: the resource may live anywhere) under
// one MariaDB lock while every client session is killed from the side,
// holders' sessions and their gates included, and holders sometimes stall
// past their TTL so that the lock passes on and their late writes must be
// refused. The history must be linearizable, with no refusal of a holder
// whose lease was live.
func TestLinearizableMariaDBUnderKilledConnections(t *testing.T) {
	t.Parallel()
	srv := testenv.NewMariaDB(t)
	pc := newPGClients(t)
	reg := newSQLRegister(t, pc.admin, false)
	h := &locktest.History{}
	name := locktest.Name(t)
	const ttl = 300 * time.Millisecond
	const clients, ops = 4, 10
	s := server{dialect: sqllock.MySQL, driver: "mysql", dsn: srv.DSN}

	var kills atomic.Int64
	kill := func(ctx context.Context) {
		if err := srv.KillConnections(ctx); err != nil {
			t.Errorf("kill: %v", err)
		} else {
			kills.Add(1)
		}
	}
	var lockErrs atomic.Int64
	var wg sync.WaitGroup
	for c := range clients {
		mu, err := sqllock.New(s.open(t), sqllock.MySQL, name, lock.TTL(ttl), lock.MaxPoll(50*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(c), 11))
			for i := range ops {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				lease, err := mu.Lock(ctx)
				if err != nil {
					lockErrs.Add(1) // a statement that met a killed session
					cancel()
					continue
				}
				stall := (c == 0 && i == 1) || rng.IntN(4) == 0
				h.Increment(ctx, c, lease, reg, func() {
					if rng.IntN(3) == 0 {
						kill(ctx) // everyone's sessions, this holder's gate too
					}
					if stall {
						time.Sleep(3 * ttl)
					}
				})
				_ = lease.Unlock(ctx)
				cancel()
			}
		}()
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range 6 {
			time.Sleep(300 * time.Millisecond)
			kill(context.Background())
		}
	}()
	wg.Wait()
	<-done
	if kills.Load() == 0 {
		t.Fatal("no session was killed: the fault was not injected")
	}
	if n := lockErrs.Load(); n > clients*ops/2 {
		t.Fatalf("%d of %d Lock calls failed under the kills", n, clients*ops)
	}
	t.Logf("%d kills, %d Lock calls failed", kills.Load(), lockErrs.Load())
	if h.Refused() == 0 {
		t.Fatal("no late write was refused: the stalls did not let the lock pass on")
	}
	h.Check(t, reg, true)
}
