// Package lockdriver is the store side of package lock: the Driver a store
// implements (Memory and Redis in lock, SQL in lock/sqllock, ZooKeeper in
// lock/zklock), the settings the lock.Option functions fill in, and the
// constructors that wrap a Driver in lock's public values.
//
// Package lock exports only what applications call: Locker, RWLocker,
// Lease, the constructors, the options and the errors. The means of
// implementing a store stay here, so that they can change with the stores,
// which all live in this module. Lease and the Lockers are lock's own types,
// which this package cannot name, since lock imports it: lock hands over
// the constructors (NewLocker, NewRWLocker) in its init, as grpc-go's
// internal package receives functions from grpc. Any package that calls them
// has imported lock (it returns lock's types), so lock's init has run.
package lockdriver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"time"
)

// Driver is the store side of a lock. Every method must be atomic in the
// store. A Driver returns lock.ErrLocked and lock.ErrNotHeld where said.
type Driver interface {
	// Acquire takes the lock for owner with a lease of ttl, judged by the
	// store's clock. The holding owner acquires again at once, with the same
	// token: one more hold level when Options.Owner was set; without it the
	// owner id is one Lock call's own, and the Memory and Redis drivers treat
	// a second acquire as a resend of that call, adding no level. Their
	// Acquire leaves nothing held when it returns an error, even if its
	// request runs in the store later. When wait is false Acquire makes one attempt
	// and returns lock.ErrLocked if another owner holds the lock; when wait is true
	// it blocks until acquired or ctx ends, and then returns ctx's error.
	Acquire(ctx context.Context, owner string, ttl time.Duration, wait bool) (Grant, error)
	// Extend makes owner's lease end ttl from now, by the store's clock. It
	// returns lock.ErrNotHeld when owner does not hold the lock (the lease
	// expired or was taken over); it never acquires.
	Extend(ctx context.Context, owner string, ttl time.Duration) error
	// Release drops one hold level of owner. It returns lock.ErrNotHeld when
	// owner does not hold the lock.
	Release(ctx context.Context, owner string) error
}

// Grant is what a successful Acquire returns.
type Grant struct {
	// Token is the fencing token: strictly increasing per lock name across
	// all holders; the same for every hold level of one holding.
	Token int64
}

// Options are the settings of a Locker, which the lock.Option functions
// set; see them for what each means.
type Options struct {
	TTL       time.Duration // lease length; default 30s
	AutoRenew bool          // renew at TTL/3 while held
	Owner     string        // fixed owner id: reentrant; "" = a new random owner per Lock
	Fair      bool          // FIFO among waiters
	// MaxPoll bounds the fallback poll of a waiter, for holders that die
	// without releasing; default 1s.
	MaxPoll time.Duration
}

// DefaultTTL is the lease length when lock.TTL is not given (lock.DefaultTTL).
const DefaultTTL = 30 * time.Second

// BuildOptions applies opts (lock.Option values) over the defaults and
// validates them. Every constructor of a Locker calls it; the error names
// the bad option.
func BuildOptions[O ~func(*Options)](opts []O) (Options, error) {
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

// Set by package lock in its init; see the package documentation.
var (
	newLocker   func(d Driver, o Options) any
	newRWLocker func(r, w Driver, o Options) any
)

// SetConstructors installs lock's constructors. Package lock calls it once,
// in its init; nothing else may.
func SetConstructors(locker func(d Driver, o Options) any, rw func(r, w Driver, o Options) any) {
	newLocker, newRWLocker = locker, rw
}

// NewLocker returns a lock.Locker over d, with leases, AutoRenew and Lost
// handled by package lock; o comes from BuildOptions. L is lock.Locker.
func NewLocker[L any](d Driver, o Options) L { return newLocker(d, o).(L) }

// NewRWLocker returns a lock.RWLocker whose read side is r and whose write
// side is w, each with leases as NewLocker's. L is lock.RWLocker.
func NewRWLocker[L any](r, w Driver, o Options) L { return newRWLocker(r, w, o).(L) }
