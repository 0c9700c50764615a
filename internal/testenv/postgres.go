package testenv

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	// The "pgx" database/sql driver, used for readiness checks and
	// KillConnections (and available to tests under that name).
	_ "github.com/jackc/pgx/v5/stdlib"
)

// PostgresDatabase is the database StartPostgres creates; Postgres.DSN
// points at it.
const PostgresDatabase = "floodgate"

// Postgres is one private PostgreSQL server (a postgres process started
// directly, not through pg_ctl) owned by the test binary: a fresh cluster
// made by initdb (superuser "postgres", trust authentication, UTF8, C
// locale) in its own temporary directory, listening on 127.0.0.1 at a port
// chosen free at start (never 5432) and on a unix socket in Dir, with fsync
// off. When the test binary runs as root the server runs as the "postgres"
// OS user, since PostgreSQL refuses root. Exported fields are set once by
// StartPostgres. Its methods are safe for concurrent use.
type Postgres struct {
	// Addr is "127.0.0.1:<Port>".
	Addr string
	// Port is the TCP port, the same for the server's whole life.
	Port int
	// DSN is the URL of the "floodgate" database as the superuser:
	// postgres://postgres@127.0.0.1:<Port>/floodgate?sslmode=disable,
	// usable with database/sql's "pgx" driver and with pgx itself.
	DSN string
	// Dir is the server's private directory: the cluster in Dir/data, the
	// unix socket, the logs. Close removes it.
	Dir string

	d *daemon
}

// lookPostgres finds initdb and postgres of one installation: initdb on
// PATH (postgres next to where it really lives, else on PATH), else the
// highest version in /usr/lib/postgresql/*/bin, where Debian's packages put
// them.
func lookPostgres() (initdb, postgres string, err error) {
	if initdb, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(initdb); err == nil {
			if p := filepath.Join(filepath.Dir(real), "postgres"); isExecutable(p) {
				return initdb, p, nil
			}
		}
		if postgres, err := exec.LookPath("postgres"); err == nil {
			return initdb, postgres, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int {
		return compareVersions(filepath.Base(filepath.Dir(b)), filepath.Base(filepath.Dir(a)))
	})
	for _, dir := range dirs {
		i, p := filepath.Join(dir, "initdb"), filepath.Join(dir, "postgres")
		if isExecutable(i) && isExecutable(p) {
			return i, p, nil
		}
	}
	return "", "", notInstalled("testenv: PostgreSQL's initdb and postgres not found on PATH or in /usr/lib/postgresql/*/bin (install them: apt-get install -y postgresql)")
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o111 != 0
}

// compareVersions compares dotted version numbers ("9.6" < "15").
func compareVersions(a, b string) int {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := range max(len(as), len(bs)) {
		var x, y int
		if i < len(as) {
			x, _ = strconv.Atoi(as[i])
		}
		if i < len(bs) {
			y, _ = strconv.Atoi(bs[i])
		}
		if x != y {
			return x - y
		}
	}
	return 0
}

// StartPostgres runs initdb in a new temporary directory, starts postgres
// on a free 127.0.0.1 port (retrying on other ports if it cannot bind),
// waits until it answers a query (within about 30 s), and creates the
// database "floodgate". The error, if any, includes the tail of the logs.
// The caller must Close the server (NewPostgres and SharedPostgres do it for
// you).
func StartPostgres() (*Postgres, error) {
	initdb, bin, err := lookPostgres()
	if err != nil {
		return nil, err
	}
	as, err := lookupRunAs("postgres", "apt-get install -y postgresql creates it")
	if err != nil {
		return nil, err
	}
	dir, err := as.mkdirTemp("fg-postgres-")
	if err != nil {
		return nil, err
	}
	p := &Postgres{Dir: dir}
	if err := p.init(initdb, bin, as); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return p, nil
}

func (p *Postgres) init(initdb, bin string, as runAs) error {
	data := filepath.Join(p.Dir, "data")
	if sock := filepath.Join(p.Dir, ".s.PGSQL.65535"); len(sock) > 100 {
		return fmt.Errorf("testenv: unix socket path %q too long; set TMPDIR to a shorter directory", sock)
	}
	cmd := exec.Command(initdb, "-D", data, "-U", "postgres", "--auth=trust", "-E", "UTF8", "--locale=C", "--no-sync")
	cmd.Dir = p.Dir
	cmd.SysProcAttr = as.attr()
	if err := runSetup(cmd, filepath.Join(p.Dir, "initdb.log")); err != nil {
		return err
	}
	p.d = &daemon{
		name:    "postgres",
		dir:     p.Dir,
		stopSig: syscall.SIGINT, // fast shutdown: SIGTERM would wait for every client to leave
		command: func() *exec.Cmd {
			cmd := exec.Command(bin,
				"-D", data,
				"-p", strconv.Itoa(p.Port),
				"-k", p.Dir,
				"-c", "listen_addresses=127.0.0.1",
				"-c", "fsync=off",
				"-c", "full_page_writes=off",
				"-c", "max_connections=200",
			)
			cmd.SysProcAttr = as.attr()
			return cmd
		},
		probe: func(ctx context.Context, _ int) error {
			return withSQLConn(ctx, "pgx", p.adminDSN(), func(c *sql.Conn) error {
				var got string
				if err := c.QueryRowContext(ctx, "SHOW data_directory").Scan(&got); err != nil {
					return err
				}
				if filepath.Clean(got) != data {
					return fmt.Errorf("port %d answered by another server (data directory %s, ours %s): Address already in use", p.Port, got, data)
				}
				return nil
			})
		},
	}
	err := startDaemon(p.d, func(port int) {
		p.Port = port
		p.Addr = p.d.addr
		p.DSN = fmt.Sprintf("postgres://postgres@%s/%s?sslmode=disable", p.Addr, PostgresDatabase)
	})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), dbReadyTimeout)
	defer cancel()
	err = withSQLConn(ctx, "pgx", p.adminDSN(), func(c *sql.Conn) error {
		_, err := c.ExecContext(ctx, "CREATE DATABASE "+PostgresDatabase)
		return err
	})
	if err != nil {
		_ = p.d.close()
		return fmt.Errorf("testenv: creating database %s on %s: %w%s", PostgresDatabase, p.Addr, err, p.d.logTail())
	}
	return nil
}

// adminDSN is the URL of the "postgres" maintenance database.
func (p *Postgres) adminDSN() string {
	return fmt.Sprintf("postgres://postgres@%s/postgres?sslmode=disable&connect_timeout=2", p.Addr)
}

// KillConnections terminates every connection to the "floodgate" database
// except the one it uses itself (pg_terminate_backend on each row of
// pg_stat_activity), and returns once the server no longer lists them:
// their clients' next query fails. ctx bounds the whole operation (10 s if
// it has no deadline). Meant for fault tests.
func (p *Postgres) KillConnections(ctx context.Context) error {
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	return withSQLConn(ctx, "pgx", p.adminDSN(), func(c *sql.Conn) error {
		rows, err := c.QueryContext(ctx, "SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()", PostgresDatabase)
		if err != nil {
			return fmt.Errorf("testenv: KillConnections: %w", err)
		}
		var pids []string
		for rows.Next() {
			var pid int64
			var ok bool
			if err := rows.Scan(&pid, &ok); err != nil {
				_ = rows.Close()
				return fmt.Errorf("testenv: KillConnections: %w", err)
			}
			pids = append(pids, strconv.FormatInt(pid, 10))
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("testenv: KillConnections: %w", err)
		}
		if len(pids) == 0 {
			return nil
		}
		list := "{" + strings.Join(pids, ",") + "}"
		return waitGone(ctx, func(ctx context.Context) (int, error) {
			var n int
			err := c.QueryRowContext(ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = ANY($1::int[])", list).Scan(&n)
			return n, err
		})
	})
}

// LogTail returns the last lines of the server's log (its stderr, in
// Dir/stdout.log), for a test to print when something goes wrong.
func (p *Postgres) LogTail() string { return p.d.logTail() }

// Running reports whether the postmaster is alive (it may be paused).
func (p *Postgres) Running() bool { return p.d.running() }

// Pid returns the postmaster's process id, or 0 if it is not running.
func (p *Postgres) Pid() int { return p.d.pid() }

// Stop shuts the server down (fast shutdown, SIGINT: clients are
// disconnected, data is checkpointed) and waits for it to exit, killing it
// after 10 s. It is idempotent.
func (p *Postgres) Stop() error { return p.d.stop() }

// Kill simulates a crash: SIGKILL to the postmaster and all its backends,
// returning once they are gone. Committed transactions survive (the WAL is
// written before a commit is acknowledged; fsync=off only risks an OS
// crash), and Restart runs crash recovery. It returns ErrNotRunning if the
// server was not running.
func (p *Postgres) Kill() error { return p.d.kill() }

// Pause freezes the postmaster and every backend with SIGSTOP: connections
// stay open but nothing is answered (queries and new connections hang until
// their context expires) until Resume. It returns ErrNotRunning if the
// server is not running.
func (p *Postgres) Pause() error { return p.d.signal(syscall.SIGSTOP) }

// Resume continues a paused server (SIGCONT to all its processes). Resuming
// a server that is not paused is harmless.
func (p *Postgres) Resume() error { return p.d.signal(syscall.SIGCONT) }

// Restart stops the server if it is running (as Stop does) and starts it
// again on the same port and data, returning once it answers a query. Data
// survives. It returns ErrClosed after Close.
func (p *Postgres) Restart() error { return p.d.restart() }

// Close stops the server and removes its directory. It is idempotent.
func (p *Postgres) Close() error { return p.d.close() }

// SharedPostgres returns the test binary's shared PostgreSQL server,
// starting it on first use. Every test of the package gets the same server
// and database, so tests must use their own tables (or schemas) and must not
// stop, kill or pause it, nor KillConnections (use NewPostgres for that). If
// the server cannot start, this and every later call fail the test with
// t.Fatalf giving the reason and the server's log tail, or, under go test
// -short, skip it when PostgreSQL is not installed (see NotInstalled). The
// package must run its tests through Main, which closes the server.
func SharedPostgres(t testing.TB) *Postgres {
	t.Helper()
	return sharedPostgres.get(t, "SharedPostgres", "PostgreSQL", StartPostgres)
}

// NewPostgres starts a fresh private PostgreSQL server for this test (for
// fault tests: Pause, Kill, Restart, KillConnections), closes it with
// t.Cleanup, and fails the test with t.Fatalf if it cannot start (or skips
// it, as SharedPostgres does). It does not need Main.
func NewPostgres(t testing.TB) *Postgres {
	t.Helper()
	return newServer(t, "PostgreSQL", StartPostgres)
}
