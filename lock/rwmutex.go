package lock

import (
	"context"
	"errors"
	"fmt"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/internal/unwrap"
	"github.com/floodgate-dev/floodgate/lock/internal/lockdriver"
)

// NewRWMutex returns a distributed reader/writer lock named name on a Memory
// or Redis backend: many readers or one writer hold it at once. Writers are
// not starved: once a writer waits, new readers queue behind it, and readers
// already waiting before it go first. Locks of the same name on the same
// store share their state, whichever process they are in; an RWMutex, a
// Mutex and a Semaphore of one name are separate locks. Options (TTL,
// AutoRenew, Owner, Fair, MaxPoll) apply to both sides.
//
// It returns an RWLocker, an interface, as NewMutex and NewSemaphore return
// a Locker: the locks of every store (sqllock, zklock) are the same values.
// Every holding, read or write, is a Lease with its own TTL — a crashed
// reader's hold ends at its TTL like a writer's — and its own fencing token,
// strictly increasing per name across readers and writers. Waiters are woken
// by releases: a writer's release wakes the readers waiting before the next
// writer, together; the last reader's release wakes the next writer. With
// Fair, waiters acquire in arrival order (readers that are next to each other
// in the queue together); without it a writer may overtake waiters when the
// lock is free.
//
// With Owner, reentrancy is per side: the owner re-enters the side it holds,
// and each Unlock releases one level. An owner never waits for itself: the
// write holder may also take the read side, and a reader may take the write
// side once no other owner holds the lock (two owners that both try this
// wait for each other until a context or a lease ends; release the read side
// first instead).
//
// On Redis every key of the lock shares the hash tag {name} (Cluster-safe)
// and waiters are woken through pub/sub on the lock's channel. The fencing
// counter outlives the lock, so a store keeps one small record per name ever
// used. The RWLocker is safe for concurrent use.
func NewRWMutex(b backend.Backend, name string, opts ...Option) (RWLocker, error) {
	if b == nil {
		return nil, errors.New("lock: backend is nil")
	}
	if err := lockdriver.CheckName(name); err != nil {
		return nil, err
	}
	o, err := lockdriver.BuildOptions(opts)
	if err != nil {
		return nil, err
	}
	var side func(byte) lockdriver.Driver
	switch b := b.(type) {
	case *backend.Memory:
		side = newRWMem(unwrap.Memory(b), name, o).side
	case *backend.Redis:
		side = newRWRedis(unwrap.Redis(b), name, o).side
	default:
		return nil, fmt.Errorf("lock: unsupported backend %T", b)
	}
	return newRWLocker(side(sideRead), side(sideWrite), o), nil
}

// rwLocker is the RWLocker of every store: a Locker per side.
type rwLocker struct {
	r, w Locker
}

// newRWLocker returns the RWLocker whose read side is r and whose write side
// is w. The stores of lock/sqllock and lock/zklock reach it as
// lockdriver.NewRWLocker.
func newRWLocker(r, w lockdriver.Driver, o lockdriver.Options) RWLocker {
	return &rwLocker{r: newLocker(r, o), w: newLocker(w, o)}
}

func (m *rwLocker) RLocker() Locker                              { return m.r }
func (m *rwLocker) RLock(ctx context.Context) (*Lease, error)    { return m.r.Lock(ctx) }
func (m *rwLocker) TryRLock(ctx context.Context) (*Lease, error) { return m.r.TryLock(ctx) }
func (m *rwLocker) Lock(ctx context.Context) (*Lease, error)     { return m.w.Lock(ctx) }
func (m *rwLocker) TryLock(ctx context.Context) (*Lease, error)  { return m.w.TryLock(ctx) }
