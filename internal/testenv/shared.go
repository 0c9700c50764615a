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

	redisOnce     sync.Once
	sharedRedis   *Redis
	sharedRedisEr error

	clusterOnce     sync.Once
	sharedCluster   *Cluster
	sharedClusterEr error

	sentinelOnce     sync.Once
	sharedSentinel   *Sentinel
	sharedSentinelEr error
)

// Main runs the package's tests and then closes every server started by
// SharedRedis, SharedCluster and SharedSentinel, and returns m.Run's exit
// code. Use it from TestMain:
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

func share(c io.Closer) {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	sharedClosers = append(sharedClosers, c)
}

func requireMain(t testing.TB, what string) {
	t.Helper()
	if !inMain.Load() {
		t.Fatalf("testenv: %s needs the package's TestMain to call testenv.Main: func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }", what)
	}
}

// SharedRedis returns the test binary's shared standalone server (no
// persistence), starting it on first use. Every test of the package gets the
// same server, so tests must use their own keys and must not stop, kill or
// pause it (use NewRedis for that). If the server cannot start, this and
// every later call fail the test with t.Fatalf giving the reason. The package
// must run its tests through Main, which closes the server.
func SharedRedis(t testing.TB) *Redis {
	t.Helper()
	requireMain(t, "SharedRedis")
	redisOnce.Do(func() {
		sharedRedis, sharedRedisEr = StartRedis()
		if sharedRedisEr == nil {
			share(sharedRedis)
		}
	})
	if sharedRedisEr != nil {
		t.Fatalf("testenv: cannot start shared Redis: %v", sharedRedisEr)
	}
	return sharedRedis
}

// SharedCluster returns the test binary's shared three-master cluster,
// starting it on first use, with the same contract as SharedRedis (use
// NewCluster for fault tests).
func SharedCluster(t testing.TB) *Cluster {
	t.Helper()
	requireMain(t, "SharedCluster")
	clusterOnce.Do(func() {
		sharedCluster, sharedClusterEr = StartCluster()
		if sharedClusterEr == nil {
			share(sharedCluster)
		}
	})
	if sharedClusterEr != nil {
		t.Fatalf("testenv: cannot start shared Redis Cluster: %v", sharedClusterEr)
	}
	return sharedCluster
}

// SharedSentinel returns the test binary's shared Sentinel group, starting it
// on first use, with the same contract as SharedRedis. Failover on it
// changes which node is master for every later test; tests that fail over or
// break nodes should prefer NewSentinel.
func SharedSentinel(t testing.TB) *Sentinel {
	t.Helper()
	requireMain(t, "SharedSentinel")
	sentinelOnce.Do(func() {
		sharedSentinel, sharedSentinelEr = StartSentinel()
		if sharedSentinelEr == nil {
			share(sharedSentinel)
		}
	})
	if sharedSentinelEr != nil {
		t.Fatalf("testenv: cannot start shared Redis Sentinel: %v", sharedSentinelEr)
	}
	return sharedSentinel
}

// NewRedis starts a fresh private server for this test (for fault tests:
// Pause, Kill, Restart), fails the test with t.Fatalf if it cannot start, and
// closes it with t.Cleanup. It does not need Main.
func NewRedis(t testing.TB, opts ...Option) *Redis {
	t.Helper()
	r, err := StartRedis(opts...)
	if err != nil {
		t.Fatalf("testenv: cannot start Redis: %v", err)
	}
	cleanup(t, r)
	return r
}

// NewCluster starts a fresh private cluster for this test like NewRedis.
func NewCluster(t testing.TB) *Cluster {
	t.Helper()
	c, err := StartCluster()
	if err != nil {
		t.Fatalf("testenv: cannot start Redis Cluster: %v", err)
	}
	cleanup(t, c)
	return c
}

// NewSentinel starts a fresh private Sentinel group for this test like
// NewRedis.
func NewSentinel(t testing.TB) *Sentinel {
	t.Helper()
	s, err := StartSentinel()
	if err != nil {
		t.Fatalf("testenv: cannot start Redis Sentinel: %v", err)
	}
	cleanup(t, s)
	return s
}

func cleanup(t testing.TB, c io.Closer) {
	t.Cleanup(func() {
		if err := c.Close(); err != nil {
			t.Errorf("testenv: close: %v", err)
		}
	})
}
