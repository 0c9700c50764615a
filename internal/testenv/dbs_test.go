package testenv_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	_ "github.com/go-sql-driver/mysql"
	"github.com/go-zookeeper/zk"
	_ "github.com/jackc/pgx/v5/stdlib"

	"github.com/floodgate-dev/floodgate/internal/testenv"
)

// openDB opens a database/sql pool closed at the end of the test.
func openDB(t *testing.T, driver, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// sqlServer is what the PostgreSQL and MariaDB fault tests need.
type sqlServer interface {
	Pause() error
	Resume() error
	Restart() error
	Kill() error
	Stop() error
	KillConnections(ctx context.Context) error
	LogTail() string
}

// checkPauseResume: a query with a 300ms deadline fails while the server is
// paused, and the server answers again after Resume.
func checkPauseResume(t *testing.T, srv sqlServer, db *sql.DB, query string) {
	t.Helper()
	if err := db.PingContext(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Resume() }) // in case the test fails paused
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	start := time.Now()
	var v any
	err := db.QueryRowContext(ctx, query).Scan(&v)
	cancel()
	if err == nil {
		t.Fatalf("query on a paused server succeeded: %v", v)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("query on a paused server took %v to fail", took)
	}
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	if err := db.QueryRowContext(ctxTimeout(t, 10*time.Second), query).Scan(&v); err != nil {
		t.Fatalf("query after Resume: %v%s", err, srv.LogTail())
	}
}

// checkKillConnections: an open *sql.Conn breaks, a new connection works.
func checkKillConnections(t *testing.T, srv sqlServer, db *sql.DB, query string) {
	t.Helper()
	ctx := ctxTimeout(t, 10*time.Second)
	conn, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var v any
	if err := conn.QueryRowContext(ctx, query).Scan(&v); err != nil {
		t.Fatal(err)
	}
	if err := srv.KillConnections(ctx); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRowContext(ctx, query).Scan(&v); err == nil {
		t.Fatal("query on a killed connection succeeded")
	}
	if err := db.QueryRowContext(ctx, query).Scan(&v); err != nil {
		t.Fatalf("query on a new connection after KillConnections: %v", err)
	}
}

// checkRestartKeepsData: a committed row survives Restart (graceful) and
// Kill followed by Restart (crash recovery).
func checkRestartKeepsData(t *testing.T, srv sqlServer, driver, dsn, create string) {
	t.Helper()
	ctx := ctxTimeout(t, 60*time.Second)
	db := openDB(t, driver, dsn)
	for _, q := range []string{create, "INSERT INTO survivors (v) VALUES ('before restart')"} {
		if _, err := db.ExecContext(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	_ = db.Close()
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	db = openDB(t, driver, dsn)
	if _, err := db.ExecContext(ctx, "INSERT INTO survivors (v) VALUES ('before kill')"); err != nil {
		t.Fatal(err)
	}
	_ = db.Close()
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Kill(); !errors.Is(err, testenv.ErrNotRunning) {
		t.Fatalf("second Kill: %v, want ErrNotRunning", err)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	db = openDB(t, driver, dsn)
	var got []string
	rows, err := db.QueryContext(ctx, "SELECT v FROM survivors ORDER BY v")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			t.Fatal(err)
		}
		got = append(got, s)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if want := "before kill,before restart"; strings.Join(got, ",") != want {
		t.Fatalf("rows after restarts = %q, want %s", got, want)
	}
	// Stop is idempotent and Restart starts a stopped server.
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	if err := db.PingContext(ctx); err != nil {
		t.Fatalf("ping after Stop and Restart: %v", err)
	}
}

func checkPrivateAddr(t *testing.T, addr string, port, machinePort int) {
	t.Helper()
	if port == machinePort || !strings.HasPrefix(addr, "127.0.0.1:") {
		t.Fatalf("server at %s, want a private 127.0.0.1 port (not %d)", addr, machinePort)
	}
}

func TestPostgresShared(t *testing.T) {
	t.Parallel()
	pg := testenv.SharedPostgres(t)
	checkPrivateAddr(t, pg.Addr, pg.Port, 5432)
	if again := testenv.SharedPostgres(t); again != pg {
		t.Fatalf("SharedPostgres returned a second server %s after %s", again.Addr, pg.Addr)
	}
	if want := "postgres://postgres@" + pg.Addr + "/floodgate?sslmode=disable"; pg.DSN != want {
		t.Fatalf("DSN = %q, want %q", pg.DSN, want)
	}
	db := openDB(t, "pgx", pg.DSN)
	ctx := ctxTimeout(t, 10*time.Second)
	var now time.Time
	if err := db.QueryRowContext(ctx, "SELECT now()").Scan(&now); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(now); d < -time.Minute || d > time.Minute {
		t.Fatalf("now() = %v, far from the local clock", now)
	}
	var dbname, enc string
	if err := db.QueryRowContext(ctx, "SELECT current_database(), pg_encoding_to_char(encoding) FROM pg_database WHERE datname = current_database()").Scan(&dbname, &enc); err != nil {
		t.Fatal(err)
	}
	if dbname != "floodgate" || enc != "UTF8" {
		t.Fatalf("connected to %s (%s), want floodgate (UTF8)", dbname, enc)
	}
}

func TestPostgresFaults(t *testing.T) {
	t.Parallel()
	pg := testenv.NewPostgres(t)
	if pg.Pid() == 0 || !pg.Running() {
		t.Fatal("new server not running")
	}
	db := openDB(t, "pgx", pg.DSN)
	t.Run("PauseResume", func(t *testing.T) { checkPauseResume(t, pg, db, "SELECT now()") })
	t.Run("KillConnections", func(t *testing.T) { checkKillConnections(t, pg, db, "SELECT now()") })
	t.Run("RestartKeepsData", func(t *testing.T) {
		checkRestartKeepsData(t, pg, "pgx", pg.DSN, "CREATE TABLE survivors (v text)")
	})
	if err := pg.Close(); err != nil {
		t.Fatal(err)
	}
	if err := pg.Restart(); !errors.Is(err, testenv.ErrClosed) {
		t.Fatalf("Restart after Close: %v, want ErrClosed", err)
	}
}

func TestMariaDBShared(t *testing.T) {
	t.Parallel()
	m := testenv.SharedMariaDB(t)
	checkPrivateAddr(t, m.Addr, m.Port, 3306)
	if again := testenv.SharedMariaDB(t); again != m {
		t.Fatalf("SharedMariaDB returned a second server %s after %s", again.Addr, m.Addr)
	}
	if want := "root@tcp(" + m.Addr + ")/floodgate?parseTime=true"; m.DSN != want {
		t.Fatalf("DSN = %q, want %q", m.DSN, want)
	}
	db := openDB(t, "mysql", m.DSN)
	ctx := ctxTimeout(t, 10*time.Second)
	var now time.Time
	if err := db.QueryRowContext(ctx, "SELECT NOW(6)").Scan(&now); err != nil {
		t.Fatal(err)
	}
	var dbname, charset string
	if err := db.QueryRowContext(ctx, "SELECT DATABASE(), @@character_set_database").Scan(&dbname, &charset); err != nil {
		t.Fatal(err)
	}
	if dbname != "floodgate" || charset != "utf8mb4" {
		t.Fatalf("connected to %s (%s), want floodgate (utf8mb4)", dbname, charset)
	}
}

func TestMariaDBFaults(t *testing.T) {
	t.Parallel()
	m := testenv.NewMariaDB(t)
	if m.Pid() == 0 || !m.Running() {
		t.Fatal("new server not running")
	}
	db := openDB(t, "mysql", m.DSN)
	t.Run("PauseResume", func(t *testing.T) { checkPauseResume(t, m, db, "SELECT NOW(6)") })
	t.Run("KillConnections", func(t *testing.T) { checkKillConnections(t, m, db, "SELECT NOW(6)") })
	t.Run("RestartKeepsData", func(t *testing.T) {
		checkRestartKeepsData(t, m, "mysql", m.DSN, "CREATE TABLE survivors (v varchar(64)) ENGINE=InnoDB")
	})
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if err := m.Restart(); !errors.Is(err, testenv.ErrClosed) {
		t.Fatalf("Restart after Close: %v, want ErrClosed", err)
	}
}

type zkNopLogger struct{}

func (zkNopLogger) Printf(string, ...any) {}

// zkConnect opens a client session to z, closed at the end of the test.
func zkConnect(t *testing.T, z *testenv.ZooKeeper) *zk.Conn {
	t.Helper()
	c, _, err := zk.Connect([]string{z.Addr}, 10*time.Second, zk.WithLogger(zkNopLogger{}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// zkEventually retries f (the client reconnects in the background after a
// server restart) until it succeeds or 90 s pass. go-zookeeper waits for
// the answer to its connect request up to 10 × 2/3 of the session timeout
// (66 s with zkConnect's 10 s): a restarting server that accepted the
// connection under load but dropped the request held a client that long,
// and 20 s, then 60 s, were too short.
func zkEventually(t *testing.T, what string, f func() error) {
	zkEventuallyOn(t, nil, what, f)
}

// zkEventuallyOn is zkEventually that adds z's log tail to a failure.
func zkEventuallyOn(t *testing.T, z *testenv.ZooKeeper, what string, f func() error) {
	t.Helper()
	zkLogs := func() string {
		if z == nil {
			return ""
		}
		return z.LogTail()
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v%s", what, err, zkLogs())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func TestZooKeeperShared(t *testing.T) {
	t.Parallel()
	z := testenv.SharedZooKeeper(t)
	checkPrivateAddr(t, z.Addr, z.Port, 2181)
	if again := testenv.SharedZooKeeper(t); again != z {
		t.Fatalf("SharedZooKeeper returned a second server %s after %s", again.Addr, z.Addr)
	}
	if got, err := z.Command(ctxTimeout(t, 5*time.Second), "ruok"); err != nil || got != "imok" {
		t.Fatalf("ruok = %q, %v; want imok", got, err)
	}
	c := zkConnect(t, z)
	zkEventually(t, "create", func() error {
		_, err := c.Create("/shared-test", []byte("v1"), zk.FlagPersistent, zk.WorldACL(zk.PermAll))
		return err
	})
	got, _, err := c.Get("/shared-test")
	if err != nil || string(got) != "v1" {
		t.Fatalf("get = %q, %v; want v1", got, err)
	}
	if err := c.Delete("/shared-test", -1); err != nil {
		t.Fatal(err)
	}
	if ok, _, err := c.Exists("/shared-test"); err != nil || ok {
		t.Fatalf("exists after delete = %v, %v", ok, err)
	}
}

func TestZooKeeperFaults(t *testing.T) {
	t.Parallel()
	z := testenv.NewZooKeeper(t)
	if z.Pid() == 0 || !z.Running() {
		t.Fatal("new server not running")
	}
	c := zkConnect(t, z)
	zkEventually(t, "create", func() error {
		_, err := c.Create("/faults", []byte("kept"), zk.FlagPersistent, zk.WorldACL(zk.PermAll))
		return err
	})

	// Pause: a four-letter command with a 300ms deadline fails; Resume
	// recovers, and the session too.
	if err := z.Pause(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	got, err := z.Command(ctx, "ruok")
	cancel()
	if err == nil {
		_ = z.Resume()
		t.Fatalf("ruok on a paused server answered %q", got)
	}
	if err := z.Resume(); err != nil {
		t.Fatal(err)
	}
	if got, err := z.Command(ctxTimeout(t, 5*time.Second), "ruok"); err != nil || got != "imok" {
		t.Fatalf("ruok after Resume = %q, %v%s", got, err, z.LogTail())
	}
	zkEventually(t, "get after Resume", func() error { _, _, err := c.Get("/faults"); return err })

	// Restart and Kill+Restart: the client reconnects and the node is
	// still there; a new client works too.
	for _, crash := range []bool{false, true} {
		if crash {
			if err := z.Kill(); err != nil {
				t.Fatal(err)
			}
			if err := z.Kill(); !errors.Is(err, testenv.ErrNotRunning) {
				t.Fatalf("second Kill: %v, want ErrNotRunning", err)
			}
		}
		if err := z.Restart(); err != nil {
			t.Fatal(err)
		}
		zkEventuallyOn(t, z, fmt.Sprintf("get after restart (crash %v)", crash), func() error {
			v, _, err := c.Get("/faults")
			if err == nil && string(v) != "kept" {
				err = errors.New("value " + string(v))
			}
			return err
		})
		c2 := zkConnect(t, z)
		zkEventually(t, "new client after restart", func() error { _, _, err := c2.Get("/faults"); return err })
	}
	if err := z.Stop(); err != nil {
		t.Fatal(err)
	}
	if z.Running() {
		t.Fatal("running after Stop")
	}
	if err := z.Close(); err != nil {
		t.Fatal(err)
	}
	if err := z.Restart(); !errors.Is(err, testenv.ErrClosed) {
		t.Fatalf("Restart after Close: %v, want ErrClosed", err)
	}
}
