package lock

import (
	"errors"
	"fmt"
	"sync"
)

// ErrStaleToken is returned by Fence.Admit for a token lower than the
// highest one already admitted.
var ErrStaleToken = errors.New("lock: stale fencing token")

// Fence is the check a protected resource makes: it admits a write only with
// a fencing token not lower than the highest token it has admitted, per
// resource. A holder that was paused past its TTL — by GC, swapping, a slow
// network — wakes up still believing it holds the lock; its token is lower
// than the new holder's, so its late writes are refused. A lease alone
// cannot give this: only the resource sees the order in which writes arrive.
//
// Fence keeps the highest tokens in memory, for a resource in the same
// process. A database does the same in the write itself, for example
//
//	UPDATE accounts SET balance = $1, fence = $2 WHERE id = $3 AND fence <= $2
//
// and treats 0 affected rows as a stale writer. The zero Fence is ready to
// use and safe for concurrent use.
type Fence struct {
	mu      sync.Mutex
	highest map[string]int64
}

// Admit records token for resource and returns nil when token is not lower
// than any token admitted before for it; otherwise it returns an error
// wrapping ErrStaleToken and records nothing. Equal tokens are admitted: one
// holder may write several times.
func (f *Fence) Admit(resource string, token int64) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.highest == nil {
		f.highest = make(map[string]int64)
	}
	if h := f.highest[resource]; token < h {
		return fmt.Errorf("%w: %d < %d for %q", ErrStaleToken, token, h, resource)
	}
	f.highest[resource] = token
	return nil
}

// Highest returns the highest token admitted for resource, or 0.
func (f *Fence) Highest(resource string) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.highest[resource]
}
