// Package delayqueue is a reliable delay queue on the Memory or Redis
// backend: jobs are enqueued with a due time and delivered to a handler no
// earlier than that, at least once, under a lease.
//
//	q, err := delayqueue.New(b, "emails", delayqueue.Concurrency(8))
//	id, err := q.Enqueue(ctx, payload, delayqueue.Delay(10*time.Minute))
//	err = q.Run(ctx, func(ctx context.Context, j *delayqueue.Job) error {
//		return send(ctx, j.Payload) // nil acks; an error retries with backoff
//	})
//
// # How it works
//
// A queue is three sorted sets and three hashes, all under the hash tag
// {name} on Redis (so a queue lives on one Cluster slot): scheduled (job id
// scored by due time), inflight (delivered jobs, by lease deadline) and dead
// (jobs that used up their attempts), plus the payloads, each job's attempt
// count and due time, and the Enqueue call of each job whose ID the caller
// chose; a string naming the waker (below); and short-lived receipts of
// recent calls (see "Lost replies and resends"). Every change of state is
// one script call, and the scripts are the only place where state changes,
// so any number of consumers in any number of processes may share a queue:
//
//   - Enqueue adds the job to scheduled (or reports ErrDuplicate for an ID
//     that is already in the queue); EnqueueBatch adds many in one call.
//     A job due before every other scheduled job is published, to wake a
//     sleeping consumer.
//   - A consumer's take leases up to one due job per free slot of its Run
//     (at most BatchSize): each moves from scheduled to inflight with a
//     lease of Visibility, and its attempt count, which also serves as the
//     lease's fencing token, goes up by one. The same call takes back
//     in-flight jobs whose lease deadline passed (a consumer crashed or
//     stalled), at most BatchSize: to scheduled, due at the deadline, or to
//     dead once they used their attempts; and it answers when to look next.
//   - While the handler runs its lease is extended every Visibility/3. When
//     it returns nil the job is deleted (ack): in the Run's next take when
//     that is planned within 5ms (the ack then costs no call of its own),
//     else in a call that also takes the next due job for the freed slot.
//     When it returns an error the job goes back to scheduled at now +
//     Backoff(attempt), or to dead after MaxAttempts attempts.
//
// Whether a job is due and whether a lease ended is judged by one clock: the
// Redis server's (TIME in the scripts) or the Memory backend's, never the
// consumers' own. A job is never delivered before its due time by that clock.
// Times are whole microseconds since the Unix epoch (exact in Lua up to
// 2^53 µs, the year 2255); Delay and At round up to the next microsecond.
//
// Jobs that used up their attempts wait in the dead set: ListDead shows
// them, Requeue gives one another MaxAttempts attempts, Cancel deletes it.
//
// Consumers do not poll on a fixed fast interval. Of the idle consumers of a
// queue one is the waker: it sleeps until the earliest due time or lease
// deadline, and at most MaxPoll (default 1s); the others sleep until the
// waker's role ends, MaxPoll after it last took a look, so that a due time
// wakes one consumer, not all. A job due before every other is published
// (Redis pub/sub; channels in process on Memory) to the waker, or to all
// when there is none, and a waker whose slots are all still busy 5ms after
// its next look was due hands the role on. A lost wake-up, or a waker that died, costs
// at most MaxPoll of lateness. A job costs three script calls at most: its
// enqueue, the take that leases it, and its ack; fewer when jobs come due
// close together, since a take then leases several, carries the acks of
// jobs just finished, or is itself an ack. Idle, a consumer makes one call
// per MaxPoll.
//
// # Why not keyspace notifications
//
// A common recipe stores each job in a key that expires at its due time and
// reacts to Redis keyspace "expired" events. It is not reliable, so this
// package does not use it: the events are pub/sub messages, fire-and-forget,
// lost for good while no consumer is subscribed (a deploy, a crash, a
// network blip); they are emitted only when Redis notices the expiry (on
// access or by its sampling sweep), so they can come seconds late under
// load; they carry the key name but not the value, which is already gone;
// and in a Cluster every node emits its own. Here the state is a sorted set
// that survives every consumer, a due job stays in it until a consumer takes
// it, and the pub/sub message is only a hint to wake up early.
//
// # Delivery guarantees
//
// Delivery is at least once: a job is deleted only when a handler returned
// nil for it. A consumer that dies mid-handler leaves the job in flight; once
// its lease ends (Visibility after the last extension, by the store's clock)
// the next take hands it to another consumer with the next Attempt number.
// Within a lease a job is delivered to one consumer only. Handlers should
// therefore be idempotent, or deduplicate on Job.ID and Job.Attempt.
//
// On Redis, durability is Redis's: with AOF and appendfsync always an
// acknowledged Enqueue survives a restart; without persistence a restart
// loses the queue.
//
// # Lost replies and resends
//
// A script whose reply is lost (a connection cut, a read timeout while Redis
// stalls) has still run, and go-redis resends it (MaxRetries, 3 by default),
// so any script may run twice. Every script that changes the queue tells a
// second run of the same call from a new call and answers it as the first
// run did, without acting again:
//
//   - Enqueue without ID draws the job's ID before the script runs, so a job
//     with it is this call's: success, one job. With ID, the call's ID
//     (callid.New) is kept beside the job, for the job's life: a
//     resend of this call succeeds; another Enqueue with the ID gets
//     ErrDuplicate.
//   - A take, an ack, a retry, Cancel and Requeue leave a receipt under
//     their call ID, read by the scripts' clock and kept for the longer of
//     Visibility and MinReplayWindow (30s): a resent take returns the same
//     deliveries (it does not lease more jobs), a resent ack answers
//     acked, a resent retry its outcome, a resent Cancel or Requeue nil,
//     even if the job was enqueued again with its ID since. A take that
//     leased jobs leaves one receipt, and each of its deliveries one more
//     when it is acked or retried (about 190 bytes each on Redis, kept the
//     window after the call).
//   - A resent extension moves the deadline again, from its own now, and
//     answers as the first; a resent take's taking back of ended leases does
//     the next part of the same work, if any.
//
// A resend that arrives after the receipt ended is judged as a new call: an
// ack or retry then reports ErrLeaseLost to OnError and changes nothing; a
// Cancel returns ErrNotFound. When the client gives up (every resend failed)
// the call returns the store's error and may or may not have taken effect;
// a new call is a new call: Enqueue again without ID may add a second job,
// with ID it gets ErrDuplicate if the first one landed.
package delayqueue

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/internal/callid"
	"github.com/floodgate-dev/floodgate/internal/unwrap"
)

// Limits.
const (
	// MaxNameLen is the longest queue name, in bytes.
	MaxNameLen = 512
	// MaxIDLen is the longest job ID, in bytes. A longer ID is refused with
	// an error, not kept under a digest as the keys of ratelimit, counter,
	// lockout and idempotency are: a job's ID comes back as it was given
	// (Enqueue's result, Job.ID, DeadJob.ID) and names the job for Cancel
	// and Requeue, so a digest would hand the caller an ID it never chose.
	MaxIDLen = backend.MaxKeyLen
	// MaxDelay is the longest Delay, and At may be at most MaxDelay from
	// now: a hundred years keeps due times below 2^53 µs (year 2255), the
	// exact range of Lua numbers.
	MaxDelay = 100 * 365 * 24 * time.Hour
	// BatchSize is how many due jobs one take leases, and how many ended
	// leases it takes back, at most: it bounds the time one script call
	// holds Redis.
	BatchSize = 100
)

// Sentinel errors.
var (
	// ErrDuplicate is returned by Enqueue, together with the job's ID, when
	// another Enqueue call added a job with the ID given by the ID option and
	// it is still in the queue (scheduled, ready, in flight or dead). Nothing
	// is changed. A resend of the same call after a lost reply is not a
	// duplicate, and a random ID never gets it.
	ErrDuplicate = errors.New("delayqueue: a job with this ID is already in the queue")
	// ErrNotFound is returned by Cancel when no job has the ID, and by
	// Requeue when no dead job has it.
	ErrNotFound = errors.New("delayqueue: no such job")
	// ErrLeaseLost is the cause of a handler's context cancellation when the
	// consumer can no longer know that it holds the job's lease: an
	// extension found the job taken back, acked or cancelled, or no
	// extension succeeded for a whole Visibility (the store is unreachable).
	// Another consumer may then get the job. It is also reported to OnError
	// when an ack or retry finds the lease gone.
	ErrLeaseLost = errors.New("delayqueue: lease lost")
	// ErrSkipRetry, returned by a handler (or wrapped in its error), moves
	// the job to the dead set at once, whatever MaxAttempts says.
	ErrSkipRetry = errors.New("delayqueue: skip retry")
	// ErrShutdown is the cause of a handler's context cancellation when Run's
	// context ended and the handler did not finish within ShutdownTimeout.
	ErrShutdown = errors.New("delayqueue: shutting down")
)

// Job is one delivery of a job to a handler.
type Job struct {
	// ID is the job's ID: the one given with the ID option, or the random one
	// Enqueue returned.
	ID string
	// Payload is the enqueued payload. The handler owns this copy.
	Payload []byte
	// Attempt is the number of this delivery: 1 the first time, then one
	// more for every retry and for every lease that ended without an ack
	// (a crashed consumer).
	Attempt int
	// DueAt is when this delivery became due, by the store's clock: the
	// enqueued due time, a retry's now + backoff, or the deadline of the
	// lease that ended. The job is never delivered before it.
	DueAt time.Time
}

// Stats are the sizes of a queue's sets, read in one atomic step.
type Stats struct {
	// Scheduled jobs wait for their due time.
	Scheduled int64
	// Ready jobs are due and wait for a free consumer.
	Ready int64
	// InFlight jobs are leased to a consumer whose handler runs (or whose
	// lease has not yet been taken back).
	InFlight int64
	// Dead jobs used up their attempts (or failed with ErrSkipRetry). They
	// stay until Cancel removes them or Requeue schedules them again; see
	// ListDead.
	Dead int64
}

// Handler processes one delivery. Returning nil acks the job (it is
// deleted); an error retries it after Backoff(j.Attempt), or moves it to the
// dead set after MaxAttempts attempts or when the error wraps ErrSkipRetry.
// A panic counts as an error. ctx is cancelled with cause ErrLeaseLost when
// the lease is lost, and with cause ErrShutdown when Run stops before the
// handler finished; the handler should then return soon.
type Handler func(ctx context.Context, j *Job) error

// Option configures a Queue.
type Option func(*config)

type config struct {
	visibility  time.Duration
	maxAttempts int
	backoff     func(attempt int) time.Duration
	concurrency int
	maxPoll     time.Duration
	shutdown    time.Duration
	onError     func(error)
	errs        []error
}

// Visibility sets the lease of a delivered job: how long after the last
// extension a consumer that stopped (crashed, paused, partitioned) keeps the
// job before another consumer may get it. While the handler runs the lease
// is extended every d/3, so d bounds the redelivery delay after a crash, not
// the handler's run time. Default 30s; d must be at least 1ms and a whole
// number of microseconds.
func Visibility(d time.Duration) Option {
	return func(c *config) {
		if d < time.Millisecond || d%time.Microsecond != 0 || d > MaxDelay {
			c.errs = append(c.errs, fmt.Errorf("delayqueue: Visibility must be a whole number of microseconds between 1ms and MaxDelay, got %v", d))
			return
		}
		c.visibility = d
	}
}

// MaxAttempts sets how many deliveries a job gets: after the n-th failed
// attempt (an error, a panic, or a lease that ended without an ack) the job
// moves to the dead set instead of being retried. Default 25; n must be >= 1
// (1: no retries).
func MaxAttempts(n int) Option {
	return func(c *config) {
		if n < 1 {
			c.errs = append(c.errs, fmt.Errorf("delayqueue: MaxAttempts must be >= 1, got %d", n))
			return
		}
		c.maxAttempts = n
	}
}

// Backoff sets the delay before a failed job is delivered again: f(attempt)
// for the attempt that failed (1 after the first failure). Negative delays
// count as 0; delays are rounded up to whole microseconds and capped at
// MaxDelay. Default DefaultBackoff. f must not be nil; it is called from
// Run's goroutines, possibly concurrently.
func Backoff(f func(attempt int) time.Duration) Option {
	return func(c *config) {
		if f == nil {
			c.errs = append(c.errs, errors.New("delayqueue: Backoff must not be nil"))
			return
		}
		c.backoff = f
	}
}

// DefaultBackoff is the default Backoff: 1s after the first failed attempt,
// doubling with every further one, capped at 10 minutes (1s, 2s, 4s, ...,
// 8m32s, 10m, 10m, ...). It has no jitter; wrap it to add some.
func DefaultBackoff(attempt int) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	if attempt > 10 {
		return 10 * time.Minute
	}
	return min(time.Second<<(attempt-1), 10*time.Minute)
}

// Concurrency sets how many handlers one Run executes at once. Default 1; n
// must be between 1 and 10000. While the handlers are fast (under 200µs on
// average), a take also leases jobs beyond the free slots, which start as
// slots free (see Run).
func Concurrency(n int) Option {
	return func(c *config) {
		if n < 1 || n > 10000 {
			c.errs = append(c.errs, fmt.Errorf("delayqueue: Concurrency must be between 1 and 10000, got %d", n))
			return
		}
		c.concurrency = n
	}
}

// MaxPoll sets the longest an idle consumer sleeps before it looks at the
// store again although nothing woke it: the bound on lateness when a
// wake-up message is lost (pub/sub is fire-and-forget) or the Redis client
// has no pub/sub. Default 1s; d must be at least 1ms.
func MaxPoll(d time.Duration) Option {
	return func(c *config) {
		if d < time.Millisecond {
			c.errs = append(c.errs, fmt.Errorf("delayqueue: MaxPoll must be >= 1ms, got %v", d))
			return
		}
		c.maxPoll = d
	}
}

// ShutdownTimeout sets how long Run, once its context ended, waits for
// running handlers to finish (their leases are still extended meanwhile).
// Handlers still running then get their context cancelled with cause
// ErrShutdown and are abandoned: Run returns without acking them, and their
// jobs are delivered again once their leases end. Default 10s; 0 abandons
// running handlers at once; d must be >= 0.
func ShutdownTimeout(d time.Duration) Option {
	return func(c *config) {
		if d < 0 {
			c.errs = append(c.errs, fmt.Errorf("delayqueue: ShutdownTimeout must be >= 0, got %v", d))
			return
		}
		c.shutdown = d
	}
}

// OnError sets the function to which Run reports the errors it recovers
// from: store errors (Run retries with backoff up to MaxPoll) and lost
// leases (wrapping ErrLeaseLost). It is called from Run's goroutines,
// possibly concurrently. Default: log with slog.Default at level Warn. f
// must not be nil; use func(error) {} to discard.
func OnError(f func(error)) Option {
	return func(c *config) {
		if f == nil {
			c.errs = append(c.errs, errors.New("delayqueue: OnError must not be nil"))
			return
		}
		c.onError = f
	}
}

// Queue is a delay queue named name on a store. Queues with the same name on
// the same store are the same queue, in any number of processes: jobs
// enqueued through one are delivered to the Runs of all. A Queue is safe for
// concurrent use. Create it with New; Enqueue and Run are what most callers
// want.
//
// Options (Visibility, MaxAttempts, Backoff, ...) are those of this Queue's
// Runs: give every consumer of a queue the same options.
type Queue struct {
	name string
	cfg  config
	d    driver
}

// driver is the store side of a queue: every method is one atomic step in
// the store, judged by the store's clock.
//
// Every method is safe to run twice with the same arguments, as a client
// does when it resends a call whose reply was lost: the second run acts no
// more and answers as the first (extend: with a later deadline; take: with
// what it finds). The methods that change a job take the ID of the logical
// call (callid.New), which its resends share, and leave a receipt
// for the replay window that a second run answers from; enqueue instead
// knows its job by the random ID drawn for the call, or by the call ID kept
// with a job whose ID the caller chose, for the life of the job.
type driver interface {
	// enqueue adds the jobs that no other call's job has the ID of; call is
	// the call's ID. The IDs of one call differ.
	enqueue(ctx context.Context, jobs []newJob, call string) ([]enqueued, error)
	// cancel removes a job in any state; false when there is none.
	cancel(ctx context.Context, id, call string) (bool, error)
	// take acks a.acks, takes back ended leases (at most
	// BatchSize), leases up to a.n due jobs, and plans the caller's next look
	// (see lua/take.lua).
	// The deliveries' call IDs are a.call + "." + their index: their ack or
	// retry uses it.
	take(ctx context.Context, a takeArgs) (takeResult, error)
	// extend moves the lease deadline of the delivery holding attempt;
	// 0 when it is lost, else the new deadline.
	extend(ctx context.Context, id string, attempt int, visibility int64) (int64, error)
	// retry schedules the job again at now + backoff, or kills it when
	// attempt >= maxAttempts, if the delivery holds its lease.
	retry(ctx context.Context, id string, attempt int, backoff int64, maxAttempts int, call string) (retryOutcome, error)
	stats(ctx context.Context) (Stats, error)
	// listDead returns up to limit dead jobs, first died first.
	listDead(ctx context.Context, limit int) ([]DeadJob, error)
	// requeue schedules a dead job again, due now, attempts reset; false
	// when no dead job has the id.
	requeue(ctx context.Context, id, call string) (bool, error)
	// subscribe returns the channels of published due times (µs, decimal)
	// for every consumer and for runner's alone; nil when the store cannot
	// publish.
	subscribe(ctx context.Context, runner string) (all, own <-chan string, stop func(), err error)
}

// newJob is a job to enqueue.
type newJob struct {
	id      string
	payload []byte
	at      int64 // µs, due time; < 0: delay from now
	delay   int64 // µs
	chosen  bool  // the caller chose id; else it was drawn for this call
}

// enqueued is what enqueue did with a job.
type enqueued struct {
	due int64 // µs
	dup bool  // another call's job has the ID: nothing changed
}

// takeArgs is one take.
type takeArgs struct {
	n           int         // how many jobs to lease at most; 0: none
	spare       int         // the caller's free slots besides n
	runner      string      // the caller's Run; "" when no message can wake it
	call        string      // the call ID
	acks        []*delivery // the deliveries to ack first
	visibility  int64       // µs
	maxAttempts int
	poll        int64 // MaxPoll, µs
	legacy      bool  // also move jobs of an older version's ready set back to scheduled
}

// takeResult is what a take did and saw.
type takeResult struct {
	pumpResult
	Acked      []bool // per ack asked: acked, or false when the lease was lost
	Wake       int64  // µs, store clock: when to look next
	Waker      bool   // the caller is the waker
	Deliveries []*delivery
}

// pumpResult is what a take did and saw besides its claims and its ack.
type pumpResult struct {
	Requeued, Dead int   // jobs whose lease ended, taken back to scheduled, to dead
	More           bool  // due jobs are left, not leased
	NextDue        int64 // µs: head of scheduled (due already when More), -1 when empty
	NextDeadline   int64 // µs: head of inflight, -1 when empty
	Now            int64 // µs: the store's clock
}

// delivery is a claimed job with its lease deadline.
type delivery struct {
	Job
	deadline  int64     // µs, store clock
	claimed   time.Time // local time the take that leased it was sent
	confirmed time.Time // local time the request that set the last known deadline was sent (keepLease)
	call      string    // the delivery's call ID, which its ack or retry uses
}

// MinReplayWindow is the shortest time for which a call that changed a job
// (take, ack, retry, Cancel, Requeue) leaves a receipt, so that a client's
// resend of it after a lost reply answers as the first run: the window is
// the longer of Visibility and MinReplayWindow, by the store's clock.
const MinReplayWindow = 30 * time.Second

type retryOutcome int

const (
	leaseLost retryOutcome = iota
	retried
	killed
)

// New returns the queue named name on b. It fails with an error naming the
// option and value when an option is invalid, when name is empty or longer
// than MaxNameLen, and when b is nil. On Redis every key of the queue shares
// the hash tag {name} (Cluster-safe).
func New(b backend.Backend, name string, opts ...Option) (*Queue, error) {
	if b == nil {
		return nil, errors.New("delayqueue: backend is nil")
	}
	if name == "" {
		return nil, errors.New("delayqueue: name is empty")
	}
	if len(name) > MaxNameLen {
		return nil, fmt.Errorf("delayqueue: name must be at most %d bytes, got %d", MaxNameLen, len(name))
	}
	cfg := config{
		visibility:  30 * time.Second,
		maxAttempts: 25,
		backoff:     DefaultBackoff,
		concurrency: 1,
		maxPoll:     time.Second,
		shutdown:    10 * time.Second,
	}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if len(cfg.errs) > 0 {
		return nil, errors.Join(cfg.errs...)
	}
	if cfg.onError == nil {
		cfg.onError = func(err error) {
			slog.Default().Warn("delayqueue", "queue", name, "err", err)
		}
	}
	q := &Queue{name: name, cfg: cfg}
	window := max(cfg.visibility, MinReplayWindow)
	switch b := b.(type) {
	case *backend.Memory:
		q.d = newMemDriver(unwrap.Memory(b), name, window)
	case *backend.Redis:
		q.d = newRedisDriver(unwrap.Redis(b), name, window)
	default:
		return nil, fmt.Errorf("delayqueue: unsupported backend %T", b)
	}
	return q, nil
}

// Name returns the queue's name.
func (q *Queue) Name() string { return q.name }

// EnqueueOption configures one Enqueue.
type EnqueueOption func(*enqueueConfig)

type enqueueConfig struct {
	delay    time.Duration
	at       time.Time
	id       string
	hasDelay bool
	hasAt    bool
	hasID    bool
}

// Delay makes the job due d after now, by the store's clock (Redis TIME),
// rounded up to a whole microsecond. Default 0: due at once. d must be
// between 0 and MaxDelay; Delay and At exclude each other.
func Delay(d time.Duration) EnqueueOption {
	return func(c *enqueueConfig) { c.delay, c.hasDelay = d, true }
}

// At makes the job due at t, rounded up to a whole microsecond, as judged by
// the store's clock (on Redis the server's, which may differ from the
// caller's). A t in the past makes the job due at once, ordered by t among
// the due jobs. t must be after the Unix epoch and at most MaxDelay after
// the caller's now; Delay and At exclude each other.
func At(t time.Time) EnqueueOption {
	return func(c *enqueueConfig) { c.at, c.hasAt = t, true }
}

// ID gives the job an ID of the caller's choice instead of a random one. A
// job whose ID is already in the queue — scheduled, ready, in flight or dead
// — is not enqueued again: Enqueue then returns the ID and ErrDuplicate, and
// changes nothing. The ID is free again once the job is acked or cancelled.
// id must be non-empty and at most MaxIDLen bytes.
func ID(id string) EnqueueOption {
	return func(c *enqueueConfig) { c.id, c.hasID = id, true }
}

// Enqueue adds a job with the payload (copied; nil means empty), due at once
// or as the options say, and returns its ID: the one given with ID, else a
// random 32-character hex ID.
//
// Errors: an error naming the option and value for a bad option;
// ErrDuplicate (with the ID) when the ID option names a job that another
// Enqueue call added and that is still in the queue; the context's error;
// store errors (wrapped). The client's resends of this call after a lost
// reply are safe (see "Lost replies and resends"). When Enqueue returns a
// store error the job may or may not have been added; to retry safely,
// enqueue with ID and take ErrDuplicate as "already there".
func (q *Queue) Enqueue(ctx context.Context, payload []byte, opts ...EnqueueOption) (string, error) {
	j, err := newJobOf(payload, opts)
	if err != nil {
		return "", err
	}
	if err := ctx.Err(); err != nil {
		return "", err
	}
	out, err := q.d.enqueue(ctx, []newJob{j}, callid.New())
	if err != nil {
		return "", err
	}
	if out[0].dup {
		return j.id, ErrDuplicate
	}
	return j.id, nil
}

// Item is a job for EnqueueBatch: its payload and its Enqueue options.
type Item struct {
	Payload []byte
	Options []EnqueueOption
}

// MaxBatch is the most jobs one EnqueueBatch adds.
const MaxBatch = 1000

// DuplicateError is EnqueueBatch's error when the ID option of some of its
// jobs names a job that another Enqueue or EnqueueBatch call added and that
// is still in the queue. Those jobs were not added; all the others were. It
// wraps ErrDuplicate.
type DuplicateError struct {
	IDs []string // the IDs of the jobs not added, in the batch's order
}

func (e *DuplicateError) Error() string {
	return fmt.Sprintf("delayqueue: %d job IDs are already in the queue: %q", len(e.IDs), e.IDs)
}

// Unwrap returns ErrDuplicate.
func (e *DuplicateError) Unwrap() error { return ErrDuplicate }

// EnqueueBatch adds the jobs of items in one atomic step (one script call on
// Redis), as as many Enqueue calls would, and returns their IDs in the order
// of items. It saves a producer that has many jobs at hand a round trip and
// a script call per job.
//
// Errors: an error naming the item, and the option and value, for a bad
// option, for two items with the same ID option, for an empty batch and for
// more than MaxBatch items (nothing is added); a *DuplicateError when some
// ID options name jobs already in the queue (the other jobs are added, and
// ids holds every ID); the context's error; store errors (wrapped). Resends
// after a lost reply are safe, and a store error leaves the batch added or
// not, as for Enqueue.
func (q *Queue) EnqueueBatch(ctx context.Context, items []Item) (ids []string, err error) {
	if len(items) == 0 || len(items) > MaxBatch {
		return nil, fmt.Errorf("delayqueue: EnqueueBatch takes 1 to %d items, got %d", MaxBatch, len(items))
	}
	jobs := make([]newJob, len(items))
	chosen := make(map[string]int)
	for i, it := range items {
		j, err := newJobOf(it.Payload, it.Options)
		if err != nil {
			return nil, fmt.Errorf("delayqueue: item %d: %w", i, err)
		}
		if j.chosen {
			if k, ok := chosen[j.id]; ok {
				return nil, fmt.Errorf("delayqueue: items %d and %d have the same ID %q", k, i, j.id)
			}
			chosen[j.id] = i
		}
		jobs[i] = j
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	out, err := q.d.enqueue(ctx, jobs, callid.New())
	if err != nil {
		return nil, err
	}
	ids = make([]string, len(jobs))
	var dups []string
	for i, j := range jobs {
		ids[i] = j.id
		if out[i].dup {
			dups = append(dups, j.id)
		}
	}
	if dups != nil {
		return ids, &DuplicateError{IDs: dups}
	}
	return ids, nil
}

// newJobOf checks Enqueue's options and returns the job they describe, with
// its ID drawn when the caller chose none.
func newJobOf(payload []byte, opts []EnqueueOption) (newJob, error) {
	var c enqueueConfig
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	j := newJob{payload: payload, at: -1}
	switch {
	case c.hasAt && c.hasDelay:
		return j, fmt.Errorf("delayqueue: At (%v) and Delay (%v) exclude each other", c.at, c.delay)
	case c.hasDelay:
		if c.delay < 0 || c.delay > MaxDelay {
			return j, fmt.Errorf("delayqueue: Delay must be between 0 and MaxDelay (876000h), got %v", c.delay)
		}
		j.delay = ceilMicros(c.delay)
	case c.hasAt:
		if !c.at.After(time.Unix(0, 0)) || c.at.After(time.Now().Add(MaxDelay)) {
			return j, fmt.Errorf("delayqueue: At must be after the Unix epoch and at most MaxDelay from now, got %v", c.at)
		}
		j.at = c.at.UnixMicro()
		if c.at.After(time.UnixMicro(j.at)) {
			j.at++
		}
	}
	if c.hasID {
		if c.id == "" {
			return j, errors.New("delayqueue: ID is empty")
		}
		if len(c.id) > MaxIDLen {
			return j, fmt.Errorf("delayqueue: ID must be at most %d bytes, got %d", MaxIDLen, len(c.id))
		}
		j.id, j.chosen = c.id, true
	} else {
		j.id = newID() // drawn for this call: a job with it is this call's
	}
	return j, nil
}

// Cancel removes the job with the ID, whatever its state, so that it is not
// delivered (again). A handler running it is not interrupted, but its
// outcome is discarded (its ack or retry finds the lease gone). Cancel also
// removes dead jobs. Errors: ErrNotFound when no job has the ID (never
// enqueued, acked, or cancelled already); an error for an empty or too long
// ID; the context's error; store errors.
func (q *Queue) Cancel(ctx context.Context, id string) error {
	if id == "" {
		return errors.New("delayqueue: ID is empty")
	}
	if len(id) > MaxIDLen {
		return fmt.Errorf("delayqueue: ID must be at most %d bytes, got %d", MaxIDLen, len(id))
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	ok, err := q.d.cancel(ctx, id, callid.New())
	if err != nil {
		return err
	}
	if !ok {
		return ErrNotFound
	}
	return nil
}

// DeadJob is a job in the dead set.
type DeadJob struct {
	// Job is the job as its last delivery saw it: Attempt is the number of
	// attempts it used, DueAt when the last one was due.
	Job
	// DiedAt is when it moved to the dead set, by the store's clock.
	DiedAt time.Time
}

// MaxList is the most dead jobs ListDead returns in one call.
const MaxList = 1000

// ListDead returns up to limit jobs of the dead set, those that died first
// first (ties by ID), with their payloads; it changes nothing. limit must be
// between 1 and MaxList. Requeue gives a dead job another run; Cancel
// deletes it. On Memory it sorts the whole dead set, O(n log n).
//
// Errors: an error naming limit when it is out of range; the context's
// error; store errors.
func (q *Queue) ListDead(ctx context.Context, limit int) ([]DeadJob, error) {
	if limit < 1 || limit > MaxList {
		return nil, fmt.Errorf("delayqueue: ListDead limit must be between 1 and %d, got %d", MaxList, limit)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return q.d.listDead(ctx, limit)
}

// Requeue moves a dead job back to the scheduled set, due now (by the
// store's clock), with its attempt count reset, so that it gets MaxAttempts
// new attempts. Errors: ErrNotFound when no dead job has the ID (jobs in
// other states are not touched); an error for an empty or too long ID; the
// context's error; store errors.
func (q *Queue) Requeue(ctx context.Context, id string) error {
	if id == "" {
		return errors.New("delayqueue: ID is empty")
	}
	if len(id) > MaxIDLen {
		return fmt.Errorf("delayqueue: ID must be at most %d bytes, got %d", MaxIDLen, len(id))
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	ok, err := q.d.requeue(ctx, id, callid.New())
	if err != nil {
		return err
	}
	if !ok {
		return ErrNotFound
	}
	return nil
}

// Stats returns the number of jobs in each state, read in one atomic step
// (one script call on Redis; on Memory it counts the due jobs one by one).
// Errors: the context's error; store errors.
func (q *Queue) Stats(ctx context.Context) (Stats, error) {
	if err := ctx.Err(); err != nil {
		return Stats{}, err
	}
	return q.d.stats(ctx)
}

// ceilMicros converts d to µs, rounding up.
func ceilMicros(d time.Duration) int64 {
	us := d.Microseconds()
	if time.Duration(us)*time.Microsecond < d {
		us++
	}
	return us
}

func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand panics instead)
	return hex.EncodeToString(b[:])
}
