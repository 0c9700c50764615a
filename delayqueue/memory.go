package delayqueue

import (
	"cmp"
	"context"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/floodgate-dev/floodgate/internal/memstore"
)

// memDriver is a queue in a Memory backend. All Queues of one name on one
// Memory share a memQueue (the entry of the name in the "delayqueue" table),
// whose mutex makes every method one atomic step, as a script is on Redis.
// The methods mirror the scripts in lua/ line by line.
type memDriver struct {
	sh       *memstore.Shard // the one of the queue's entry, whose time is the queue's
	q        *memQueue
	receipts *memstore.Table // call ID -> receipt (see rcpt), as lua/claim.lua describes
	window   int64           // µs: receipts' lifetime
}

// memQueue is the state of one queue; mu guards everything in it.
type memQueue struct {
	mu                           sync.Mutex
	jobs                         map[string]*memJob
	sched, ready, inflight, dead *zset
	subs                         map[chan string]struct{}
}

type memJob struct {
	payload []byte
	attempt int
	due     int64  // µs
	call    string // the Enqueue's call ID when the caller chose the job's ID
}

func newMemDriver(m *memstore.Store, name string, window time.Duration) *memDriver {
	t := m.Table("delayqueue")
	sh := t.Shard(name)
	sh.Lock()
	defer sh.Unlock()
	e := sh.Get(name)
	if e == nil {
		e = &memstore.Entry{Value: &memQueue{
			jobs:     make(map[string]*memJob),
			sched:    newZset(),
			ready:    newZset(),
			inflight: newZset(),
			dead:     newZset(),
			subs:     make(map[chan string]struct{}),
		}}
		sh.Put(name, e)
	}
	return &memDriver{sh: sh, q: e.Value.(*memQueue), receipts: m.Table("delayqueue.receipts/" + name),
		window: window.Microseconds()}
}

// now returns the queue's time: the time of its entry's shard (see
// memstore.Shard.Time), which never runs backwards. q.mu must be held.
func (d *memDriver) now() int64 {
	d.sh.Lock()
	now := d.sh.Now()
	d.sh.Unlock()
	return now
}

// Receipt kinds on Memory (lua/claim.lua has the strings of Redis).
const (
	rcptNone    = iota
	rcptClaim   // A: the attempt; Value: the job's ID
	rcptAck     //
	rcptRetried //
	rcptKilled  //
	rcptCancel  //
	rcptRequeue //
)

// rcpt is a call's receipt, found by receipt; key is its key in the
// receipts table.
type rcpt struct {
	key     string
	kind    uint64
	attempt int64
	id      string
}

// receipt returns call's receipt, kind rcptNone when there is none live; q.mu
// must be held.
func (d *memDriver) receipt(call string) rcpt {
	r := rcpt{key: call}
	sh := d.receipts.Shard(r.key)
	sh.Lock()
	defer sh.Unlock()
	if e := sh.Get(r.key); e != nil && e.Expires > sh.Now() {
		r.kind, r.attempt = e.Tag, e.A
		r.id, _ = e.Value.(string)
	}
	return r
}

// set records what the call did, for the replay window; q.mu must be held.
func (d *memDriver) set(r rcpt, kind uint64) {
	sh := d.receipts.Shard(r.key)
	sh.Lock()
	defer sh.Unlock()
	expires := sh.Now() + d.window
	if e := sh.Get(r.key); e != nil {
		// The delivery's claim receipt, now its ack's or retry's: in place.
		e.Tag, e.Expires, e.A, e.Value = kind, expires, 0, nil
		return
	}
	e := &memstore.Entry{Tag: kind, Expires: expires}
	if kind == rcptClaim {
		e.A, e.Value = r.attempt, r.id
	}
	sh.Put(r.key, e)
}

// schedule adds id to scheduled, due at due, and wakes the subscribers when
// it is the new head (as enqueue.lua does); q.mu must be held.
func (q *memQueue) schedule(id string, due int64) {
	head := q.sched.head()
	q.sched.Add(id, due)
	if head < 0 || due < head {
		q.publish(due)
	}
}

// publish wakes the subscribers; q.mu must be held. Like Redis pub/sub it
// drops messages for subscribers whose buffer is full.
func (q *memQueue) publish(due int64) {
	msg := strconv.FormatInt(due, 10)
	for c := range q.subs {
		select {
		case c <- msg:
		default:
		}
	}
}

func (d *memDriver) enqueue(_ context.Context, id string, payload []byte, at, delay int64, call string) (int64, bool, error) {
	q := d.q
	q.mu.Lock()
	defer q.mu.Unlock()
	now := d.now()
	if j, ok := q.jobs[id]; ok {
		if call == "" || j.call == call {
			return j.due, false, nil // this call's job
		}
		return 0, true, nil
	}
	due := at
	if at < 0 {
		due = now + delay
	}
	q.jobs[id] = &memJob{payload: clone(payload), due: due, call: call}
	q.schedule(id, due)
	return due, false, nil
}

func (d *memDriver) cancel(_ context.Context, id, call string) (bool, error) {
	q := d.q
	q.mu.Lock()
	defer q.mu.Unlock()
	r := d.receipt(call)
	if r.kind == rcptCancel {
		return true, nil
	}
	if _, ok := q.jobs[id]; !ok {
		return false, nil
	}
	delete(q.jobs, id)
	q.sched.Remove(id)
	q.ready.Remove(id)
	q.inflight.Remove(id)
	q.dead.Remove(id)
	d.set(r, rcptCancel)
	return true, nil
}

func (d *memDriver) pump(_ context.Context, maxAttempts int) (pumpResult, error) {
	q := d.q
	q.mu.Lock()
	defer q.mu.Unlock()
	now := d.now()
	var r pumpResult
	for r.Moved < BatchSize {
		id, due, ok := q.sched.Min()
		if !ok || due > now {
			break
		}
		q.sched.PopMin()
		q.ready.Add(id, due)
		r.Moved++
	}
	for r.Requeued+r.Dead < BatchSize {
		id, deadline, ok := q.inflight.Min()
		if !ok || deadline > now {
			break
		}
		q.inflight.PopMin()
		j := q.jobs[id]
		if j.attempt >= maxAttempts {
			q.dead.Add(id, now)
			r.Dead++
		} else {
			q.ready.Add(id, deadline)
			j.due = deadline
			r.Requeued++
		}
	}
	r.Ready = int64(q.ready.Len())
	r.NextDue = q.sched.head()
	r.NextDeadline = q.inflight.head()
	r.Now = now
	return r, nil
}

func (d *memDriver) claim(_ context.Context, visibility int64, call string) (*delivery, error) {
	q := d.q
	q.mu.Lock()
	defer q.mu.Unlock()
	now := d.now()
	r := d.receipt(call)
	if r.kind != rcptNone && r.kind != rcptClaim {
		return nil, nil // this claim's delivery was acked or retried since
	}
	if r.kind == rcptClaim {
		// A second run of this claim: the same delivery while it holds the lease.
		id := r.id
		j := q.jobs[id]
		deadline, ok := q.inflight.Score(id)
		if j == nil || !ok || int64(j.attempt) != r.attempt {
			return nil, nil
		}
		return &delivery{
			Job:      Job{ID: id, Payload: clone(j.payload), Attempt: j.attempt, DueAt: microTime(j.due)},
			deadline: deadline,
			call:     call,
		}, nil
	}
	id, _, ok := q.ready.PopMin()
	if !ok {
		return nil, nil
	}
	j := q.jobs[id]
	j.attempt++
	deadline := now + visibility
	q.inflight.Add(id, deadline)
	r.attempt, r.id = int64(j.attempt), id
	d.set(r, rcptClaim)
	return &delivery{
		Job:      Job{ID: id, Payload: clone(j.payload), Attempt: j.attempt, DueAt: microTime(j.due)},
		deadline: deadline,
		call:     call,
	}, nil
}

// holds reports whether the delivery of attempt holds the lease of id; q.mu
// must be held.
func (q *memQueue) holds(id string, attempt int) bool {
	j := q.jobs[id]
	return j != nil && j.attempt == attempt && q.inflight.Has(id)
}

func (d *memDriver) extend(_ context.Context, id string, attempt int, visibility int64) (int64, error) {
	q := d.q
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.holds(id, attempt) {
		return 0, nil
	}
	deadline := d.now() + visibility
	q.inflight.Add(id, deadline)
	return deadline, nil
}

func (d *memDriver) ack(_ context.Context, id string, attempt int, call string) (bool, error) {
	q := d.q
	q.mu.Lock()
	defer q.mu.Unlock()
	r := d.receipt(call)
	if r.kind == rcptAck {
		return true, nil
	}
	if !q.holds(id, attempt) {
		return false, nil
	}
	q.inflight.Remove(id)
	delete(q.jobs, id)
	d.set(r, rcptAck)
	return true, nil
}

func (d *memDriver) retry(_ context.Context, id string, attempt int, backoff int64, maxAttempts int, call string) (retryOutcome, error) {
	q := d.q
	q.mu.Lock()
	defer q.mu.Unlock()
	r := d.receipt(call)
	switch r.kind {
	case rcptRetried:
		return retried, nil
	case rcptKilled:
		return killed, nil
	}
	if !q.holds(id, attempt) {
		return leaseLost, nil
	}
	now := d.now()
	q.inflight.Remove(id)
	if attempt >= maxAttempts {
		q.dead.Add(id, now)
		d.set(r, rcptKilled)
		return killed, nil
	}
	due := now + backoff
	q.jobs[id].due = due
	q.schedule(id, due)
	d.set(r, rcptRetried)
	return retried, nil
}

func (d *memDriver) stats(context.Context) (Stats, error) {
	q := d.q
	q.mu.Lock()
	defer q.mu.Unlock()
	return Stats{
		Scheduled: int64(q.sched.Len()),
		Ready:     int64(q.ready.Len()),
		InFlight:  int64(q.inflight.Len()),
		Dead:      int64(q.dead.Len()),
	}, nil
}

func (d *memDriver) listDead(_ context.Context, limit int) ([]DeadJob, error) {
	q := d.q
	q.mu.Lock()
	defer q.mu.Unlock()
	items := slices.Clone(q.dead.h)
	slices.SortFunc(items, func(a, b *zitem) int {
		if c := cmp.Compare(a.score, b.score); c != 0 {
			return c
		}
		return strings.Compare(a.member, b.member)
	})
	out := make([]DeadJob, 0, min(limit, len(items)))
	for _, it := range items[:min(limit, len(items))] {
		j := q.jobs[it.member]
		out = append(out, DeadJob{
			Job:    Job{ID: it.member, Payload: clone(j.payload), Attempt: j.attempt, DueAt: microTime(j.due)},
			DiedAt: microTime(it.score),
		})
	}
	return out, nil
}

func (d *memDriver) requeue(_ context.Context, id, call string) (bool, error) {
	q := d.q
	q.mu.Lock()
	defer q.mu.Unlock()
	r := d.receipt(call)
	if r.kind == rcptRequeue {
		return true, nil
	}
	if !q.dead.Remove(id) {
		return false, nil
	}
	now := d.now()
	j := q.jobs[id]
	j.attempt, j.due = 0, now
	q.schedule(id, now)
	d.set(r, rcptRequeue)
	return true, nil
}

func (d *memDriver) subscribe(context.Context) (<-chan string, func(), error) {
	c := make(chan string, 4)
	q := d.q
	q.mu.Lock()
	q.subs[c] = struct{}{}
	q.mu.Unlock()
	var once sync.Once
	return c, func() {
		once.Do(func() {
			q.mu.Lock()
			delete(q.subs, c)
			q.mu.Unlock()
		})
	}, nil
}

// clone copies p; like a Redis reply, an empty payload comes back as a
// non-nil empty slice.
func clone(p []byte) []byte { return append(make([]byte, 0, len(p)), p...) }
