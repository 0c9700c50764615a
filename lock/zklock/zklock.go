// Package zklock provides the locks of package lock on ZooKeeper: a mutex
// (New), a readers–writer lock (NewRWMutex) and a counting semaphore
// (NewSemaphore), each a lock.Locker with the lock package's contract, built
// with the classic ZooKeeper recipes on github.com/go-zookeeper/zk.
//
// # Recipe
//
// Each Lock or TryLock that is not a re-entry creates an ephemeral
// sequential node under the lock path (the path and its parents are created
// as persistent nodes when missing). The nodes form a queue ordered by their
// sequence numbers; the mutex is held by the lowest node. A waiter watches
// only the node just before it, so a release wakes one waiter, never a herd,
// and waiters acquire in the order they queued: every zklock Locker is fair,
// with or without lock.Fair. TryLock creates its node and, if the node is not
// admitted at once, deletes it and returns lock.ErrLocked. A waiter whose
// context ends deletes its node.
//
// Node names carry a protection id, "_c_<guid>-lock-<sequence>" (the form of
// Curator and of go-zookeeper's zk.Lock), one GUID per Lock or TryLock call:
// when the connection drops before the reply of a create arrives, the client,
// once reconnected in the same session, lists the lock path and takes the
// node carrying the call's GUID, and creates again only if there is none, so
// a call never has two nodes. ZooKeeper makes that listing conclusive: a
// session's requests are applied in order, and a reconnection closes the
// session's old connection, so a create sent before cannot land after it.
// A call that returns an error holds nothing: it deletes its node, or, when
// it does not know whether its create was applied (the reply was lost, or
// its context ended first), waits for the outcome or looks for the node by
// its GUID, in the background, and deletes it, so that the node never
// becomes a holder nobody knows of. These clean-ups retry for about a
// minute while the client is disconnected; a session that ends meanwhile
// takes its nodes with it.
// A node's data is "<hold count> <owner id>": with lock.Owner, the same owner
// re-enters at once (the count goes up) and each Unlock releases one level,
// deleting the node at the last one.
//
// # Leases and sessions
//
// ZooKeeper has no expiry for a single node; its lease is the session. Here a
// lease ends at the first of:
//
//   - its TTL passing without Extend: the holder's client deletes its node at
//     the deadline, measured on its monotonic clock, so a holder that stops
//     renewing frees the lock for others;
//   - the end of the session: ZooKeeper deletes the ephemeral node when the
//     holder's process dies or is cut off longer than the session timeout;
//   - the node's deletion by anyone else.
//
// Extend (and AutoRenew, every TTL/3) succeeds while the node exists with the
// lease's owner, read after a sync so that a follower cannot answer with old
// state, and returns lock.ErrNotHeld otherwise. The deadline kept by the
// client never moves earlier (one deadline serves every hold level of an
// owner), so Extend with a shorter duration shortens nothing. A watch on the held node
// notices a deletion or the expiry of the session at once; the next Extend
// then returns lock.ErrNotHeld without a round trip, and Lease.Lost closes.
// While the client is cut off from ZooKeeper it cannot know, and Lost closes
// when the last confirmed deadline passes. Choose a TTL no longer than the
// session timeout the server granted (it clamps the requested one to its
// minSessionTimeout and maxSessionTimeout): the server heard the client no
// earlier than the start of the last confirmed Extend, so Lost then closes
// before ZooKeeper can expire the session and give the lock to another
// client.
//
// # Fencing tokens
//
// Lease.Token is the czxid of the lease's node: the id of the ZooKeeper
// transaction that created it. Zxids strictly increase over the life of an
// ensemble (leader epoch in the high 32 bits, a counter in the low ones), and
// a later holder's node was created after every earlier holder's node, since
// the queue is ordered by creation; so tokens strictly increase per lock path
// across all holders, and every hold level of one holding has the same token.
// The czxid is chosen over the node's sequence number because it also keeps
// increasing when the lock path is deleted and created again (which restarts
// the sequence at 0) and is comparable across the paths of one ensemble. No
// token survives the loss of ZooKeeper's data: a new ensemble starts its
// zxids again from 0.
//
// # Connections
//
// The caller owns the *zk.Conn and its session; Lockers on one connection
// share the session, and closing the connection ends every lease held
// through it. While the client is disconnected, a waiting Lock keeps its
// place in the queue (its node lives as long as the session) and retries
// until it reconnects, its context ends, or a minute of failures has passed;
// a Lock through a closed client fails within a few seconds. go-zookeeper
// calls take no context: when a context ends, the waiting call is abandoned
// and finishes in the background (the client fails requests when its
// connection drops). Nodes are created with the ACL world:anyone with all
// permissions.
//
// # Limits
//
// A lock path must be used by one kind of lock only: every sequential node
// under it takes part in the queue. ZooKeeper's sequence counter is a signed
// 32-bit number per parent node, so the order of a lock path is only good for
// 2^31 creations. Options: lock.TTL, lock.AutoRenew, lock.Owner,
// lock.MaxPoll (a waiter also looks at the queue this often, as a safety net
// for lost watches; default 1s); lock.Fair changes nothing.
package zklock

import (
	"errors"
	"fmt"

	"github.com/go-zookeeper/zk"

	"github.com/floodgate-dev/floodgate/lock"
	"github.com/floodgate-dev/floodgate/lock/internal/lockdriver"
)

// New returns a mutual exclusion lock on the ZooKeeper path path: an
// absolute path without a trailing slash, used by this lock only. Locks of
// the same path exclude each other, in whatever process or session they are.
// The Locker is safe for concurrent use; Lock is what most callers want.
// Errors name the bad argument or option.
func New(conn *zk.Conn, path string, opts ...lock.Option) (lock.Locker, error) {
	d, err := newSide(conn, path, recipe{kind: kindLock, permits: 1}, opts)
	if err != nil {
		return nil, err
	}
	return lockdriver.NewLocker[lock.Locker](d, d.o), nil
}

func newSide(conn *zk.Conn, path string, r recipe, opts []lock.Option) (*driver, error) {
	if conn == nil {
		return nil, errors.New("zklock: conn is nil")
	}
	if err := checkPath(path); err != nil {
		return nil, err
	}
	o, err := lockdriver.BuildOptions(opts)
	if err != nil {
		return nil, err
	}
	return newDriver(conn, path, r, o), nil
}

// NewRWMutex returns a readers–writer lock on the ZooKeeper path path (as
// for New, used by this lock only): any number of readers, or one writer.
// It is a lock.RWLocker, as lock.NewRWMutex returns on Memory and Redis:
// Lock and TryLock take the write side, RLock and TryRLock the read side,
// and RLocker gives the read side as a lock.Locker; each hands out leases
// with the lock package's contract, fencing tokens included. The options
// apply to both sides.
//
// Readers create "read-" nodes and writers "write-" nodes in one queue; a
// reader waits only for the closest lower write node, a writer for the
// closest lower node of any kind. A reader that comes after a waiting writer
// therefore waits for it: writers are not starved. There is no upgrade or
// downgrade: an owner that holds one side and asks for the other waits for
// itself. The RWLocker is safe for concurrent use.
func NewRWMutex(conn *zk.Conn, path string, opts ...lock.Option) (lock.RWLocker, error) {
	rd, err := newSide(conn, path, recipe{kind: kindRead, permits: 1}, opts)
	if err != nil {
		return nil, err
	}
	wd, _ := newSide(conn, path, recipe{kind: kindWrite, permits: 1}, opts)
	return lockdriver.NewRWLocker[lock.RWLocker](rd, wd, rd.o), nil
}

// NewSemaphore returns a counting semaphore of permits leases on the
// ZooKeeper path path (as for New, used by this semaphore only, always with
// the same permits). A Lock is admitted when its node is among the lowest
// permits nodes of the queue. The first waiter watches the holders, any of
// which may free a permit; a later waiter watches the node just before it,
// which touches its data when it is admitted, so each release wakes one
// waiter. A permit is a lease: it comes back when its holder unlocks, stops
// renewing past its TTL, or loses its session (for a crashed holder, when
// ZooKeeper expires the session). Re-entry with lock.Owner takes the same
// permit again. The Locker is safe for concurrent use.
func NewSemaphore(conn *zk.Conn, path string, permits int, opts ...lock.Option) (lock.Locker, error) {
	if permits < 1 {
		return nil, fmt.Errorf("zklock: permits must be >= 1, got %d", permits)
	}
	d, err := newSide(conn, path, recipe{kind: kindLease, permits: permits}, opts)
	if err != nil {
		return nil, err
	}
	return lockdriver.NewLocker[lock.Locker](d, d.o), nil
}
