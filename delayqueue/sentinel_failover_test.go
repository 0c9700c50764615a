package delayqueue_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/delayqueue"
	"github.com/floodgate-dev/floodgate/internal/testenv"
)

// TestNothingLostAcrossSentinelFailover is TestNothingLostAcrossClusterFailover
// (issue 14, "a failover is not an outage") on a Sentinel group: a master,
// its replica and a Sentinel with down-after-milliseconds 1000, reached
// through a go-redis FailoverClient with default settings (only the master
// name, the Sentinel addresses and ContextTimeoutEnabled). Jobs due from 1 s
// to 2 s ahead are enqueued and replicated (the replica's slave_repl_offset
// reaches the master's master_repl_offset), a consumer runs, and the master
// is SIGKILLed when about half of them are due. More jobs are enqueued from
// the kill until a second after the Sentinel's switch (as SENTINEL
// GET-MASTER-ADDR-BY-NAME reports it); those may fail. Every job whose
// Enqueue returned nil must be handled at least once within failoverDrain of
// the switch, and the queue must drain to empty Stats.
func TestNothingLostAcrossSentinelFailover(t *testing.T) {
	const (
		n             = 200
		lease         = 2 * time.Second // redelivery of jobs whose ack was lost
		failoverDrain = 10 * time.Second
	)
	s := testenv.NewSentinel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	fc := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:            s.MasterName,
		SentinelAddrs:         s.SentinelAddrs,
		ContextTimeoutEnabled: true,
	})
	t.Cleanup(func() { fc.Close() })
	b := backend.NewRedis(fc, backend.WithPrefix(uniquePrefix()))
	t.Cleanup(func() { b.Close() })
	var storeErrs atomic.Int64
	q, err := delayqueue.New(b, "sfo-jobs",
		delayqueue.Concurrency(4), delayqueue.Visibility(lease), delayqueue.MaxPoll(100*time.Millisecond),
		delayqueue.Backoff(func(int) time.Duration { return 10 * time.Millisecond }),
		delayqueue.OnError(func(error) { storeErrs.Add(1) })) // failover errors are expected
	if err != nil {
		t.Fatal(err)
	}

	// Jobs due from 1 s to 2 s from now, every one replicated before the
	// kill.
	var (
		mu       sync.Mutex
		accepted = map[string]bool{}      // IDs whose Enqueue returned nil
		seen     = map[string]int{}       // handled, by ID
		first    = map[string]time.Time{} // first handled, by ID
	)
	start := time.Now()
	var enqWG sync.WaitGroup
	errs := make(chan error, n)
	for w := range 8 {
		enqWG.Go(func() {
			for i := w; i < n; i += 8 {
				id := fmt.Sprint("a", i)
				due := start.Add(time.Second + time.Duration(i)*5*time.Millisecond)
				if _, err := q.Enqueue(ctx, []byte(id), delayqueue.ID(id), delayqueue.At(due)); err != nil {
					errs <- err
				}
			}
		})
	}
	enqWG.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	for i := range n {
		accepted[fmt.Sprint("a", i)] = true
	}
	enqueued := time.Since(start)
	// WAIT on a fresh connection would prove nothing about the writes made
	// on the client's pooled ones; the offsets do.
	if err := testenv.WaitReplicated(ctx, s.Master); err != nil {
		t.Fatal(err)
	}
	t.Logf("master %s, replica %s; %d jobs enqueued in %v and replicated %v after the start",
		s.Master.Addr, s.Replica.Addr, n, enqueued.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))

	stopRun := runQueue(t, q, func(_ context.Context, j *delayqueue.Job) error {
		if string(j.Payload) != j.ID {
			return fmt.Errorf("job %s: payload %q", j.ID, j.Payload)
		}
		time.Sleep(5 * time.Millisecond)
		mu.Lock()
		seen[j.ID]++
		if _, ok := first[j.ID]; !ok {
			first[j.ID] = time.Now()
		}
		mu.Unlock()
		return nil
	})
	// Kill when about half of the jobs are due: some handled, some in
	// flight, the rest scheduled.
	time.Sleep(time.Until(start.Add(1500 * time.Millisecond)))
	mu.Lock()
	before := len(seen)
	mu.Unlock()

	if err := s.Master.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	// Enqueue from the kill until a second after the switch.
	var (
		enqDone          = make(chan struct{})
		stopEnq          = make(chan struct{})
		enqOK, enqFailed int
		lastEnqFail      time.Time
	)
	go func() {
		defer close(enqDone)
		for i := 0; ; i++ {
			select {
			case <-stopEnq:
				return
			default:
			}
			id := fmt.Sprint("b", i)
			cctx, ccancel := context.WithTimeout(ctx, time.Second)
			_, err := q.Enqueue(cctx, []byte(id), delayqueue.ID(id))
			ccancel()
			mu.Lock()
			if err == nil {
				accepted[id] = true
				enqOK++
			} else {
				enqFailed++
				lastEnqFail = time.Now()
			}
			mu.Unlock()
			time.Sleep(10 * time.Millisecond)
		}
	}()
	var switched time.Time
	for {
		addr, err := s.MasterAddr(ctx)
		if err == nil && addr == s.Replica.Addr {
			switched = time.Now()
			break
		}
		if ctx.Err() != nil {
			close(stopEnq)
			<-enqDone
			t.Fatalf("the Sentinel did not switch to %s: last answer %q, %v%s", s.Replica.Addr, addr, err, s.Sentinels[0].LogTail())
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(time.Second)
	close(stopEnq)
	<-enqDone
	mu.Lock()
	lastFail := "none"
	if enqFailed > 0 {
		lastFail = "the last " + relTo(lastEnqFail, switched, "the switch")
	}
	t.Logf("Sentinel switched to %s %v after SIGKILL of %s (down-after-milliseconds 1000); %d of %d jobs handled before the kill; after it %d enqueued, %d Enqueue calls failed (%s)",
		s.Replica.Addr, switched.Sub(killed).Round(time.Millisecond), s.Master.Addr, before, n, enqOK, enqFailed, lastFail)
	total := len(accepted)
	mu.Unlock()

	deadline := switched.Add(failoverDrain)
	for {
		mu.Lock()
		var missing []string
		for id := range accepted {
			if seen[id] == 0 {
				missing = append(missing, id)
			}
		}
		mu.Unlock()
		if len(missing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			if len(missing) > 10 {
				missing = missing[:10]
			}
			t.Fatalf("%d of %d accepted jobs not handled %v after the switch, e.g. %v", len(missing), total, failoverDrain, missing)
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	// lastA: the last of the jobs enqueued before the kill to be handled;
	// firstAfter: the first handling after the switch; handled: the last
	// accepted job's first handling.
	var lastA, firstAfter, handled time.Time
	redelivered := 0
	for id := range accepted {
		f := first[id]
		if f.After(handled) {
			handled = f
		}
		if id[0] == 'a' && f.After(lastA) {
			lastA = f
		}
		if f.After(switched) && (firstAfter.IsZero() || f.Before(firstAfter)) {
			firstAfter = f
		}
		redelivered += seen[id] - 1
	}
	mu.Unlock()
	t.Logf("all %d accepted jobs handled, the last %s: the first handling after the switch %v after it, the last of the jobs enqueued before the kill %s; %d redeliveries; %d store errors reported to OnError",
		total, relTo(handled, switched, "the switch"), firstAfter.Sub(switched).Round(time.Millisecond),
		relTo(lastA, switched, "the switch"), redelivered, storeErrs.Load())

	// The queue drains: acks lost in the failover are redelivered after the
	// lease and acked then.
	waitFor(t, 2*lease+5*time.Second, "the queue to be empty", func() bool {
		st, err := q.Stats(ctx)
		return err == nil && st == delayqueue.Stats{}
	})
	t.Logf("queue empty %v after the switch", time.Since(switched).Round(time.Millisecond))
	stopRun()
}

// relTo describes t relative to ref, named what: "1.2s after the switch" or
// "188ms before the switch".
func relTo(t, ref time.Time, what string) string {
	d := t.Sub(ref).Round(time.Millisecond)
	if d < 0 {
		return fmt.Sprintf("%v before %s", -d, what)
	}
	return fmt.Sprintf("%v after %s", d, what)
}
