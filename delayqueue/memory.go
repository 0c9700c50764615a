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
	receipts *memstore.Table // call ID -> receipt (see rcpt), as lua/take.lua describes
	window   int64           // µs: receipts' lifetime
}

// memQueue is the state of one queue; mu guards everything in it.
type memQueue struct {
	mu                    sync.Mutex
	jobs                  map[string]*memJob
	sched, inflight, dead *zset
	subs                  map[chan string]struct{} // every consumer's
	own                   map[string]chan string   // runner -> its own
	waker                 memWaker
}

// memWaker is the waker (see lua/take.lua), live while until > now.
type memWaker struct {
	until int64 // µs
	owner string
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
			inflight: newZset(),
			dead:     newZset(),
			subs:     make(map[chan string]struct{}),
			own:      make(map[string]chan string),
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

// Receipt kinds on Memory (lua/take.lua has the strings of Redis).
const (
	rcptNone    = iota
	rcptTake    // Value: the leases ([]lease)
	rcptAck     //
	rcptRetried //
	rcptKilled  //
	rcptCancel  //
	rcptRequeue //
)

// rcpt is a call's receipt, found by receipt; key is its key in the
// receipts table.
type rcpt struct {
	key    string
	kind   uint64
	leases []lease // rcptTake
}

// lease is a job a take leased, with the attempt it leased.
type lease struct {
	id      string
	attempt int
}

// receipt returns call's receipt, kind rcptNone when there is none live; q.mu
// must be held.
func (d *memDriver) receipt(call string) rcpt {
	r := rcpt{key: call}
	sh := d.receipts.Shard(r.key)
	sh.Lock()
	defer sh.Unlock()
	if e := sh.Get(r.key); e != nil && e.Expires > sh.Now() {
		r.kind = e.Tag
		r.leases, _ = e.Value.([]lease)
	}
	return r
}

// set records what the call did, for the replay window; q.mu must be held.
func (d *memDriver) set(r rcpt, kind uint64) {
	sh := d.receipts.Shard(r.key)
	sh.Lock()
	defer sh.Unlock()
	e := &memstore.Entry{Tag: kind, Expires: sh.Now() + d.window}
	if kind == rcptTake {
		e.Value = r.leases
	}
	sh.Put(r.key, e)
}

// schedule adds the jobs ids to scheduled, due at their due times, the
// earliest of which is first, and wakes a consumer as schedule in
// lua/common.lua does; q.mu must be held.
func (q *memQueue) schedule(ids []string, first, now int64) {
	head := q.sched.head()
	for _, id := range ids {
		q.sched.Add(id, q.jobs[id].due)
	}
	if head >= 0 && first >= head {
		return
	}
	if q.waker.until > now {
		send(q.own[q.waker.owner], first)
		return
	}
	q.publish(first)
}

// publish wakes every subscriber; q.mu must be held.
func (q *memQueue) publish(due int64) {
	for c := range q.subs {
		send(c, due)
	}
}

// send sends due to c, if c is not nil; like Redis pub/sub it drops the
// message when c's buffer is full.
func send(c chan string, due int64) {
	if c == nil {
		return
	}
	select {
	case c <- strconv.FormatInt(due, 10):
	default:
	}
}

func (d *memDriver) enqueue(_ context.Context, jobs []newJob, call string) ([]enqueued, error) {
	q := d.q
	q.mu.Lock()
	defer q.mu.Unlock()
	now := d.now()
	out := make([]enqueued, len(jobs))
	var add []string
	first := int64(-1)
	for i, nj := range jobs {
		if j, ok := q.jobs[nj.id]; ok {
			if !nj.chosen || j.call == call {
				out[i] = enqueued{due: j.due} // this call's job
			} else {
				out[i] = enqueued{dup: true}
			}
			continue
		}
		due := nj.at
		if nj.at < 0 {
			due = now + nj.delay
		}
		j := &memJob{payload: clone(nj.payload), due: due}
		if nj.chosen {
			j.call = call
		}
		q.jobs[nj.id] = j
		add = append(add, nj.id)
		if first < 0 || due < first {
			first = due
		}
		out[i] = enqueued{due: due}
	}
	if add != nil {
		q.schedule(add, first, now)
	}
	return out, nil
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
	q.inflight.Remove(id)
	q.dead.Remove(id)
	d.set(r, rcptCancel)
	return true, nil
}

func (d *memDriver) take(_ context.Context, a takeArgs) (takeResult, error) {
	q := d.q
	q.mu.Lock()
	defer q.mu.Unlock()
	now := d.now()
	var res takeResult

	// 1. Ack.
	for _, ack := range a.acks {
		r := d.receipt(ack.call)
		switch {
		case r.kind == rcptAck:
			res.Acked = append(res.Acked, true)
		case q.holds(ack.ID, ack.Attempt):
			q.inflight.Remove(ack.ID)
			delete(q.jobs, ack.ID)
			d.set(r, rcptAck)
			res.Acked = append(res.Acked, true)
		default:
			res.Acked = append(res.Acked, false)
		}
	}

	// 2. Ended leases.
	for res.Requeued+res.Dead < BatchSize {
		id, deadline, ok := q.inflight.Min()
		if !ok || deadline > now {
			break
		}
		q.inflight.PopMin()
		j := q.jobs[id]
		if j.attempt >= a.maxAttempts {
			q.dead.Add(id, now)
			res.Dead++
		} else {
			q.sched.Add(id, deadline)
			j.due = deadline
			res.Requeued++
		}
	}

	// 3. Claim.
	deliver := func(id string, j *memJob, deadline int64) {
		res.Deliveries = append(res.Deliveries, &delivery{
			Job:      Job{ID: id, Payload: clone(j.payload), Attempt: j.attempt, DueAt: microTime(j.due)},
			deadline: deadline,
			call:     a.call + "." + strconv.Itoa(len(res.Deliveries)),
		})
	}
	claimed := 0
	if r := d.receipt(a.call); a.n > 0 && r.kind != rcptNone {
		// A second run: the first run's deliveries that still hold their lease.
		claimed = len(r.leases)
		for _, l := range r.leases {
			if deadline, ok := q.inflight.Score(l.id); ok && q.jobs[l.id].attempt == l.attempt {
				deliver(l.id, q.jobs[l.id], deadline)
			}
		}
	} else if a.n > 0 {
		r.leases = nil
		deadline := now + a.visibility
		for len(r.leases) < a.n {
			id, due, ok := q.sched.Min()
			if !ok || due > now {
				break
			}
			q.sched.PopMin()
			j := q.jobs[id]
			j.attempt++
			q.inflight.Add(id, deadline)
			r.leases = append(r.leases, lease{id: id, attempt: j.attempt})
			deliver(id, j, deadline)
		}
		if len(r.leases) > 0 {
			d.set(r, rcptTake)
		}
		claimed = len(r.leases)
	}

	// 4. Plan.
	res.NextDue, res.NextDeadline, res.Now = q.sched.head(), q.inflight.head(), now
	res.More = res.NextDue >= 0 && res.NextDue <= now
	plan := now + a.poll
	for _, t := range []int64{res.NextDue, res.NextDeadline} {
		if t >= 0 && t < plan {
			plan = max(t, now)
		}
	}
	res.Wake = plan
	if res.More {
		res.Wake = now
	}
	w := &q.waker
	live := w.until > now
	switch {
	case a.runner != "" && a.n-claimed+a.spare > 0:
		if !live || w.owner == a.runner {
			if !live || w.until-now < a.poll/2 {
				*w = memWaker{until: now + a.poll, owner: a.runner}
			}
			res.Waker = true
		} else if !res.More {
			res.Wake = w.until
		}
	case live && a.runner != "" && w.owner == a.runner:
		*w = memWaker{}
		q.publish(plan)
	case live && res.More:
		send(q.own[w.owner], now)
	}
	return res, nil
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
	q.schedule([]string{id}, due, now)
	d.set(r, rcptRetried)
	return retried, nil
}

func (d *memDriver) stats(context.Context) (Stats, error) {
	q := d.q
	q.mu.Lock()
	defer q.mu.Unlock()
	now := d.now()
	var due int64
	for _, it := range q.sched.h {
		if it.score <= now {
			due++
		}
	}
	return Stats{
		Scheduled: int64(q.sched.Len()) - due,
		Ready:     due,
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
	q.schedule([]string{id}, now, now)
	d.set(r, rcptRequeue)
	return true, nil
}

func (d *memDriver) subscribe(_ context.Context, runner string) (all, own <-chan string, stop func(), err error) {
	c, mine := make(chan string, 4), make(chan string, 4)
	q := d.q
	q.mu.Lock()
	q.subs[c] = struct{}{}
	q.own[runner] = mine
	q.mu.Unlock()
	var once sync.Once
	return c, mine, func() {
		once.Do(func() {
			q.mu.Lock()
			delete(q.subs, c)
			delete(q.own, runner)
			q.mu.Unlock()
		})
	}, nil
}

// clone copies p; like a Redis reply, an empty payload comes back as a
// non-nil empty slice.
func clone(p []byte) []byte { return append(make([]byte, 0, len(p)), p...) }
