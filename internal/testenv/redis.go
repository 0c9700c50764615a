package testenv

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Option configures a server started by StartRedis or NewRedis.
type Option func(*config)

type config struct {
	aof        bool
	unixSocket bool
	clusterBus bool     // the port+10000 bus port must be free too
	sentinel   []string // sentinel.conf lines; non-nil runs redis-server --sentinel
	tls        *tlsOption
	args       []string
}

type tlsOption struct {
	ca          *CA
	authClients bool
}

// WithTLS makes a server speak TLS only, on its one port (--port 0
// --tls-port Port), with a certificate for 127.0.0.1 and localhost issued by
// ca (by a new CA in the server's directory when ca is nil). Redis.TLS names
// the files. With authClients the server requires clients to present a
// certificate signed by its CA (--tls-auth-clients yes); without, it asks for
// none. Do, the readiness probe and the helpers of this package (Cluster,
// Sentinel) speak TLS to it too, presenting Redis.TLS.Client.
//
// Replication (--tls-replication yes), and for a Cluster node the cluster
// bus (--tls-cluster yes), go over TLS too, the server presenting
// Redis.TLS.Client to its peers; so the nodes of a Cluster (WithNodeOptions)
// or of a Sentinel group (WithSentinelNodeOptions) need one ca, not nil.
func WithTLS(ca *CA, authClients bool) Option {
	return func(c *config) { c.tls = &tlsOption{ca: ca, authClients: authClients} }
}

// RedisTLS describes the TLS set-up of a server started WithTLS.
type RedisTLS struct {
	// CA issued Server and Client; the server verifies client
	// certificates against it (--tls-ca-cert-file CA.CertFile).
	CA *CA
	// Server is the server's certificate (127.0.0.1 and localhost) and key.
	Server KeyPair
	// Client is a client certificate the server accepts, which Do uses.
	Client KeyPair
	// AuthClients reports whether the server requires a client
	// certificate.
	AuthClients bool
}

// ClientConfig returns a TLS client configuration that trusts the CA and
// presents Client.
func (t *RedisTLS) ClientConfig() (*tls.Config, error) {
	cert, err := t.Client.Load()
	if err != nil {
		return nil, fmt.Errorf("testenv: %w", err)
	}
	return &tls.Config{RootCAs: t.CA.Pool(), Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
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
	// TLS is the server's TLS set-up when WithTLS was given, else nil;
	// the server then speaks only TLS on Port.
	TLS *RedisTLS

	cfg       config
	d         *daemon
	clientTLS *tls.Config // what Do and the probe dial with; nil for plain TCP
}

// lookBinary finds a Redis executable on PATH.
func lookBinary(name string) (string, error) {
	path, err := exec.LookPath(name)
	if err != nil {
		return "", notInstalled("testenv: %s not found on PATH (install it: apt-get install -y redis-server redis-tools)", name)
	}
	return path, nil
}

// StartRedis starts a standalone server in a new temporary directory on a
// free 127.0.0.1 port, with no persistence unless WithAOF is given, and
// returns once it answers PING (within about 10 s). If the server cannot bind
// its port it is retried on other ports. The error, if any, includes the tail
// of the server's log; it matches ErrNotInstalled when redis-server is not
// on PATH. The caller must Close the server (NewRedis and the Shared*
// helpers do it for you).
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
	r := &Redis{Dir: dir, LogFile: filepath.Join(dir, "redis.log"), cfg: cfg}
	if cfg.unixSocket {
		r.Socket = filepath.Join(dir, "redis.sock")
		if len(r.Socket) > 100 {
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("testenv: unix socket path %q too long; set TMPDIR to a shorter directory", r.Socket)
		}
	}
	if cfg.tls != nil {
		if err := r.setUpTLS(); err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
	}
	r.d = r.daemon(bin)
	err = startDaemon(r.d, func(port int) {
		r.Port = port
		r.Addr = r.d.addr
	})
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	if r.clientTLS != nil {
		tlsAddrs.Store(r.Addr, r.clientTLS)
	}
	return r, nil
}

// tlsAddrs maps the address of each running server started WithTLS to the
// TLS configuration do dials it with: the package's helpers (Cluster,
// Sentinel, replication) name servers by the addresses they report, and so
// speak TLS to a TLS server without being told. Ports are not handed out
// twice in a process (reservePort), so an address names one server.
var tlsAddrs sync.Map // string → *tls.Config

// setUpTLS issues r's certificates (and its CA if none was given) into
// r.Dir.
func (r *Redis) setUpTLS() error {
	if (r.cfg.sentinel != nil || r.cfg.clusterBus) && r.cfg.tls.ca == nil {
		return errors.New("testenv: WithTLS for a Cluster node or a Sentinel needs the group's CA, not nil")
	}
	t := &RedisTLS{CA: r.cfg.tls.ca, AuthClients: r.cfg.tls.authClients}
	var err error
	if t.CA == nil {
		if t.CA, err = NewCA(r.Dir, "redis-ca"); err != nil {
			return err
		}
	}
	so := Localhost()
	so.Server = true
	if t.Server, err = t.CA.Issue("redis-server-"+filepath.Base(r.Dir), so); err != nil {
		return err
	}
	if t.Client, err = t.CA.Issue("redis-client-"+filepath.Base(r.Dir), CertOptions{CommonName: "testenv", Client: true}); err != nil {
		return err
	}
	if r.clientTLS, err = t.ClientConfig(); err != nil {
		return err
	}
	r.TLS = t
	return nil
}

// daemon returns the process of r: redis-server bin with r's command line,
// ready when it answers PING as the process it started.
func (r *Redis) daemon(bin string) *daemon {
	d := &daemon{
		name:      "redis-server",
		dir:       r.Dir,
		logs:      []string{r.LogFile},
		bus:       r.cfg.clusterBus,
		readyWait: readyTimeout,
		probeWait: 500 * time.Millisecond,
		stopSig:   syscall.SIGTERM,
		command:   func() *exec.Cmd { return exec.Command(bin, r.args()...) },
		probe:     r.probe,
	}
	if r.cfg.sentinel != nil {
		// Written once, then owned and rewritten by the Sentinel.
		d.prepare = func() error {
			conf := filepath.Join(r.Dir, "sentinel.conf")
			if _, err := os.Stat(conf); !errors.Is(err, os.ErrNotExist) {
				return nil
			}
			text := strings.Join(r.cfg.sentinel, "\n") + "\n"
			if err := os.WriteFile(conf, []byte(text), 0o600); err != nil {
				return fmt.Errorf("testenv: %w", err)
			}
			return nil
		}
	}
	return d
}

// args returns the redis-server command line.
func (r *Redis) args() []string {
	base := []string{
		"--port", strconv.Itoa(r.Port),
	}
	if t := r.TLS; t != nil {
		auth := "no"
		if t.AuthClients {
			auth = "yes"
		}
		base = []string{
			"--port", "0",
			"--tls-port", strconv.Itoa(r.Port),
			"--tls-cert-file", t.Server.CertFile,
			"--tls-key-file", t.Server.KeyFile,
			"--tls-client-cert-file", t.Client.CertFile,
			"--tls-client-key-file", t.Client.KeyFile,
			"--tls-ca-cert-file", t.CA.CertFile,
			"--tls-auth-clients", auth,
			"--tls-replication", "yes",
		}
		if r.cfg.clusterBus {
			base = append(base, "--tls-cluster", "yes")
		}
	}
	base = append(base,
		"--bind", "127.0.0.1",
		"--dir", r.Dir,
		"--logfile", r.LogFile,
		"--daemonize", "no",
		"--protected-mode", "no",
	)
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

// probe checks that the server answers PONG and that INFO shows it is
// process pid (not some other server that owns the port).
func (r *Redis) probe(ctx context.Context, pid int) error {
	v, err := doWith(ctx, r.Addr, r.clientTLS, 200*time.Millisecond, "PING")
	if err != nil {
		return err
	}
	if v != "PONG" {
		return fmt.Errorf("PING answered %#v", v)
	}
	v, err = doWith(ctx, r.Addr, r.clientTLS, 0, "INFO", "server")
	if err != nil {
		return err
	}
	s, _ := v.(string)
	fields := parseInfo(s)
	if got := fields["process_id"]; got != strconv.Itoa(pid) {
		return fmt.Errorf("port %d answered by another process (pid %s, ours %d): Address already in use", r.Port, got, pid)
	}
	return nil
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
func (r *Redis) logTail() string { return r.d.logTail() }

// LogTail returns the last lines of the server's log file and of its
// stdout/stderr, for a test to print when something goes wrong.
func (r *Redis) LogTail() string { return r.d.logTail() }

// Running reports whether the server process is alive (it may be paused).
func (r *Redis) Running() bool { return r.d.running() }

// Pid returns the process id of the running server, or 0 if none.
func (r *Redis) Pid() int { return r.d.pid() }

// Do sends one command to the server on a fresh TCP connection and returns
// its reply: a string (simple or bulk), int64, []any, nil (null reply), or,
// for an error reply, a ReplyError as the error. ctx bounds the whole
// exchange (5 s if it has no deadline). It is meant for set-up and checks in
// tests (CONFIG SET, DEBUG SLEEP, INFO ...), not for the code under test.
func (r *Redis) Do(ctx context.Context, args ...string) (any, error) {
	return doWith(ctx, r.Addr, r.clientTLS, time.Second, args...)
}

// Stop shuts the server down with SIGTERM (and SIGCONT, in case it is
// paused) and waits for it to exit; with WithAOF its data is on disk. If it
// has not exited after 10 s it is killed and an error is returned. Stop is
// idempotent: stopping a server that is not running returns nil.
func (r *Redis) Stop() error { return r.d.stop() }

// Kill simulates a crash: it sends SIGKILL and waits for the process to be
// gone. Nothing is flushed beyond what the server already wrote (with
// WithAOF, appendfsync always has written every acknowledged command).
// It returns ErrNotRunning if the server was not running.
func (r *Redis) Kill() error { return r.d.kill() }

// Pause freezes the server with SIGSTOP and returns once the kernel reports
// it stopped: connections stay open but nothing is answered (clients time
// out) until Resume. It returns ErrNotRunning if the server is not running.
func (r *Redis) Pause() error { return r.d.signal(syscall.SIGSTOP) }

// Resume continues a paused server with SIGCONT and returns once it is
// running again. It returns ErrNotRunning if the server is not running;
// resuming a server that is not paused is harmless.
func (r *Redis) Resume() error { return r.d.signal(syscall.SIGCONT) }

// Restart stops the server if it is running (as Stop does) and starts it
// again on the same port and directory, returning once it answers PING
// (after loading its AOF, if any). With WithAOF the data survives; without
// it the server comes back empty. It returns ErrClosed after Close.
func (r *Redis) Restart() error { return r.d.restart() }

// Close stops the server (as Stop, killing it if SIGTERM is not enough) and
// removes its directory. It is idempotent; after Close only Addr and the
// other fields remain meaningful.
func (r *Redis) Close() error {
	err := r.d.close()
	tlsAddrs.Delete(r.Addr)
	return err
}
