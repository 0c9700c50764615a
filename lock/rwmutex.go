package lock

import (
	"context"
	"errors"
	"fmt"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/internal/unwrap"
)

// RWMutex is a distributed reader/writer lock: many readers or one writer
// hold it at once. Writers are not starved: once a writer waits, new readers
// queue behind it, and readers already waiting before it go first.
//
// Each side is a Locker: RLocker for readers, Locker (or the shorthand
// methods RLock and Lock) for writers. Every holding, read or write, is a
// Lease with its own TTL — a crashed reader's hold ends at its TTL like a
// writer's — and its own fencing token, strictly increasing per name across
// readers and writers. Waiters are woken by releases: a writer's release
// wakes the readers waiting before the next writer, together; the last
// reader's release wakes the next writer. With Fair, waiters acquire in
// arrival order (readers that are next to each other in the queue together);
// without it a writer may overtake waiters when the lock is free.
//
// With Owner, reentrancy is per side: the owner re-enters the side it holds,
// and each Unlock releases one level. An owner never waits for itself: the
// write holder may also take the read side, and a reader may take the write
// side once no other owner holds the lock (two owners that both try this
// wait for each other until a context or a lease ends; release the read side
// first instead).
//
// The zero value is not usable; call NewRWMutex. An RWMutex is safe for
// concurrent use.
type RWMutex struct {
	r, w Locker
}

// NewRWMutex returns a reader/writer lock named name on a Memory or Redis
// backend. Locks of the same name on the same store share their state,
// whichever process they are in; an RWMutex, a Mutex and a Semaphore of one
// name are separate locks. Options (TTL, AutoRenew, Owner, Fair, MaxPoll)
// apply to both sides.
//
// On Redis every key of the lock shares the hash tag {name} (Cluster-safe)
// and waiters are woken through pub/sub on the lock's channel. The fencing
// counter outlives the lock, so a store keeps one small record per name ever
// used.
func NewRWMutex(b backend.Backend, name string, opts ...Option) (*RWMutex, error) {
	if b == nil {
		return nil, errors.New("lock: backend is nil")
	}
	if err := CheckName(name); err != nil {
		return nil, err
	}
	o, err := BuildOptions(opts)
	if err != nil {
		return nil, err
	}
	var side func(byte) Driver
	switch b := b.(type) {
	case *backend.Memory:
		side = newRWMem(unwrap.Memory(b), name, o).side
	case *backend.Redis:
		side = newRWRedis(unwrap.Redis(b), name, o).side
	default:
		return nil, fmt.Errorf("lock: unsupported backend %T", b)
	}
	return &RWMutex{r: NewLocker(side(sideRead), o), w: NewLocker(side(sideWrite), o)}, nil
}

// RLocker returns the read side: its Lock waits while another owner holds
// the write side or a writer waits ahead of it; its TryLock returns
// ErrLocked in those cases.
func (m *RWMutex) RLocker() Locker { return m.r }

// Locker returns the write side: its Lock waits while another owner holds
// either side (and, with Fair, while waiters are ahead of it); its TryLock
// returns ErrLocked then.
func (m *RWMutex) Locker() Locker { return m.w }

// RLock is shorthand for m.RLocker().Lock(ctx): it waits until the read side
// is held or ctx ends, and then returns ctx's error and holds nothing.
func (m *RWMutex) RLock(ctx context.Context) (*Lease, error) { return m.r.Lock(ctx) }

// TryRLock is shorthand for m.RLocker().TryLock(ctx): ErrLocked when a
// writer holds the lock or waits for it.
func (m *RWMutex) TryRLock(ctx context.Context) (*Lease, error) { return m.r.TryLock(ctx) }

// Lock is shorthand for m.Locker().Lock(ctx): it waits until the write side
// is held or ctx ends, and then returns ctx's error and holds nothing.
func (m *RWMutex) Lock(ctx context.Context) (*Lease, error) { return m.w.Lock(ctx) }

// TryLock is shorthand for m.Locker().TryLock(ctx): ErrLocked when another
// owner holds either side (or, with Fair, when others wait).
func (m *RWMutex) TryLock(ctx context.Context) (*Lease, error) { return m.w.TryLock(ctx) }
