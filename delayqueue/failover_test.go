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
	"github.com/floodgate-dev/floodgate/internal/unwrap"
)

// TestNothingLostAcrossClusterFailover is issue 14's "a failover is not an
// outage" for the delay queue: on a three-master, three-replica Cluster
// (cluster-node-timeout 1 s) through a go-redis ClusterClient with default
// settings (only Addrs and ContextTimeoutEnabled), jobs due over the next
// second are enqueued and replicated, a consumer runs, and the master of the
// queue's hash slot is SIGKILLed. More jobs are enqueued from the kill on;
// those written before the promotion may fail. Every job whose Enqueue
// returned nil must be handled at least once, within failoverDrain of the
// promotion.
func TestNothingLostAcrossClusterFailover(t *testing.T) {
	c := testenv.NewClusterWith(t, testenv.WithReplicas(1), testenv.WithNodeTimeout(time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs, ContextTimeoutEnabled: true})
	t.Cleanup(func() { cc.Close() })
	b, err := backend.NewRedis(cc, backend.WithPrefix(uniquePrefix()))
	if err != nil {
		t.Fatal(err)
	}
	bs := unwrap.Redis(b)
	t.Cleanup(func() { b.Close() })
	const name = "fo-jobs" // the queue's keys carry the hash tag {fo-jobs}
	victim, err := c.MasterOf(ctx, bs.Slot(name))
	if err != nil {
		t.Fatal(err)
	}
	failoverScenario(ctx, t, b, failover{
		queue:      name,
		event:      "the promotion",
		replicated: func() error { return c.WaitReplicated(ctx, victim) },
		kill:       victim.Kill,
		wait:       func() error { return c.WaitPromoted(ctx, victim) },
		what:       fmt.Sprintf("queue %q on slot %d, master %s", name, bs.Slot(name), victim.Addr),
	})
}

// failover is how failoverScenario's store fails over.
type failover struct {
	queue      string
	event      string       // what ends the failover: "the promotion", "the switch"
	replicated func() error // waits until the master's writes reached its replica
	kill       func() error // kills the master
	wait       func() error // returns once the failover has happened
	what       string       // the store, for the log
}

// failoverScenario is the delay queue's failover test on b: jobs due over
// the next second are enqueued and replicated, a consumer runs, the master
// is killed, and more jobs are enqueued from the kill until a second after
// the failover (those may fail). Every job whose Enqueue returned nil must be
// handled at least once within failoverDrain of the failover, and the queue
// must drain to empty Stats.
func failoverScenario(ctx context.Context, t *testing.T, b backend.Backend, f failover) {
	t.Helper()
	const (
		n             = 200
		lease         = 2 * time.Second // redelivery of jobs whose ack was lost
		failoverDrain = 10 * time.Second
	)
	var storeErrs atomic.Int64
	q, err := delayqueue.New(b, f.queue,
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
	if err := f.replicated(); err != nil {
		t.Fatal(err)
	}
	t.Logf("%s; %d jobs enqueued in %v", f.what, n, enqueued.Round(time.Millisecond))

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

	if err := f.kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	// Enqueue from the kill until a second after the promotion.
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
	if err := f.wait(); err != nil {
		close(stopEnq)
		<-enqDone
		t.Fatal(err)
	}
	promoted := time.Now()
	time.Sleep(time.Second)
	close(stopEnq)
	<-enqDone
	mu.Lock()
	t.Logf("%s %v after SIGKILL; %d of %d jobs handled before the kill; after it %d enqueued, %d Enqueue calls failed (last %v after %s)",
		f.event, promoted.Sub(killed).Round(time.Millisecond), before, n, enqOK, enqFailed, lastEnqFail.Sub(promoted).Round(time.Millisecond), f.event)
	total := len(accepted)
	mu.Unlock()

	deadline := promoted.Add(failoverDrain)
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
			t.Fatalf("%d of %d accepted jobs not handled %v after %s, e.g. %v", len(missing), total, failoverDrain, f.event, missing)
		}
		time.Sleep(10 * time.Millisecond)
	}
	mu.Lock()
	// lastA: the last of the jobs enqueued before the kill to be handled;
	// firstAfter: the first handling after the promotion.
	var lastA, firstAfter time.Time
	redelivered := 0
	for id := range accepted {
		f := first[id]
		if id[0] == 'a' && f.After(lastA) {
			lastA = f
		}
		if f.After(promoted) && (firstAfter.IsZero() || f.Before(firstAfter)) {
			firstAfter = f
		}
		redelivered += seen[id] - 1
	}
	mu.Unlock()
	t.Logf("all %d accepted jobs handled: the first after %s %v after it, the last of those enqueued before the kill %v after it; %d redeliveries; %d store errors reported to OnError",
		total, f.event, firstAfter.Sub(promoted).Round(time.Millisecond), lastA.Sub(promoted).Round(time.Millisecond), redelivered, storeErrs.Load())

	// The queue drains: acks lost in the failover are redelivered after the
	// lease and acked then.
	waitFor(t, 2*lease+5*time.Second, "the queue to be empty", func() bool {
		s, err := q.Stats(ctx)
		return err == nil && s == delayqueue.Stats{}
	})
	stopRun()
}
