package delayqueue

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime/debug"
	"strconv"
	"sync"
	"sync/atomic"
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
//
// While the handlers take under 200µs on average, a take also leases, up
// to BatchSize in all, the jobs that the slots start within 200µs beyond
// the free ones; they run, in order, in the slots that free next, within
// the shutdown grace too. A job not started when ShutdownTimeout passes is
// delivered again when its lease ends.
func (q *Queue) Run(ctx context.Context, h Handler) error {
	if h == nil {
		return errors.New("delayqueue: Handler is nil")
	}
	if ctx.Err() != nil {
		return nil
	}
	r := &runner{q: q, h: h, slots: make(chan struct{}, q.cfg.concurrency), kick: make(chan struct{}, 1)}
	r.hctx, r.abandon = context.WithCancelCause(context.WithoutCancel(ctx))
	defer r.abandon(ErrShutdown)
	r.loop(ctx)
	r.stop()
	return r.drain()
}

// runner is one Run.
//
// Its loop takes due jobs into the free slots (one take call leases one per
// free slot, and while handlers are fast the jobs those slots start soon
// after, at most BatchSize; see extra) and starts a worker for each; the
// jobs beyond the free slots wait in ready for the workers. A worker that
// finished a job runs the next ready one, and hands its ack to the next
// take that carries acks (see deferAck); else it acks the job and leases
// the next due one in the same call, and keeps its slot while there is one.
// Every take answers when to look next; the loop sleeps until the latest
// answer's time, or until a published due time is earlier.
type runner struct {
	q       *Queue
	h       Handler
	id      string        // the Run's ID for the waker election; "" while no message can wake it
	slots   chan struct{} // a token per running worker
	running sync.WaitGroup
	hctx    context.Context // parent of the handlers' contexts
	abandon context.CancelCauseFunc
	stopped atomic.Bool  // Run's ctx ended: workers lease no more jobs
	looking atomic.Int64 // slots the loop holds for the take it is making
	handled atomic.Int64 // a moving average of the handlers' durations, ns; 0 before the first (see extra)

	wake  <-chan string // due times published for every consumer; nil until subscribed
	own   <-chan string // due times published for this Run (it is the waker)
	unsub func()
	subAt time.Time // when to try subscribing again after a failure
	fails int       // consecutive store errors of the loop

	legacyAt atomic.Int64 // Unix ns: when a take should next look for an older version's ready jobs

	mu      sync.Mutex
	plan    plan          // from the take sent last
	kick    chan struct{} // the plan moved earlier, or an ack waits
	acks    []*delivery   // acks that the loop's next take carries (see deferAck)
	ackBy   time.Time     // when the loop sends them at the latest
	closing bool          // the loop ended: no more deferred acks
	waker   bool          // the take that made the plan found this Run the waker
	ready   []*delivery   // leased beyond the free slots, for the next free slot (see extra)
}

// ackDelay is the longest a finished job's ack waits for the loop's next
// take, which then carries it: while jobs come due less than this apart, a
// job costs a call less (its ack does not wake Redis on its own).
const ackDelay = 5 * time.Millisecond

// plan is when to take next, from the answer of a take.
type plan struct {
	sent    time.Time // when the take was sent; a later take's plan replaces it
	at      time.Time // local time to take next; zero: at once
	storeAt int64     // the same instant by the store's clock, µs
}

// Run's ID for the waker election: hex, unique per Run.
func runnerID() string { return newID()[:16] }

// loop takes and dispatches jobs until ctx ends.
func (r *runner) loop(ctx context.Context) {
	defer func() {
		if r.unsub != nil {
			r.unsub()
		}
	}()
	for ctx.Err() == nil {
		if r.unsub == nil && !time.Now().Before(r.subAt) {
			// Subscribe before the first take, so that an enqueue between
			// the take and the sleep is not missed.
			r.subscribe(ctx)
		}
		if !r.acquire(ctx) {
			return
		}
		if d := r.popReady(); d != nil {
			r.running.Add(1)
			go r.work(d)
			continue
		}
		if p, acksDue := r.next(); time.Now().Before(p.at) && !acksDue {
			<-r.slots
			r.sleep(ctx, p)
			continue
		}
		n := r.gather(ctx)
		extra := r.extra(n)
		r.looking.Store(int64(n))
		// spare 1: the loop counts as idle, whatever it leases, and stays the
		// waker; acquire hands the role on if every slot is still busy when
		// the next look is due.
		res, err := r.send(ctx, takeArgs{n: n + extra, spare: 1, runner: r.id, legacy: r.legacy()})
		r.looking.Store(0)
		if err != nil {
			r.release(n)
			r.storeError(ctx, err)
			continue
		}
		r.fails = 0
		for i, d := range res.Deliveries {
			if i >= n {
				r.pushReady(d)
				continue
			}
			r.running.Add(1)
			go r.work(d)
		}
		r.release(n - min(len(res.Deliveries), n))
	}
}

// gather takes the free slots for a take, besides the one acquire took, up
// to BatchSize, and returns how many it holds. Slots still busy are waited
// for up to gatherWait: a worker whose handler has returned frees its slot
// within a scheduling delay, and a take that has it leases one more job in
// the same call, where a take without it would leave that job to another
// call (one consumer of concurrency 4, jobs due every 200µs, instant
// handlers: takes leased 2.2 jobs each without the wait, 3.4 with it).
// Slower handlers cost a take's due jobs gatherWait at most.
func (r *runner) gather(ctx context.Context) int {
	n, most := 1, min(cap(r.slots), BatchSize)
	for n < most && r.trySlot() {
		n++
	}
	if n == most {
		return n
	}
	t := time.NewTimer(gatherWait)
	defer t.Stop()
	for n < most {
		select {
		case r.slots <- struct{}{}:
			n++
		case <-t.C:
			return n
		case <-ctx.Done():
			return n
		}
	}
	return n
}

// gatherWait is the longest a take waits for busy slots (see gather).
const gatherWait = 250 * time.Microsecond

// extra is how many jobs a take for n free slots leases besides them, to
// run in the next slots that free (see popReady): while the handlers take
// h < prefetchBelow on average, as many as the slots start within
// prefetchBelow (Concurrency × prefetchBelow/h), up to BatchSize in all;
// none while they are slower, or before one has returned. A consumer of few
// slots then leases, like one of many, the jobs due in one call: four
// consumers of concurrency 4 cost Redis what one of 16 costs per job, where
// they cost 1.2× (their takes leased 2.2 jobs each, leaving due jobs to the
// next call).
func (r *runner) extra(n int) int {
	h := time.Duration(r.handled.Load())
	if h <= 0 || h >= prefetchBelow {
		return 0
	}
	return min(BatchSize-n, cap(r.slots)*int(prefetchBelow/h))
}

// prefetchBelow is the handlers' average duration under which takes lease
// jobs beyond the free slots (see extra).
const prefetchBelow = 200 * time.Microsecond

// timed takes a handler's duration into the moving average.
func (r *runner) timed(d time.Duration) {
	avg := r.handled.Load()
	if avg == 0 {
		r.handled.Store(max(int64(d), 1))
		return
	}
	r.handled.Store(avg + (int64(d)-avg)/8)
}

// hasReady reports whether jobs leased beyond the free slots wait for one.
func (r *runner) hasReady() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ready) > 0
}

// pushReady keeps d, leased beyond the free slots, for the next free slot.
func (r *runner) pushReady(d *delivery) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ready = append(r.ready, d)
}

// popReady returns the first job leased beyond the free slots, for the
// caller's slot; nil if there is none, or once Run gave up on its handlers
// (ShutdownTimeout): the lease of a job left then ends, and the job is
// delivered again.
func (r *runner) popReady() *delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.ready) == 0 || r.hctx.Err() != nil {
		return nil
	}
	d := r.ready[0]
	r.ready = r.ready[1:]
	return d
}

// legacy reports whether a take should look for jobs in the ready set of
// version 0.9: once per MaxPoll.
func (r *runner) legacy() bool {
	now, at := time.Now().UnixNano(), r.legacyAt.Load()
	return now >= at && r.legacyAt.CompareAndSwap(at, now+int64(r.q.cfg.maxPoll))
}

// acquire waits for a free slot, or the end of ctx (false). A waker whose
// slots are still all busy ackDelay after its next look was due gives the
// role up, so that an idle consumer of the queue takes the due jobs (see
// lua/take.lua); a slot that frees sooner keeps it.
func (r *runner) acquire(ctx context.Context) bool {
	if r.trySlot() {
		return true
	}
	var missed <-chan time.Time
	if p, waker := r.role(); waker {
		t := time.NewTimer(max(time.Until(p.at), 0) + ackDelay)
		defer t.Stop()
		missed = t.C
	}
	for {
		select {
		case r.slots <- struct{}{}:
			return true
		case <-ctx.Done():
			return false
		case <-missed:
			missed = nil
			if _, err := r.send(ctx, takeArgs{runner: r.id}); err != nil {
				r.storeError(ctx, err)
			}
		}
	}
}

func (r *runner) trySlot() bool {
	select {
	case r.slots <- struct{}{}:
		return true
	default:
		return false
	}
}

func (r *runner) release(n int) {
	for range n {
		<-r.slots
	}
}

// role returns the plan, and whether the take that made it found this Run
// the waker.
func (r *runner) role() (plan, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.plan, r.waker
}

// current returns the plan.
func (r *runner) current() plan {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.plan
}

// next returns the plan, and whether deferred acks are due to be sent.
func (r *runner) next() (plan, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.plan, len(r.acks) > 0 && !time.Now().Before(r.ackBy)
}

// deferAck hands the ack of d to the next take that carries acks: the
// loop's, when that is planned within ackDelay (or is due already: the freed
// slot lets the loop take at once), or, while jobs leased beyond the free
// slots wait (see extra), the ack of the worker that runs the last of them.
// d's lease (no longer extended) must outlive the wait with room to spare;
// false leaves the ack to the caller.
func (r *runner) deferAck(d *delivery) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	wait := time.Until(r.plan.at)
	if r.closing || (wait > ackDelay && len(r.ready) == 0) || len(r.acks) >= BatchSize ||
		time.Since(d.confirmed)+4*ackDelay >= r.q.cfg.visibility {
		return false
	}
	if len(r.acks) == 0 {
		r.ackBy = time.Now().Add(ackDelay)
		if wait > ackDelay {
			r.poke() // the loop sleeps past ackBy: it sends the acks then, unless a worker does first
		}
	}
	r.acks = append(r.acks, d)
	return true
}

// send makes the take a of the loop, carrying the deferred acks, and takes
// its plan. The acks of a take that failed are kept for the next one (their
// receipts make a second run safe); those that found their lease lost are
// reported.
func (r *runner) send(ctx context.Context, a takeArgs) (takeResult, error) {
	a.acks = r.takeAcks()
	sent := time.Now()
	res, err := r.q.takeArgs(ctx, a, callid.New())
	if err != nil {
		r.returnAcks(a.acks)
		return res, err
	}
	r.reportAcks(a.acks, res.Acked)
	r.update(sent, res)
	return res, nil
}

// takeAcks returns the deferred acks, which the caller sends.
func (r *runner) takeAcks() []*delivery {
	r.mu.Lock()
	defer r.mu.Unlock()
	acks := r.acks
	r.acks = nil
	return acks
}

// returnAcks puts back acks whose take failed, to be sent with the next.
func (r *runner) returnAcks(acks []*delivery) {
	if len(acks) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.acks = append(acks, r.acks...)
	r.ackBy = time.Now()
}

// reportAcks reports the acks that found their lease lost.
func (r *runner) reportAcks(acks []*delivery, acked []bool) {
	for i, d := range acks {
		if !acked[i] {
			r.q.cfg.onError(fmt.Errorf("delayqueue: job %q attempt %d: ack: %w", d.ID, d.Attempt, ErrLeaseLost))
		}
	}
}

// update takes the plan of a take sent at sent, unless a later take's plan
// is already in place, and kicks the loop's sleep when the plan moved
// earlier.
func (r *runner) update(sent time.Time, res takeResult) {
	p := plan{sent: sent, storeAt: res.Wake}
	if !res.More {
		p.at = time.Now().Add(time.Duration(max(res.Wake-res.Now, 0)) * time.Microsecond)
	}
	r.mu.Lock()
	if sent.Before(r.plan.sent) {
		r.mu.Unlock()
		return
	}
	earlier := p.at.Before(r.plan.at)
	r.plan, r.waker = p, res.Waker
	r.mu.Unlock()
	if earlier {
		r.poke()
	}
}

// advance moves the plan to the store time due, when that is earlier: a
// published due time.
func (r *runner) advance(due int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if due >= r.plan.storeAt || r.plan.at.IsZero() {
		return
	}
	r.plan.at = r.plan.at.Add(-time.Duration(r.plan.storeAt-due) * time.Microsecond)
	r.plan.storeAt = due
}

func (r *runner) poke() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// sleep waits until the plan's time, an earlier published due time, a
// worker's earlier plan, the time to send deferred acks, or the end of ctx.
func (r *runner) sleep(ctx context.Context, p plan) {
	until := p.at
	r.mu.Lock()
	if len(r.acks) > 0 && r.ackBy.Before(until) {
		until = r.ackBy
	}
	r.mu.Unlock()
	t := time.NewTimer(time.Until(until))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			return
		case <-r.kick:
			return
		case msg := <-r.wake:
			r.heard(msg)
		case msg := <-r.own:
			r.heard(msg)
		}
		if q := r.current(); !q.at.Equal(p.at) {
			return
		}
	}
}

// heard takes a published due time into the plan; a malformed one means
// "look now".
func (r *runner) heard(msg string) {
	due, err := strconv.ParseInt(msg, 10, 64)
	if err != nil {
		due = math.MinInt64
	}
	r.advance(due)
}

func (r *runner) subscribe(ctx context.Context) {
	id := runnerID()
	wake, own, unsub, err := r.q.d.subscribe(ctx, id)
	if err != nil {
		// Without wake-ups the consumer still looks every MaxPoll; it tries
		// again after 10 MaxPolls.
		if ctx.Err() == nil {
			r.q.cfg.onError(err)
		}
		r.subAt = time.Now().Add(10 * r.q.cfg.maxPoll)
		return
	}
	r.wake, r.own, r.unsub = wake, own, unsub
	if own != nil {
		r.id = id
	}
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

// stop ends the loop's part: workers lease no more jobs and ack on their
// own; the deferred acks are sent, and the waker role, if this Run holds it,
// is given up, so that another consumer wakes for the next due time at once
// (see lua/take.lua), in a take that leases nothing, within a second.
func (r *runner) stop() {
	r.mu.Lock()
	r.closing = true // no ack is deferred from now on
	r.mu.Unlock()
	acks := r.takeAcks()
	r.stopped.Store(true)
	if r.id == "" && len(acks) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(r.hctx, time.Second)
	defer cancel()
	res, err := r.q.takeArgs(ctx, takeArgs{runner: r.id, acks: acks}, callid.New())
	if err != nil {
		for _, d := range acks {
			r.q.cfg.onError(fmt.Errorf("delayqueue: job %q attempt %d: ack: %w", d.ID, d.Attempt, err))
		}
		return
	}
	r.reportAcks(acks, res.Acked)
}

// work runs deliveries in one slot: d, and the next job each ack leases,
// until an ack leases none. It frees the slot after.
func (r *runner) work(d *delivery) {
	defer r.running.Done()
	defer func() { <-r.slots }()
	for d != nil {
		if d = r.handle(d); d == nil {
			d = r.popReady()
		}
	}
}

// handle runs the handler on one delivery, keeps its lease while it runs,
// and acks or retries the job after. An ack leases the next ready job, which
// handle returns, unless Run is stopping.
func (r *runner) handle(d *delivery) *delivery {
	q := r.q
	jctx, cancel := context.WithCancelCause(r.hctx)
	defer cancel(nil)
	stop := make(chan struct{})
	kept := make(chan struct{})
	go func() {
		defer close(kept)
		r.keepLease(jctx, cancel, d, stop)
	}()
	start := time.Now()
	err := call(jctx, r.h, &d.Job)
	r.timed(time.Since(start))
	close(stop)
	<-kept
	if cause := context.Cause(jctx); cause != nil {
		// The lease is lost or Run gave up on this handler: the job is no
		// longer this delivery's to ack or retry.
		if errors.Is(cause, ErrLeaseLost) {
			q.cfg.onError(fmt.Errorf("delayqueue: job %q attempt %d: %w", d.ID, d.Attempt, cause))
		}
		return nil
	}
	// Ack or retry even when Run's ctx ended: this runs within the grace.
	ctx, cancelOp := context.WithTimeout(r.hctx, q.cfg.visibility)
	defer cancelOp()
	if err == nil {
		if r.deferAck(d) {
			return nil
		}
		// The slots that the loop holds for its take count as free: that
		// take keeps the waker role itself.
		n, spare := 1, cap(r.slots)-len(r.slots)+int(r.looking.Load())
		if r.stopped.Load() {
			n, spare = 0, 0
		} else if r.hasReady() {
			n = 0 // this slot runs a job leased already
		}
		sent := time.Now()
		// The acks deferred meanwhile go too (see deferAck).
		acks := append(r.takeAcks(), d)
		res, aerr := q.takeArgs(ctx, takeArgs{n: n, spare: spare, runner: r.id, acks: acks, legacy: n > 0 && r.legacy()}, callid.New())
		if aerr != nil {
			r.returnAcks(acks[:len(acks)-1])
			q.cfg.onError(fmt.Errorf("delayqueue: job %q attempt %d: ack: %w", d.ID, d.Attempt, aerr))
			return nil
		}
		r.reportAcks(acks, res.Acked)
		r.update(sent, res)
		if len(res.Deliveries) == 0 {
			return nil
		}
		return res.Deliveries[0]
	}
	out, rerr := q.fail(ctx, d, err)
	switch {
	case rerr != nil:
		q.cfg.onError(fmt.Errorf("delayqueue: job %q attempt %d: retry: %w", d.ID, d.Attempt, rerr))
	case out == leaseLost:
		q.cfg.onError(fmt.Errorf("delayqueue: job %q attempt %d: retry: %w", d.ID, d.Attempt, ErrLeaseLost))
	}
	return nil
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
	d.confirmed = d.claimed
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
		left := vis - time.Since(d.confirmed)
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
			t.Reset(min(vis/10, max(vis-time.Since(d.confirmed), 0)))
		case deadline == 0:
			cancel(ErrLeaseLost)
			return
		default:
			d.confirmed = start
			t.Reset(vis / 3)
		}
	}
}

// The steps of Run, one store call each. Tests drive them directly on a fake
// clock.

// takeArgs runs the take a as the call, with the queue's options.
func (q *Queue) takeArgs(ctx context.Context, a takeArgs, call string) (takeResult, error) {
	a.call, a.visibility, a.maxAttempts, a.poll = call, q.cfg.visibility.Microseconds(), q.cfg.maxAttempts, q.cfg.maxPoll.Microseconds()
	start := time.Now()
	res, err := q.d.take(ctx, a)
	for _, d := range res.Deliveries {
		d.claimed = start
	}
	return res, err
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
