package testenv

import (
	"fmt"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"testing"
)

// Shared servers of this test binary (one per test package). They are
// started lazily, at most once, and closed by Main.
var (
	inMain atomic.Bool

	sharedMu      sync.Mutex
	sharedClosers []io.Closer

	sharedRedis     shared[*Redis]
	sharedCluster   shared[*Cluster]
	sharedSentinel  shared[*Sentinel]
	sharedPostgres  shared[*Postgres]
	sharedMariaDB   shared[*MariaDB]
	sharedZooKeeper shared[*ZooKeeper]
)

// Main runs the package's tests and then closes every server started by
// SharedRedis, SharedCluster, SharedSentinel, SharedPostgres, SharedMariaDB
// and SharedZooKeeper, and returns m.Run's exit code. Use it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }
//
// Problems while closing are printed to stderr; they do not change the exit
// code. Servers are also killed by the kernel if the binary dies (Linux).
func Main(m *testing.M) int {
	inMain.Store(true)
	code := m.Run()
	inMain.Store(false)
	sharedMu.Lock()
	closers := sharedClosers
	sharedClosers = nil
	sharedMu.Unlock()
	for _, c := range closers {
		if err := c.Close(); err != nil {
			fmt.Fprintf(os.Stderr, "testenv: closing shared server: %v\n", err)
		}
	}
	return code
}

func requireMain(t testing.TB, what string) {
	t.Helper()
	if !inMain.Load() {
		t.Fatalf("testenv: %s needs the package's TestMain to call testenv.Main: func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }", what)
	}
}

// shared is the server of one kind that the tests of a test binary share.
type shared[S io.Closer] struct {
	once sync.Once
	srv  S
	err  error
}

// get returns the shared server, starting it with start on first use and
// registering it for Main to close. fn names the exported helper, what the
// server, for messages. If the server could not start, get and every later
// call end the test as startFailed does.
func (sh *shared[S]) get(t testing.TB, fn, what string, start func() (S, error)) S {
	t.Helper()
	requireMain(t, fn)
	sh.once.Do(func() {
		sh.srv, sh.err = start()
		if sh.err == nil {
			sharedMu.Lock()
			sharedClosers = append(sharedClosers, sh.srv)
			sharedMu.Unlock()
		}
	})
	if sh.err != nil {
		startFailed(t, "shared "+what, sh.err)
	}
	return sh.srv
}

// newServer starts a server for one test with start, ends the test as
// startFailed does if it cannot start, and closes it with t.Cleanup.
func newServer[S io.Closer](t testing.TB, what string, start func() (S, error)) S {
	t.Helper()
	srv, err := start()
	if err != nil {
		startFailed(t, what, err)
	}
	t.Cleanup(func() {
		if err := srv.Close(); err != nil {
			t.Errorf("testenv: close: %v", err)
		}
	})
	return srv
}

// SharedRedis returns the test binary's shared standalone server (no
// persistence), starting it on first use. Every test of the package gets the
// same server, so tests must use their own keys and must not stop, kill or
// pause it (use NewRedis for that). If the server cannot start, this and
// every later call fail the test with t.Fatalf giving the reason, or, under
// go test -short, skip it when redis-server is not installed (see
// NotInstalled). The package must run its tests through Main, which closes
// the server.
func SharedRedis(t testing.TB) *Redis {
	t.Helper()
	return sharedRedis.get(t, "SharedRedis", "Redis", func() (*Redis, error) { return StartRedis() })
}

// SharedCluster returns the test binary's shared three-master cluster,
// starting it on first use, with the same contract as SharedRedis (use
// NewCluster for fault tests).
func SharedCluster(t testing.TB) *Cluster {
	t.Helper()
	return sharedCluster.get(t, "SharedCluster", "Redis Cluster", StartCluster)
}

// SharedSentinel returns the test binary's shared Sentinel group, starting it
// on first use, with the same contract as SharedRedis. Failover on it
// changes which node is master for every later test; tests that fail over or
// break nodes should prefer NewSentinel.
func SharedSentinel(t testing.TB) *Sentinel {
	t.Helper()
	return sharedSentinel.get(t, "SharedSentinel", "Redis Sentinel", StartSentinel)
}

// NewRedis starts a fresh private server for this test (for fault tests:
// Pause, Kill, Restart), closes it with t.Cleanup, and fails the test with
// t.Fatalf if it cannot start (or skips it, as SharedRedis does). It does
// not need Main.
func NewRedis(t testing.TB, opts ...Option) *Redis {
	t.Helper()
	return newServer(t, "Redis", func() (*Redis, error) { return StartRedis(opts...) })
}

// NewCluster starts a fresh private cluster for this test like NewRedis.
func NewCluster(t testing.TB) *Cluster {
	t.Helper()
	return newServer(t, "Redis Cluster", StartCluster)
}

// NewSentinel starts a fresh private Sentinel group for this test like
// NewRedis.
func NewSentinel(t testing.TB) *Sentinel {
	t.Helper()
	return newServer(t, "Redis Sentinel", StartSentinel)
}

// NewSentinelWith starts a fresh private Sentinel group with opts for this
// test, as NewSentinel does.
func NewSentinelWith(t testing.TB, opts ...SentinelOption) *Sentinel {
	t.Helper()
	return newServer(t, "Redis Sentinel", func() (*Sentinel, error) { return StartSentinelWith(opts...) })
}
