package delayqueue

import (
	"context"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/floodgate-dev/floodgate/internal/callid"
	"github.com/floodgate-dev/floodgate/internal/redisstore"
)

// The steps of Run, exported to the tests so that they can drive the
// scheduling logic deterministically on a fake clock.

// PumpResult is what one pump did and saw.
type PumpResult = pumpResult

// Delivery is a claimed job and its lease.
type Delivery = delivery

// Deadline returns the lease deadline the claim (or last extension) set.
func (d *delivery) Deadline() time.Time { return microTime(d.deadline) }

// Outcome is the result of a failed delivery.
type Outcome = retryOutcome

// Outcomes of Fail.
const (
	LeaseLost = leaseLost
	Retried   = retried
	Killed    = killed
)

// take runs one take for a runner (see driver.take): n leases, spare other
// free slots, and the deliveries to ack first.
func (q *Queue) take(ctx context.Context, n, spare int, runner string, acks ...*delivery) (takeResult, error) {
	return q.takeArgs(ctx, takeArgs{n: n, spare: spare, runner: runner, acks: acks}, callid.New())
}

// Pump runs a take that leases nothing.
func (q *Queue) Pump(ctx context.Context) (PumpResult, error) {
	res, err := q.take(ctx, 0, 0, "")
	return res.pumpResult, err
}

// Claim runs a take that leases one job; nil when nothing is ready.
func (q *Queue) Claim(ctx context.Context) (*Delivery, error) {
	return q.ClaimCall(ctx, callid.New())
}

// TakeResult is what a take did and saw.
type TakeResult = takeResult

// Take runs a take for the runner: n leases, spare other free slots, and ack
// the delivery first when it is not nil.
func (q *Queue) Take(ctx context.Context, n, spare int, runner string, ack *Delivery) (TakeResult, error) {
	return q.TakeCall(ctx, n, spare, runner, ack, callid.New())
}

// AckedOne reports whether the take acked its one ack.
func (r *takeResult) AckedOne() bool { return len(r.Acked) == 1 && r.Acked[0] }

// Subscribe subscribes as the runner.
func (q *Queue) Subscribe(ctx context.Context, runner string) (all, own <-chan string, stop func(), err error) {
	return q.d.subscribe(ctx, runner)
}

// Extend extends the delivery's lease by Visibility; false when it is lost.
func (q *Queue) Extend(ctx context.Context, d *Delivery) (bool, error) {
	deadline, err := q.d.extend(ctx, d.ID, d.Attempt, q.cfg.visibility.Microseconds())
	if deadline > 0 {
		d.deadline = deadline
	}
	return deadline > 0, err
}

// Ack acks the delivery, in a take that leases nothing; false when its
// lease is lost.
func (q *Queue) Ack(ctx context.Context, d *Delivery) (bool, error) {
	res, err := q.take(ctx, 0, 0, "", d)
	return res.AckedOne(), err
}

// Fail fails the delivery with cause, as a handler's error does.
func (q *Queue) Fail(ctx context.Context, d *Delivery, cause error) (Outcome, error) {
	return q.fail(ctx, d, cause)
}

// Lease returns the Visibility option's value.
func (q *Queue) Lease() time.Duration { return q.cfg.visibility }

// The changing steps as one given call, so that a test can run a call twice
// as a client's resend does.

// EnqueueCall enqueues payload due now as the call; call "" means that id was
// drawn for this call (Enqueue without the ID option). dup is ErrDuplicate.
func (q *Queue) EnqueueCall(ctx context.Context, id, payload, call string) (dup bool, err error) {
	out, err := q.d.enqueue(ctx, []newJob{{id: id, payload: []byte(payload), at: -1, chosen: call != ""}}, call)
	if err != nil {
		return false, err
	}
	return out[0].dup, nil
}

// ClaimCall is Claim as the call.
func (q *Queue) ClaimCall(ctx context.Context, call string) (*Delivery, error) {
	res, err := q.takeArgs(ctx, takeArgs{n: 1}, call)
	if err != nil || len(res.Deliveries) == 0 {
		return nil, err
	}
	return res.Deliveries[0], nil
}

// CancelCall is Cancel as the call; false is ErrNotFound.
func (q *Queue) CancelCall(ctx context.Context, id, call string) (bool, error) {
	return q.d.cancel(ctx, id, call)
}

// RequeueCall is Requeue as the call; false is ErrNotFound.
func (q *Queue) RequeueCall(ctx context.Context, id, call string) (bool, error) {
	return q.d.requeue(ctx, id, call)
}

// TakeCall is Take as the call.
func (q *Queue) TakeCall(ctx context.Context, n, spare int, runner string, ack *Delivery, call string) (TakeResult, error) {
	a := takeArgs{n: n, spare: spare, runner: runner}
	if ack != nil {
		a.acks = []*delivery{ack}
	}
	return q.takeArgs(ctx, a, call)
}

// Call returns the delivery's call ID.
func (d *delivery) Call() string { return d.call }

// CountTakes makes q count its takes from now on.
func (q *Queue) CountTakes() *atomic.Int64 {
	c := &countingDriver{driver: q.d}
	q.d = c
	return &c.takes
}

type countingDriver struct {
	driver
	takes atomic.Int64
}

func (c *countingDriver) take(ctx context.Context, a takeArgs) (takeResult, error) {
	c.takes.Add(1)
	return c.driver.take(ctx, a)
}

// BatchJob is a job of EnqueueBatchCall, due now.
type BatchJob struct {
	ID, Payload string
	Chosen      bool
}

// EnqueueBatchCall enqueues jobs as the call; dups[i] is true when job i
// was not added because another call's job has its ID.
func (q *Queue) EnqueueBatchCall(ctx context.Context, jobs []BatchJob, call string) (dups []bool, err error) {
	nj := make([]newJob, len(jobs))
	for i, j := range jobs {
		nj[i] = newJob{id: j.ID, payload: []byte(j.Payload), at: -1, chosen: j.Chosen}
	}
	out, err := q.d.enqueue(ctx, nj, call)
	for _, o := range out {
		dups = append(dups, o.dup)
	}
	return dups, err
}

// The layout of version 0.9, whose consumers moved due jobs to a ready set.
var legacyReadyScript = redisstore.NewScript(`
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[1])
redis.call('HSET', KEYS[2], ARGV[1], ARGV[3])
redis.call('HSET', KEYS[3], ARGV[1], '0:' .. ARGV[2])
return 1`)

// AddLegacyReady adds a job, due at due, to the ready set of version 0.9,
// as a consumer of that version left it. Redis only.
func (q *Queue) AddLegacyReady(ctx context.Context, id, payload string, due time.Time) error {
	d := q.d.(*redisDriver)
	_, err := d.r.Run(ctx, legacyReadyScript, []string{d.ready, d.payload, d.meta},
		[]string{id, strconv.FormatInt(due.UnixMicro(), 10), payload})
	return err
}

// Extra is how many jobs a Run of the given concurrency, whose handlers
// took handled on average (0: none returned yet), leases beyond n free
// slots in one take.
func Extra(concurrency, n int, handled time.Duration) int {
	r := &runner{slots: make(chan struct{}, concurrency)}
	r.handled.Store(int64(handled))
	return r.extra(n)
}
