package testenv

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	// The "mysql" database/sql driver, used for readiness checks and
	// KillConnections (and available to tests under that name).
	_ "github.com/go-sql-driver/mysql"
)

// MariaDBDatabase is the database StartMariaDB creates; MariaDB.DSN points
// at it.
const MariaDBDatabase = "floodgate"

// MariaDB is one private MariaDB server (mariadbd) owned by the test binary:
// a fresh data directory made by mariadb-install-db (root with an empty
// password, no test database) in its own temporary directory, listening on
// 127.0.0.1 at a port chosen free at start (never 3306) and on a unix socket
// in Dir, with utf8mb4 as the server character set, no binary log and no
// fsync at commit (committed rows survive Kill, not an OS crash). It reads
// no option file (--no-defaults), so the machine's my.cnf does not matter.
// Exported fields are set once by StartMariaDB. Its methods are safe for
// concurrent use.
type MariaDB struct {
	// Addr is "127.0.0.1:<Port>".
	Addr string
	// Port is the TCP port, the same for the server's whole life.
	Port int
	// DSN is the go-sql-driver/mysql data source name of the "floodgate"
	// database as root: root@tcp(127.0.0.1:<Port>)/floodgate?parseTime=true.
	DSN string
	// Dir is the server's private directory: data in Dir/data, the unix
	// socket (Dir/mysql.sock), the logs. Close removes it.
	Dir string

	d *daemon
}

// lookMariaDB finds the server and its installer on PATH, else in /usr/sbin
// and /usr/bin (where Debian puts them; /usr/sbin is often not on a
// non-root user's PATH).
func lookMariaDB() (install, server string, err error) {
	find := func(names ...string) string {
		for _, n := range names {
			if p, err := exec.LookPath(n); err == nil {
				return p
			}
		}
		for _, n := range names {
			for _, dir := range []string{"/usr/sbin", "/usr/bin"} {
				if p := filepath.Join(dir, n); isExecutable(p) {
					return p
				}
			}
		}
		return ""
	}
	install = find("mariadb-install-db", "mysql_install_db")
	server = find("mariadbd", "mysqld")
	if install == "" || server == "" {
		return "", "", notInstalled("testenv: MariaDB's mariadb-install-db and mariadbd not found on PATH, /usr/sbin or /usr/bin (install them: apt-get install -y mariadb-server)")
	}
	return install, server, nil
}

// StartMariaDB runs mariadb-install-db in a new temporary directory, starts
// mariadbd on a free 127.0.0.1 port (retrying on other ports if it cannot
// bind), waits until it answers a query (within about 30 s), and creates
// the database "floodgate". As root, both run with --user=root. The error,
// if any, includes the tail of the logs; it matches ErrNotInstalled when
// MariaDB is not installed. The caller must Close the server (NewMariaDB and
// SharedMariaDB do it for you).
func StartMariaDB() (*MariaDB, error) {
	install, bin, err := lookMariaDB()
	if err != nil {
		return nil, err
	}
	dir, err := runAs{}.mkdirTemp("fg-mariadb-")
	if err != nil {
		return nil, err
	}
	m := &MariaDB{Dir: dir}
	if err := m.init(install, bin); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return m, nil
}

func (m *MariaDB) init(install, bin string) error {
	data := filepath.Join(m.Dir, "data")
	sock := filepath.Join(m.Dir, "mysql.sock")
	if len(sock) > 100 {
		return fmt.Errorf("testenv: unix socket path %q too long; set TMPDIR to a shorter directory", sock)
	}
	// Options both the bootstrap and the server get. A small redo log
	// keeps each server's directory small and its creation quick.
	common := []string{"--innodb-log-file-size=16M", "--innodb-buffer-pool-size=32M"}
	var userArg []string
	if os.Geteuid() == 0 {
		userArg = []string{"--user=root"}
	}
	args := append([]string{"--no-defaults", "--datadir=" + data, "--auth-root-authentication-method=normal", "--skip-test-db", "--skip-name-resolve"}, userArg...)
	// mariadb-install-db's bootstrap server fails now and then on a loaded
	// machine (it gives up waiting for itself); a fresh data dir and another
	// try has always done.
	var err error
	for attempt := range 3 {
		if attempt > 0 {
			_ = os.RemoveAll(data)
			time.Sleep(time.Duration(attempt) * 500 * time.Millisecond)
		}
		cmd := exec.Command(install, append(args, common...)...)
		cmd.Dir = m.Dir
		if err = runSetup(cmd, filepath.Join(m.Dir, "install.log")); err == nil {
			break
		}
	}
	if err != nil {
		return err
	}
	m.d = &daemon{
		name:    "mariadbd",
		dir:     m.Dir,
		stopSig: syscall.SIGTERM,
		command: func() *exec.Cmd {
			args := append([]string{
				"--no-defaults",
				"--datadir=" + data,
				"--port=" + strconv.Itoa(m.Port),
				"--bind-address=127.0.0.1",
				"--socket=" + sock,
				"--pid-file=" + filepath.Join(m.Dir, "mariadbd.pid"),
				"--tmpdir=" + m.Dir,
				"--skip-name-resolve",
				"--skip-log-bin",
				"--innodb-flush-log-at-trx-commit=2",
				"--innodb-doublewrite=0",
				"--max-connections=200",
				"--character-set-server=utf8mb4",
				"--collation-server=utf8mb4_general_ci",
			}, userArg...)
			return exec.Command(bin, append(args, common...)...)
		},
		probe: func(ctx context.Context, _ int) error {
			return withSQLConn(ctx, "mysql", m.adminDSN(), func(c *sql.Conn) error {
				var got string
				if err := c.QueryRowContext(ctx, "SELECT @@datadir").Scan(&got); err != nil {
					return err
				}
				if filepath.Clean(got) != data {
					return fmt.Errorf("port %d answered by another server (datadir %s, ours %s): Address already in use", m.Port, got, data)
				}
				return nil
			})
		},
	}
	err = startDaemon(m.d, func(port int) {
		m.Port = port
		m.Addr = m.d.addr
		m.DSN = fmt.Sprintf("root@tcp(%s)/%s?parseTime=true", m.Addr, MariaDBDatabase)
	})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), dbReadyTimeout)
	defer cancel()
	err = withSQLConn(ctx, "mysql", m.adminDSN(), func(c *sql.Conn) error {
		_, err := c.ExecContext(ctx, "CREATE DATABASE "+MariaDBDatabase+" CHARACTER SET utf8mb4")
		return err
	})
	if err != nil {
		_ = m.d.close()
		return fmt.Errorf("testenv: creating database %s on %s: %w%s", MariaDBDatabase, m.Addr, err, m.d.logTail())
	}
	return nil
}

// adminDSN connects as root without selecting a database.
func (m *MariaDB) adminDSN() string {
	return fmt.Sprintf("root@tcp(%s)/?timeout=2s", m.Addr)
}

// KillConnections kills every connection to the "floodgate" database except
// the one it uses itself (KILL CONNECTION for each matching row of
// information_schema.processlist), and returns once the server no longer
// lists them: their clients' next query fails. ctx bounds the whole
// operation (10 s if it has no deadline). Meant for fault tests.
func (m *MariaDB) KillConnections(ctx context.Context) error {
	ctx, cancel := withDefaultTimeout(ctx)
	defer cancel()
	return withSQLConn(ctx, "mysql", m.adminDSN(), func(c *sql.Conn) error {
		rows, err := c.QueryContext(ctx, "SELECT id FROM information_schema.processlist WHERE db = ? AND id <> CONNECTION_ID()", MariaDBDatabase)
		if err != nil {
			return fmt.Errorf("testenv: KillConnections: %w", err)
		}
		var ids []string
		for rows.Next() {
			var id uint64
			if err := rows.Scan(&id); err != nil {
				_ = rows.Close()
				return fmt.Errorf("testenv: KillConnections: %w", err)
			}
			ids = append(ids, strconv.FormatUint(id, 10))
		}
		if err := rows.Err(); err != nil {
			return fmt.Errorf("testenv: KillConnections: %w", err)
		}
		for _, id := range ids {
			// 1094: unknown thread id, the connection closed meanwhile.
			if _, err := c.ExecContext(ctx, "KILL CONNECTION "+id); err != nil && !strings.Contains(err.Error(), "1094") {
				return fmt.Errorf("testenv: KillConnections: %w", err)
			}
		}
		if len(ids) == 0 {
			return nil
		}
		list := strings.Join(ids, ",")
		return waitGone(ctx, func(ctx context.Context) (int, error) {
			var n int
			err := c.QueryRowContext(ctx, "SELECT count(*) FROM information_schema.processlist WHERE id IN ("+list+")").Scan(&n)
			return n, err
		})
	})
}

// LogTail returns the last lines of the server's log (its stderr, in
// Dir/stdout.log), for a test to print when something goes wrong.
func (m *MariaDB) LogTail() string { return m.d.logTail() }

// Running reports whether the server process is alive (it may be paused).
func (m *MariaDB) Running() bool { return m.d.running() }

// Pid returns the server's process id, or 0 if it is not running.
func (m *MariaDB) Pid() int { return m.d.pid() }

// Stop shuts the server down cleanly (SIGTERM) and waits for it to exit,
// killing it after 10 s. It is idempotent.
func (m *MariaDB) Stop() error { return m.d.stop() }

// Kill simulates a crash with SIGKILL and returns once the server is gone.
// Committed transactions survive (the redo log is written, not synced, at
// each commit), and Restart runs crash recovery. It returns ErrNotRunning if
// the server was not running.
func (m *MariaDB) Kill() error { return m.d.kill() }

// Pause freezes the server with SIGSTOP: connections stay open but nothing
// is answered (queries and new connections hang until their context
// expires) until Resume. It returns ErrNotRunning if the server is not
// running.
func (m *MariaDB) Pause() error { return m.d.signal(syscall.SIGSTOP) }

// Resume continues a paused server. Resuming a server that is not paused is
// harmless.
func (m *MariaDB) Resume() error { return m.d.signal(syscall.SIGCONT) }

// Restart stops the server if it is running (as Stop does) and starts it
// again on the same port and data, returning once it answers a query. Data
// survives. It returns ErrClosed after Close.
func (m *MariaDB) Restart() error { return m.d.restart() }

// Close stops the server and removes its directory. It is idempotent.
func (m *MariaDB) Close() error { return m.d.close() }

// SharedMariaDB returns the test binary's shared MariaDB server, starting it
// on first use, with the same contract as SharedPostgres (use NewMariaDB for
// fault tests).
func SharedMariaDB(t testing.TB) *MariaDB {
	t.Helper()
	return sharedMariaDB.get(t, "SharedMariaDB", "MariaDB", StartMariaDB)
}

// NewMariaDB starts a fresh private MariaDB server for this test like
// NewPostgres.
func NewMariaDB(t testing.TB) *MariaDB {
	t.Helper()
	return newServer(t, "MariaDB", StartMariaDB)
}
