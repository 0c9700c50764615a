package lock

import (
	"context"
	"time"

	"github.com/floodgate-dev/floodgate/internal/memstore"
	"github.com/floodgate-dev/floodgate/lock/internal/lockdriver"
)

// rwMem is an RWMutex in a Memory backend: the state of a name is one entry
// of the "rwlock" table, guarded by its shard's mutex. It follows the rules
// of lua/rw_acquire.lua and lua/rw_release.lua step by step; waiters are woken
// through their own channels instead of pub/sub. Time is the backend's clock.
type rwMem struct {
	t    *memstore.Table
	name string
	o    lockdriver.Options
}

// memRW is the entry value of an RWMutex name.
type memRW struct {
	fence     int64 // last token handed out, to readers and writers; survives release
	place     int64 // last queue place handed out
	writer    string
	wcount    int
	wtoken    int64
	wdeadline int64 // µs, backend clock
	readers   map[string]*memHold
	rq, wq    []*waiter // waiting readers and writers, each by place
}

// memHold is one holding of a shared lock (a reader, a semaphore permit).
type memHold struct {
	count    int
	token    int64
	deadline int64 // µs, backend clock
}

func newRWMem(m *memstore.Store, name string, o lockdriver.Options) *rwMem {
	return &rwMem{t: m.Table("rwlock"), name: name, o: o}
}

// state returns the lock's state with the readers whose lease ended
// removed; the shard must be locked.
func (m *rwMem) state(sh *memstore.Shard, now int64) *memRW {
	e := sh.Get(m.name)
	if e == nil {
		e = &memstore.Entry{Value: &memRW{readers: map[string]*memHold{}}}
		sh.Put(m.name, e)
	}
	st := e.Value.(*memRW)
	for o, h := range st.readers {
		if h.deadline <= now {
			delete(st.readers, o)
		}
	}
	return st
}

func (st *memRW) writerLive(now int64) bool { return st.writer != "" && st.wdeadline > now }

// waitsAhead reports whether the head of q waits ahead of w (a caller that is not
// queued is behind every waiter).
func waitsAhead(q []*waiter, w *waiter) bool {
	return len(q) > 0 && (w == nil || w.place == 0 || q[0].place < w.place)
}

// side returns the Driver of one side, read or write.
func (m *rwMem) side(s byte) lockdriver.Driver { return rwMemSide{m: m, side: s} }

type rwMemSide struct {
	m    *rwMem
	side byte
}

func (d rwMemSide) Acquire(ctx context.Context, owner string, ttl time.Duration, wait bool) (lockdriver.Grant, error) {
	return memWait(ctx, owner, wait,
		func(w *waiter) (lockdriver.Grant, time.Duration, error) { return d.m.try(d.side, owner, ttl, w) },
		func(w *waiter) { d.m.leave(d.side, w) })
}

// try makes one attempt, by the rules of lua/rw_acquire.lua.
func (m *rwMem) try(side byte, owner string, ttl time.Duration, w *waiter) (lockdriver.Grant, time.Duration, error) {
	sh := m.t.Shard(m.name)
	sh.Lock()
	defer sh.Unlock()
	now := sh.Now()
	st := m.state(sh, now)
	fail := func(hint int64) (lockdriver.Grant, time.Duration, error) {
		if w != nil && w.place == 0 {
			st.place++
			w.place = st.place
			if side == sideRead {
				st.rq = append(st.rq, w)
			} else {
				st.wq = append(st.wq, w)
			}
		}
		return lockdriver.Grant{}, pollAfter(hint, m.o.MaxPoll), ErrLocked
	}
	done := func(token int64) (lockdriver.Grant, time.Duration, error) {
		if side == sideRead {
			st.rq = queueRemove(st.rq, w)
		} else {
			st.wq = queueRemove(st.wq, w)
		}
		return lockdriver.Grant{Token: token}, 0, nil
	}
	wlive := st.writerLive(now)
	rh := st.readers[owner]
	if side == sideRead {
		if rh != nil {
			if m.o.Owner != "" { // re-entry only with Owner, as in rw_acquire.lua
				rh.count++
			}
			return done(rh.token)
		}
		if wlive {
			if st.writer != owner {
				return fail(st.wdeadline - now)
			}
		} else if waitsAhead(st.wq, w) {
			return fail(0)
		}
		st.fence++
		st.readers[owner] = &memHold{count: 1, token: st.fence, deadline: now + ttl.Microseconds()}
		return done(st.fence)
	}
	if wlive {
		if st.writer == owner {
			if m.o.Owner != "" {
				st.wcount++
			}
			return done(st.wtoken)
		}
		return fail(st.wdeadline - now)
	}
	var last int64
	for o, h := range st.readers {
		if o != owner {
			last = max(last, h.deadline)
		}
	}
	if last > 0 {
		return fail(last - now)
	}
	if m.o.Fair && rh == nil && (waitsAhead(st.rq, w) || waitsAhead(st.wq, w)) {
		return fail(0)
	}
	st.fence++
	st.writer, st.wcount, st.wtoken = owner, 1, st.fence
	st.wdeadline = now + ttl.Microseconds()
	return done(st.fence)
}

// wake wakes whoever can go now, by the rules of lua/rw_release.lua: the
// readers queued before the first waiting writer, together, or else that
// writer once no other owner reads. The shard must be locked.
func (st *memRW) wake(now int64) {
	if st.writerLive(now) {
		return
	}
	var fw *waiter
	if len(st.wq) > 0 {
		fw = st.wq[0]
	}
	if len(st.rq) > 0 && (fw == nil || st.rq[0].place < fw.place) {
		for _, w := range st.rq {
			if fw != nil && w.place > fw.place {
				break
			}
			w.signal()
		}
		return
	}
	if fw == nil {
		return
	}
	for o := range st.readers {
		if o != fw.owner {
			return
		}
	}
	fw.signal()
}

func (m *rwMem) leave(side byte, w *waiter) {
	sh := m.t.Shard(m.name)
	sh.Lock()
	defer sh.Unlock()
	now := sh.Now()
	st := m.state(sh, now)
	if side == sideRead {
		st.rq = queueRemove(st.rq, w)
	} else {
		st.wq = queueRemove(st.wq, w)
	}
	st.wake(now)
}

func (d rwMemSide) Extend(_ context.Context, owner string, ttl time.Duration) error {
	sh := d.m.t.Shard(d.m.name)
	sh.Lock()
	defer sh.Unlock()
	now := sh.Now()
	st := d.m.state(sh, now)
	if d.side == sideRead {
		h := st.readers[owner]
		if h == nil {
			return ErrNotHeld
		}
		h.deadline = now + ttl.Microseconds()
		return nil
	}
	if !st.writerLive(now) || st.writer != owner {
		return ErrNotHeld
	}
	st.wdeadline = now + ttl.Microseconds()
	return nil
}

func (d rwMemSide) Release(_ context.Context, owner string) error {
	sh := d.m.t.Shard(d.m.name)
	sh.Lock()
	defer sh.Unlock()
	now := sh.Now()
	st := d.m.state(sh, now)
	if d.side == sideRead {
		h := st.readers[owner]
		if h == nil {
			return ErrNotHeld
		}
		if h.count--; h.count > 0 {
			return nil
		}
		delete(st.readers, owner)
	} else {
		if !st.writerLive(now) || st.writer != owner {
			return ErrNotHeld
		}
		if st.wcount--; st.wcount > 0 {
			return nil
		}
		st.writer = ""
	}
	st.wake(now)
	return nil
}
