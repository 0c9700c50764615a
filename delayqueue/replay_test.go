package delayqueue_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/delayqueue"
	"github.com/floodgate-dev/floodgate/internal/backendtest"
	"github.com/floodgate-dev/floodgate/internal/testenv"
)

// Issue 13, "Safe when replies are lost": a script whose reply is lost still
// ran, and go-redis resends it (after an error reading the reply, or after
// ReadTimeout, up to MaxRetries times), so every script may run twice. The
// step tables run on a Redis where every script call runs twice and the
// caller gets the second reply, and must come out as everywhere else; the
// tests below lose real replies through a proxy.

// TestConformanceReplaying runs the step tables with every script run twice.
// The table of pump batches is left out: a resent pump moves the next batch,
// which is what a pump is for.
func TestConformanceReplaying(t *testing.T) {
	for _, tb := range tables {
		if tb.name == "pumps move at most 100 per call" {
			continue
		}
		t.Run(tb.name, func(t *testing.T) {
			clk := clock.NewFake(t0)
			b, rp := backendtest.Replaying(t, clk)
			q, err := delayqueue.New(b, "q", tb.opts...)
			if err != nil {
				t.Fatal(err)
			}
			runSteps(t, q, clk, tb.steps, true)
			if rp.Replays() == 0 {
				t.Fatal("nothing was replayed")
			}
		})
	}
}

// TestReplayedCalls: on every backend, memory included, the same call run
// twice answers the same and acts once, and another call does not pass for
// it.
func TestReplayedCalls(t *testing.T) {
	for _, bk := range allBackends() {
		t.Run(bk.name, func(t *testing.T) {
			t.Parallel()
			clk := clock.NewFake(t0)
			q, err := delayqueue.New(bk.make(t, clk)(), "q", delayqueue.MaxAttempts(2), delayqueue.Visibility(10*sec))
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			check := func(step string, got, want any, err error) {
				t.Helper()
				if err != nil || got != want {
					t.Fatalf("%s: %v %v, want %v", step, got, err, want)
				}
			}
			stats := func(step string, want delayqueue.Stats) {
				t.Helper()
				got, err := q.Stats(ctx)
				check(step+": stats", got, want, err)
			}

			// Enqueue: a drawn ID is the call's; a chosen one is the call's
			// when the call ID matches.
			for run := range 2 {
				dup, err := q.EnqueueCall(ctx, "drawn", "p", "")
				check("enqueue with a drawn ID, run "+string(rune('1'+run)), dup, false, err)
				dup, err = q.EnqueueCall(ctx, "chosen", "p", "call-e1")
				check("enqueue with a chosen ID, run "+string(rune('1'+run)), dup, false, err)
			}
			dup, err := q.EnqueueCall(ctx, "chosen", "p", "call-e2")
			check("another Enqueue of the chosen ID", dup, true, err)
			if _, err := q.Enqueue(ctx, nil, delayqueue.ID("chosen")); !errors.Is(err, delayqueue.ErrDuplicate) {
				t.Fatalf("Enqueue of the chosen ID: %v, want ErrDuplicate", err)
			}
			stats("after enqueues", delayqueue.Stats{Ready: 2})

			// Claim twice: the same delivery, one job leased.
			if _, err := q.Pump(ctx); err != nil {
				t.Fatal(err)
			}
			d1, err := q.ClaimCall(ctx, "call-c1")
			if err != nil || d1 == nil {
				t.Fatalf("claim: %v %v", d1, err)
			}
			d2, err := q.ClaimCall(ctx, "call-c1")
			if err != nil || d2 == nil || d2.ID != d1.ID || d2.Attempt != d1.Attempt || d2.Deadline() != d1.Deadline() ||
				string(d2.Payload) != "p" || !d2.DueAt.Equal(d1.DueAt) {
				t.Fatalf("claim run twice: %+v then %+v %v, want the same delivery", d1, d2, err)
			}
			stats("after a claim run twice", delayqueue.Stats{Ready: 1, InFlight: 1})

			// Extend twice: held both times.
			for range 2 {
				ok, err := q.Extend(ctx, d1)
				check("extend", ok, true, err)
			}

			// Fail (retry) twice: retried both times, scheduled once.
			for range 2 {
				out, err := q.Fail(ctx, d1, errors.New("boom"))
				check("retry", out, delayqueue.Retried, err)
			}
			stats("after a retry run twice", delayqueue.Stats{Scheduled: 1, Ready: 1})

			// Ack twice: acked both times; another delivery's ack of the
			// job is still refused.
			d3, err := q.ClaimCall(ctx, "call-c2")
			if err != nil || d3 == nil || d3.ID == d1.ID {
				t.Fatalf("claim the other job: %v %v", d3, err)
			}
			for range 2 {
				ok, err := q.Ack(ctx, d3)
				check("ack", ok, true, err)
			}
			stats("after an ack run twice", delayqueue.Stats{Scheduled: 1})
			if dup, err := q.EnqueueCall(ctx, "extra", "p", ""); dup || err != nil {
				t.Fatal(dup, err)
			}
			if _, err := q.Pump(ctx); err != nil {
				t.Fatal(err)
			}
			if d, err := q.ClaimCall(ctx, "call-c2"); d != nil || err != nil {
				t.Fatalf("claim run again after its delivery was acked: %v %v, want nothing", d, err)
			}
			stats("the late claim leased nothing", delayqueue.Stats{Scheduled: 1, Ready: 1})
			if ok, err := q.CancelCall(ctx, "extra", "call-x0"); !ok || err != nil {
				t.Fatal(ok, err)
			}

			// Cancel twice: removed both times, and the second run does not
			// touch a job enqueued with the ID since.
			ok, err := q.CancelCall(ctx, d1.ID, "call-x1")
			check("cancel", ok, true, err)
			if dup, err := q.EnqueueCall(ctx, d1.ID, "again", "call-e3"); dup || err != nil {
				t.Fatalf("enqueue after cancel: %v %v", dup, err)
			}
			ok, err = q.CancelCall(ctx, d1.ID, "call-x1")
			check("cancel run again", ok, true, err)
			stats("a replayed cancel left the new job alone", delayqueue.Stats{Ready: 1})
			ok, err = q.CancelCall(ctx, d1.ID, "call-x2")
			check("another cancel", ok, true, err)
			ok, err = q.CancelCall(ctx, d1.ID, "call-x3")
			check("a cancel of nothing", ok, false, err)

			// Retry into the dead set twice, then Requeue twice.
			if dup, err := q.EnqueueCall(ctx, "dies", "p", ""); dup || err != nil {
				t.Fatal(dup, err)
			}
			if _, err := q.Pump(ctx); err != nil {
				t.Fatal(err)
			}
			d4, err := q.ClaimCall(ctx, "call-c3")
			if err != nil || d4 == nil || d4.ID != "dies" {
				t.Fatalf("claim: %v %v", d4, err)
			}
			for range 2 {
				out, err := q.Fail(ctx, d4, delayqueue.ErrSkipRetry)
				check("kill", out, delayqueue.Killed, err)
			}
			stats("after a kill run twice", delayqueue.Stats{Dead: 1})
			for range 2 {
				ok, err := q.RequeueCall(ctx, "dies", "call-q1")
				check("requeue", ok, true, err)
			}
			ok, err = q.RequeueCall(ctx, "dies", "call-q2")
			check("another requeue", ok, false, err)
			stats("after a requeue run twice", delayqueue.Stats{Ready: 1})

			// Receipts last max(Visibility, MinReplayWindow), by the store's
			// clock: after that a resend is judged as a new call.
			clk.Advance(delayqueue.MinReplayWindow)
			ok, err = q.Ack(ctx, d3)
			check("ack after the replay window", ok, false, err)
		})
	}
}

// proxied returns a queue whose Redis client talks through a fault proxy and
// resends a command whose reply was lost (MaxRetries), with its scripts
// cached already (one job through every step), so that the next lost reply
// is a call's own.
func proxied(t *testing.T, opts ...delayqueue.Option) (*delayqueue.Queue, *testenv.Proxy) {
	t.Helper()
	p := testenv.NewProxy(t, testenv.SharedRedis(t).Addr)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: 2, ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	q, err := delayqueue.New(backendtest.NewRedis(t, rdb, backend.WithPrefix(uniquePrefix())), "q",
		append([]delayqueue.Option{delayqueue.MaxAttempts(5)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, id := range []string{"warm-1", "warm-2"} {
		if _, err := q.Enqueue(ctx, nil, delayqueue.ID(id)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := q.Pump(ctx); err != nil {
		t.Fatal(err)
	}
	d, err := q.Claim(ctx)
	if err != nil || d == nil {
		t.Fatal(d, err)
	}
	if _, err := q.Extend(ctx, d); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Fail(ctx, d, errors.New("warm-up")); err != nil {
		t.Fatal(err)
	}
	if _, err := q.Stats(ctx); err != nil {
		t.Fatal(err)
	}
	if err := q.Requeue(ctx, "none"); !errors.Is(err, delayqueue.ErrNotFound) {
		t.Fatal(err)
	}
	if d, err := q.Claim(ctx); err != nil || d == nil {
		t.Fatal(d, err)
	} else if _, err := q.Ack(ctx, d); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{"warm-1", "warm-2"} {
		_ = q.Cancel(ctx, id)
	}
	return q, p
}

// TestEnqueueLostReply reproduces defect 4 of issue 13: Enqueue without the
// ID option whose reply is lost is resent, and the resend found the job it
// had just added and returned ErrDuplicate (a caller that enqueued again
// made a real duplicate). Now the resend is the same job: one job, no error.
// With the ID option a resend succeeds too, while another Enqueue with the
// ID still gets ErrDuplicate.
func TestEnqueueLostReply(t *testing.T) {
	q, p := proxied(t)
	ctx := context.Background()
	p.LoseNextReplies(1)
	id, err := q.Enqueue(ctx, []byte("mail"))
	if err != nil || id == "" || p.Lost() != 1 {
		t.Fatalf("Enqueue whose reply was lost: %q %v (lost %d); want its ID and no error", id, err, p.Lost())
	}
	p.LoseNextReplies(1)
	if got, err := q.Enqueue(ctx, []byte("order"), delayqueue.ID("order-42")); got != "order-42" || err != nil || p.Lost() != 2 {
		t.Fatalf("Enqueue with ID whose reply was lost: %q %v (lost %d); want order-42, nil", got, err, p.Lost())
	}
	if _, err := q.Enqueue(ctx, nil, delayqueue.ID("order-42")); !errors.Is(err, delayqueue.ErrDuplicate) {
		t.Fatalf("another Enqueue of order-42: %v, want ErrDuplicate", err)
	}
	if s, err := q.Stats(ctx); err != nil || s != (delayqueue.Stats{Ready: 2}) {
		t.Fatalf("stats %+v %v, want 2 ready jobs", s, err)
	}
}

// TestLostRepliesOfDeliveries: the replies of a claim, an extension, an ack,
// a retry, a cancel and a requeue are lost and the calls resent; each answers
// as its first run did and acts once.
func TestLostRepliesOfDeliveries(t *testing.T) {
	q, p := proxied(t)
	ctx := context.Background()
	lost := 0
	lose := func() { p.LoseNextReplies(1); lost++ }
	sawLost := func(step string) {
		t.Helper()
		if p.Lost() != lost {
			t.Fatalf("%s: %d replies lost, want %d", step, p.Lost(), lost)
		}
	}
	for _, id := range []string{"a", "b"} {
		if _, err := q.Enqueue(ctx, []byte(id), delayqueue.ID(id)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := q.Pump(ctx); err != nil {
		t.Fatal(err)
	}
	lose()
	d, err := q.Claim(ctx)
	sawLost("claim")
	if err != nil || d == nil || d.ID != "a" || d.Attempt != 1 {
		t.Fatalf("Claim whose reply was lost: %+v %v; want a, attempt 1", d, err)
	}
	if s, _ := q.Stats(ctx); s != (delayqueue.Stats{Ready: 1, InFlight: 1}) {
		t.Fatalf("after the resent claim: %+v, want one job in flight, one ready", s)
	}
	lose()
	if ok, err := q.Extend(ctx, d); !ok || err != nil {
		t.Fatalf("Extend whose reply was lost: %v %v, want held", ok, err)
	}
	sawLost("extend")
	lose()
	if out, err := q.Fail(ctx, d, errors.New("boom")); out != delayqueue.Retried || err != nil {
		t.Fatalf("retry whose reply was lost: %v %v, want Retried (before: lease lost)", out, err)
	}
	sawLost("retry")
	d2, err := q.Claim(ctx)
	if err != nil || d2 == nil || d2.ID != "b" {
		t.Fatalf("Claim b: %+v %v", d2, err)
	}
	lose()
	if ok, err := q.Ack(ctx, d2); !ok || err != nil {
		t.Fatalf("ack whose reply was lost: %v %v, want acked (before: lease lost)", ok, err)
	}
	sawLost("ack")
	lose()
	if err := q.Cancel(ctx, "a"); err != nil {
		t.Fatalf("Cancel whose reply was lost: %v, want nil (before: ErrNotFound)", err)
	}
	sawLost("cancel")
	if s, _ := q.Stats(ctx); s != (delayqueue.Stats{}) {
		t.Fatalf("after all: %+v, want an empty queue", s)
	}
}

// TestRunLostReplies: a consumer whose store calls lose replies now and then
// still handles every job once (no duplicate from a resent claim, no job left
// leased to nobody) and reports no lost lease: with handlers of 1ms, each
// job's ack and take is a call of its own, and with instant handlers, whose
// takes lease jobs beyond the free slots (a few calls for all the jobs).
func TestRunLostReplies(t *testing.T) {
	for _, c := range []struct {
		name    string
		handler time.Duration
		minLost int
	}{{"handlers of 1ms", time.Millisecond, 10}, {"instant handlers", 0, 1}} {
		t.Run(c.name, func(t *testing.T) { runLostReplies(t, c.handler, c.minLost) })
	}
}

func runLostReplies(t *testing.T, handler time.Duration, minLost int) {
	var mu sync.Mutex
	var errs []error
	q, p := proxied(t, delayqueue.OnError(func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	}))
	ctx := context.Background()
	const n = 20
	for i := range n {
		if _, err := q.Enqueue(ctx, []byte{byte(i)}); err != nil {
			t.Fatal(err)
		}
	}
	handled := make(chan string, 2*n)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = q.Run(runCtx, func(_ context.Context, j *delayqueue.Job) error {
			time.Sleep(handler)
			p.LoseNextReplies(1) // the next reply: this job's ack, or a take
			handled <- j.ID
			return nil
		})
	}()
	seen := map[string]int{}
	deadline := time.After(20 * time.Second)
	for len(seen) < n {
		select {
		case id := <-handled:
			seen[id]++
		case <-deadline:
			t.Fatalf("%d of %d jobs handled in 20s", len(seen), n)
		}
	}
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
	if p.Lost() < minLost {
		t.Fatalf("only %d replies lost, want %d at least", p.Lost(), minLost)
	}
	mu.Lock()
	defer mu.Unlock()
	for _, err := range errs {
		if errors.Is(err, delayqueue.ErrLeaseLost) {
			t.Errorf("reported: %v", err)
		}
	}
}

// TestEnqueueAcrossStall is defect 4 as reported (a 6s stall, go-redis's
// 5s ReadTimeout), scaled down: Redis (here the proxy in front of it) stalls
// for 1.3s, longer than the client's 1s read timeout (the resend's connection
// handshake must end within its own 1s); go-redis resends
// Enqueue on a new connection, and when the stall ends both copies run.
// Enqueue without ID must return its ID and no error, with one job.
func TestEnqueueAcrossStall(t *testing.T) {
	p := testenv.NewProxy(t, testenv.SharedRedis(t).Addr)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ReadTimeout: time.Second, MaxRetries: 3})
	t.Cleanup(func() { rdb.Close() })
	q, err := delayqueue.New(backendtest.NewRedis(t, rdb, backend.WithPrefix(uniquePrefix())), "q")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := q.Enqueue(ctx, nil); err != nil { // the script cached
		t.Fatal(err)
	}
	p.Stall()
	time.AfterFunc(1300*time.Millisecond, p.Resume)
	start := time.Now()
	id, err := q.Enqueue(ctx, []byte("mail"))
	if err != nil || id == "" {
		t.Fatalf("Enqueue across a stall: %q %v; want its ID and no error", id, err)
	}
	if time.Since(start) < time.Second {
		t.Fatalf("Enqueue returned after %v: the stall did not hold it", time.Since(start))
	}
	if s, err := q.Stats(ctx); err != nil || s != (delayqueue.Stats{Ready: 2}) {
		t.Fatalf("stats %+v %v, want 2 ready jobs", s, err)
	}
}
