package zklock_test

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/floodgate-dev/floodgate/internal/testenv"
	"github.com/floodgate-dev/floodgate/lock"
)

// proxiedZK is a ZooKeeper session through a fault-injecting proxy, and one
// straight to the server to look at the nodes with.
type proxiedZK struct {
	p      *testenv.Proxy
	conn   *zk.Conn // through p
	direct *zk.Conn
}

// newProxiedZK connects through a proxy with a long session (the server
// caps it at 10s), so that the session outlives the faults and pings are
// rare: a lost chunk is most likely the reply the test aims at.
func newProxiedZK(t *testing.T) proxiedZK {
	srv := testenv.SharedZooKeeper(t)
	p := testenv.NewProxy(t, srv.Addr)
	conn, events, err := zk.Connect([]string{p.Addr()}, 10*time.Second, zk.WithLogger(nopLogger{}), zk.WithDialer(net.DialTimeout))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(conn.Close)
	timeout := time.After(10 * time.Second)
	for session := false; !session; {
		select {
		case ev := <-events:
			session = ev.State == zk.StateHasSession
		case <-timeout:
			t.Fatal("no ZooKeeper session through the proxy")
		}
	}
	return proxiedZK{p: p, conn: conn, direct: connect(t, srv.Addr, nil)}
}

// nodes returns the children of path, read on the direct session.
func (px proxiedZK) nodes(t *testing.T, path string) []string {
	t.Helper()
	children, _, err := px.direct.Children(path)
	if err != nil {
		t.Fatal(err)
	}
	return children
}

// noNodeWithin waits until path has no children, for at most within.
func (px proxiedZK) noNodeWithin(t *testing.T, path string, within time.Duration) {
	t.Helper()
	end := time.Now().Add(within)
	for {
		children := px.nodes(t, path)
		if len(children) == 0 {
			return
		}
		if time.Now().After(end) {
			t.Fatalf("nodes %v are left %v after the failed Lock", children, within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// watchCreate returns a channel that is closed once a child of path is
// created: proof that a create landed.
func (px proxiedZK) watchCreate(t *testing.T, path string) <-chan struct{} {
	t.Helper()
	_, _, ev, err := px.direct.ChildrenW(path)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		<-ev
		close(done)
	}()
	return done
}

// warm makes the lock path exist and the session busy-free: a Lock and an
// Unlock through the proxy.
func warm(t *testing.T, l lock.Locker) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lease, err := l.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

func landed(t *testing.T, created <-chan struct{}) {
	t.Helper()
	select {
	case <-created:
	case <-time.After(10 * time.Second):
		t.Fatal("the create never reached the server: the test proves nothing")
	}
}

// The reply of the create is lost with the connection: the node exists,
// and the client, reconnected in the same session, finds it by its GUID
// instead of creating a second one. The Lock holds exactly one node.
func TestLostCreateReplyOneNode(t *testing.T) {
	t.Parallel()
	px := newProxiedZK(t)
	p := uniquePath(t)
	l := mustNew(t, px.conn, p)
	warm(t, l)
	created := px.watchCreate(t, p)
	px.p.LoseNextChunks(1)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	lease, err := l.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	landed(t, created)
	if !px.p.WaitLost(1, 0) {
		t.Fatal("the proxy lost no reply")
	}
	if n := px.nodes(t, p); len(n) != 1 {
		t.Fatalf("nodes after a lost create reply: %v, want exactly one", n)
	}
	other := mustNew(t, px.direct, p)
	if _, err := other.TryLock(ctx); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("TryLock of another client: %v, want ErrLocked", err)
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	px.noNodeWithin(t, p, 5*time.Second)
}

// A Lock whose create is held up (traffic stalled) fails at its deadline;
// the create lands afterwards, and the node is deleted, so that it never
// becomes a holder nobody knows of.
func TestFailedLockStalledCreateLeavesNoNode(t *testing.T) {
	t.Parallel()
	px := newProxiedZK(t)
	p := uniquePath(t)
	l := mustNew(t, px.conn, p)
	warm(t, l)
	created := px.watchCreate(t, p)
	px.p.Stall()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	lease, err := l.Lock(ctx)
	cancel()
	px.p.Resume()
	if err == nil {
		_ = lease.Unlock(context.Background())
		t.Fatal("Lock succeeded through stalled traffic")
	}
	landed(t, created)
	px.noNodeWithin(t, p, 10*time.Second)
	freeFor(t, mustNew(t, px.direct, p))
}

// The reply of the create is lost and the client cannot reconnect before
// the Lock's deadline: the Lock fails without knowing whether its node
// exists. Once reconnected, the client finds the node by its GUID and
// deletes it.
func TestFailedLockLostCreateLeavesNoNode(t *testing.T) {
	t.Parallel()
	px := newProxiedZK(t)
	p := uniquePath(t)
	l := mustNew(t, px.conn, p)
	warm(t, l)
	created := px.watchCreate(t, p)
	px.p.Refuse(true)
	px.p.LoseNextChunks(1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	lease, err := l.Lock(ctx)
	cancel()
	if err == nil {
		_ = lease.Unlock(context.Background())
		t.Fatal("Lock succeeded without a reply to its create")
	}
	landed(t, created)
	px.p.Refuse(false)
	px.noNodeWithin(t, p, 10*time.Second)
	freeFor(t, mustNew(t, px.direct, p))
}

// freeFor checks that l takes the lock at once.
func freeFor(t *testing.T, l lock.Locker) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	lease, err := l.TryLock(ctx)
	if err != nil {
		t.Fatalf("TryLock after the failed Lock: %v", err)
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}
