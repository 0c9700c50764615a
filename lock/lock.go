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
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"
)

// Sentinel errors. Compare with errors.Is.
var (
	// ErrLocked is returned by TryLock when another owner holds the lock.
	ErrLocked = errors.New("lock: locked by another owner")
	// ErrNotHeld is returned by Unlock and Extend when the lease was lost:
	// it expired, or the lock state was removed or taken over.
	ErrNotHeld = errors.New("lock: not held")
)

// Locker acquires a lock. Mutex, the read and write sides of RWMutex, and
// Semaphore are Lockers; so are the sqllock and zklock backends.
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

// Option configures a Locker.
type Option func(*Options)

// Options are the settings of a Locker, exported for the backends in
// sub-packages; applications use the Option functions.
type Options struct {
	TTL       time.Duration // lease length; default 30s
	AutoRenew bool          // renew at TTL/3 while held
	Owner     string        // fixed owner id: reentrant; "" = a new random owner per Lock
	Fair      bool          // FIFO among waiters
	// MaxPoll bounds the fallback poll of a waiter, for holders that die
	// without releasing; default 1s.
	MaxPoll time.Duration
}

// DefaultTTL is the lease length when TTL is not given.
const DefaultTTL = 30 * time.Second

// TTL sets the lease length (default 30s). It must be at least 1ms.
func TTL(d time.Duration) Option { return func(o *Options) { o.TTL = d } }

// AutoRenew renews the lease at TTL/3 while it is held, retrying transient
// errors; Lease.Lost closes when a renewal finds the lease gone or when the
// last confirmed deadline passes.
func AutoRenew() Option { return func(o *Options) { o.AutoRenew = true } }

// Owner makes the Locker reentrant for the owner id: Lock by the same owner
// while it holds the lock succeeds at once and increases a hold count; each
// Unlock releases one level. Without Owner, every Lock call is a new owner
// and nothing re-enters: a resend of the same acquire (a client retrying
// after a lost reply) gets the same lease back, not a second level.
func Owner(id string) Option { return func(o *Options) { o.Owner = id } }

// Fair makes waiters acquire in the order they started waiting. Without it, a
// newcomer may take a lock that was just released before the longest waiter.
func Fair() Option { return func(o *Options) { o.Fair = true } }

// MaxPoll bounds the fallback poll of waiters (default 1s): a waiter also
// retries this often in case the holder died without releasing.
func MaxPoll(d time.Duration) Option { return func(o *Options) { o.MaxPoll = d } }

// BuildOptions applies opts over the defaults and validates them. Backends
// call it; the error names the bad option.
func BuildOptions(opts []Option) (Options, error) {
	o := Options{TTL: DefaultTTL, MaxPoll: time.Second}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	if o.TTL < time.Millisecond {
		return o, fmt.Errorf("lock: TTL must be >= 1ms, got %v", o.TTL)
	}
	if o.TTL%time.Millisecond != 0 {
		return o, fmt.Errorf("lock: TTL must be a whole number of milliseconds, got %v", o.TTL)
	}
	if o.MaxPoll < time.Millisecond {
		return o, fmt.Errorf("lock: MaxPoll must be >= 1ms, got %v", o.MaxPoll)
	}
	if len(o.Owner) > 256 {
		return o, fmt.Errorf("lock: Owner must be at most 256 bytes, got %d", len(o.Owner))
	}
	return o, nil
}

// CheckName validates a lock name: non-empty, at most 512 bytes.
func CheckName(name string) error {
	if name == "" {
		return errors.New("lock: name is empty")
	}
	if len(name) > 512 {
		return fmt.Errorf("lock: name must be at most 512 bytes, got %d", len(name))
	}
	return nil
}

// NewOwnerID returns a random owner id.
func NewOwnerID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
