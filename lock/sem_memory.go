package lock

import (
	"context"
	"time"

	"github.com/floodgate-dev/floodgate/internal/memstore"
	"github.com/floodgate-dev/floodgate/lock/internal/lockdriver"
)

// semMem is a Semaphore in a Memory backend: the state of a name is one
// entry of the "semaphore" table, guarded by its shard's mutex. It follows
// the rules of lua/sem_acquire.lua and lua/sem_release.lua; waiters are woken
// through their own channels instead of pub/sub. Time is the backend's clock.
type semMem struct {
	t       *memstore.Table
	name    string
	permits int
	o       lockdriver.Options
}

// memSem is the entry value of a Semaphore name.
type memSem struct {
	fence   int64 // last token handed out; survives release
	place   int64 // last queue place handed out
	holders map[string]*memHold
	queue   []*waiter // by place
}

func newSemMem(m *memstore.Store, name string, permits int, o lockdriver.Options) *semMem {
	return &semMem{t: m.Table("semaphore"), name: name, permits: permits, o: o}
}

// state returns the semaphore's state with the holders whose lease ended
// removed; the shard must be locked.
func (d *semMem) state(sh *memstore.Shard, now int64) *memSem {
	e := sh.Get(d.name)
	if e == nil {
		e = &memstore.Entry{Value: &memSem{holders: map[string]*memHold{}}}
		sh.Put(d.name, e)
	}
	st := e.Value.(*memSem)
	for o, h := range st.holders {
		if h.deadline <= now {
			delete(st.holders, o)
		}
	}
	return st
}

func (d *semMem) Acquire(ctx context.Context, owner string, ttl time.Duration, wait bool) (lockdriver.Grant, error) {
	return memWait(ctx, owner, wait,
		func(w *waiter) (lockdriver.Grant, time.Duration, error) { return d.try(owner, ttl, w) },
		d.leave)
}

// try makes one attempt, by the rules of lua/sem_acquire.lua.
func (d *semMem) try(owner string, ttl time.Duration, w *waiter) (lockdriver.Grant, time.Duration, error) {
	sh := d.t.Shard(d.name)
	sh.Lock()
	defer sh.Unlock()
	now := sh.Now()
	st := d.state(sh, now)
	if h := st.holders[owner]; h != nil {
		if d.o.Owner != "" { // re-entry only with Owner, as in sem_acquire.lua
			h.count++
		}
		st.queue = queueRemove(st.queue, w)
		return lockdriver.Grant{Token: h.token}, 0, nil
	}
	fail := func(hint int64) (lockdriver.Grant, time.Duration, error) {
		if w != nil && w.place == 0 {
			st.place++
			w.place = st.place
			st.queue = append(st.queue, w)
		}
		return lockdriver.Grant{}, pollAfter(hint, d.o.MaxPoll), ErrLocked
	}
	if len(st.holders) >= d.permits {
		var first int64
		for _, h := range st.holders {
			if first == 0 || h.deadline < first {
				first = h.deadline
			}
		}
		return fail(first - now)
	}
	if d.o.Fair {
		before := len(st.queue)
		if w != nil && w.place != 0 {
			before = 0
			for _, x := range st.queue {
				if x.place < w.place {
					before++
				}
			}
		}
		if before >= d.permits-len(st.holders) {
			return fail(0)
		}
	}
	st.fence++
	st.holders[owner] = &memHold{count: 1, token: st.fence, deadline: now + ttl.Microseconds()}
	st.queue = queueRemove(st.queue, w)
	return lockdriver.Grant{Token: st.fence}, 0, nil
}

// wake wakes the waiters that free permits can admit now, by the rules of
// lua/sem_release.lua. The shard must be locked.
func (d *semMem) wake(st *memSem) {
	for i := 0; i < d.permits-len(st.holders) && i < len(st.queue); i++ {
		st.queue[i].signal()
	}
}

func (d *semMem) leave(w *waiter) {
	sh := d.t.Shard(d.name)
	sh.Lock()
	defer sh.Unlock()
	st := d.state(sh, sh.Now())
	st.queue = queueRemove(st.queue, w)
	d.wake(st)
}

func (d *semMem) Extend(_ context.Context, owner string, ttl time.Duration) error {
	sh := d.t.Shard(d.name)
	sh.Lock()
	defer sh.Unlock()
	now := sh.Now()
	h := d.state(sh, now).holders[owner]
	if h == nil {
		return ErrNotHeld
	}
	h.deadline = now + ttl.Microseconds()
	return nil
}

func (d *semMem) Release(_ context.Context, owner string) error {
	sh := d.t.Shard(d.name)
	sh.Lock()
	defer sh.Unlock()
	st := d.state(sh, sh.Now())
	h := st.holders[owner]
	if h == nil {
		return ErrNotHeld
	}
	if h.count--; h.count > 0 {
		return nil
	}
	delete(st.holders, owner)
	d.wake(st)
	return nil
}
