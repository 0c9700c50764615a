package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Timeouts used by the process lifecycle.
const (
	// readyTimeout bounds the wait for a started server to answer PING.
	readyTimeout = 10 * time.Second
	// stopTimeout bounds the wait for a server to exit after SIGTERM
	// before it is killed with SIGKILL.
	stopTimeout = 10 * time.Second
	// startAttempts is how many ports StartRedis tries when the server
	// cannot bind.
	startAttempts = 5
	// logTailLines is how many lines of the server's logs go into an error.
	logTailLines = 25
)

// ErrClosed is returned by methods of a Redis that has been closed.
var ErrClosed = errors.New("testenv: server closed")

// ErrNotRunning is returned by Pause, Resume and Kill when the server has no
// running process (it was stopped, killed or crashed).
var ErrNotRunning = errors.New("testenv: server not running")

// Option configures a server started by StartRedis or NewRedis.
type Option func(*config)

type config struct {
	aof        bool
	unixSocket bool
	clusterBus bool     // the port+10000 bus port must be free too
	sentinel   []string // sentinel.conf lines; non-nil runs redis-server --sentinel
	args       []string
}

// WithAOF enables persistence through the append-only file
// (--appendonly yes --appendfsync always) in the server's directory, so that
// every acknowledged write survives Stop, Kill and Restart. Without it the
// server keeps nothing on disk and comes back empty after Restart.
func WithAOF() Option { return func(c *config) { c.aof = true } }

// WithUnixSocket makes the server listen on a unix socket too, at Redis.Socket
// (a file in its directory, mode 0700), besides its TCP port.
func WithUnixSocket() Option { return func(c *config) { c.unixSocket = true } }

// WithArgs appends redis-server command-line flags after the defaults, for
// example WithArgs("--maxmemory", "10mb"). A later flag overrides an earlier
// one with the same name.
func WithArgs(args ...string) Option {
	return func(c *config) { c.args = append(c.args, args...) }
}

// withClusterBus is set by StartCluster: it reserves port+10000 as well.
func withClusterBus() Option { return func(c *config) { c.clusterBus = true } }

// withSentinel runs the server as a Sentinel with the given sentinel.conf
// lines (written once, then owned and rewritten by the Sentinel).
func withSentinel(lines ...string) Option {
	return func(c *config) { c.sentinel = append([]string{}, lines...) }
}

// Redis is one private redis-server process (or Sentinel, see StartSentinel)
// owned by the test binary: it listens on 127.0.0.1 at a port chosen free at
// start, keeps its data, config and logs in its own temporary directory, and
// is killed by the kernel if the test binary dies (Linux). Its exported fields
// are set once by StartRedis and never change. Its methods are safe for
// concurrent use; they serialise with each other.
type Redis struct {
	// Addr is "127.0.0.1:<Port>", the address to dial.
	Addr string
	// Port is the TCP port, the same for the server's whole life
	// (Restart reuses it).
	Port int
	// Socket is the unix socket path when WithUnixSocket was given, else "".
	Socket string
	// Dir is the server's private directory: working dir, data, logs.
	// Close removes it.
	Dir string
	// LogFile is the server's log (--logfile); its stdout and stderr go to
	// stdout.log next to it.
	LogFile string

	bin string
	cfg config

	mu     sync.Mutex
	proc   *process // nil when not running
	closed bool
}

// process is one run of redis-server.
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

// lookBinary finds a Redis executable on PATH.
func lookBinary(name string) (string, error) {
	path, err := exec.LookPath(name)
	if err != nil {
		return "", fmt.Errorf("testenv: %s not found on PATH (install it, e.g. apt-get install -y redis-server): %w", name, err)
	}
	return path, nil
}

// StartRedis starts a standalone server in a new temporary directory on a
// free 127.0.0.1 port, with no persistence unless WithAOF is given, and
// returns once it answers PING (within about 10 s). If the server cannot bind
// its port it is retried on other ports. The error, if any, includes the tail
// of the server's log. The caller must Close the server (NewRedis and the
// Shared* helpers do it for you).
func StartRedis(opts ...Option) (*Redis, error) {
	var cfg config
	for _, o := range opts {
		o(&cfg)
	}
	bin, err := lookBinary("redis-server")
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "fg-redis-")
	if err != nil {
		return nil, fmt.Errorf("testenv: %w", err)
	}
	r := &Redis{Dir: dir, LogFile: filepath.Join(dir, "redis.log"), bin: bin, cfg: cfg}
	if cfg.unixSocket {
		r.Socket = filepath.Join(dir, "redis.sock")
		if len(r.Socket) > 100 {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("testenv: unix socket path %q too long; set TMPDIR to a shorter directory", r.Socket)
		}
	}
	var lastErr error
	for range startAttempts {
		port, err := reservePort(cfg.clusterBus)
		if err != nil {
			lastErr = err
			break
		}
		r.Port = port
		r.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		// Each attempt gets fresh logs so the error shows only its own.
		_ = os.Remove(r.LogFile)
		_ = os.Remove(filepath.Join(dir, "stdout.log"))
		lastErr = r.start()
		if lastErr == nil {
			return r, nil
		}
		if !errors.Is(lastErr, errBind) {
			break
		}
	}
	_ = os.RemoveAll(dir)
	return nil, lastErr
}

// errBind marks a start that failed because a port was taken.
var errBind = errors.New("port already in use")

// args returns the redis-server command line.
func (r *Redis) args() []string {
	base := []string{
		"--port", strconv.Itoa(r.Port),
		"--bind", "127.0.0.1",
		"--dir", r.Dir,
		"--logfile", r.LogFile,
		"--daemonize", "no",
		"--protected-mode", "no",
	}
	if r.cfg.sentinel != nil {
		return append(append([]string{filepath.Join(r.Dir, "sentinel.conf"), "--sentinel"}, base...), r.cfg.args...)
	}
	a := append(base, "--save", "", "--appendonly", "no")
	if r.cfg.aof {
		a = append(a, "--appendonly", "yes", "--appendfsync", "always")
	}
	if r.Socket != "" {
		a = append(a, "--unixsocket", r.Socket, "--unixsocketperm", "700")
	}
	return append(a, r.cfg.args...)
}

// start launches the process and waits until it answers PING. The caller
// holds r.mu or owns r exclusively.
func (r *Redis) start() error {
	if r.cfg.sentinel != nil {
		conf := filepath.Join(r.Dir, "sentinel.conf")
		if _, err := os.Stat(conf); errors.Is(err, os.ErrNotExist) {
			text := strings.Join(r.cfg.sentinel, "\n") + "\n"
			if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
				return fmt.Errorf("testenv: %w", err)
			}
		}
	}
	out, err := os.OpenFile(filepath.Join(r.Dir, "stdout.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("testenv: %w", err)
	}
	cmd := exec.Command(r.bin, r.args()...)
	cmd.Dir = r.Dir
	cmd.Stdout = out
	cmd.Stderr = out
	if err := startCmd(cmd); err != nil {
		_ = out.Close()
		return fmt.Errorf("testenv: starting %s: %w", r.bin, err)
	}
	p := &process{cmd: cmd, out: out, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		_ = out.Close()
		close(p.done)
	}()
	r.proc = p
	if err := r.waitReady(p); err != nil {
		p.kill()
		r.proc = nil
		if strings.Contains(err.Error(), "Address already in use") {
			return fmt.Errorf("%w: %w", errBind, err)
		}
		return err
	}
	return nil
}

// kill sends SIGKILL and waits for the exit.
func (p *process) kill() {
	_ = p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// waitReady polls PING until the server answers PONG and INFO shows it is
// our process (not some other server that owns the port), the process
// exits, or readyTimeout passes.
func (r *Redis) waitReady(p *process) error {
	deadline := time.Now().Add(readyTimeout)
	pid := strconv.Itoa(p.cmd.Process.Pid)
	var lastErr error
	for delay := 5 * time.Millisecond; ; delay = min(delay*2, 100*time.Millisecond) {
		if p.exited() {
			return fmt.Errorf("testenv: redis-server on %s exited during start-up (%v)%s", r.Addr, p.err, r.logTail())
		}
		ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
		lastErr = ping(ctx, r.Addr)
		if lastErr == nil {
			var fields map[string]string
			fields, lastErr = info(ctx, r.Addr, "server")
			if lastErr == nil && fields["process_id"] != pid {
				lastErr = fmt.Errorf("port %d answered by another process (pid %s, ours %s): Address already in use", r.Port, fields["process_id"], pid)
			}
		}
		cancel()
		if lastErr == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("testenv: redis-server on %s not ready after %v: %v%s", r.Addr, readyTimeout, lastErr, r.logTail())
		}
		time.Sleep(delay)
	}
}

// ping sends PING with a short dial timeout and wants PONG.
func ping(ctx context.Context, addr string) error {
	v, err := do(ctx, addr, 200*time.Millisecond, "PING")
	if err != nil {
		return err
	}
	if v != "PONG" {
		return fmt.Errorf("PING answered %#v", v)
	}
	return nil
}

// logTail returns the last lines of the server's log and stdout for errors.
func (r *Redis) logTail() string {
	var b strings.Builder
	for _, f := range []string{r.LogFile, filepath.Join(r.Dir, "stdout.log")} {
		data, err := os.ReadFile(f)
		if err != nil || len(strings.TrimSpace(string(data))) == 0 {
			continue
		}
		lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
		if len(lines) > logTailLines {
			lines = lines[len(lines)-logTailLines:]
		}
		fmt.Fprintf(&b, "\n--- last lines of %s ---\n%s", f, strings.Join(lines, "\n"))
	}
	return b.String()
}

// LogTail returns the last lines of the server's log file and of its
// stdout/stderr, for a test to print when something goes wrong.
func (r *Redis) LogTail() string { return r.logTail() }

// Running reports whether the server process is alive (it may be paused).
func (r *Redis) Running() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.proc != nil && !r.proc.exited()
}

// Pid returns the process id of the running server, or 0 if none.
func (r *Redis) Pid() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.proc == nil || r.proc.exited() {
		return 0
	}
	return r.proc.cmd.Process.Pid
}

// Do sends one command to the server on a fresh TCP connection and returns
// its reply: a string (simple or bulk), int64, []any, nil (null reply), or,
// for an error reply, a ReplyError as the error. ctx bounds the whole
// exchange (5 s if it has no deadline). It is meant for set-up and checks in
// tests (CONFIG SET, DEBUG SLEEP, INFO ...), not for the code under test.
func (r *Redis) Do(ctx context.Context, args ...string) (any, error) {
	return do(ctx, r.Addr, time.Second, args...)
}

// Stop shuts the server down with SIGTERM (and SIGCONT, in case it is
// paused) and waits for it to exit; with WithAOF its data is on disk. If it
// has not exited after 10 s it is killed and an error is returned. Stop is
// idempotent: stopping a server that is not running returns nil.
func (r *Redis) Stop() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.stopLocked()
}

func (r *Redis) stopLocked() error {
	p := r.proc
	if p == nil {
		return nil
	}
	r.proc = nil
	if p.exited() {
		return nil
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	_ = p.cmd.Process.Signal(syscall.SIGCONT)
	select {
	case <-p.done:
		return nil
	case <-time.After(stopTimeout):
		p.kill()
		return fmt.Errorf("testenv: redis-server on %s ignored SIGTERM for %v; killed%s", r.Addr, stopTimeout, r.logTail())
	}
}

// Kill simulates a crash: it sends SIGKILL and waits for the process to be
// gone. Nothing is flushed beyond what the server already wrote (with
// WithAOF, appendfsync always has written every acknowledged command).
// It returns ErrNotRunning if the server was not running.
func (r *Redis) Kill() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.proc
	if p == nil || p.exited() {
		r.proc = nil
		return ErrNotRunning
	}
	r.proc = nil
	p.kill()
	return nil
}

// Pause freezes the server with SIGSTOP and returns once the kernel reports
// it stopped: connections stay open but nothing is answered (clients time
// out) until Resume. It returns ErrNotRunning if the server is not running.
func (r *Redis) Pause() error {
	return r.signalWait(syscall.SIGSTOP, true)
}

// Resume continues a paused server with SIGCONT and returns once it is
// running again. It returns ErrNotRunning if the server is not running;
// resuming a server that is not paused is harmless.
func (r *Redis) Resume() error {
	return r.signalWait(syscall.SIGCONT, false)
}

func (r *Redis) signalWait(sig syscall.Signal, stopped bool) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.proc
	if p == nil || p.exited() {
		return ErrNotRunning
	}
	if err := p.cmd.Process.Signal(sig); err != nil {
		return fmt.Errorf("testenv: %v to redis-server on %s: %w", sig, r.Addr, err)
	}
	return waitStopped(p.cmd.Process.Pid, stopped, 2*time.Second)
}

// Restart stops the server if it is running (as Stop does) and starts it
// again on the same port and directory, returning once it answers PING
// (after loading its AOF, if any). With WithAOF the data survives; without
// it the server comes back empty. It returns ErrClosed after Close.
func (r *Redis) Restart() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return ErrClosed
	}
	if err := r.stopLocked(); err != nil {
		return err
	}
	// The port is normally free at once (redis-server binds with
	// SO_REUSEADDR); retry briefly in case something holds it.
	var err error
	for range startAttempts {
		if err = r.start(); err == nil || !errors.Is(err, errBind) {
			return err
		}
		time.Sleep(200 * time.Millisecond)
	}
	return err
}

// Close stops the server (as Stop, killing it if SIGTERM is not enough) and
// removes its directory. It is idempotent; after Close only Addr and the
// other fields remain meaningful.
func (r *Redis) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	r.closed = true
	err := r.stopLocked()
	if rmErr := os.RemoveAll(r.Dir); rmErr != nil && err == nil {
		err = fmt.Errorf("testenv: %w", rmErr)
	}
	return err
}
