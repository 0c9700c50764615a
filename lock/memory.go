package lock

import (
	"context"
	"time"

	"github.com/floodgate-dev/floodgate/internal/memstore"
	"github.com/floodgate-dev/floodgate/lock/internal/lockdriver"
)

// memDriver is a mutex in a Memory backend: the state of a lock name is one
// entry of the "lock" table, guarded by its shard's mutex. Waiters queue in
// the entry and the releaser wakes the head one; time is the backend's clock.
type memDriver struct {
	t    *memstore.Table
	name string
	o    lockdriver.Options
}

// memLock is the entry value of a lock name.
type memLock struct {
	owner    string
	count    int
	token    int64
	deadline int64 // µs, backend clock
	fence    int64 // last token handed out; survives release
	waiters  []*memWaiter
}

type memWaiter struct {
	owner string
	wake  chan struct{} // buffered 1
}

func newMemDriver(m *memstore.Store, name string, o lockdriver.Options) *memDriver {
	return &memDriver{t: m.Table("lock"), name: name, o: o}
}

// state returns the lock's state; the shard must be locked.
func (d *memDriver) state(sh *memstore.Shard) *memLock {
	e := sh.Get(d.name)
	if e == nil {
		e = &memstore.Entry{Value: &memLock{}}
		sh.Put(d.name, e)
	}
	return e.Value.(*memLock)
}

func (d *memDriver) Acquire(ctx context.Context, owner string, ttl time.Duration, wait bool) (lockdriver.Grant, error) {
	var w *memWaiter
	defer func() {
		if w != nil {
			d.leave(w)
		}
	}()
	for {
		g, retry, err := d.try(owner, ttl, w)
		if err == nil {
			w = nil // try removed it from the queue
			return g, nil
		}
		if !wait {
			return lockdriver.Grant{}, err
		}
		if w == nil {
			w = &memWaiter{owner: owner, wake: make(chan struct{}, 1)}
			sh := d.t.Shard(d.name)
			sh.Lock()
			st := d.state(sh)
			st.waiters = append(st.waiters, w)
			sh.Unlock()
			continue // the lock may have been released meanwhile
		}
		t := time.NewTimer(retry)
		select {
		case <-ctx.Done():
			t.Stop()
			return lockdriver.Grant{}, ctx.Err()
		case <-w.wake:
		case <-t.C:
		}
		t.Stop()
	}
}

// try makes one attempt. On failure it returns how long to wait at most
// before trying again: until the holder's lease ends, capped by MaxPoll.
func (d *memDriver) try(owner string, ttl time.Duration, w *memWaiter) (lockdriver.Grant, time.Duration, error) {
	sh := d.t.Shard(d.name)
	sh.Lock()
	defer sh.Unlock()
	st := d.state(sh)
	now := sh.Now()
	if st.owner != "" && st.deadline > now {
		if st.owner == owner {
			// Re-entry only with Owner: without it the owner id is one
			// Lock call's own (the Redis scripts answer a resend so).
			if d.o.Owner != "" {
				st.count++
			}
			return lockdriver.Grant{Token: st.token}, 0, nil
		}
		return lockdriver.Grant{}, min(time.Duration(st.deadline-now)*time.Microsecond, d.o.MaxPoll), ErrLocked
	}
	if d.o.Fair && len(st.waiters) > 0 && st.waiters[0] != w {
		return lockdriver.Grant{}, d.o.MaxPoll, ErrLocked
	}
	if w != nil {
		st.remove(w)
	}
	st.fence++
	st.owner, st.count, st.token = owner, 1, st.fence
	st.deadline = now + ttl.Microseconds()
	return lockdriver.Grant{Token: st.token}, 0, nil
}

func (st *memLock) remove(w *memWaiter) {
	for i, x := range st.waiters {
		if x == w {
			st.waiters = append(st.waiters[:i], st.waiters[i+1:]...)
			return
		}
	}
}

// wakeHead wakes the longest waiter; the shard must be locked.
func (st *memLock) wakeHead() {
	if len(st.waiters) > 0 {
		select {
		case st.waiters[0].wake <- struct{}{}:
		default:
		}
	}
}

// leave takes a waiter that gave up out of the queue, passing on a wake-up it
// may have consumed.
func (d *memDriver) leave(w *memWaiter) {
	sh := d.t.Shard(d.name)
	sh.Lock()
	defer sh.Unlock()
	st := d.state(sh)
	st.remove(w)
	if st.owner == "" || st.deadline <= sh.Now() {
		st.wakeHead()
	}
}

// held reports whether owner holds the lock at now; the shard must be
// locked.
func (d *memDriver) held(st *memLock, owner string, now int64) bool {
	return st.owner == owner && st.deadline > now
}

func (d *memDriver) Extend(_ context.Context, owner string, ttl time.Duration) error {
	sh := d.t.Shard(d.name)
	sh.Lock()
	defer sh.Unlock()
	st := d.state(sh)
	now := sh.Now()
	if !d.held(st, owner, now) {
		return ErrNotHeld
	}
	st.deadline = now + ttl.Microseconds()
	return nil
}

func (d *memDriver) Release(_ context.Context, owner string) error {
	sh := d.t.Shard(d.name)
	sh.Lock()
	defer sh.Unlock()
	st := d.state(sh)
	if !d.held(st, owner, sh.Now()) {
		return ErrNotHeld
	}
	if st.count--; st.count > 0 {
		return nil
	}
	st.owner = ""
	st.wakeHead()
	return nil
}

// drop removes the lock state (for tests of Lost on deletion).
func (d *memDriver) drop() {
	sh := d.t.Shard(d.name)
	sh.Lock()
	defer sh.Unlock()
	st := d.state(sh)
	st.owner, st.count = "", 0
}
