package delayqueue_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/delayqueue"
)

type opKind int

const (
	opEnqueue opKind = iota
	opCancel
	opPump
	opClaim
	opExtend
	opAck
	opFail
	opStats
	opListDead
	opRequeue
)

// none stands for "no such time" in pump expectations (an empty set).
const none = -1

// step is one call of a step table, made with the fake clock at t0+at.
type step struct {
	at  time.Duration
	op  opKind
	id  string
	enq []delayqueue.EnqueueOption

	attempt int   // opExtend, opAck, opFail: the delivery (attempt number) acting
	cause   error // opFail

	wantErr     error              // opEnqueue, opCancel, opRequeue
	wantPump    pumpWant           // opPump
	wantClaim   *claimWant         // opClaim; nil: nothing ready
	wantOK      bool               // opExtend, opAck
	wantOutcome delayqueue.Outcome // opFail
	wantStats   delayqueue.Stats   // opStats
	limit       int                // opListDead
	wantDead    []deadWant         // opListDead
}

// deadWant is a DeadJob with times relative to t0 and the payload "p:"+id.
type deadWant struct {
	id      string
	attempt int
	due     time.Duration
	died    time.Duration
}

func listDead(at time.Duration, limit int, want ...deadWant) step {
	return step{at: at, op: opListDead, limit: limit, wantDead: want}
}

func requeue(at time.Duration, id string) step { return step{at: at, op: opRequeue, id: id} }

// pumpWant is a PumpResult with times relative to t0 (none: empty set),
// and Stats.Ready after it. While jobs are ready nextDue is not checked: the
// head of scheduled is then a due job.
type pumpWant struct {
	requeued, dead        int
	ready                 int64
	nextDue, nextDeadline time.Duration
}

type claimWant struct {
	id      string
	attempt int
	due     time.Duration
}

func enq(at time.Duration, id string, opts ...delayqueue.EnqueueOption) step {
	return step{at: at, op: opEnqueue, id: id, enq: opts}
}

func (s step) fails(err error) step { s.wantErr = err; return s }

func cancel(at time.Duration, id string) step { return step{at: at, op: opCancel, id: id} }

func pump(at time.Duration, requeued, dead int, ready int64, nextDue, nextDeadline time.Duration) step {
	return step{at: at, op: opPump, wantPump: pumpWant{requeued, dead, ready, nextDue, nextDeadline}}
}

func claim(at time.Duration, id string, attempt int, due time.Duration) step {
	return step{at: at, op: opClaim, wantClaim: &claimWant{id: id, attempt: attempt, due: due}}
}

func claimNone(at time.Duration) step { return step{at: at, op: opClaim} }

func extend(at time.Duration, id string, attempt int, ok bool) step {
	return step{at: at, op: opExtend, id: id, attempt: attempt, wantOK: ok}
}

func ack(at time.Duration, id string, attempt int, ok bool) step {
	return step{at: at, op: opAck, id: id, attempt: attempt, wantOK: ok}
}

func fail(at time.Duration, id string, attempt int, cause error, out delayqueue.Outcome) step {
	return step{at: at, op: opFail, id: id, attempt: attempt, cause: cause, wantOutcome: out}
}

func stats(at time.Duration, scheduled, ready, inflight, dead int64) step {
	return step{at: at, op: opStats, wantStats: delayqueue.Stats{Scheduled: scheduled, Ready: ready, InFlight: inflight, Dead: dead}}
}

type table struct {
	name  string
	opts  []delayqueue.Option
	steps []step
}

const (
	us  = time.Microsecond
	ms  = time.Millisecond
	sec = time.Second
)

var errBoom = errors.New("boom")

// tenSeconds is a Backoff of 10s per failed attempt so far.
func tenSeconds(attempt int) time.Duration { return time.Duration(attempt) * 10 * sec }

// tables hold hand-computed results; every backend must reproduce them.
var tables = []table{
	{"never before due, in due order", nil, []step{
		enq(0, "a", delayqueue.Delay(3*sec)),
		enq(0, "b", delayqueue.Delay(sec)),
		enq(0, "c", delayqueue.Delay(2*sec)),
		enq(0, "d", delayqueue.At(t0.Add(sec))),             // ties with b: ordered by id
		enq(0, "e", delayqueue.Delay(1500*time.Nanosecond)), // rounded up to 2µs
		stats(0, 5, 0, 0, 0),
		pump(0, 0, 0, 0, 2*us, none),
		claimNone(0),
		pump(us, 0, 0, 0, 2*us, none),
		pump(2*us, 0, 0, 1, sec, none),
		claim(2*us, "e", 1, 2*us),
		pump(sec-us, 0, 0, 0, sec, 30*sec+2*us),
		claimNone(sec - us),
		pump(sec, 0, 0, 2, 2*sec, 30*sec+2*us),
		stats(sec, 2, 2, 1, 0),
		claim(sec, "b", 1, sec),
		claim(sec, "d", 1, sec),
		claimNone(sec),
		pump(5*sec, 0, 0, 2, none, 30*sec+2*us),
		claim(5*sec, "c", 1, 2*sec),
		enq(5*sec, "f", delayqueue.At(t0.Add(-sec))), // in the past: due at once, first in order
		pump(5*sec, 0, 0, 2, none, 30*sec+2*us),
		claim(5*sec, "f", 1, -sec),
		claim(5*sec, "a", 1, 3*sec),
		claimNone(5 * sec),
		stats(5*sec, 0, 0, 6, 0),
		ack(6*sec, "a", 1, true),
		ack(6*sec, "a", 1, true), // acked already by this delivery: the same answer
		stats(6*sec, 0, 0, 5, 0),
	}},
	{"Cancel prevents delivery in every state", []delayqueue.Option{delayqueue.MaxAttempts(1)}, []step{
		enq(0, "sched", delayqueue.Delay(sec)),
		enq(0, "ready"),
		enq(0, "flight"),
		enq(0, "dead"),
		pump(0, 0, 0, 3, sec, none),
		claim(0, "dead", 1, 0),
		fail(0, "dead", 1, errBoom, delayqueue.Killed),
		claim(0, "flight", 1, 0),
		stats(0, 1, 1, 1, 1),
		cancel(0, "sched"),
		cancel(0, "ready"),
		cancel(0, "flight"),
		cancel(0, "dead"),
		cancel(0, "dead").fails(delayqueue.ErrNotFound),
		cancel(0, "never").fails(delayqueue.ErrNotFound),
		stats(0, 0, 0, 0, 0),
		ack(0, "flight", 1, false), // the running handler's outcome is discarded
		pump(2*sec, 0, 0, 0, none, none),
		claimNone(2 * sec),
		enq(2*sec, "sched"), // the ID is free again
		stats(2*sec, 0, 1, 0, 0),
	}},
	{"an ID is not enqueued twice while in the queue", []delayqueue.Option{delayqueue.MaxAttempts(2), delayqueue.Backoff(tenSeconds)}, []step{
		enq(0, "x", delayqueue.Delay(sec)),
		enq(0, "x").fails(delayqueue.ErrDuplicate),
		stats(0, 1, 0, 0, 0),
		pump(sec, 0, 0, 1, none, none),
		enq(sec, "x").fails(delayqueue.ErrDuplicate), // ready
		claim(sec, "x", 1, sec),
		enq(sec, "x").fails(delayqueue.ErrDuplicate), // in flight
		fail(sec, "x", 1, errBoom, delayqueue.Retried),
		enq(sec, "x").fails(delayqueue.ErrDuplicate), // scheduled for a retry
		pump(11*sec, 0, 0, 1, none, none),
		claim(11*sec, "x", 2, 11*sec),
		fail(11*sec, "x", 2, errBoom, delayqueue.Killed),
		enq(11*sec, "x").fails(delayqueue.ErrDuplicate), // dead
		stats(11*sec, 0, 0, 0, 1),
		cancel(12*sec, "x"),
		enq(12*sec, "x", delayqueue.Delay(sec)),
		pump(13*sec, 0, 0, 1, none, none),
		claim(13*sec, "x", 1, 13*sec), // a new job: attempts start again
		ack(13*sec, "x", 1, true),
		enq(13*sec, "x"), // acked: free again
		stats(13*sec, 0, 1, 0, 0),
	}},
	{"backoff schedule and dead letter after MaxAttempts", []delayqueue.Option{delayqueue.MaxAttempts(3), delayqueue.Backoff(tenSeconds)}, []step{
		enq(0, "j"),
		pump(0, 0, 0, 1, none, none),
		claim(0, "j", 1, 0),
		fail(sec, "j", 1, errBoom, delayqueue.Retried), // due at 1s + 10s
		stats(sec, 1, 0, 0, 0),
		pump(11*sec-us, 0, 0, 0, 11*sec, none),
		claimNone(11*sec - us),
		pump(11*sec, 0, 0, 1, none, none),
		claim(11*sec, "j", 2, 11*sec),
		fail(12*sec, "j", 2, errBoom, delayqueue.Retried), // due at 12s + 20s
		pump(32*sec-us, 0, 0, 0, 32*sec, none),
		pump(32*sec, 0, 0, 1, none, none),
		claim(40*sec, "j", 3, 32*sec), // claimed late: DueAt is still the due time
		fail(40*sec, "j", 3, errBoom, delayqueue.Killed),
		stats(40*sec, 0, 0, 0, 1),
		pump(10000*sec, 0, 0, 0, none, none),
		claimNone(10000 * sec),
		fail(10000*sec, "j", 3, errBoom, delayqueue.LeaseLost), // dead already
	}},
	{"ErrSkipRetry kills at once", []delayqueue.Option{delayqueue.MaxAttempts(5)}, []step{
		enq(0, "j"),
		pump(0, 0, 0, 1, none, none),
		claim(0, "j", 1, 0),
		fail(0, "j", 1, fmt.Errorf("bad payload: %w", delayqueue.ErrSkipRetry), delayqueue.Killed),
		stats(0, 0, 0, 0, 1),
	}},
	{"an expired lease is taken back, then killed after MaxAttempts", []delayqueue.Option{delayqueue.MaxAttempts(2), delayqueue.Visibility(10 * sec)}, []step{
		enq(0, "j"),
		pump(0, 0, 0, 1, none, none),
		claim(0, "j", 1, 0),
		pump(5*sec, 0, 0, 0, none, 10*sec),
		extend(5*sec, "j", 1, true), // deadline 15s
		pump(10*sec, 0, 0, 0, none, 15*sec),
		pump(15*sec-us, 0, 0, 0, none, 15*sec),
		stats(15*sec-us, 0, 0, 1, 0),
		pump(15*sec, 1, 0, 1, none, none), // the consumer died: back to ready
		stats(15*sec, 0, 1, 0, 0),
		claim(16*sec, "j", 2, 15*sec), // due at the old lease's deadline
		// The first delivery lost its lease: it can neither extend, ack nor retry.
		extend(16*sec, "j", 1, false),
		ack(16*sec, "j", 1, false),
		fail(16*sec, "j", 1, errBoom, delayqueue.LeaseLost),
		stats(16*sec, 0, 0, 1, 0),
		pump(26*sec, 0, 1, 0, none, none), // attempt 2 = MaxAttempts: dead
		stats(26*sec, 0, 0, 0, 1),
		extend(26*sec, "j", 2, false),
	}},
	{"a lease past its deadline holds until a pump takes it back", []delayqueue.Option{delayqueue.Visibility(10 * sec)}, []step{
		enq(0, "a"),
		enq(0, "b"),
		pump(0, 0, 0, 2, none, none),
		claim(0, "a", 1, 0),
		claim(0, "b", 1, 0),
		extend(20*sec, "a", 1, true), // late, but nobody took it back: deadline 30s
		ack(20*sec, "b", 1, true),
		pump(29*sec, 0, 0, 0, none, 30*sec),
		pump(30*sec, 1, 0, 1, none, none),
		claim(30*sec, "a", 2, 30*sec),
		ack(30*sec, "a", 2, true),
		stats(30*sec, 0, 0, 0, 0),
	}},
	{"dead letters: ListDead and Requeue", []delayqueue.Option{delayqueue.MaxAttempts(1)}, []step{
		enq(0, "b"),
		enq(0, "a"),
		enq(0, "c"),
		listDead(0, 10),
		pump(0, 0, 0, 3, none, none),
		claim(0, "a", 1, 0),
		claim(0, "b", 1, 0),
		claim(0, "c", 1, 0),
		fail(2*sec, "b", 1, errBoom, delayqueue.Killed),
		fail(2*sec, "a", 1, errBoom, delayqueue.Killed),
		fail(3*sec, "c", 1, errBoom, delayqueue.Killed),
		listDead(3*sec, 10, deadWant{"a", 1, 0, 2 * sec}, deadWant{"b", 1, 0, 2 * sec}, deadWant{"c", 1, 0, 3 * sec}),
		listDead(3*sec, 2, deadWant{"a", 1, 0, 2 * sec}, deadWant{"b", 1, 0, 2 * sec}),
		requeue(4*sec, "b"),
		requeue(4*sec, "b").fails(delayqueue.ErrNotFound), // scheduled now, not dead
		requeue(4*sec, "never").fails(delayqueue.ErrNotFound),
		stats(4*sec, 0, 1, 0, 2),
		pump(4*sec, 0, 0, 1, none, none),
		claim(4*sec, "b", 1, 4*sec), // attempts start again
		requeue(4*sec, "b").fails(delayqueue.ErrNotFound),
		ack(4*sec, "b", 1, true),
		listDead(4*sec, 10, deadWant{"a", 1, 0, 2 * sec}, deadWant{"c", 1, 0, 3 * sec}),
	}},
	{"retry with zero backoff and a negative one", []delayqueue.Option{delayqueue.Backoff(func(a int) time.Duration { return time.Duration(1-a) * sec })}, []step{
		enq(0, "j"),
		pump(0, 0, 0, 1, none, none),
		claim(0, "j", 1, 0),
		fail(sec, "j", 1, errBoom, delayqueue.Retried), // Backoff(1) = 0
		pump(sec, 0, 0, 1, none, none),
		claim(sec, "j", 2, sec),
		fail(2*sec, "j", 2, errBoom, delayqueue.Retried), // Backoff(2) = -1s counts as 0
		pump(2*sec, 0, 0, 1, none, none),
		claim(2*sec, "j", 3, 2*sec),
	}},
}

func init() {
	// Takes lease due jobs in due order (ties by ID), and take back at most
	// BatchSize ended leases per call, in deadline order.
	var steps []step
	id := func(i int) string { return fmt.Sprintf("j%03d", i) }
	for i := range 250 {
		steps = append(steps, enq(0, id(249-i)))
	}
	steps = append(steps,
		stats(0, 0, 250, 0, 0),
		pump(0, 0, 0, 250, 0, none), // due jobs stay scheduled until a take leases them
	)
	for i := range 150 {
		steps = append(steps, claim(0, id(i), 1, 0))
	}
	steps = append(steps,
		pump(30*sec, 100, 0, 200, none, 30*sec),
		pump(30*sec, 50, 0, 250, none, none),
		claim(30*sec, id(150), 1, 0), // due at 0: before the leases that ended at 30s
		stats(30*sec, 0, 249, 1, 0),
	)
	tables = append(tables, table{"pumps move at most 100 per call", nil, steps})
}

func TestConformance(t *testing.T) {
	for _, bk := range allBackends() {
		t.Run(bk.name, func(t *testing.T) {
			t.Parallel()
			for _, tb := range tables {
				t.Run(tb.name, func(t *testing.T) {
					clk := clock.NewFake(t0)
					q, err := delayqueue.New(bk.make(t, clk)(), "q", tb.opts...)
					if err != nil {
						t.Fatal(err)
					}
					runSteps(t, q, clk, tb.steps, false)
				})
			}
		})
	}
}

// runSteps runs a table. replayed says that every script runs twice (see
// replay_test.go): a pump's counts are then its second run's, what was left
// to move, so only what it saw is compared.
func runSteps(t *testing.T, q *delayqueue.Queue, clk *clock.Fake, steps []step, replayed bool) {
	t.Helper()
	ctx := context.Background()
	deliveries := map[string]map[int]*delayqueue.Delivery{}
	for i, s := range steps {
		clk.Set(t0.Add(s.at))
		where := fmt.Sprintf("step %d (t=%v)", i+1, s.at)
		switch s.op {
		case opEnqueue:
			opts := append([]delayqueue.EnqueueOption{delayqueue.ID(s.id)}, s.enq...)
			id, err := q.Enqueue(ctx, []byte("p:"+s.id), opts...)
			if !errors.Is(err, s.wantErr) {
				t.Fatalf("%s Enqueue %q: err %v, want %v", where, s.id, err, s.wantErr)
			}
			if id != s.id {
				t.Errorf("%s Enqueue: id %q, want %q", where, id, s.id)
			}
		case opCancel:
			if err := q.Cancel(ctx, s.id); !errors.Is(err, s.wantErr) {
				t.Fatalf("%s Cancel %q: err %v, want %v", where, s.id, err, s.wantErr)
			}
		case opPump:
			got, err := q.Pump(ctx)
			if err != nil {
				t.Fatalf("%s Pump: %v", where, err)
			}
			st, err := q.Stats(ctx)
			if err != nil {
				t.Fatalf("%s Stats: %v", where, err)
			}
			w := s.wantPump
			want := delayqueue.PumpResult{Requeued: w.requeued, Dead: w.dead, More: w.ready > 0,
				NextDue: rel(w.nextDue), NextDeadline: rel(w.nextDeadline), Now: t0.Add(s.at).UnixMicro()}
			if replayed {
				got.Requeued, got.Dead = want.Requeued, want.Dead
			}
			if want.More && got.NextDue >= 0 && got.NextDue <= want.Now {
				got.NextDue = want.NextDue // the head is a due job: any
			}
			if got != want || st.Ready != w.ready {
				t.Errorf("%s Pump:\n got %+v, %d ready\nwant %+v, %d ready", where, got, st.Ready, want, w.ready)
			}
		case opClaim:
			d, err := q.Claim(ctx)
			if err != nil {
				t.Fatalf("%s Claim: %v", where, err)
			}
			w := s.wantClaim
			switch {
			case w == nil && d != nil:
				t.Fatalf("%s Claim: got %q attempt %d, want nothing", where, d.ID, d.Attempt)
			case w == nil:
			case d == nil:
				t.Fatalf("%s Claim: got nothing, want %q", where, w.id)
			default:
				wantPayload := "p:" + w.id
				if d.ID != w.id || string(d.Payload) != wantPayload || d.Attempt != w.attempt || !d.DueAt.Equal(t0.Add(w.due)) {
					t.Fatalf("%s Claim: got %q %q attempt %d due %v, want %q %q attempt %d due %v", where,
						d.ID, d.Payload, d.Attempt, d.DueAt.Sub(t0), w.id, wantPayload, w.attempt, w.due)
				}
				if d.Deadline() != t0.Add(s.at+visibilityOf(q)) {
					t.Errorf("%s Claim: lease deadline %v, want %v", where, d.Deadline().Sub(t0), s.at+visibilityOf(q))
				}
				if deliveries[d.ID] == nil {
					deliveries[d.ID] = map[int]*delayqueue.Delivery{}
				}
				deliveries[d.ID][d.Attempt] = d
			}
		case opExtend, opAck, opFail:
			d := deliveries[s.id][s.attempt]
			if d == nil {
				t.Fatalf("%s: bad table: no delivery %q attempt %d", where, s.id, s.attempt)
			}
			switch s.op {
			case opExtend:
				ok, err := q.Extend(ctx, d)
				if err != nil || ok != s.wantOK {
					t.Errorf("%s Extend %q attempt %d: %v %v, want %v", where, s.id, s.attempt, ok, err, s.wantOK)
				}
			case opAck:
				ok, err := q.Ack(ctx, d)
				if err != nil || ok != s.wantOK {
					t.Errorf("%s Ack %q attempt %d: %v %v, want %v", where, s.id, s.attempt, ok, err, s.wantOK)
				}
			case opFail:
				out, err := q.Fail(ctx, d, s.cause)
				if err != nil || out != s.wantOutcome {
					t.Errorf("%s Fail %q attempt %d: %v %v, want %v", where, s.id, s.attempt, out, err, s.wantOutcome)
				}
			}
		case opListDead:
			got, err := q.ListDead(ctx, s.limit)
			if err != nil {
				t.Fatalf("%s ListDead: %v", where, err)
			}
			var want []delayqueue.DeadJob
			for _, w := range s.wantDead {
				want = append(want, delayqueue.DeadJob{
					Job:    delayqueue.Job{ID: w.id, Payload: []byte("p:" + w.id), Attempt: w.attempt, DueAt: t0.Add(w.due)},
					DiedAt: t0.Add(w.died),
				})
			}
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("%s ListDead(%d):\n got %v\nwant %v", where, s.limit, got, want)
			}
		case opRequeue:
			if err := q.Requeue(ctx, s.id); !errors.Is(err, s.wantErr) {
				t.Fatalf("%s Requeue %q: err %v, want %v", where, s.id, err, s.wantErr)
			}
		case opStats:
			got, err := q.Stats(ctx)
			if err != nil {
				t.Fatalf("%s Stats: %v", where, err)
			}
			if got != s.wantStats {
				t.Errorf("%s Stats: got %+v, want %+v", where, got, s.wantStats)
			}
		}
	}
}

// rel converts a time relative to t0 to µs, keeping none.
func rel(d time.Duration) int64 {
	if d == none {
		return none
	}
	return t0.Add(d).UnixMicro()
}

func visibilityOf(q *delayqueue.Queue) time.Duration { return q.Lease() }

// TestRandomIDs: jobs without the ID option get distinct random IDs, and
// their payloads, binary or empty, come back unchanged.
func TestRandomIDs(t *testing.T) {
	for _, bk := range allBackends() {
		t.Run(bk.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			q, err := delayqueue.New(bk.make(t, clock.NewFake(t0))(), "q")
			if err != nil {
				t.Fatal(err)
			}
			sent := map[string]string{}
			for _, p := range []string{"first", "", "\x00\xff binary\r\n", "first"} {
				id, err := q.Enqueue(ctx, []byte(p))
				if err != nil {
					t.Fatal(err)
				}
				if _, dup := sent[id]; dup || len(id) != 32 {
					t.Fatalf("random ID %q: duplicate or not 32 hex digits", id)
				}
				sent[id] = p
			}
			if _, err := q.Pump(ctx); err != nil {
				t.Fatal(err)
			}
			for range len(sent) {
				d, err := q.Claim(ctx)
				if err != nil || d == nil {
					t.Fatalf("Claim: %v %v", d, err)
				}
				if p, ok := sent[d.ID]; !ok || p != string(d.Payload) || d.Attempt != 1 || !d.DueAt.Equal(t0) {
					t.Errorf("Claim: %q %q attempt %d due %v; sent %q", d.ID, d.Payload, d.Attempt, d.DueAt, p)
				}
				delete(sent, d.ID)
			}
			if d, err := q.Claim(ctx); d != nil || err != nil {
				t.Errorf("Claim after all: %v %v, want nothing", d, err)
			}
		})
	}
}
