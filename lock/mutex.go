package lock

import (
	"errors"
	"fmt"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/internal/unwrap"
	"github.com/floodgate-dev/floodgate/lock/internal/lockdriver"
)

// NewMutex returns a mutual exclusion lock named name on a Memory or Redis
// backend. Locks of the same name on the same store exclude each other,
// whichever process they are in. Options: TTL, AutoRenew, Owner, Fair,
// MaxPoll.
//
// On Redis every key of the lock shares the hash tag {name} (Cluster-safe)
// and waiters are woken through pub/sub on the lock's channel. On Memory the
// lock is in-process. Either way the lock's fencing counter outlives the lock,
// so a store keeps one small record per lock name ever used.
func NewMutex(b backend.Backend, name string, opts ...Option) (Locker, error) {
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
	switch b := b.(type) {
	case *backend.Memory:
		return newLocker(newMemDriver(unwrap.Memory(b), name, o), o), nil
	case *backend.Redis:
		return newLocker(newRedisDriver(unwrap.Redis(b), name, o), o), nil
	}
	return nil, fmt.Errorf("lock: unsupported backend %T", b)
}
