package delayqueue_test

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/delayqueue"
)

// TestTakeBatch: one take leases several jobs, due first; run again (a
// client's resend) it returns the same deliveries that still hold their
// lease and leases nothing more; an ack leases the next job in the same
// call, and a resend of that call acks once and returns the same delivery.
func TestTakeBatch(t *testing.T) {
	for _, bk := range allBackends() {
		t.Run(bk.name, func(t *testing.T) {
			ctx := context.Background()
			clk := clock.NewFake(t0)
			q, err := delayqueue.New(bk.make(t, clk)(), "q")
			if err != nil {
				t.Fatal(err)
			}
			for i := range 5 {
				id := "j" + strconv.Itoa(i)
				if _, err := q.Enqueue(ctx, []byte("p:"+id), delayqueue.ID(id), delayqueue.At(t0.Add(time.Duration(5-i)*time.Millisecond))); err != nil {
					t.Fatal(err)
				}
			}
			clk.Advance(time.Second)
			ids := func(res delayqueue.TakeResult) string {
				s := ""
				for _, d := range res.Deliveries {
					s += d.ID + ":" + strconv.Itoa(d.Attempt) + " "
				}
				return s
			}
			first, err := q.TakeCall(ctx, 3, 0, "", nil, "call-t1")
			if err != nil {
				t.Fatal(err)
			}
			if got, want := ids(first), "j4:1 j3:1 j2:1 "; got != want || !first.More {
				t.Fatalf("take 3: %q more %v, want %q and more", got, first.More, want)
			}
			calls := map[string]bool{}
			for _, d := range first.Deliveries {
				if calls[d.Call()] || string(d.Payload) != "p:"+d.ID {
					t.Fatalf("delivery %q: call %q repeated or payload %q", d.ID, d.Call(), d.Payload)
				}
				calls[d.Call()] = true
			}
			again, err := q.TakeCall(ctx, 3, 0, "", nil, "call-t1")
			if err != nil || ids(again) != ids(first) || again.Deliveries[0].Deadline() != first.Deliveries[0].Deadline() {
				t.Fatalf("take run twice: %q %v, want %q", ids(again), err, ids(first))
			}
			if ok, err := q.Ack(ctx, first.Deliveries[1]); !ok || err != nil {
				t.Fatal("ack", ok, err)
			}
			again, err = q.TakeCall(ctx, 3, 0, "", nil, "call-t1")
			if got, want := ids(again), "j4:1 j2:1 "; got != want || err != nil {
				t.Fatalf("take run again after an ack: %q %v, want %q", got, err, want)
			}
			stats := func(what string, want delayqueue.Stats) {
				t.Helper()
				if got, err := q.Stats(ctx); got != want || err != nil {
					t.Fatalf("%s: stats %+v %v, want %+v", what, got, err, want)
				}
			}
			stats("after the replays", delayqueue.Stats{Ready: 2, InFlight: 2})

			// Ack and take in one call, run twice.
			for run := range 2 {
				res, err := q.TakeCall(ctx, 1, 0, "", first.Deliveries[0], "call-t2")
				if err != nil || !res.AckedOne() || ids(res) != "j1:1 " {
					t.Fatalf("ack and take, run %d: acked %v %q %v, want acked 1 \"j1:1 \"", run+1, res.Acked, ids(res), err)
				}
			}
			stats("after ack and take twice", delayqueue.Stats{Ready: 1, InFlight: 2})
			// The delivery's ack again, in another take: answered from its
			// receipt, and the take leases the last job.
			res, err := q.Take(ctx, 1, 0, "", first.Deliveries[0])
			if err != nil || !res.AckedOne() || ids(res) != "j0:1 " || res.More {
				t.Fatalf("ack again: acked %v %q more %v %v, want acked 1 \"j0:1 \" and no more", res.Acked, ids(res), res.More, err)
			}
			stats("at the end", delayqueue.Stats{InFlight: 3})
		})
	}
}

// TestWaker: of the idle consumers of a queue one is the waker, which plans
// to look at the next due time; the others sleep until its role ends,
// MaxPoll after it took or renewed it. A job due before every other is
// published to the waker alone; a waker that takes its last free slot hands
// the role on, publishing the next due time for all.
func TestWaker(t *testing.T) {
	for _, bk := range allBackends() {
		t.Run(bk.name, func(t *testing.T) {
			ctx := context.Background()
			clk := clock.NewFake(t0)
			q, err := delayqueue.New(bk.make(t, clk)(), "q", delayqueue.MaxPoll(time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			allA, ownA, stopA, err := q.Subscribe(ctx, "A")
			if err != nil {
				t.Fatal(err)
			}
			defer stopA()
			_, ownB, stopB, err := q.Subscribe(ctx, "B")
			if err != nil {
				t.Fatal(err)
			}
			defer stopB()
			us := func(d time.Duration) int64 { return t0.Add(d).UnixMicro() }
			take := func(who string, n, spare int, wantWaker bool, wantWake time.Duration) delayqueue.TakeResult {
				t.Helper()
				res, err := q.Take(ctx, n, spare, who, nil)
				if err != nil || res.Waker != wantWaker || res.Wake != us(wantWake) {
					t.Fatalf("take by %s: waker %v wake %v %v, want waker %v wake %v", who, res.Waker,
						time.UnixMicro(res.Wake).Sub(t0), err, wantWaker, wantWake)
				}
				return res
			}
			hear := func(c <-chan string, what string, want time.Duration) {
				t.Helper()
				select {
				case msg := <-c:
					if msg != strconv.FormatInt(us(want), 10) {
						t.Fatalf("%s: heard %s, want %d", what, msg, us(want))
					}
				case <-time.After(10 * time.Second):
					t.Fatalf("%s: heard nothing", what)
				}
			}
			quiet := func(c <-chan string, what string) {
				t.Helper()
				select {
				case msg := <-c:
					t.Fatalf("%s: heard %s, want nothing", what, msg)
				default:
				}
			}
			if _, err := q.Enqueue(ctx, nil, delayqueue.ID("late"), delayqueue.Delay(10*time.Second)); err != nil {
				t.Fatal(err)
			}
			hear(allA, "the first job, no waker yet", 10*time.Second)

			take("A", 1, 0, true, 10*time.Second)
			take("B", 1, 0, false, time.Minute)   // until A's role ends
			take("A", 1, 3, true, 10*time.Second) // still the waker: nothing changes

			// An earlier job wakes A alone, and moves its plan.
			if _, err := q.Enqueue(ctx, nil, delayqueue.ID("early"), delayqueue.Delay(5*time.Second)); err != nil {
				t.Fatal(err)
			}
			hear(ownA, "an earlier job", 5*time.Second)
			quiet(allA, "an earlier job, on the channel of all")
			quiet(ownB, "an earlier job, on B's channel")
			take("B", 1, 0, false, time.Minute)
			// A later job wakes no one.
			if _, err := q.Enqueue(ctx, nil, delayqueue.ID("later"), delayqueue.Delay(20*time.Second)); err != nil {
				t.Fatal(err)
			}

			// A takes the early job with its last slot: B is told of the
			// next due time, and becomes the waker.
			clk.Advance(5 * time.Second)
			res := take("A", 1, 0, false, 10*time.Second)
			if len(res.Deliveries) != 1 || res.Deliveries[0].ID != "early" {
				t.Fatalf("A took %v, want the early job", res.Deliveries)
			}
			hear(allA, "the waker resigned", 10*time.Second)
			quiet(ownA, "after the later job")
			take("B", 1, 0, true, 10*time.Second)
			take("A", 1, 0, false, 5*time.Second+time.Minute)

			// A waker that does not come back is replaced once its role
			// ended, MaxPoll after it took it (B's ends at 1m5s).
			clk.Advance(5*time.Second + time.Minute)
			res = take("A", 3, 1, true, 10*time.Second+time.Minute+30*time.Second)
			if len(res.Deliveries) != 3 {
				t.Fatalf("A took %v, want the late, the later and the early job (its lease ended)", res.Deliveries)
			}
		})
	}
}

// TestOneWakerPerDueTime: four consumers of one queue, idle between jobs
// due at different times, do not all look for each job: their takes stay
// at two per job at most (the one that leases it, and its ack), where every
// consumer waking for every due time would make five.
func TestOneWakerPerDueTime(t *testing.T) {
	for _, bk := range threeBackends() {
		t.Run(bk.name, func(t *testing.T) {
			const jobs, consumers = 40, 4
			mk := bk.make(t, nil)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var (
				mu   sync.Mutex
				seen = map[string]int{}
				all  = make(chan struct{})
			)
			var wakes []func() int64
			var wg sync.WaitGroup
			for range consumers {
				q, err := delayqueue.New(mk(), "q", delayqueue.Concurrency(2))
				if err != nil {
					t.Fatal(err)
				}
				wakes = append(wakes, q.CountTakes().Load)
				wg.Add(1)
				go func() {
					defer wg.Done()
					_ = q.Run(ctx, func(_ context.Context, j *delayqueue.Job) error {
						mu.Lock()
						defer mu.Unlock()
						seen[j.ID]++
						if len(seen) == jobs && seen[j.ID] == 1 {
							close(all)
						}
						return nil
					})
				}()
			}
			producer, err := delayqueue.New(mk(), "q")
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now().Add(500 * time.Millisecond)
			for i := range jobs {
				if _, err := producer.Enqueue(ctx, nil, delayqueue.At(start.Add(time.Duration(i)*25*time.Millisecond))); err != nil {
					t.Fatal(err)
				}
			}
			select {
			case <-all:
			case <-time.After(60 * time.Second):
				t.Fatalf("delivered %d jobs of %d", len(seen), jobs)
			}
			elapsed := time.Since(start) + 500*time.Millisecond
			cancel()
			wg.Wait()
			var total int64
			for _, w := range wakes {
				total += w()
			}
			// Besides two takes per job: each consumer's first take, one when
			// it stops, and one per MaxPoll (1s) of the run and of the
			// waker's role, twice for slack.
			polls := int64(consumers * (2 + 2*(int(elapsed/time.Second)+2)))
			if total > 2*jobs+polls {
				t.Errorf("%d takes for %d jobs (bound %d): consumers wake together", total, jobs, 2*jobs+polls)
			}
			t.Logf("%d takes for %d jobs in %v", total, jobs, elapsed.Round(time.Millisecond))
		})
	}
}

// TestLegacyReady: jobs that a consumer of version 0.9 moved to its ready
// set, which this version does not use, count as ready and are delivered by
// a Run of this version.
func TestLegacyReady(t *testing.T) {
	for _, bk := range allBackends()[1:] {
		t.Run(bk.name, func(t *testing.T) {
			ctx := context.Background()
			q, err := delayqueue.New(bk.make(t, nil)(), "q")
			if err != nil {
				t.Fatal(err)
			}
			due := time.Now().Add(-time.Second).Truncate(time.Microsecond)
			if err := q.AddLegacyReady(ctx, "old", "p", due); err != nil {
				t.Fatal(err)
			}
			if _, err := q.Enqueue(ctx, []byte("q"), delayqueue.ID("new")); err != nil {
				t.Fatal(err)
			}
			if st, err := q.Stats(ctx); err != nil || st != (delayqueue.Stats{Ready: 2}) {
				t.Fatalf("stats %+v %v, want 2 ready", st, err)
			}
			rctx, cancel := context.WithCancel(ctx)
			done := make(chan struct{})
			defer func() { cancel(); <-done }()
			got := make(chan string, 2)
			go func() {
				defer close(done)
				_ = q.Run(rctx, func(_ context.Context, j *delayqueue.Job) error {
					got <- j.ID + "=" + string(j.Payload) + "@" + strconv.FormatBool(j.DueAt.Equal(due))
					return nil
				})
			}()
			want := map[string]bool{"old=p@true": true, "new=q@false": true}
			for range 2 {
				select {
				case g := <-got:
					if !want[g] {
						t.Fatalf("delivered %q, want one of %v", g, want)
					}
					delete(want, g)
				case <-time.After(20 * time.Second):
					t.Fatalf("not delivered: %v", want)
				}
			}
		})
	}
}

// TestDeferredAcks: with jobs due less than a few ms apart, acks ride on the
// loop's next take; none is lost, none reports a lost lease, and a Run that
// stops right after its last delivery sends the acks it still holds.
func TestDeferredAcks(t *testing.T) {
	for _, bk := range threeBackends() {
		t.Run(bk.name, func(t *testing.T) {
			const jobs = 200
			ctx := context.Background()
			mk := bk.make(t, nil)
			var errs []error
			var mu sync.Mutex
			q, err := delayqueue.New(mk(), "q", delayqueue.Concurrency(4), delayqueue.OnError(func(err error) {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			}))
			if err != nil {
				t.Fatal(err)
			}
			takes := q.CountTakes()
			start := time.Now().Add(300 * time.Millisecond)
			var items []delayqueue.Item
			for i := range jobs {
				items = append(items, delayqueue.Item{Options: []delayqueue.EnqueueOption{
					delayqueue.At(start.Add(time.Duration(i) * 500 * time.Microsecond))}})
			}
			if _, err := q.EnqueueBatch(ctx, items); err != nil {
				t.Fatal(err)
			}
			rctx, cancel := context.WithCancel(ctx)
			defer cancel()
			seen := map[string]int{}
			done := make(chan error)
			go func() {
				done <- q.Run(rctx, func(_ context.Context, j *delayqueue.Job) error {
					mu.Lock()
					defer mu.Unlock()
					if seen[j.ID]++; len(seen) == jobs {
						cancel()
					}
					return nil
				})
			}()
			select {
			case err := <-done:
				if err != nil {
					t.Fatal(err)
				}
			case <-time.After(60 * time.Second):
				t.Fatalf("Run did not end; %d jobs delivered", len(seen))
			}
			mu.Lock()
			defer mu.Unlock()
			if len(seen) != jobs || len(errs) > 0 {
				t.Fatalf("%d of %d jobs delivered; errors %v", len(seen), jobs, errs)
			}
			if st, err := q.Stats(ctx); err != nil || st != (delayqueue.Stats{}) {
				t.Fatalf("after Run: stats %+v %v, want every job acked", st, err)
			}
			t.Logf("%d takes for %d jobs", takes.Load(), jobs)
		})
	}
}

// TestBusyWakerHandsOn: a waker whose every slot is busy when a job comes
// due gives the role up, and an idle consumer takes the job, long before the
// idle one's own look (MaxPoll, a minute here) would have found it.
func TestBusyWakerHandsOn(t *testing.T) {
	for _, bk := range threeBackends() {
		t.Run(bk.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			mk := bk.make(t, nil)
			newQ := func() *delayqueue.Queue {
				q, err := delayqueue.New(mk(), "q", delayqueue.MaxPoll(time.Minute), delayqueue.ShutdownTimeout(0))
				if err != nil {
					t.Fatal(err)
				}
				return q
			}
			a, b := newQ(), newQ()
			if _, err := a.Enqueue(ctx, nil, delayqueue.ID("long")); err != nil {
				t.Fatal(err)
			}
			if _, err := a.Enqueue(ctx, nil, delayqueue.ID("next"), delayqueue.Delay(time.Second)); err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			defer func() { cancel(); wg.Wait() }()
			started := make(chan struct{})
			got := make(chan string, 2)
			wg.Go(func() {
				_ = a.Run(ctx, func(ctx context.Context, j *delayqueue.Job) error {
					if j.ID == "long" {
						close(started)
						<-ctx.Done() // holds A's only slot
						return ctx.Err()
					}
					got <- "a:" + j.ID
					return nil
				})
			})
			select {
			case <-started:
			case <-time.After(20 * time.Second):
				t.Fatal("A did not start the long job")
			}
			wg.Go(func() {
				_ = b.Run(ctx, func(_ context.Context, j *delayqueue.Job) error {
					got <- "b:" + j.ID
					return nil
				})
			})
			select {
			case g := <-got:
				if g != "b:next" {
					t.Fatalf("delivered %s, want the next job to B", g)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the next job was not delivered: the busy waker kept its role")
			}
		})
	}
}

// TestTakesThroughFaults: jobs due a millisecond apart, so that takes lease
// several jobs and carry deferred acks, and two backlogs due at once, which
// instant handlers lease beyond their free slots, through a store that is
// slow (5 ms a reply), then stalled past the client's read timeout, then
// loses replies: every job is handled once, every ack lands (the queue ends
// empty), and no lease is reported lost.
func TestTakesThroughFaults(t *testing.T) {
	var mu sync.Mutex
	var errs []error
	q, p := proxied(t, delayqueue.Concurrency(4), delayqueue.OnError(func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}))
	ctx := context.Background()
	const n = 300
	start := time.Now().Add(300 * time.Millisecond)
	var items []delayqueue.Item
	for i := range n {
		due := start.Add(time.Duration(i) * time.Millisecond)
		switch {
		case i < 60:
			due = start // a backlog before the faults
		case i >= 240:
			due = start.Add(460 * time.Millisecond) // and one during the stall
		}
		items = append(items, delayqueue.Item{Options: []delayqueue.EnqueueOption{delayqueue.At(due)}})
	}
	if _, err := q.EnqueueBatch(ctx, items); err != nil {
		t.Fatal(err)
	}
	handled := make(chan string, 2*n)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = q.Run(runCtx, func(_ context.Context, j *delayqueue.Job) error {
			handled <- j.ID
			return nil
		})
	}()
	faults := make(chan struct{})
	go func() {
		defer close(faults)
		time.Sleep(350 * time.Millisecond)
		p.SetDelay(5 * time.Millisecond) // slow
		time.Sleep(100 * time.Millisecond)
		p.SetDelay(0)
		p.Stall() // paused: calls wait, none is lost
		time.Sleep(700 * time.Millisecond)
		p.Resume()
		p.LoseNextReplies(5) // lost replies, resent
	}()
	seen := map[string]int{}
	deadline := time.After(60 * time.Second)
	for len(seen) < n {
		select {
		case id := <-handled:
			seen[id]++
		case <-deadline:
			t.Fatalf("%d of %d jobs handled in 60s", len(seen), n)
		}
	}
	<-faults
	stop()
	<-done
	for id, c := range seen {
		if c != 1 {
			t.Errorf("job %s handled %d times", id, c)
		}
	}
	if s, err := q.Stats(ctx); err != nil || s != (delayqueue.Stats{}) {
		t.Fatalf("after the run: %+v %v, want an empty queue", s, err)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, err := range errs {
		if errors.Is(err, delayqueue.ErrLeaseLost) {
			t.Errorf("reported: %v", err)
		}
	}
}
