package lockout

import (
	"time"

	"github.com/floodgate-dev/floodgate/internal/memstore"
)

// The Memory engine mirrors lua/*.lua step for step, in int64: the
// conformance suite demands identical Statuses. Each key's entry holds a
// *state; Entry.Expires only tells the janitor when the entry is garbage.

// state is one key's record.
type state struct {
	until int64   // µs the ban ends; no ban when <= now
	fails []int64 // µs of failures; those <= now - window are dead
}

// memKey puts the policy id before the user key; the id has no ':'.
func (g *Guard) memKey(key string) string { return g.id + ":" + key }

// stateOf returns the state in e, or nil. The shard must be locked.
func stateOf(e *memstore.Entry) *state {
	if e == nil {
		return nil
	}
	st, _ := e.Value.(*state)
	return st
}

func (g *Guard) memCheck(key string) Status {
	k := g.memKey(key)
	sh := g.mem.Shard(k)
	sh.Lock()
	defer sh.Unlock()
	now := sh.Now()
	st := stateOf(sh.Get(k))
	if st == nil {
		return Status{Remaining: g.max}
	}
	if st.until > now {
		return banned(st.until - now)
	}
	n := int64(0)
	for _, t := range st.fails {
		if t > now-g.window {
			n++
		}
	}
	return Status{Remaining: max(1, g.max-n)}
}

func (g *Guard) memFail(key string) Status {
	k := g.memKey(key)
	sh := g.mem.Shard(k)
	sh.Lock()
	defer sh.Unlock()
	now := sh.Now()
	e := sh.Get(k)
	st := stateOf(e)
	if st == nil {
		st = &state{}
		e = &memstore.Entry{Value: st}
		sh.Put(k, e)
	}
	if st.until > now {
		return banned(st.until - now)
	}
	live := st.fails[:0]
	for _, t := range st.fails {
		if t > now-g.window {
			live = append(live, t)
		}
	}
	if int64(len(live))+1 >= g.max {
		st.fails = nil
		st.until = now + g.ban
		e.Expires = st.until
		return banned(g.ban)
	}
	st.fails = append(live, now)
	e.Expires = max(e.Expires, now+g.window)
	return Status{Remaining: g.max - int64(len(st.fails))}
}

func (g *Guard) memClear(key string, lift bool) {
	k := g.memKey(key)
	sh := g.mem.Shard(k)
	sh.Lock()
	defer sh.Unlock()
	e := sh.Get(k)
	st := stateOf(e)
	if st == nil {
		return
	}
	if lift || st.until <= sh.Now() {
		sh.Delete(k)
		return
	}
	st.fails = nil
	e.Expires = st.until
}

func banned(left int64) Status {
	return Status{Banned: true, RetryAfter: durationMicros(left)}
}

func durationMicros(us int64) time.Duration { return time.Duration(us) * time.Microsecond }
