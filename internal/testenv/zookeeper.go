package testenv

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"
)

// ZooKeeper is one private standalone ZooKeeper server (a java process
// running org.apache.zookeeper.server.ZooKeeperServerMain) owned by the test
// binary, listening on 127.0.0.1 at a port chosen free at start (never
// 2181), with its zoo.cfg, data and logs in its own temporary directory:
// tickTime 500 ms, session timeouts from 1 s to 20 s, no AdminServer, all
// four-letter commands allowed, no fsync. Exported fields are set once by
// StartZooKeeper. Its methods are safe for concurrent use.
type ZooKeeper struct {
	// Addr is "127.0.0.1:<Port>", the server to give a client.
	Addr string
	// Port is the client port, the same for the server's whole life.
	Port int
	// Dir is the server's private directory: zoo.cfg, data in Dir/data,
	// the logs. Close removes it.
	Dir string

	d *daemon
}

// lookZooKeeper finds java (PATH, then $JAVA_HOME/bin) and ZooKeeper's
// class path: $ZOOKEEPER_HOME's jars if set, else Debian's
// /usr/share/java/zookeeper.jar (package zookeeper, whose manifest names its
// dependencies; slf4j-simple is added so the server logs to stderr), else
// the jars of /usr/share/zookeeper (and its lib directory).
func lookZooKeeper() (java, classpath string, err error) {
	java, err = exec.LookPath("java")
	if err != nil {
		if home := os.Getenv("JAVA_HOME"); home != "" && isExecutable(filepath.Join(home, "bin", "java")) {
			java, err = filepath.Join(home, "bin", "java"), nil
		}
	}
	if err != nil {
		return "", "", notInstalled("testenv: java, which runs ZooKeeper, not found on PATH or in $JAVA_HOME/bin (install a JRE: apt-get install -y default-jre-headless)")
	}
	jars := func(dirs ...string) []string {
		var out []string
		for _, dir := range dirs {
			m, _ := filepath.Glob(filepath.Join(dir, "*.jar"))
			out = append(out, m...)
		}
		return out
	}
	hasServer := func(cp []string) bool {
		for _, j := range cp {
			if b := filepath.Base(j); strings.HasPrefix(b, "zookeeper-") || b == "zookeeper.jar" {
				return true
			}
		}
		return false
	}
	if home := os.Getenv("ZOOKEEPER_HOME"); home != "" {
		if cp := jars(home, filepath.Join(home, "lib")); hasServer(cp) {
			return java, strings.Join(cp, string(os.PathListSeparator)), nil
		}
	}
	if isRegular("/usr/share/java/zookeeper.jar") {
		cp := []string{"/usr/share/java/zookeeper.jar"}
		if isRegular("/usr/share/java/slf4j-simple.jar") {
			cp = append(cp, "/usr/share/java/slf4j-simple.jar")
		}
		return java, strings.Join(cp, string(os.PathListSeparator)), nil
	}
	if cp := jars("/usr/share/zookeeper", "/usr/share/zookeeper/lib"); hasServer(cp) {
		return java, strings.Join(cp, string(os.PathListSeparator)), nil
	}
	return "", "", notInstalled("testenv: ZooKeeper's jars not found in $ZOOKEEPER_HOME, /usr/share/java/zookeeper.jar or /usr/share/zookeeper (install them: apt-get install -y zookeeper)")
}

func isRegular(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular()
}

// StartZooKeeper writes a zoo.cfg in a new temporary directory, starts the
// server on a free 127.0.0.1 port (retrying on other ports if it cannot
// bind), and returns once it answers "ruok" with "imok" and a client
// session can create and delete a node (normally within a few seconds; at
// most about 30 s). The error, if any, includes the tail of the server's
// log; it matches ErrNotInstalled when java or ZooKeeper is not installed.
// The caller must Close the server (NewZooKeeper and SharedZooKeeper do it
// for you).
func StartZooKeeper() (*ZooKeeper, error) {
	java, classpath, err := lookZooKeeper()
	if err != nil {
		return nil, err
	}
	dir, err := runAs{}.mkdirTemp("fg-zookeeper-")
	if err != nil {
		return nil, err
	}
	z := &ZooKeeper{Dir: dir}
	data := filepath.Join(dir, "data")
	cfg := filepath.Join(dir, "zoo.cfg")
	z.d = &daemon{
		name:    "zookeeper",
		dir:     dir,
		stopSig: syscall.SIGTERM,
		prepare: func() error {
			text := strings.Join([]string{
				"dataDir=" + data,
				"clientPort=" + strconv.Itoa(z.Port),
				"clientPortAddress=127.0.0.1",
				"tickTime=500",
				"minSessionTimeout=1000",
				"maxSessionTimeout=20000",
				"maxClientCnxns=0",
				"admin.enableServer=false",
				"4lw.commands.whitelist=*",
				"forceSync=no",
				"preAllocSize=4096",
				"autopurge.purgeInterval=0",
			}, "\n") + "\n"
			if err := os.WriteFile(cfg, []byte(text), 0o600); err != nil {
				return fmt.Errorf("testenv: %w", err)
			}
			return nil
		},
		command: func() *exec.Cmd {
			return exec.Command(java,
				"-Xmx256m",
				"-XX:TieredStopAtLevel=1",
				"-XX:+UseSerialGC",
				"-Xshare:auto",
				"-XX:-UsePerfData",
				"-XX:+ExitOnOutOfMemoryError",
				"-Djava.awt.headless=true",
				"-Djava.io.tmpdir="+dir,
				"-Dzookeeper.admin.enableServer=false",
				"-Dzookeeper.4lw.commands.whitelist=*",
				"-Dorg.slf4j.simpleLogger.showDateTime=true",
				"-Dorg.slf4j.simpleLogger.dateTimeFormat=HH:mm:ss.SSS",
				"-cp", classpath,
				"org.apache.zookeeper.server.ZooKeeperServerMain",
				cfg,
			)
		},
		probe: func(ctx context.Context, _ int) error {
			if got, err := fourLetter(ctx, z.Addr, "ruok"); err != nil {
				return err
			} else if got != "imok" {
				return fmt.Errorf("ruok answered %q", got)
			}
			conf, err := fourLetter(ctx, z.Addr, "conf")
			if err != nil {
				return err
			}
			if !strings.Contains(conf, "dataDir="+filepath.Join(data, "version-2")+"\n") {
				return fmt.Errorf("port %d answered by another server (conf: %q; ours has dataDir %s): Address already in use", z.Port, conf, data)
			}
			return zkCreateDelete(ctx, z.Addr)
		},
	}
	err = startDaemon(z.d, func(port int) {
		z.Port = port
		z.Addr = z.d.addr
	})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	return z, nil
}

// fourLetter sends a four-letter command and returns the whole answer.
func fourLetter(ctx context.Context, addr, cmd string) (string, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return "", err
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()
	if _, err := io.WriteString(conn, cmd); err != nil {
		return "", err
	}
	b, err := io.ReadAll(conn)
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%s: %w", cmd, ctx.Err())
		}
		return "", err
	}
	return string(b), nil
}

type zkNopLogger struct{}

func (zkNopLogger) Printf(string, ...any) {}

// zkCreateDelete opens a session, creates and deletes an ephemeral node,
// and closes the session, all bounded by ctx.
func zkCreateDelete(ctx context.Context, addr string) error {
	conn, events, err := zk.Connect([]string{addr}, 10*time.Second, zk.WithLogger(zkNopLogger{}))
	if err != nil {
		return err
	}
	defer conn.Close()
	for connected := false; !connected; {
		select {
		case ev := <-events:
			connected = ev.State == zk.StateHasSession
		case <-ctx.Done():
			return fmt.Errorf("no ZooKeeper session: %w", ctx.Err())
		}
	}
	done := make(chan error, 1)
	go func() {
		path, err := conn.Create("/testenv-ready-", nil, zk.FlagEphemeralSequential, zk.WorldACL(zk.PermAll))
		if err == nil {
			err = conn.Delete(path, -1)
		}
		done <- err
	}()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
		conn.Close() // fails the pending request
		<-done
		return fmt.Errorf("create and delete of a node: %w", ctx.Err())
	}
}

// Command sends a four-letter command ("ruok", "srvr", "mntr", "cons" ...;
// all are allowed) on a fresh connection and returns the server's whole
// answer. ctx bounds the exchange (5 s if it has no deadline).
func (z *ZooKeeper) Command(ctx context.Context, cmd string) (string, error) {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
	}
	return fourLetter(ctx, z.Addr, cmd)
}

// LogTail returns the last lines of the server's log (its stdout and
// stderr, in Dir/stdout.log), for a test to print when something goes
// wrong.
func (z *ZooKeeper) LogTail() string { return z.d.logTail() }

// Running reports whether the server process is alive (it may be paused).
func (z *ZooKeeper) Running() bool { return z.d.running() }

// Pid returns the java process's id, or 0 if it is not running.
func (z *ZooKeeper) Pid() int { return z.d.pid() }

// Stop shuts the server down (SIGTERM) and waits for it to exit, killing it
// after 10 s. It is idempotent.
func (z *ZooKeeper) Stop() error { return z.d.stop() }

// Kill simulates a crash with SIGKILL and returns once the server is gone.
// Acknowledged writes survive (the transaction log is written, not synced,
// before a write is acknowledged). It returns ErrNotRunning if the server
// was not running.
func (z *ZooKeeper) Kill() error { return z.d.kill() }

// Pause freezes the server with SIGSTOP: connections stay open but nothing
// is answered until Resume (sessions whose timeout passes meanwhile expire
// once it resumes). It returns ErrNotRunning if the server is not running.
func (z *ZooKeeper) Pause() error { return z.d.signal(syscall.SIGSTOP) }

// Resume continues a paused server. Resuming a server that is not paused is
// harmless.
func (z *ZooKeeper) Resume() error { return z.d.signal(syscall.SIGCONT) }

// Restart stops the server if it is running (as Stop does) and starts it
// again on the same port and data, returning once it is ready. Nodes
// survive, and so do sessions that reconnect within their timeout (with
// their ephemeral nodes). It returns ErrClosed after Close.
func (z *ZooKeeper) Restart() error { return z.d.restart() }

// Close stops the server and removes its directory. It is idempotent.
func (z *ZooKeeper) Close() error { return z.d.close() }

// SharedZooKeeper returns the test binary's shared ZooKeeper server,
// starting it on first use. Every test of the package gets the same server,
// so tests must use their own paths (znodes) and must not stop, kill or
// pause it (use NewZooKeeper for that). If the server cannot start, this and
// every later call fail the test with t.Fatalf giving the reason and the
// server's log tail, or, under go test -short, skip it when java or
// ZooKeeper is not installed (see NotInstalled). The package must run its
// tests through Main, which closes the server.
func SharedZooKeeper(t testing.TB) *ZooKeeper {
	t.Helper()
	return sharedZooKeeper.get(t, "SharedZooKeeper", "ZooKeeper", StartZooKeeper)
}

// NewZooKeeper starts a fresh private ZooKeeper server for this test (for
// fault tests: Pause, Kill, Restart), closes it with t.Cleanup, and fails
// the test with t.Fatalf if it cannot start (or skips it, as
// SharedZooKeeper does). It does not need Main.
func NewZooKeeper(t testing.TB) *ZooKeeper {
	t.Helper()
	return newServer(t, "ZooKeeper", StartZooKeeper)
}
