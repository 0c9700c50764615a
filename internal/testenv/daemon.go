package testenv

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Timeouts and limits of the process lifecycle, for every kind of server.
const (
	// readyTimeout bounds the wait for a started Redis to answer PING.
	readyTimeout = 10 * time.Second
	// dbReadyTimeout bounds the wait for a started database server
	// (PostgreSQL, MariaDB, ZooKeeper) to answer: crash recovery after
	// Kill and a JVM start can take a few seconds on a loaded machine.
	dbReadyTimeout = 30 * time.Second
	// dbProbeTimeout bounds one readiness probe of a database server.
	dbProbeTimeout = 2 * time.Second
	// dbSetupTimeout bounds initdb and mariadb-install-db.
	dbSetupTimeout = 60 * time.Second
	// groupTimeout bounds the wait for a killed process group to be gone.
	groupTimeout = 5 * time.Second
	// stopTimeout bounds the wait for a server to exit after its shutdown
	// signal before it is killed with SIGKILL.
	stopTimeout = 10 * time.Second
	// startAttempts is how many ports a start tries when the server
	// cannot bind.
	startAttempts = 5
	// logTailLines is how many lines of the server's logs go into an error.
	logTailLines = 25
)

// ErrClosed is returned by methods of a server that has been closed.
var ErrClosed = errors.New("testenv: server closed")

// ErrNotRunning is returned by Pause, Resume and Kill when the server has no
// running process (it was stopped, killed or crashed).
var ErrNotRunning = errors.New("testenv: server not running")

// daemon runs one server process (redis-server, PostgreSQL, MariaDB or
// ZooKeeper) as a child of the test binary, in its own process group,
// killed by the kernel if the test binary dies (Linux): the start-up, the
// readiness wait, the retries on other ports and the lifecycle that every
// kind of server shares. Pause, Resume and Kill reach its helper processes
// too (PostgreSQL's backends, which are session leaders of their own;
// redis-server's background saves). Its methods serialise with each other.
type daemon struct {
	name      string                                   // "postgres", for messages
	addr      string                                   // "127.0.0.1:port"
	dir       string                                   // private directory, removed by close
	logs      []string                                 // log files besides stdout.log: tailed in errors, emptied before each start attempt
	bus       bool                                     // port+10000 must be free too (a Redis Cluster node's bus)
	readyWait time.Duration                            // bound of the readiness wait; 0 means dbReadyTimeout
	probeWait time.Duration                            // bound of one probe; 0 means dbProbeTimeout
	prepare   func() error                             // optional, run before each start (write a config file)
	command   func() *exec.Cmd                         // the command line of one run
	probe     func(ctx context.Context, pid int) error // one readiness check of the process pid
	stopSig   syscall.Signal                           // the graceful shutdown signal

	mu     sync.Mutex
	proc   *process // nil when not running
	closed bool
}

// process is one run of a server.
type process struct {
	cmd  *exec.Cmd
	out  *os.File
	done chan struct{} // closed once the process has exited
	err  error         // cmd.Wait's result, valid after done is closed
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stdoutLog is the file receiving the server's stdout and stderr.
func (d *daemon) stdoutLog() string { return filepath.Join(d.dir, "stdout.log") }

// start launches the process and waits until probe succeeds. A start that
// fails because the port is taken returns an error wrapping errBind. The
// caller holds d.mu or owns d exclusively.
func (d *daemon) start() error {
	if d.prepare != nil {
		if err := d.prepare(); err != nil {
			return err
		}
	}
	out, err := os.OpenFile(d.stdoutLog(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("testenv: %w", err)
	}
	cmd := d.command()
	if cmd.Dir == "" {
		cmd.Dir = d.dir
	}
	cmd.Stdout = out
	cmd.Stderr = out
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	if err := startCmd(cmd); err != nil {
		_ = out.Close()
		return fmt.Errorf("testenv: starting %s: %w", cmd.Path, err)
	}
	p := &process{cmd: cmd, out: out, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		_ = out.Close()
		close(p.done)
	}()
	d.proc = p
	if err := d.waitReady(p); err != nil {
		killTree(p)
		d.proc = nil
		if strings.Contains(err.Error(), "Address already in use") {
			return fmt.Errorf("%w: %w", errBind, err)
		}
		return err
	}
	return nil
}

// waitReady polls probe until it succeeds, the process exits, or d.readyWait
// passes.
func (d *daemon) waitReady(p *process) error {
	ready, probeWait := cmp.Or(d.readyWait, dbReadyTimeout), cmp.Or(d.probeWait, dbProbeTimeout)
	deadline := time.Now().Add(ready)
	var lastErr error
	for delay := 5 * time.Millisecond; ; delay = min(delay*2, 100*time.Millisecond) {
		if p.exited() {
			return fmt.Errorf("testenv: %s on %s exited during start-up (%v)%s", d.name, d.addr, p.err, d.logTail())
		}
		ctx, cancel := context.WithTimeout(context.Background(), probeWait)
		go func() {
			// A probe stuck on some other listener ends with the process.
			select {
			case <-p.done:
				cancel()
			case <-ctx.Done():
			}
		}()
		lastErr = d.probe(ctx, p.cmd.Process.Pid)
		cancel()
		if lastErr == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("testenv: %s on %s not ready after %v: %v%s", d.name, d.addr, ready, lastErr, d.logTail())
		}
		time.Sleep(delay)
	}
}

// killTree simulates a crash of the whole server: it freezes the server
// process (so that it forks no more), sends SIGKILL to it, its process group
// and all its descendants, and waits until the process has exited and
// (within groupTimeout) none of the others is alive.
func killTree(p *process) {
	pid := p.cmd.Process.Pid
	var kids []int
	// Once the server has exited its pid may be reused: then only its
	// process group is signalled (its orphans are no longer its
	// descendants anyway).
	if p.cmd.Process.Signal(syscall.SIGSTOP) == nil {
		_ = waitStopped(pid, true, time.Second)
		kids = descendants(pid)
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	for _, k := range kids {
		_ = syscall.Kill(k, syscall.SIGKILL)
	}
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
	deadline := time.Now().Add(groupTimeout)
	for anyAlive(pid, kids) && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
}

// signalTree sends sig to the server process, its process group and its
// descendants. For SIGSTOP it returns once they are all stopped (the server
// first, so that it forks no more), for SIGCONT once the server runs again.
func signalTree(p *process, sig syscall.Signal) error {
	pid := p.cmd.Process.Pid
	if err := p.cmd.Process.Signal(sig); err != nil {
		return err
	}
	stop := sig == syscall.SIGSTOP
	if stop {
		if err := waitStopped(pid, true, 2*time.Second); err != nil {
			return err
		}
	}
	_ = syscall.Kill(-pid, sig)
	for _, k := range descendants(pid) {
		// A child may exit meanwhile; that is not an error.
		if syscall.Kill(k, sig) == nil && stop {
			waitStoppedOrGone(k, 2*time.Second)
		}
	}
	if !stop {
		return waitStopped(pid, false, 2*time.Second)
	}
	return nil
}

// logTail returns the last lines of the server's logs and output for
// errors.
func (d *daemon) logTail() string {
	var b strings.Builder
	for _, f := range append(slices.Clip(d.logs), d.stdoutLog()) {
		b.WriteString(fileTail(f))
	}
	return b.String()
}

// fileTail returns the last logTailLines lines of file f under a header, or
// "" if it is missing or empty.
func fileTail(f string) string {
	data, err := os.ReadFile(f)
	if err != nil || len(strings.TrimSpace(string(data))) == 0 {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > logTailLines {
		lines = lines[len(lines)-logTailLines:]
	}
	return fmt.Sprintf("\n--- last lines of %s ---\n%s", f, strings.Join(lines, "\n"))
}

func (d *daemon) running() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.proc != nil && !d.proc.exited()
}

func (d *daemon) pid() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.proc == nil || d.proc.exited() {
		return 0
	}
	return d.proc.cmd.Process.Pid
}

func (d *daemon) stop() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.stopLocked()
}

// stopLocked sends the graceful shutdown signal (and SIGCONT, in case the
// server is paused) and waits for the exit, killing the group after
// stopTimeout.
func (d *daemon) stopLocked() error {
	p := d.proc
	if p == nil {
		return nil
	}
	d.proc = nil
	if p.exited() {
		// The server crashed; make sure no helper process survives it.
		killTree(p)
		return nil
	}
	_ = p.cmd.Process.Signal(d.stopSig)
	_ = signalTree(p, syscall.SIGCONT)
	select {
	case <-p.done:
		return nil
	case <-time.After(stopTimeout):
		killTree(p)
		return fmt.Errorf("testenv: %s on %s ignored %v for %v; killed%s", d.name, d.addr, d.stopSig, stopTimeout, d.logTail())
	}
}

func (d *daemon) kill() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	p := d.proc
	if p == nil || p.exited() {
		if p != nil {
			killTree(p)
		}
		d.proc = nil
		return ErrNotRunning
	}
	d.proc = nil
	killTree(p)
	return nil
}

// signal sends sig to the server and its helper processes (see
// signalTree).
func (d *daemon) signal(sig syscall.Signal) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	p := d.proc
	if p == nil || p.exited() {
		return ErrNotRunning
	}
	if err := signalTree(p, sig); err != nil {
		return fmt.Errorf("testenv: %v to %s on %s: %w", sig, d.name, d.addr, err)
	}
	return nil
}

func (d *daemon) restart() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return ErrClosed
	}
	if err := d.stopLocked(); err != nil {
		return err
	}
	var err error
	for range startAttempts {
		if err = d.start(); err == nil || !errors.Is(err, errBind) {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
	return err
}

func (d *daemon) close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil
	}
	d.closed = true
	err := d.stopLocked()
	if rmErr := os.RemoveAll(d.dir); rmErr != nil && err == nil {
		err = fmt.Errorf("testenv: %w", rmErr)
	}
	return err
}

// startDaemon starts d on free ports, retrying on other ports when the
// port is taken. setPort is called with each port tried before d.start
// (it sets whatever depends on the port; d.addr is set already). On
// failure the caller removes d.dir.
func startDaemon(d *daemon, setPort func(port int)) error {
	var lastErr error
	for range startAttempts {
		port, err := reservePort(d.bus)
		if err != nil {
			return err
		}
		d.addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		setPort(port)
		// Each attempt gets fresh logs so the error shows only its own.
		for _, f := range append(slices.Clip(d.logs), d.stdoutLog()) {
			_ = os.Remove(f)
		}
		lastErr = d.start()
		if lastErr == nil || !errors.Is(lastErr, errBind) {
			return lastErr
		}
	}
	return lastErr
}

// errBind marks a start that failed because a port was taken.
var errBind = errors.New("port already in use")

// runSetup runs a set-up command (initdb, mariadb-install-db) with its
// output in logFile, and returns an error with the log's tail if it fails.
func runSetup(cmd *exec.Cmd, logFile string) error {
	out, err := os.OpenFile(logFile, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("testenv: %w", err)
	}
	defer out.Close()
	cmd.Stdout = out
	cmd.Stderr = out
	cmd.WaitDelay = time.Second
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	if err := startCmd(cmd); err != nil {
		return fmt.Errorf("testenv: starting %s: %w", cmd.Path, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(dbSetupTimeout):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		err = fmt.Errorf("timed out after %v", dbSetupTimeout)
		<-done
	}
	if err != nil {
		return fmt.Errorf("testenv: %s failed: %v%s", strings.Join(cmd.Args, " "), err, fileTail(logFile))
	}
	return nil
}

// runAs describes the OS user a server runs as: the current user, or, when
// the test binary runs as root and the server refuses root (PostgreSQL), a
// dedicated account.
type runAs struct {
	cred *syscall.Credential // nil: the current user
}

// lookupRunAs returns the credential to run a server as: nil unless the
// process is root, else the given account's.
func lookupRunAs(account, hint string) (runAs, error) {
	if os.Geteuid() != 0 {
		return runAs{}, nil
	}
	u, err := user.Lookup(account)
	if err != nil {
		return runAs{}, fmt.Errorf("testenv: running as root, the server must run as the %q user, which does not exist (%s): %w", account, hint, err)
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return runAs{}, fmt.Errorf("testenv: user %q has a non-numeric uid %q or gid %q", account, u.Uid, u.Gid)
	}
	return runAs{cred: &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}}, nil
}

// attr returns the SysProcAttr of a command run as r.
func (r runAs) attr() *syscall.SysProcAttr {
	if r.cred == nil {
		return &syscall.SysProcAttr{}
	}
	c := *r.cred
	return &syscall.SysProcAttr{Credential: &c}
}

// mkdirTemp creates the server's private directory (mode 0700) under
// os.TempDir, owned by r's user. If that user could not reach it there
// (a private TMPDIR of root), /tmp is used instead.
func (r runAs) mkdirTemp(pattern string) (string, error) {
	parent := os.TempDir()
	if r.cred != nil && !searchable(parent) {
		parent = "/tmp"
	}
	dir, err := os.MkdirTemp(parent, pattern)
	if err != nil {
		return "", fmt.Errorf("testenv: %w", err)
	}
	if r.cred != nil {
		if err := os.Chown(dir, int(r.cred.Uid), int(r.cred.Gid)); err != nil {
			_ = os.RemoveAll(dir)
			return "", fmt.Errorf("testenv: %w", err)
		}
	}
	return dir, nil
}

// searchable reports whether every directory from / down to dir can be
// traversed by any user.
func searchable(dir string) bool {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return false
	}
	for {
		fi, err := os.Stat(dir)
		if err != nil || fi.Mode().Perm()&0o001 == 0 {
			return false
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return true
		}
		dir = parent
	}
}
