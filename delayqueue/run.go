package delayqueue

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"strconv"
	"sync"
	"time"

	"github.com/floodgate-dev/floodgate/internal/callid"
)

func microTime(us int64) time.Time { return time.UnixMicro(us) }

// Run consumes the queue: it hands due jobs to h, at most Concurrency at
// once, until ctx ends, and then returns nil once the running handlers
// finished or ShutdownTimeout passed (see ShutdownTimeout for what happens to
// handlers still running). It returns an error at once only when h is nil;
// store errors do not end it: they go to OnError and Run retries, waiting
// 50ms, doubling up to MaxPoll. Several Runs, in one process or many, may
// consume one queue; each job is delivered to one of them at a time.
//
// Each delivery runs h in its own goroutine with a context that is not
// cancelled by ctx (so that a handler can finish during the shutdown grace),
// but with cause ErrShutdown after it, and with cause ErrLeaseLost when the
// lease is lost. See Handler for what h's result does.
func (q *Queue) Run(ctx context.Context, h Handler) error {
	if h == nil {
		return errors.New("delayqueue: Handler is nil")
	}
	if ctx.Err() != nil {
		return nil
	}
	r := &runner{q: q, h: h, slots: make(chan struct{}, q.cfg.concurrency)}
	r.hctx, r.abandon = context.WithCancelCause(context.WithoutCancel(ctx))
	defer r.abandon(ErrShutdown)
	r.loop(ctx)
	return r.drain()
}

// runner is one Run.
type runner struct {
	q       *Queue
	h       Handler
	slots   chan struct{} // a token per running handler
	running sync.WaitGroup
	hctx    context.Context // parent of the handlers' contexts
	abandon context.CancelCauseFunc

	wake   <-chan string // published due times; nil until subscribed
	unsub  func()
	subAt  time.Time // when to try subscribing again after a failure
	fails  int       // consecutive store errors
	nextAt time.Time // local time of the next planned pump
	planAt int64     // the same instant in store µs, to filter wake-ups
}

// loop claims and dispatches jobs until ctx ends.
func (r *runner) loop(ctx context.Context) {
	defer func() {
		if r.unsub != nil {
			r.unsub()
		}
	}()
	needPump := true
	for ctx.Err() == nil {
		if r.unsub == nil && !time.Now().Before(r.subAt) {
			// Subscribe before the first pump, so that an enqueue between the
			// pump and the sleep is not missed.
			r.subscribe(ctx)
		}
		pumped := false
		if needPump || !time.Now().Before(r.nextAt) {
			p, err := r.q.pump(ctx)
			if err != nil {
				r.storeError(ctx, err)
				continue
			}
			r.plan(p)
			needPump, pumped = false, true
		}
		select {
		case r.slots <- struct{}{}:
		case <-ctx.Done():
			return
		}
		if ctx.Err() != nil {
			<-r.slots
			return
		}
		d, err := r.q.claim(ctx)
		if err != nil {
			<-r.slots
			r.storeError(ctx, err)
			continue
		}
		r.fails = 0
		if d != nil {
			r.running.Add(1)
			go r.handle(d)
			continue
		}
		<-r.slots
		needPump = true
		if !pumped {
			continue // nothing ready: pump before going to sleep
		}
		r.sleep(ctx)
	}
}

// plan sets when to pump next: at the earliest due time or lease deadline
// the pump saw, at once when more jobs are due than one pump moves, and
// after MaxPoll at the latest.
func (r *runner) plan(p pumpResult) {
	r.fails = 0
	wait := r.q.cfg.maxPoll.Microseconds()
	for _, t := range []int64{p.NextDue, p.NextDeadline} {
		if t >= 0 {
			wait = min(wait, max(t-p.Now, 0))
		}
	}
	r.nextAt = time.Now().Add(time.Duration(wait) * time.Microsecond)
	r.planAt = p.Now + wait
}

// sleep waits until the planned pump, a published due time earlier than it,
// or the end of ctx.
func (r *runner) sleep(ctx context.Context) {
	t := time.NewTimer(time.Until(r.nextAt))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			return
		case msg := <-r.wake:
			if due, err := strconv.ParseInt(msg, 10, 64); err != nil || due < r.planAt {
				return
			}
		}
	}
}

func (r *runner) subscribe(ctx context.Context) {
	wake, unsub, err := r.q.d.subscribe(ctx)
	if err != nil {
		// Without wake-ups the consumer still looks every MaxPoll; it tries
		// again after 10 MaxPolls.
		if ctx.Err() == nil {
			r.q.cfg.onError(err)
		}
		r.subAt = time.Now().Add(10 * r.q.cfg.maxPoll)
		return
	}
	r.wake, r.unsub = wake, unsub
}

// storeError reports err and waits before the next try: 50ms, doubling with
// every consecutive error, up to MaxPoll.
func (r *runner) storeError(ctx context.Context, err error) {
	if ctx.Err() != nil {
		return
	}
	r.q.cfg.onError(err)
	d := min(50*time.Millisecond<<min(r.fails, 16), r.q.cfg.maxPoll)
	r.fails++
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// drain waits for the running handlers up to ShutdownTimeout, then abandons
// those still running.
func (r *runner) drain() error {
	done := make(chan struct{})
	go func() {
		r.running.Wait()
		close(done)
	}()
	t := time.NewTimer(r.q.cfg.shutdown)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		r.abandon(ErrShutdown)
	}
	return nil
}

// handle runs the handler on one delivery, keeps its lease while it runs,
// and acks or retries the job after.
func (r *runner) handle(d *delivery) {
	defer r.running.Done()
	defer func() { <-r.slots }()
	q := r.q
	jctx, cancel := context.WithCancelCause(r.hctx)
	defer cancel(nil)
	stop := make(chan struct{})
	kept := make(chan struct{})
	go func() {
		defer close(kept)
		r.keepLease(jctx, cancel, d, stop)
	}()
	err := call(jctx, r.h, &d.Job)
	close(stop)
	<-kept
	if cause := context.Cause(jctx); cause != nil {
		// The lease is lost or Run gave up on this handler: the job is no
		// longer this delivery's to ack or retry.
		if errors.Is(cause, ErrLeaseLost) {
			q.cfg.onError(fmt.Errorf("delayqueue: job %q attempt %d: %w", d.ID, d.Attempt, cause))
		}
		return
	}
	// Ack or retry even when Run's ctx ended: this runs within the grace.
	ctx, cancelOp := context.WithTimeout(r.hctx, q.cfg.visibility)
	defer cancelOp()
	if err == nil {
		ok, aerr := q.d.ack(ctx, d.ID, d.Attempt, d.call)
		switch {
		case aerr != nil:
			q.cfg.onError(fmt.Errorf("delayqueue: job %q attempt %d: ack: %w", d.ID, d.Attempt, aerr))
		case !ok:
			q.cfg.onError(fmt.Errorf("delayqueue: job %q attempt %d: ack: %w", d.ID, d.Attempt, ErrLeaseLost))
		}
		return
	}
	out, rerr := q.fail(ctx, d, err)
	switch {
	case rerr != nil:
		q.cfg.onError(fmt.Errorf("delayqueue: job %q attempt %d: retry: %w", d.ID, d.Attempt, rerr))
	case out == leaseLost:
		q.cfg.onError(fmt.Errorf("delayqueue: job %q attempt %d: retry: %w", d.ID, d.Attempt, ErrLeaseLost))
	}
}

// call runs h, turning a panic into an error.
func call(ctx context.Context, h Handler, j *Job) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("delayqueue: handler panicked: %v\n%s", p, debug.Stack())
		}
	}()
	return h(ctx, j)
}

// keepLease extends the lease every Visibility/3 until stop is closed. It
// cancels the handler with ErrLeaseLost when an extension finds the lease
// gone, or when no extension succeeded for a whole Visibility (counted from
// the request that set the last known deadline, so never later than the
// store's deadline). Failed extensions are retried every Visibility/10.
func (r *runner) keepLease(jctx context.Context, cancel context.CancelCauseFunc, d *delivery, stop <-chan struct{}) {
	vis := r.q.cfg.visibility
	confirmed := d.claimed
	t := time.NewTimer(vis / 3)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-jctx.Done():
			return
		case <-t.C:
		}
		left := vis - time.Since(confirmed)
		if left <= 0 {
			cancel(ErrLeaseLost)
			return
		}
		start := time.Now()
		ctx, cancelOp := context.WithTimeout(r.hctx, left)
		deadline, err := r.q.d.extend(ctx, d.ID, d.Attempt, vis.Microseconds())
		cancelOp()
		switch {
		case err != nil:
			r.q.cfg.onError(fmt.Errorf("delayqueue: job %q attempt %d: extend: %w", d.ID, d.Attempt, err))
			t.Reset(min(vis/10, max(vis-time.Since(confirmed), 0)))
		case deadline == 0:
			cancel(ErrLeaseLost)
			return
		default:
			confirmed = start
			t.Reset(vis / 3)
		}
	}
}

// The steps of Run, one store call each. Tests drive them directly on a fake
// clock.

// pump moves due jobs to ready and takes back expired leases.
func (q *Queue) pump(ctx context.Context) (pumpResult, error) {
	return q.d.pump(ctx, q.cfg.maxAttempts)
}

// claim leases the ready job due first, or returns nil.
func (q *Queue) claim(ctx context.Context) (*delivery, error) {
	start := time.Now()
	d, err := q.d.claim(ctx, q.cfg.visibility.Microseconds(), callid.New())
	if d != nil {
		d.claimed = start
	}
	return d, err
}

// fail retries the delivery after Backoff(attempt), or moves it to dead
// after MaxAttempts or when cause wraps ErrSkipRetry.
func (q *Queue) fail(ctx context.Context, d *delivery, cause error) (retryOutcome, error) {
	maxAttempts := q.cfg.maxAttempts
	if errors.Is(cause, ErrSkipRetry) {
		maxAttempts = d.Attempt
	}
	var backoff int64
	if d.Attempt < maxAttempts {
		backoff = ceilMicros(min(max(q.cfg.backoff(d.Attempt), 0), MaxDelay))
	}
	return q.d.retry(ctx, d.ID, d.Attempt, backoff, maxAttempts, d.call)
}
