package delayqueue_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/delayqueue"
)

// runQueue runs q.Run in a goroutine until the test ends (or stop is
// called), and fails the test if Run returns an error.
func runQueue(t *testing.T, q *delayqueue.Queue, h delayqueue.Handler) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- q.Run(ctx, h) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Run: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	return stop
}

// waitFor polls cond every 5ms until it holds, failing the test after d.
func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// errorLog collects what Run reports to OnError.
type errorLog struct {
	mu   sync.Mutex
	errs []error
}

func (l *errorLog) add(err error) {
	l.mu.Lock()
	l.errs = append(l.errs, err)
	l.mu.Unlock()
}

func (l *errorLog) count(target error) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, e := range l.errs {
		if target == nil || errors.Is(e, target) {
			n++
		}
	}
	return n
}

// TestNeverBeforeDue: on the real clock (Redis TIME, on the same machine as
// the test), no job is delivered before its DueAt, DueAt is never before the
// requested due time, and every job is delivered exactly once.
func TestNeverBeforeDue(t *testing.T) {
	for _, bk := range threeBackends() {
		t.Run(bk.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			q, err := delayqueue.New(bk.make(t, nil)(), "due", delayqueue.Concurrency(4))
			if err != nil {
				t.Fatal(err)
			}
			const n = 150
			var (
				mu        sync.Mutex
				earliest  = map[string]time.Time{} // the due time each job asked for, at the latest
				delivered = map[string]int{}
				early     []string
			)
			var total atomic.Int64
			runQueue(t, q, func(_ context.Context, j *delayqueue.Job) error {
				now := time.Now()
				mu.Lock()
				defer mu.Unlock()
				if now.Before(j.DueAt) {
					early = append(early, fmt.Sprintf("%s delivered at %v, %v before DueAt", j.ID, now, j.DueAt.Sub(now)))
				}
				// Due times are whole microseconds: the store's now is truncated.
				if w, ok := earliest[j.ID]; ok && j.DueAt.Before(w.Truncate(time.Microsecond)) {
					early = append(early, fmt.Sprintf("%s has DueAt %v, before the requested %v", j.ID, j.DueAt, w))
				}
				delivered[j.ID]++
				total.Add(1)
				return nil
			})
			rng := rand.New(rand.NewPCG(1, 2))
			for i := range n {
				id := fmt.Sprintf("job-%d", i)
				d := time.Duration(rng.Int64N(int64(300 * time.Millisecond)))
				mu.Lock()
				if i%2 == 0 {
					earliest[id] = time.Now().Add(d)
					mu.Unlock()
					_, err = q.Enqueue(ctx, nil, delayqueue.ID(id), delayqueue.Delay(d))
				} else {
					at := time.Now().Add(d)
					earliest[id] = at
					mu.Unlock()
					_, err = q.Enqueue(ctx, nil, delayqueue.ID(id), delayqueue.At(at))
				}
				if err != nil {
					t.Fatal(err)
				}
				if i%10 == 0 {
					time.Sleep(5 * time.Millisecond)
				}
			}
			waitFor(t, 10*time.Second, "every job", func() bool { return total.Load() >= n })
			time.Sleep(20 * time.Millisecond)
			mu.Lock()
			defer mu.Unlock()
			for _, e := range early {
				t.Error(e)
			}
			for id := range earliest {
				if delivered[id] != 1 {
					t.Errorf("%s delivered %d times, want once", id, delivered[id])
				}
			}
		})
	}
}

// TestConcurrency: Concurrency(n) runs n handlers at once, never more.
func TestConcurrency(t *testing.T) {
	for _, bk := range threeBackends() {
		t.Run(bk.name, func(t *testing.T) {
			t.Parallel()
			const n = 4
			q, err := delayqueue.New(bk.make(t, nil)(), "conc", delayqueue.Concurrency(n))
			if err != nil {
				t.Fatal(err)
			}
			var active, peak, done atomic.Int64
			all := make(chan struct{})
			var once sync.Once
			runQueue(t, q, func(ctx context.Context, j *delayqueue.Job) error {
				a := active.Add(1)
				defer active.Add(-1)
				for p := peak.Load(); a > p && !peak.CompareAndSwap(p, a); p = peak.Load() {
				}
				if a == n {
					once.Do(func() { close(all) })
				}
				// Hold until n handlers ran at once (or give up after 5s).
				select {
				case <-all:
				case <-time.After(5 * time.Second):
				}
				done.Add(1)
				return nil
			})
			for i := range 3 * n {
				if _, err := q.Enqueue(context.Background(), []byte(fmt.Sprint(i))); err != nil {
					t.Fatal(err)
				}
			}
			waitFor(t, 10*time.Second, "every job", func() bool { return done.Load() == 3*n })
			if p := peak.Load(); p != n {
				t.Errorf("at most %d handlers ran at once, want exactly Concurrency = %d", p, n)
			}
		})
	}
}

// TestTwoRunsShareAQueue: two consumers (separate clients, as two processes
// would have) on one queue: every job is delivered exactly once.
func TestTwoRunsShareAQueue(t *testing.T) {
	for _, bk := range threeBackends() {
		t.Run(bk.name, func(t *testing.T) {
			t.Parallel()
			store := bk.make(t, nil)
			var queues []*delayqueue.Queue
			for range 2 {
				q, err := delayqueue.New(store(), "shared", delayqueue.Concurrency(3))
				if err != nil {
					t.Fatal(err)
				}
				queues = append(queues, q)
			}
			const n = 200
			var (
				mu    sync.Mutex
				count = map[string]int{}
				by    [2]int
				total atomic.Int64
			)
			for i, q := range queues {
				runQueue(t, q, func(_ context.Context, j *delayqueue.Job) error {
					mu.Lock()
					count[j.ID]++
					by[i]++
					mu.Unlock()
					time.Sleep(time.Millisecond)
					total.Add(1)
					return nil
				})
			}
			ctx := context.Background()
			for i := range n {
				if _, err := queues[i%2].Enqueue(ctx, nil, delayqueue.ID(fmt.Sprint(i)), delayqueue.Delay(time.Duration(i%20)*time.Millisecond)); err != nil {
					t.Fatal(err)
				}
			}
			waitFor(t, 10*time.Second, "every job", func() bool { return total.Load() >= n })
			// Once every job is acked none can be delivered again: wait for
			// that (acks follow the handlers), then count.
			waitFor(t, 10*time.Second, "an empty queue", func() bool {
				s, err := queues[0].Stats(ctx)
				return err == nil && s == (delayqueue.Stats{})
			})
			mu.Lock()
			defer mu.Unlock()
			for i := range n {
				if c := count[fmt.Sprint(i)]; c != 1 {
					t.Errorf("job %d delivered %d times, want once", i, c)
				}
			}
			t.Logf("deliveries per consumer: %v", by)
		})
	}
}

// TestLeaseExtendedWhileHandlerRuns: a handler that runs for over three
// Visibilities keeps its job: the lease is extended, so a second consumer
// (pumping often) never gets it, and the job is acked after one delivery.
// The Visibility is 1s, so that the extensions, made every third of it, hold
// on a busy machine (with 300ms, a Cluster extend under -race and load once
// missed its deadline and the lease was lost, as it should have been).
func TestLeaseExtendedWhileHandlerRuns(t *testing.T) {
	for _, bk := range threeBackends() {
		t.Run(bk.name, func(t *testing.T) {
			t.Parallel()
			store := bk.make(t, nil)
			var log errorLog
			var deliveries, finished atomic.Int64
			h := func(ctx context.Context, j *delayqueue.Job) error {
				deliveries.Add(1)
				select {
				case <-time.After(3500 * time.Millisecond):
				case <-ctx.Done():
					return context.Cause(ctx)
				}
				finished.Add(1)
				return nil
			}
			var queues []*delayqueue.Queue
			for range 2 {
				q, err := delayqueue.New(store(), "long", delayqueue.Visibility(time.Second),
					delayqueue.MaxPoll(20*time.Millisecond), delayqueue.OnError(log.add))
				if err != nil {
					t.Fatal(err)
				}
				queues = append(queues, q)
				runQueue(t, q, h)
			}
			if _, err := queues[0].Enqueue(context.Background(), []byte("slow")); err != nil {
				t.Fatal(err)
			}
			waitFor(t, 10*time.Second, "the handler to finish", func() bool { return finished.Load() == 1 })
			waitFor(t, 10*time.Second, "the ack: an empty queue", func() bool {
				s, err := queues[1].Stats(context.Background())
				return err == nil && s == (delayqueue.Stats{})
			})
			if d := deliveries.Load(); d != 1 {
				t.Errorf("%d deliveries, want 1: the lease was not kept", d)
			}
			if n := log.count(nil); n != 0 {
				t.Errorf("OnError got %d errors: %v", n, log.errs)
			}
		})
	}
}

// TestRetriesThroughRun: errors and panics retry after Backoff, with
// increasing Attempt; after MaxAttempts the job is dead; ErrSkipRetry kills
// at once.
func TestRetriesThroughRun(t *testing.T) {
	for _, bk := range threeBackends() {
		t.Run(bk.name, func(t *testing.T) {
			t.Parallel()
			q, err := delayqueue.New(bk.make(t, nil)(), "retry", delayqueue.MaxAttempts(3), delayqueue.Concurrency(2),
				delayqueue.Backoff(func(attempt int) time.Duration { return time.Duration(attempt) * 10 * time.Millisecond }))
			if err != nil {
				t.Fatal(err)
			}
			var (
				mu       sync.Mutex
				attempts = map[string][]int{}
				acked    atomic.Int64
			)
			runQueue(t, q, func(_ context.Context, j *delayqueue.Job) error {
				mu.Lock()
				attempts[j.ID] = append(attempts[j.ID], j.Attempt)
				mu.Unlock()
				switch {
				case j.ID == "flaky" && j.Attempt < 3:
					return errBoom
				case j.ID == "panics" && j.Attempt == 1:
					panic("handler bug")
				case j.ID == "bad":
					return errBoom
				case j.ID == "poison":
					return fmt.Errorf("cannot parse: %w", delayqueue.ErrSkipRetry)
				}
				acked.Add(1)
				return nil
			})
			ctx := context.Background()
			for _, id := range []string{"flaky", "panics", "bad", "poison"} {
				if _, err := q.Enqueue(ctx, nil, delayqueue.ID(id)); err != nil {
					t.Fatal(err)
				}
			}
			waitFor(t, 10*time.Second, "two acks and two dead jobs", func() bool {
				s, err := q.Stats(ctx)
				return err == nil && acked.Load() == 2 && s == delayqueue.Stats{Dead: 2}
			})
			mu.Lock()
			defer mu.Unlock()
			want := map[string]string{"flaky": "[1 2 3]", "panics": "[1 2]", "bad": "[1 2 3]", "poison": "[1]"}
			for id, w := range want {
				if got := fmt.Sprint(attempts[id]); got != w {
					t.Errorf("%s: attempts %s, want %s", id, got, w)
				}
			}
		})
	}
}

// TestWakeOnEnqueue: an idle consumer sleeps until the next due time, not on
// a fast poll, and an Enqueue of an earlier job wakes it: with MaxPoll at a
// minute and the only other job an hour away, the new job is delivered
// within seconds only because of the wake-up message.
func TestWakeOnEnqueue(t *testing.T) {
	for _, bk := range allBackends() {
		t.Run(bk.name, func(t *testing.T) {
			t.Parallel()
			q, err := delayqueue.New(bk.make(t, nil)(), "wake", delayqueue.MaxPoll(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if _, err := q.Enqueue(ctx, nil, delayqueue.ID("later"), delayqueue.Delay(time.Hour)); err != nil {
				t.Fatal(err)
			}
			got := make(chan string, 2)
			runQueue(t, q, func(_ context.Context, j *delayqueue.Job) error {
				got <- j.ID
				return nil
			})
			time.Sleep(300 * time.Millisecond) // the consumer is asleep (and subscribed)
			for _, id := range []string{"now", "soon"} {
				var opt delayqueue.EnqueueOption
				if id == "soon" {
					opt = delayqueue.Delay(100 * time.Millisecond)
				}
				if _, err := q.Enqueue(ctx, nil, delayqueue.ID(id), opt); err != nil {
					t.Fatal(err)
				}
				select {
				case g := <-got:
					if g != id {
						t.Fatalf("delivered %q, want %q", g, id)
					}
				case <-time.After(10 * time.Second):
					t.Fatalf("%q not delivered within 10s: the consumer was not woken", id)
				}
			}
			waitFor(t, 5*time.Second, "only the hour-away job left", func() bool {
				s, err := q.Stats(ctx)
				return err == nil && s == delayqueue.Stats{Scheduled: 1}
			})
		})
	}
}

// TestShutdown: when Run's context ends, a running handler may finish within
// ShutdownTimeout and its job is acked; with ShutdownTimeout(0) the handler's
// context is cancelled with ErrShutdown at once, Run returns, and the job
// stays in flight for redelivery.
func TestShutdown(t *testing.T) {
	for _, bk := range threeBackends()[:2] {
		t.Run(bk.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			store := bk.make(t, nil)

			q, err := delayqueue.New(store(), "graceful", delayqueue.ShutdownTimeout(5*time.Second))
			if err != nil {
				t.Fatal(err)
			}
			started, finished := make(chan struct{}), make(chan struct{})
			stop := runQueue(t, q, func(ctx context.Context, _ *delayqueue.Job) error {
				close(started)
				time.Sleep(200 * time.Millisecond)
				defer close(finished)
				return ctx.Err()
			})
			if _, err := q.Enqueue(ctx, nil); err != nil {
				t.Fatal(err)
			}
			<-started
			stop()
			select {
			case <-finished:
			default:
				t.Fatal("Run returned before its handler finished")
			}
			if s, err := q.Stats(ctx); err != nil || s != (delayqueue.Stats{}) {
				t.Errorf("graceful: Stats %+v %v, want the job acked", s, err)
			}

			q, err = delayqueue.New(store(), "abrupt", delayqueue.ShutdownTimeout(0))
			if err != nil {
				t.Fatal(err)
			}
			started = make(chan struct{})
			cause := make(chan error, 1)
			stop = runQueue(t, q, func(ctx context.Context, _ *delayqueue.Job) error {
				close(started)
				<-ctx.Done()
				cause <- context.Cause(ctx)
				return ctx.Err()
			})
			if _, err := q.Enqueue(ctx, nil); err != nil {
				t.Fatal(err)
			}
			<-started
			stop()
			if c := <-cause; !errors.Is(c, delayqueue.ErrShutdown) {
				t.Errorf("abandoned handler's cause %v, want ErrShutdown", c)
			}
			time.Sleep(50 * time.Millisecond)
			if s, err := q.Stats(ctx); err != nil || s != (delayqueue.Stats{InFlight: 1}) {
				t.Errorf("abrupt: Stats %+v %v, want the job still in flight", s, err)
			}
		})
	}
}

// TestLeaseLostCancelsHandler: when the job is cancelled while its handler
// runs, the next lease extension finds it gone and cancels the handler's
// context with ErrLeaseLost, which is reported to OnError.
func TestLeaseLostCancelsHandler(t *testing.T) {
	for _, bk := range threeBackends()[:2] {
		t.Run(bk.name, func(t *testing.T) {
			t.Parallel()
			var log errorLog
			q, err := delayqueue.New(bk.make(t, nil)(), "lost", delayqueue.Visibility(150*time.Millisecond), delayqueue.OnError(log.add))
			if err != nil {
				t.Fatal(err)
			}
			started := make(chan struct{})
			cause := make(chan error, 1)
			runQueue(t, q, func(ctx context.Context, _ *delayqueue.Job) error {
				close(started)
				select {
				case <-ctx.Done():
					cause <- context.Cause(ctx)
				case <-time.After(5 * time.Second):
					cause <- nil
				}
				return nil
			})
			ctx := context.Background()
			if _, err := q.Enqueue(ctx, nil, delayqueue.ID("j")); err != nil {
				t.Fatal(err)
			}
			<-started
			if err := q.Cancel(ctx, "j"); err != nil {
				t.Fatal(err)
			}
			if c := <-cause; !errors.Is(c, delayqueue.ErrLeaseLost) {
				t.Errorf("handler's cause %v, want ErrLeaseLost", c)
			}
			waitFor(t, 5*time.Second, "the report", func() bool { return log.count(delayqueue.ErrLeaseLost) == 1 })
		})
	}
}

// TestPrefetch: while handlers are fast, a take leases jobs beyond its free
// slots, as many as the slots start within 200µs, which run as slots free:
// one consumer of concurrency 2 delivers 200 due jobs, each once, never more
// than 2 at once, in fewer takes than leasing one job per free slot needs
// (100). Slow handlers, or none measured yet, lease nothing beyond the free
// slots.
func TestPrefetch(t *testing.T) {
	for _, c := range []struct {
		handled time.Duration
		want    int
	}{
		{0, 0},                      // no handler returned yet
		{150 * time.Microsecond, 2}, // the slots start 2 within 200µs
		{50 * time.Microsecond, 8},  // 8
		{time.Microsecond, 98},      // 400, but a take leases BatchSize at most
		{200 * time.Microsecond, 0}, // slow handlers: one job per free slot
		{time.Second, 0},
	} {
		if got := delayqueue.Extra(2, 2, c.handled); got != c.want {
			t.Errorf("concurrency 2, handlers of %v: %d leased beyond 2 free slots, want %d", c.handled, got, c.want)
		}
	}

	for _, bk := range threeBackends() {
		t.Run(bk.name, func(t *testing.T) {
			t.Parallel()
			const jobs, n = 200, 2
			q, err := delayqueue.New(bk.make(t, nil)(), "prefetch", delayqueue.Concurrency(n))
			if err != nil {
				t.Fatal(err)
			}
			enqueueNumbered(t, q, jobs)
			takes := q.CountTakes()
			var active, peak, done atomic.Int64
			var mu sync.Mutex
			seen := map[string]int{}
			runQueue(t, q, func(ctx context.Context, j *delayqueue.Job) error {
				a := active.Add(1)
				defer active.Add(-1)
				for p := peak.Load(); a > p && !peak.CompareAndSwap(p, a); p = peak.Load() {
				}
				mu.Lock()
				seen[j.ID]++
				mu.Unlock()
				done.Add(1)
				return nil
			})
			waitFor(t, 20*time.Second, "every job", func() bool { return done.Load() >= jobs })
			mu.Lock()
			defer mu.Unlock()
			for id, k := range seen {
				if k != 1 {
					t.Errorf("job %s delivered %d times", id, k)
				}
			}
			if len(seen) != jobs {
				t.Errorf("%d jobs delivered, want %d", len(seen), jobs)
			}
			if p := peak.Load(); p > n {
				t.Errorf("%d handlers ran at once, over Concurrency %d", p, n)
			}
			t.Logf("%d jobs in %d takes", jobs, takes.Load())
			if k := takes.Load(); k >= jobs/n {
				t.Errorf("%d takes for %d jobs at concurrency %d: no take leased beyond its free slots", k, jobs, n)
			}

			// A Run that stops runs the jobs it leased beyond its slots in
			// its shutdown grace: none is left leased.
			q2, err := delayqueue.New(bk.make(t, nil)(), "prefetch-stop", delayqueue.Concurrency(n))
			if err != nil {
				t.Fatal(err)
			}
			enqueueNumbered(t, q2, jobs)
			var ran atomic.Int64
			stop := runQueue(t, q2, func(ctx context.Context, j *delayqueue.Job) error {
				ran.Add(1)
				return nil
			})
			waitFor(t, 20*time.Second, "60 jobs", func() bool { return ran.Load() >= 60 })
			stop()
			st, err := q2.Stats(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if st.InFlight != 0 || st.Scheduled+st.Ready+ran.Load() != jobs {
				t.Errorf("after Run stopped, %d jobs ran and the queue holds %+v; want none in flight and the other %d waiting", ran.Load(), st, jobs-ran.Load())
			}
		})
	}
}

// TestPrefetchAbandoned: jobs leased beyond the free slots and not started
// when ShutdownTimeout passes (the one slot's handler hangs) are not lost:
// their leases end, and another Run delivers each of them, while no job
// handled before is delivered again.
func TestPrefetchAbandoned(t *testing.T) {
	for _, bk := range threeBackends() {
		t.Run(bk.name, func(t *testing.T) {
			t.Parallel()
			const jobs = 200
			mk := bk.make(t, nil)
			opts := []delayqueue.Option{delayqueue.Concurrency(1), delayqueue.Visibility(time.Second), delayqueue.ShutdownTimeout(10 * time.Millisecond)}
			q1, err := delayqueue.New(mk(), "prefetch-abandoned", opts...)
			if err != nil {
				t.Fatal(err)
			}
			enqueueNumbered(t, q1, jobs)
			var mu sync.Mutex
			first := map[string]bool{}
			hung := make(chan struct{})
			var once sync.Once
			stop := runQueue(t, q1, func(ctx context.Context, j *delayqueue.Job) error {
				mu.Lock()
				k := len(first)
				if k < 20 {
					first[j.ID] = true
				}
				mu.Unlock()
				if k < 20 {
					return nil // fast: the takes lease beyond the one slot
				}
				once.Do(func() { close(hung) })
				<-ctx.Done() // hangs until Run gives up on it
				return ctx.Err()
			})
			select {
			case <-hung:
			case <-time.After(20 * time.Second):
				t.Fatal("the handler never hung")
			}
			st, err := q1.Stats(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if st.InFlight < 2 {
				t.Fatalf("%+v: want jobs leased beyond the one slot", st)
			}
			stop()

			q2, err := delayqueue.New(mk(), "prefetch-abandoned", opts...)
			if err != nil {
				t.Fatal(err)
			}
			var done atomic.Int64
			second := map[string]int{}
			runQueue(t, q2, func(ctx context.Context, j *delayqueue.Job) error {
				mu.Lock()
				second[j.ID]++
				mu.Unlock()
				done.Add(1)
				return nil
			})
			waitFor(t, 30*time.Second, "the other jobs", func() bool { return done.Load() >= jobs-20 })
			mu.Lock()
			defer mu.Unlock()
			for id := range second {
				if first[id] {
					t.Errorf("job %s, handled by the first Run, delivered again", id)
				}
			}
			if len(second) != jobs-20 {
				t.Errorf("the second Run delivered %d jobs, want the %d the first did not finish", len(second), jobs-20)
			}
		})
	}
}

// enqueueNumbered enqueues n jobs due now, their payloads 0 to n-1, in one
// batch.
func enqueueNumbered(t *testing.T, q *delayqueue.Queue, n int) {
	t.Helper()
	items := make([]delayqueue.Item, n)
	for i := range items {
		items[i] = delayqueue.Item{Payload: []byte(fmt.Sprint(i))}
	}
	if _, err := q.EnqueueBatch(context.Background(), items); err != nil {
		t.Fatal(err)
	}
}
