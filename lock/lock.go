// Package lock provides distributed locks with one contract on every store:
// Memory and Redis here, SQL databases in lock/sqllock and ZooKeeper in
// lock/zklock.
//
// A Locker hands out a *Lease. A lease has a TTL judged by the store's clock,
// so a dead holder's lock frees itself; only its owner can release or extend
// it, atomically; Extend never re-acquires a lost lock. AutoRenew keeps a lease
// alive while the holder runs, and Lease.Lost closes as soon as the lease can
// no longer be known to be held. Lease.Token is a fencing token that strictly
// increases per lock name across all holders: pass it to the resource you
// protect and let the resource reject stale tokens (see Fence), because a
// lease alone cannot stop a holder that was paused past its TTL.
//
// Every constructor returns an interface: NewMutex and NewSemaphore a
// Locker, NewRWMutex an RWLocker, here and in lock/sqllock and lock/zklock,
// so that code written against them runs on every store.
//
//	mu, _ := lock.NewMutex(b, "invoice:42", lock.TTL(10*time.Second), lock.AutoRenew())
//	lease, err := mu.Lock(ctx)
//	if err != nil { ... }
//	defer lease.Unlock(ctx)
//	select {
//	case <-lease.Lost(): // stop touching the resource
//	...
//	}
package lock

import (
	"context"
	"errors"
	"time"

	"github.com/floodgate-dev/floodgate/lock/internal/lockdriver"
)

// Sentinel errors. Compare with errors.Is.
var (
	// ErrLocked is returned by TryLock when another owner holds the lock.
	ErrLocked = errors.New("lock: locked by another owner")
	// ErrNotHeld is returned by Unlock and Extend when the lease was lost:
	// it expired, or the lock state was removed or taken over.
	ErrNotHeld = errors.New("lock: not held")
)

// Locker acquires a lock. NewMutex and NewSemaphore return one, and so do
// the sides of an RWLocker and the constructors of lock/sqllock and
// lock/zklock.
type Locker interface {
	// Lock waits until the lock is held or ctx ends. Waiters are woken by the
	// release of the lock (with a bounded fallback poll for holders that die
	// without releasing), not by a fast poll. When ctx ends first, Lock
	// returns ctx's error and holds nothing. On Memory and Redis any error
	// means Lock holds nothing, even when its request reached the store or
	// runs there later: such a call is cancelled in the background (see
	// docs/locks.md, "When replies are lost").
	Lock(ctx context.Context) (*Lease, error)
	// TryLock makes one attempt and returns ErrLocked at once when another
	// owner holds the lock. Like Lock, it holds nothing when it fails.
	TryLock(ctx context.Context) (*Lease, error)
}

// RWLocker is a readers–writer lock: many readers or one writer hold it at
// once. It is the write side's Locker (Lock, TryLock) with the read side's
// RLock and TryRLock; RLocker gives the read side as a Locker of its own, for
// code that takes a Locker. NewRWMutex returns one on Memory and Redis, and
// sqllock.NewRWMutex and zklock.NewRWMutex on their stores.
//
// Constructors return interfaces (Locker, RWLocker), not concrete types, so
// that every store's locks are the same values: code written against a
// Locker runs on Memory, Redis, SQL and ZooKeeper alike.
type RWLocker interface {
	// Lock and TryLock take the write side: Lock waits while another owner
	// holds either side (and, with Fair, while waiters are ahead of it);
	// TryLock returns ErrLocked then.
	Locker
	// RLock takes the read side: it waits while another owner holds the
	// write side or a writer waits ahead of it, until held or ctx ends, and
	// then returns ctx's error and holds nothing.
	RLock(ctx context.Context) (*Lease, error)
	// TryRLock makes one attempt at the read side and returns ErrLocked when
	// a writer holds the lock or waits for it.
	TryRLock(ctx context.Context) (*Lease, error)
	// RLocker returns the read side as a Locker: its Lock is RLock, its
	// TryLock TryRLock.
	RLocker() Locker
}

// Option configures a Locker.
type Option func(*options)

// options are the settings the Options fill in: lockdriver.Options, which the
// stores of lock/sqllock and lock/zklock read too.
type options = lockdriver.Options

// DefaultTTL is the lease length when TTL is not given.
const DefaultTTL = 30 * time.Second

// TTL sets the lease length (default 30s). It must be at least 1ms.
func TTL(d time.Duration) Option { return func(o *options) { o.TTL = d } }

// AutoRenew renews the lease at TTL/3 while it is held, retrying transient
// errors; Lease.Lost closes when a renewal finds the lease gone or when the
// last confirmed deadline passes.
func AutoRenew() Option { return func(o *options) { o.AutoRenew = true } }

// Owner makes the Locker reentrant for the owner id: Lock by the same owner
// while it holds the lock succeeds at once and increases a hold count; each
// Unlock releases one level. Without Owner, every Lock call is a new owner
// and nothing re-enters: a resend of the same acquire (a client retrying
// after a lost reply) gets the same lease back, not a second level. The id
// must be at most 256 bytes.
func Owner(id string) Option { return func(o *options) { o.Owner = id } }

// Fair makes waiters acquire in the order they started waiting. Without it, a
// newcomer may take a lock that was just released before the longest waiter.
func Fair() Option { return func(o *options) { o.Fair = true } }

// MaxPoll bounds the fallback poll of waiters (default 1s; at least 1ms): a
// waiter also retries this often in case the holder died without releasing.
func MaxPoll(d time.Duration) Option { return func(o *options) { o.MaxPoll = d } }
