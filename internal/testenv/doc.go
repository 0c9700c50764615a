// Package testenv starts private, real Redis servers for tests: a standalone
// redis-server (StartRedis), a three-master Redis Cluster (StartCluster) and
// a master/replica pair watched by a Sentinel (StartSentinel). Never a mock,
// and never the machine's own Redis: every server is a child process of the
// test binary listening on 127.0.0.1 at a port chosen free at start (never
// 6379), with its own temporary directory for data, config and logs.
//
// It needs redis-server and redis-cli on PATH (Debian: apt-get install -y
// redis-server); without them every start returns an error saying so.
//
// A test package shares one server of each kind across its tests:
//
//	func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }
//
//	func TestSomething(t *testing.T) {
//		r := testenv.SharedRedis(t) // fails the test if Redis cannot start
//		rdb := redis.NewClient(&redis.Options{Addr: r.Addr})
//		...
//	}
//
// Tests that break servers (Pause, Kill, Restart, Failover) take their own
// with NewRedis, NewCluster or NewSentinel, closed by t.Cleanup.
//
// The servers cannot outlive the test binary: on Linux they are started with
// Pdeathsig SIGKILL, and Close (or Main) stops them and removes their
// directories. Signals (Pause, Resume, Kill) make the package Unix-only.
package testenv
