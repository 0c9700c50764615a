package lock

import (
	"errors"
	"fmt"
	"math"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/internal/unwrap"
	"github.com/floodgate-dev/floodgate/lock/internal/lockdriver"
)

// MaxPermits is the largest number of permits a Semaphore accepts.
const MaxPermits = math.MaxInt32

// NewSemaphore returns a counting semaphore named name on a Memory or Redis
// backend: a Locker that at most permits owners hold at once. Each permit is
// a lease: it has a TTL, so a crashed holder's permit comes back when its
// lease ends, and only its holder can release or extend it. Each holding gets
// a fencing token, strictly increasing per name across all holders. With
// Owner, the owner re-enters at once and keeps its one permit, with a hold
// count; each Unlock releases one level. Waiters are woken by releases, as
// many as the free permits can admit; with Fair they acquire in arrival
// order, without it a newcomer may take a free permit before them.
//
// Options: TTL, AutoRenew, Owner, Fair, MaxPoll. All Semaphores of one name
// must use the same permits: each admits against its own value. A Semaphore,
// a Mutex and an RWMutex of one name are separate locks. On Redis every key
// shares the hash tag {name} (Cluster-safe) and waiters are woken through
// pub/sub on the semaphore's channel. The returned Locker is safe for
// concurrent use.
//
// NewSemaphore returns an error naming the field for a nil backend, an empty
// or oversized name, a bad option, or permits outside [1, MaxPermits].
func NewSemaphore(b backend.Backend, name string, permits int, opts ...Option) (Locker, error) {
	if b == nil {
		return nil, errors.New("lock: backend is nil")
	}
	if err := lockdriver.CheckName(name); err != nil {
		return nil, err
	}
	if permits < 1 || permits > MaxPermits {
		return nil, fmt.Errorf("lock: permits must be between 1 and %d, got %d", MaxPermits, permits)
	}
	o, err := lockdriver.BuildOptions(opts)
	if err != nil {
		return nil, err
	}
	switch b := b.(type) {
	case *backend.Memory:
		return newLocker(newSemMem(unwrap.Memory(b), name, permits, o), o), nil
	case *backend.Redis:
		return newLocker(newSemRedis(unwrap.Redis(b), name, permits, o), o), nil
	}
	return nil, fmt.Errorf("lock: unsupported backend %T", b)
}
