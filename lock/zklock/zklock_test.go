package zklock_test

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/floodgate-dev/floodgate/internal/testenv"
	"github.com/floodgate-dev/floodgate/lock"
	"github.com/floodgate-dev/floodgate/lock/internal/lockdriver"
	"github.com/floodgate-dev/floodgate/lock/internal/locktest"
	"github.com/floodgate-dev/floodgate/lock/zklock"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(childMain()) // the other process of TestMutualExclusionTwoProcesses
	}
	os.Exit(testenv.Main(m))
}

// sessionTimeout is the session timeout the tests ask for; the server
// (tickTime 500ms) accepts 1s to 20s.
const sessionTimeout = 2 * time.Second

type nopLogger struct{}

func (nopLogger) Printf(string, ...any) {}

// connect opens a client session on addr, closed by t.Cleanup, and waits
// until it has a session. dial, if not nil, makes its TCP connections.
func connect(t testing.TB, addr string, dial zk.Dialer) *zk.Conn {
	t.Helper()
	if dial == nil {
		dial = net.DialTimeout
	}
	conn, events, err := zk.Connect([]string{addr}, sessionTimeout, zk.WithLogger(nopLogger{}), zk.WithDialer(dial))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	timeout := time.After(10 * time.Second)
	for {
		select {
		case ev := <-events:
			if ev.State == zk.StateHasSession {
				return conn
			}
		case <-timeout:
			t.Fatalf("no ZooKeeper session on %s", addr)
		}
	}
}

// root is the parent of every lock path of this test binary.
var root = "/floodgate-test-" + lockdriver.NewOwnerID()

func path(name string) string { return root + "/" + name }

var pathSeq atomic.Int64

// uniquePath returns a fresh lock path.
func uniquePath(t testing.TB) string {
	return path(strings.NewReplacer("/", "-", " ", "_").Replace(t.Name()) + "-" + time.Now().Format("150405.000000") + "-" + string(rune('a'+pathSeq.Add(1)%26)))
}

func mustNew(t testing.TB, conn *zk.Conn, p string, opts ...lock.Option) lock.Locker {
	t.Helper()
	l, err := zklock.New(conn, p, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// children returns the nodes under p.
func children(t testing.TB, conn *zk.Conn, p string) []string {
	t.Helper()
	c, _, err := conn.Children(p)
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		t.Fatal(err)
	}
	return c
}

// waitChildren waits until p has n nodes.
func waitChildren(t testing.TB, conn *zk.Conn, p string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for len(children(t, conn, p)) != n {
		if time.Now().After(deadline) {
			t.Fatalf("%s has nodes %v, want %d", p, children(t, conn, p), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestConformance(t *testing.T) {
	addr := testenv.SharedZooKeeper(t).Addr
	admin := connect(t, addr, nil)
	locktest.Run(t, locktest.Backend{
		Name: "zookeeper",
		// A new session per Locker, as separate processes would have.
		New: func(t testing.TB, name string, opts ...lock.Option) lock.Locker {
			return mustNew(t, connect(t, addr, nil), path(name), opts...)
		},
		Drop: func(t testing.TB, name string) {
			for _, c := range children(t, admin, path(name)) {
				if err := admin.Delete(path(name)+"/"+c, -1); err != nil && !errors.Is(err, zk.ErrNoNode) {
					t.Fatal(err)
				}
			}
		},
		MinTTL: sessionTimeout,
	})
}

func TestBadArguments(t *testing.T) {
	conn := connect(t, testenv.SharedZooKeeper(t).Addr, nil)
	if _, err := zklock.New(nil, "/x"); err == nil || err.Error() != "zklock: conn is nil" {
		t.Errorf("nil conn: %v", err)
	}
	if _, err := zklock.New(conn, "x"); err == nil || err.Error() != `zklock: path must be absolute, got "x"` {
		t.Errorf("relative path: %v", err)
	}
	if _, err := zklock.NewRWMutex(conn, "/x/"); err == nil || err.Error() != `zklock: path must not end with "/", got "/x/"` {
		t.Errorf("trailing slash: %v", err)
	}
	if _, err := zklock.New(conn, "/x", lock.TTL(0)); err == nil || err.Error() != "lock: TTL must be >= 1ms, got 0s" {
		t.Errorf("TTL(0): %v", err)
	}
	for _, permits := range []int{0, -1} {
		if _, err := zklock.NewSemaphore(conn, "/x", permits); err == nil || !strings.Contains(err.Error(), "zklock: permits must be >= 1") {
			t.Errorf("permits %d: %v", permits, err)
		}
	}
}

// TestClosedConn: Lock through a closed client fails, instead of waiting
// for a reconnection that will never come.
func TestClosedConn(t *testing.T) {
	conn := connect(t, testenv.SharedZooKeeper(t).Addr, nil)
	l := mustNew(t, conn, uniquePath(t))
	conn.Close()
	done := make(chan error, 1)
	go func() {
		_, err := l.Lock(context.Background())
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("Lock through a closed client succeeded")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("Lock through a closed client still waiting after 30s")
	}
}

// TestTryLockLeavesNoNode: a failed TryLock deletes the node it queued.
func TestTryLockLeavesNoNode(t *testing.T) {
	addr := testenv.SharedZooKeeper(t).Addr
	p := uniquePath(t)
	a := connect(t, addr, nil)
	lease, err := mustNew(t, a, p).TryLock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	other := mustNew(t, connect(t, addr, nil), p)
	for range 3 {
		if _, err := other.TryLock(context.Background()); !errors.Is(err, lock.ErrLocked) {
			t.Fatalf("TryLock: %v, want ErrLocked", err)
		}
	}
	if c := children(t, a, p); len(c) != 1 {
		t.Fatalf("nodes after failed TryLocks: %v", c)
	}
	if err := lease.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitChildren(t, a, p, 0)
}

// TestReentryAcrossSessions: the hold count lives in the node, so another
// client with the same owner id re-enters too.
func TestReentryAcrossSessions(t *testing.T) {
	addr := testenv.SharedZooKeeper(t).Addr
	p := uniquePath(t)
	ctx := context.Background()
	a := mustNew(t, connect(t, addr, nil), p, lock.Owner("worker-7"))
	b := mustNew(t, connect(t, addr, nil), p, lock.Owner("worker-7"))
	stranger := mustNew(t, connect(t, addr, nil), p)
	l1, err := a.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	l2, err := b.TryLock(ctx)
	if err != nil {
		t.Fatalf("re-entry from another session: %v", err)
	}
	if l1.Token() != l2.Token() {
		t.Fatalf("tokens %d and %d for one holding", l1.Token(), l2.Token())
	}
	if err := l1.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := stranger.TryLock(ctx); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("one level still held, TryLock: %v", err)
	}
	if err := l2.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	l3, err := stranger.TryLock(ctx)
	if err != nil {
		t.Fatalf("after both Unlocks: %v", err)
	}
	if l3.Token() <= l1.Token() {
		t.Fatalf("token %d after %d", l3.Token(), l1.Token())
	}
	_ = l3.Unlock(ctx)
}

// TestTokenSurvivesPathRecreation: tokens are czxids, so they keep
// increasing when the lock path is deleted and created again (a sequence
// number would start again at 0).
func TestTokenSurvivesPathRecreation(t *testing.T) {
	addr := testenv.SharedZooKeeper(t).Addr
	p := uniquePath(t)
	ctx := context.Background()
	conn := connect(t, addr, nil)
	l := mustNew(t, conn, p)
	first, err := l.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := first.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	if err := conn.Delete(p, -1); err != nil {
		t.Fatal(err)
	}
	second, err := l.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer second.Unlock(ctx)
	if second.Token() <= first.Token() {
		t.Fatalf("token %d after the path was recreated, first holder had %d", second.Token(), first.Token())
	}
}

// faultDialer makes a client's TCP connections and can break them: lose
// the reply of the next create, or cut the client off from the server.
type faultDialer struct {
	loseCreate atomic.Bool // the next create is applied, its reply lost
	lostCreate atomic.Bool // it happened
	cut        atomic.Bool // no connection: the client is partitioned

	mu    sync.Mutex
	conns []net.Conn
}

func (f *faultDialer) dial(network, addr string, timeout time.Duration) (net.Conn, error) {
	if f.cut.Load() {
		return nil, errors.New("partitioned")
	}
	c, err := net.DialTimeout(network, addr, timeout)
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.conns = append(f.conns, c)
	f.mu.Unlock()
	return &faultConn{Conn: c, f: f}, nil
}

// partition closes the client's connections and refuses new ones until
// heal.
func (f *faultDialer) partition() {
	f.cut.Store(true)
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.conns {
		_ = c.Close()
	}
	f.conns = nil
}

func (f *faultDialer) heal() { f.cut.Store(false) }

type faultConn struct {
	net.Conn
	f    *faultDialer
	deaf atomic.Bool // read nothing more: the connection "drops" with the next reply
}

// opCreate is ZooKeeper's opcode of a create request.
const opCreate = 1

func (c *faultConn) Write(b []byte) (int, error) {
	// A request is [length][xid][opcode]..., written at once.
	if len(b) >= 12 && binary.BigEndian.Uint32(b[8:12]) == opCreate && c.f.loseCreate.CompareAndSwap(true, false) {
		c.deaf.Store(true)
		c.f.lostCreate.Store(true)
	}
	return c.Conn.Write(b)
}

func (c *faultConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	if c.deaf.Load() {
		// The server has read and applied the create by the time its
		// reply arrives; the client never sees the reply.
		_ = c.Conn.Close()
		return 0, errors.New("connection lost with a create in flight")
	}
	return n, err
}

// TestLostCreateReplyRecovered: the connection drops after the create was
// applied but before its reply arrived. The client must find its node by
// the protection id and hold the lock through it, not create a second node
// that would block the queue while the session lives.
func TestLostCreateReplyRecovered(t *testing.T) {
	addr := testenv.SharedZooKeeper(t).Addr
	p := uniquePath(t)
	admin := connect(t, addr, nil)
	for _, q := range []string{root, p} {
		if _, err := admin.Create(q, nil, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			t.Fatal(err)
		}
	}
	f := &faultDialer{}
	l := mustNew(t, connect(t, addr, f.dial), p)
	f.loseCreate.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	lease, err := l.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !f.lostCreate.Load() {
		t.Fatal("the fault was not injected")
	}
	nodes := children(t, admin, p)
	_, st, err := admin.Get(p)
	if err != nil {
		t.Fatal(err)
	}
	// Exactly one create was applied (Cversion counts child changes), and
	// its node is the one held.
	if len(nodes) != 1 || st.Cversion != 1 {
		t.Fatalf("nodes %v after %d child changes, want the one node of the one create", nodes, st.Cversion)
	}
	if _, err := mustNew(t, admin, p).TryLock(ctx); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("TryLock by another client: %v, want ErrLocked", err)
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Fatalf("Unlock of the recovered node: %v", err)
	}
	waitChildren(t, admin, p, 0)
}

// TestSessionExpiryLosesLease: a holder cut off from ZooKeeper past its
// session timeout loses its session, ZooKeeper deletes its node and gives
// the lock to the next client. When the holder reconnects it learns that
// the session expired and Lost closes at the next renewal — before the
// lease's own deadline.
func TestSessionExpiryLosesLease(t *testing.T) {
	addr := testenv.SharedZooKeeper(t).Addr
	p := uniquePath(t)
	f := &faultDialer{}
	ttl := 3 * sessionTimeout // Lost must come from the expiry, not the TTL
	holder := mustNew(t, connect(t, addr, f.dial), p, lock.TTL(ttl), lock.AutoRenew())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	old, err := holder.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	next := acquired(t, mustNew(t, connect(t, addr, nil), p, lock.MaxPoll(time.Minute)))
	waitChildren(t, connect(t, addr, nil), p, 2)

	f.partition()
	cur := expectLease(t, next, "the waiter, after the holder's session expired", 5*sessionTimeout)
	f.heal()
	select {
	case <-old.Lost():
		if !time.Now().Before(old.Deadline()) {
			t.Fatal("Lost closed at the lease's deadline, not when the session expired")
		}
	case <-time.After(ttl):
		t.Fatal("Lost did not close after the session expired")
	}
	if err := old.Extend(ctx, ttl); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Extend after expiry: %v, want ErrNotHeld", err)
	}
	if err := old.Unlock(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Unlock after expiry: %v, want ErrNotHeld", err)
	}
	if cur.Token() <= old.Token() {
		t.Fatalf("token %d after %d", cur.Token(), old.Token())
	}
	if err := cur.Unlock(ctx); err != nil {
		t.Fatalf("the new holder's Unlock: %v", err)
	}
}

// TestServerPause: ZooKeeper frozen (SIGSTOP) past the session timeout.
// The holder cannot renew, so Lost closes at its deadline; after the
// server resumes, the waiter gets the lock and the old lease stays lost.
//
// Under the race detector it is skipped: go-zookeeper/zk v1.0.4 (its latest
// release) reads Conn.lastZxid in sendSetWatches while the new connection's
// recvLoop writes it, a data race inside the library on the reconnect this
// test forces (seen in CI). scripts/test.sh runs it again without -race.
func TestServerPause(t *testing.T) {
	if raceEnabled {
		t.Skip("go-zookeeper/zk races on lastZxid when it reconnects with watches; scripts/test.sh runs this test without -race")
	}
	z := testenv.NewZooKeeper(t)
	p := "/paused"
	ttl := sessionTimeout
	holder := mustNew(t, connect(t, z.Addr, nil), p, lock.TTL(ttl), lock.AutoRenew())
	waiter := mustNew(t, connect(t, z.Addr, nil), p, lock.TTL(time.Minute))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	old, err := holder.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	next := acquired(t, waiter)
	waitChildren(t, connect(t, z.Addr, nil), p, 2)

	if err := z.Pause(); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			_ = z.Resume()
		}
	}()
	select {
	case <-old.Lost():
	case <-time.After(3 * ttl):
		t.Fatal("Lost did not close while ZooKeeper was paused")
	}
	time.Sleep(2 * sessionTimeout) // past the session timeout
	if err := z.Resume(); err != nil {
		t.Fatal(err)
	}
	resumed = true

	cur := expectLease(t, next, "the waiter, after ZooKeeper resumed", 30*time.Second)
	if err := old.Extend(ctx, ttl); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Extend of the lost lease: %v, want ErrNotHeld", err)
	}
	if err := old.Unlock(ctx); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Unlock of the lost lease: %v, want ErrNotHeld", err)
	}
	if cur.Token() <= old.Token() {
		t.Fatalf("token %d after %d", cur.Token(), old.Token())
	}
	if err := cur.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// result is the outcome of a Lock run in the background.
type result struct {
	lease *lock.Lease
	err   error
}

// acquired starts l.Lock in a goroutine, with a context that ends with the
// test, and returns where its result arrives.
func acquired(t *testing.T, l lock.Locker) <-chan result {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	ch := make(chan result, 1)
	go func() {
		lease, err := l.Lock(ctx)
		ch <- result{lease, err}
	}()
	return ch
}

func expectNone(t *testing.T, ch <-chan result, what string) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("%s acquired too early (err %v)", what, r.err)
	case <-time.After(300 * time.Millisecond):
	}
}

func expectLease(t *testing.T, ch <-chan result, what string, within time.Duration) *lock.Lease {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("%s: %v", what, r.err)
		}
		return r.lease
	case <-time.After(within):
		t.Fatalf("%s did not acquire within %v", what, within)
	}
	return nil
}

func newRW(t *testing.T, addr, p string, opts ...lock.Option) lock.RWLocker {
	t.Helper()
	m, err := zklock.NewRWMutex(connect(t, addr, nil), p, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func TestRWMutex(t *testing.T) {
	addr := testenv.SharedZooKeeper(t).Addr
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	// A long poll: only the watches can wake waiters in time.
	opts := []lock.Option{lock.TTL(time.Minute), lock.MaxPoll(time.Minute)}

	t.Run("ReadersShare", func(t *testing.T) {
		p := uniquePath(t)
		r1, err := newRW(t, addr, p, opts...).RLocker().TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		r2, err := newRW(t, addr, p, opts...).RLocker().TryLock(ctx)
		if err != nil {
			t.Fatalf("second reader: %v", err)
		}
		if _, err := newRW(t, addr, p, opts...).TryLock(ctx); !errors.Is(err, lock.ErrLocked) {
			t.Fatalf("writer while read-locked: %v, want ErrLocked", err)
		}
		w := acquired(t, newRW(t, addr, p, opts...))
		_ = r1.Unlock(ctx)
		expectNone(t, w, "writer with one reader left")
		_ = r2.Unlock(ctx)
		wl := expectLease(t, w, "writer after the readers", 10*time.Second)
		if wl.Token() <= r2.Token() {
			t.Fatalf("writer token %d after reader token %d", wl.Token(), r2.Token())
		}
		_ = wl.Unlock(ctx)
	})

	t.Run("WriterExcludes", func(t *testing.T) {
		p := uniquePath(t)
		w, err := newRW(t, addr, p, opts...).TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := newRW(t, addr, p, opts...).RLocker().TryLock(ctx); !errors.Is(err, lock.ErrLocked) {
			t.Fatalf("reader while write-locked: %v, want ErrLocked", err)
		}
		if _, err := newRW(t, addr, p, opts...).TryLock(ctx); !errors.Is(err, lock.ErrLocked) {
			t.Fatalf("writer while write-locked: %v, want ErrLocked", err)
		}
		r1 := acquired(t, newRW(t, addr, p, opts...).RLocker())
		r2 := acquired(t, newRW(t, addr, p, opts...).RLocker())
		expectNone(t, r1, "reader under a writer")
		_ = w.Unlock(ctx)
		// Both readers wait for the same writer and get in together.
		l1, l2 := expectLease(t, r1, "reader 1", 10*time.Second), expectLease(t, r2, "reader 2", 10*time.Second)
		_, _ = l1.Unlock(ctx), l2.Unlock(ctx)
	})

	t.Run("WaitingWriterBlocksNewReaders", func(t *testing.T) {
		p := uniquePath(t)
		admin := connect(t, addr, nil)
		r1, err := newRW(t, addr, p, opts...).RLocker().Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		w := acquired(t, newRW(t, addr, p, opts...))
		waitChildren(t, admin, p, 2) // the writer is queued
		if _, err := newRW(t, addr, p, opts...).RLocker().TryLock(ctx); !errors.Is(err, lock.ErrLocked) {
			t.Fatalf("new reader behind a waiting writer: %v, want ErrLocked", err)
		}
		r2 := acquired(t, newRW(t, addr, p, opts...).RLocker())
		expectNone(t, r2, "reader behind a waiting writer")
		_ = r1.Unlock(ctx)
		wl := expectLease(t, w, "writer", 10*time.Second)
		expectNone(t, r2, "reader while the writer holds")
		_ = wl.Unlock(ctx)
		_ = expectLease(t, r2, "reader after the writer", 10*time.Second).Unlock(ctx)
	})

	t.Run("ReaderReentryPassesWaitingWriter", func(t *testing.T) {
		p := uniquePath(t)
		admin := connect(t, addr, nil)
		rw := newRW(t, addr, p, append(opts, lock.Owner("reader-1"))...)
		r1, err := rw.RLocker().Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		w := acquired(t, newRW(t, addr, p, opts...))
		waitChildren(t, admin, p, 2)
		// Re-entry takes another level of the held node: it does not queue
		// behind the writer, which would deadlock.
		r2, err := rw.RLocker().TryLock(ctx)
		if err != nil {
			t.Fatalf("reader re-entry with a writer waiting: %v", err)
		}
		_ = r2.Unlock(ctx)
		expectNone(t, w, "writer with one read level left")
		_ = r1.Unlock(ctx)
		_ = expectLease(t, w, "writer", 10*time.Second).Unlock(ctx)
	})
}

func newSem(t *testing.T, conn *zk.Conn, p string, permits int, opts ...lock.Option) lock.Locker {
	t.Helper()
	s, err := zklock.NewSemaphore(conn, p, permits, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestSemaphore(t *testing.T) {
	addr := testenv.SharedZooKeeper(t).Addr
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	opts := []lock.Option{lock.TTL(time.Minute), lock.MaxPoll(time.Minute)}
	sem := func(t *testing.T, p string) lock.Locker { return newSem(t, connect(t, addr, nil), p, 2, opts...) }

	t.Run("TwoPermits", func(t *testing.T) {
		p := uniquePath(t)
		a, err := sem(t, p).TryLock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		b, err := sem(t, p).TryLock(ctx)
		if err != nil {
			t.Fatalf("second permit: %v", err)
		}
		if _, err := sem(t, p).TryLock(ctx); !errors.Is(err, lock.ErrLocked) {
			t.Fatalf("third TryLock: %v, want ErrLocked", err)
		}
		c := acquired(t, sem(t, p))
		expectNone(t, c, "third holder")
		_ = a.Unlock(ctx)
		cl := expectLease(t, c, "third holder after a release", 10*time.Second)
		if cl.Token() <= b.Token() {
			t.Fatalf("token %d after %d", cl.Token(), b.Token())
		}
		_, _ = b.Unlock(ctx), cl.Unlock(ctx)
	})

	// Releases out of order: each admission must wake the next waiter, which
	// becomes the first waiter and must then watch every holder.
	t.Run("OutOfOrderReleases", func(t *testing.T) {
		p := uniquePath(t)
		admin := connect(t, addr, nil)
		h1, err := sem(t, p).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		h2, err := sem(t, p).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var w [3]<-chan result
		for i := range w {
			w[i] = acquired(t, sem(t, p))
			waitChildren(t, admin, p, 3+i) // queue in order
		}
		_ = h2.Unlock(ctx)
		l0 := expectLease(t, w[0], "waiter 0", 10*time.Second)
		expectNone(t, w[1], "waiter 1")
		_ = h1.Unlock(ctx) // not the node waiter 1 watched when it queued
		l1 := expectLease(t, w[1], "waiter 1", 10*time.Second)
		expectNone(t, w[2], "waiter 2")
		_ = l1.Unlock(ctx)
		l2 := expectLease(t, w[2], "waiter 2", 10*time.Second)
		_, _ = l0.Unlock(ctx), l2.Unlock(ctx)
		waitChildren(t, admin, p, 0)
	})

	t.Run("CrashedHolderPermitReturns", func(t *testing.T) {
		p := uniquePath(t)
		crashing := connect(t, addr, nil)
		if _, err := newSem(t, crashing, p, 2, opts...).Lock(ctx); err != nil {
			t.Fatal(err)
		}
		b, err := sem(t, p).Lock(ctx)
		if err != nil {
			t.Fatal(err)
		}
		c := acquired(t, sem(t, p))
		expectNone(t, c, "third holder")
		crashing.Close() // the session ends: ZooKeeper deletes its node
		cl := expectLease(t, c, "third holder after the crash", 10*time.Second)
		_, _ = b.Unlock(ctx), cl.Unlock(ctx)
	})
}

// TestFencingWithZooKeeper: a paused holder's late write is refused by a
// resource that checks fencing tokens.
func TestFencingWithZooKeeper(t *testing.T) {
	addr := testenv.SharedZooKeeper(t).Addr
	p := uniquePath(t)
	ctx := context.Background()
	var fence lock.Fence
	old, err := mustNew(t, connect(t, addr, nil), p, lock.TTL(sessionTimeout)).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := fence.Admit("row", old.Token()); err != nil {
		t.Fatal(err)
	}
	<-old.Lost() // "paused" past its TTL
	cur, err := mustNew(t, connect(t, addr, nil), p).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer cur.Unlock(ctx)
	if err := fence.Admit("row", cur.Token()); err != nil {
		t.Fatal(err)
	}
	if err := fence.Admit("row", old.Token()); !errors.Is(err, lock.ErrStaleToken) {
		t.Fatalf("late write of the old holder: %v, want ErrStaleToken", err)
	}
}
