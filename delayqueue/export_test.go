package delayqueue

import (
	"context"
	"time"
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

// Pump runs one pump step.
func (q *Queue) Pump(ctx context.Context) (PumpResult, error) { return q.pump(ctx) }

// Claim runs one claim step; nil when nothing is ready.
func (q *Queue) Claim(ctx context.Context) (*Delivery, error) { return q.claim(ctx) }

// Extend extends the delivery's lease by Visibility; false when it is lost.
func (q *Queue) Extend(ctx context.Context, d *Delivery) (bool, error) {
	deadline, err := q.d.extend(ctx, d.ID, d.Attempt, q.cfg.visibility.Microseconds())
	if deadline > 0 {
		d.deadline = deadline
	}
	return deadline > 0, err
}

// Ack acks the delivery; false when its lease is lost.
func (q *Queue) Ack(ctx context.Context, d *Delivery) (bool, error) {
	return q.d.ack(ctx, d.ID, d.Attempt, d.call)
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
	_, dup, err = q.d.enqueue(ctx, id, []byte(payload), -1, 0, call)
	return dup, err
}

// ClaimCall is Claim as the call.
func (q *Queue) ClaimCall(ctx context.Context, call string) (*Delivery, error) {
	return q.d.claim(ctx, q.cfg.visibility.Microseconds(), call)
}

// CancelCall is Cancel as the call; false is ErrNotFound.
func (q *Queue) CancelCall(ctx context.Context, id, call string) (bool, error) {
	return q.d.cancel(ctx, id, call)
}

// RequeueCall is Requeue as the call; false is ErrNotFound.
func (q *Queue) RequeueCall(ctx context.Context, id, call string) (bool, error) {
	return q.d.requeue(ctx, id, call)
}
