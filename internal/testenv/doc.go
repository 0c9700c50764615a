// Package testenv starts private, real servers for tests: a standalone
// redis-server (StartRedis), a three-master Redis Cluster (StartCluster; with
// replicas and a short node timeout for failover tests: StartClusterWith), a
// master/replica pair watched by a Sentinel (StartSentinel; with an ACL user
// on the Sentinel: StartSentinelWith), each of the Redis kinds speaking only
// TLS if asked (WithTLS; WithNodeOptions, WithSentinelNodeOptions), PostgreSQL
// (StartPostgres), MariaDB (StartMariaDB) and ZooKeeper (StartZooKeeper); and
// a fault-injecting TCP proxy to put between a client and any of them
// (StartProxy: delay, stall, cut, refuse, lose replies). Never a mock, and
// never the machine's own servers: every server is a child process of the
// test binary listening on 127.0.0.1 at a port chosen free at start (never
// 6379), with its own temporary directory for data, config and logs.
//
// It needs the servers installed (Debian: apt-get install -y redis-server
// redis-tools postgresql mariadb-server zookeeper default-jre-headless;
// scripts/test.sh does it). Without one, its Start function returns an error
// that says what is missing and matches ErrNotInstalled, and the New and
// Shared helpers fail the test, or skip it under go test -short, so that
// go test -short ./... passes on a machine with only Go (see NotInstalled,
// which tests use for other programs they need, such as Chromium).
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
// with NewRedis, NewCluster, NewSentinel, NewPostgres, NewMariaDB or
// NewZooKeeper, closed by t.Cleanup.
//
// The servers cannot outlive the test binary: on Linux they are started with
// Pdeathsig SIGKILL, and Close (or Main) stops them and removes their
// directories. Signals (Pause, Resume, Kill) make the package Unix-only.
package testenv
