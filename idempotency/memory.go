package idempotency

import (
	"context"
	"time"

	"github.com/floodgate-dev/floodgate/internal/memstore"
)

// memDriver keeps keys and tokens in two tables of a Memory backend. A key's
// entry holds a *memRecord; a token's entry holds its deadline in A, and once
// consumed the consuming call's ID in Value. Times
// are the backend's clock, in microseconds; entries expire at their
// deadline, so the janitor removing one changes nothing.
type memDriver struct {
	keys   *memstore.Table
	tokens *memstore.Table
}

// memRecord is the state of a key. Running records are in flight: wake is
// closed when the runner finishes (complete or abort) or its expired lease
// is taken over, so that waiters look again at once.
type memRecord struct {
	running  bool
	aborted  bool   // freed by its owner; kept until the lease deadline, so that a replayed abort is recognised
	owner    string // the Do call's; kept when done, so that a replayed complete is recognised
	deadline int64  // µs: end of the lease while running, else end of the TTL
	fp       string
	res      result
	wake     chan struct{}
}

func newMemDriver(m *memstore.Store, ns string) *memDriver {
	return &memDriver{
		keys:   m.Table("idempotency.keys/" + ns),
		tokens: m.Table("idempotency.tokens/" + ns),
	}
}

// live returns the record of key if it has not expired; the shard must be
// locked.
func live(sh *memstore.Shard, key string, now int64) *memRecord {
	e := sh.Get(key)
	if e == nil {
		return nil
	}
	r := e.Value.(*memRecord)
	if r.deadline <= now {
		return nil
	}
	return r
}

func (d *memDriver) begin(_ context.Context, key, owner, fp string, lease time.Duration, _ bool) (outcome, error) {
	sh := d.keys.Shard(key)
	sh.Lock()
	defer sh.Unlock()
	now := sh.Now()
	if r := live(sh, key, now); r != nil && !r.aborted {
		switch {
		case r.fp != fp:
			return outcome{state: mismatch}, nil
		case !r.running:
			res := r.res
			res.val = clone(res.val)
			return outcome{state: done, res: res}, nil
		case r.owner == owner:
			return outcome{state: claimed}, nil // this call's claim, made before
		}
		return outcome{state: inFlight, hint: time.Duration(r.deadline-now) * time.Microsecond, wake: r.wake}, nil
	}
	if e := sh.Get(key); e != nil {
		if old := e.Value.(*memRecord); old.running {
			close(old.wake) // an expired lease taken over: its waiters look again
		}
	}
	r := &memRecord{running: true, owner: owner, deadline: now + lease.Microseconds(), fp: fp, wake: make(chan struct{})}
	sh.Put(key, &memstore.Entry{Value: r, Expires: r.deadline})
	return outcome{state: claimed}, nil
}

// held returns owner's live in-flight record of key; the shard must be
// locked.
func held(sh *memstore.Shard, key, owner string, now int64) *memRecord {
	r := live(sh, key, now)
	if r == nil || !r.running || r.owner != owner {
		return nil
	}
	return r
}

func (d *memDriver) renew(_ context.Context, key, owner string, lease time.Duration) (bool, error) {
	sh := d.keys.Shard(key)
	sh.Lock()
	defer sh.Unlock()
	now := sh.Now()
	r := held(sh, key, owner, now)
	if r == nil {
		return false, nil
	}
	r.deadline = now + lease.Microseconds()
	sh.Get(key).Expires = r.deadline
	return true, nil
}

func (d *memDriver) complete(_ context.Context, key, owner string, ttl time.Duration, res result) (bool, error) {
	sh := d.keys.Shard(key)
	sh.Lock()
	defer sh.Unlock()
	now := sh.Now()
	if r := live(sh, key, now); r != nil && !r.running && !r.aborted && r.owner == owner {
		return true, nil // stored by this call already
	}
	r := held(sh, key, owner, now)
	if r == nil {
		return false, nil
	}
	close(r.wake)
	res.val = clone(res.val)
	nr := &memRecord{owner: owner, deadline: now + ttl.Microseconds(), fp: r.fp, res: res}
	sh.Put(key, &memstore.Entry{Value: nr, Expires: nr.deadline})
	return true, nil
}

func (d *memDriver) abort(_ context.Context, key, owner string) (bool, error) {
	sh := d.keys.Shard(key)
	sh.Lock()
	defer sh.Unlock()
	now := sh.Now()
	if r := live(sh, key, now); r != nil && r.aborted && r.owner == owner {
		return true, nil // aborted by this call already
	}
	r := held(sh, key, owner, now)
	if r == nil {
		return false, nil
	}
	close(r.wake)
	sh.Put(key, &memstore.Entry{Value: &memRecord{aborted: true, owner: owner, deadline: r.deadline, fp: r.fp}, Expires: r.deadline})
	return true, nil
}

// subscribe returns no channel: on Memory, begin hands waiters the record's
// wake channel.
func (d *memDriver) subscribe(context.Context, string) (<-chan string, func(), error) {
	return nil, func() {}, nil
}

// A token's entry holds its deadline in A, and once consumed the ID of the
// call that consumed it in Value, with the deadline of that record (at most
// ReplayWindow) in A, as the token's key does on Redis.

func (d *memDriver) issue(_ context.Context, token string, ttl time.Duration) (bool, error) {
	sh := d.tokens.Shard(token)
	sh.Lock()
	defer sh.Unlock()
	now := sh.Now()
	if e := sh.Get(token); e != nil && e.A > now {
		if e.Value != nil {
			return false, nil // consumed
		}
		return true, nil // stored by this call already
	}
	deadline := now + ttl.Microseconds()
	sh.Put(token, &memstore.Entry{A: deadline, Expires: deadline})
	return true, nil
}

func (d *memDriver) consume(_ context.Context, token, call string) (bool, error) {
	sh := d.tokens.Shard(token)
	sh.Lock()
	defer sh.Unlock()
	e := sh.Get(token)
	if e == nil {
		return false, nil
	}
	now := sh.Now()
	live := e.A > now
	if by, ok := e.Value.(string); ok {
		return live && by == call, nil
	}
	if !live {
		sh.Delete(token)
		return false, nil
	}
	deadline := min(e.A, now+ReplayWindow.Microseconds())
	sh.Put(token, &memstore.Entry{A: deadline, Value: call, Expires: deadline})
	return true, nil
}

// clone copies b; the copy is never nil, as a result read back from Redis.
func clone(b []byte) []byte { return append([]byte{}, b...) }
