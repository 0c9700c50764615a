package delayqueue_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/delayqueue"
	"github.com/floodgate-dev/floodgate/internal/testenv"
)

// TestNothingLostAcrossRedisRestart: with AOF (appendfsync always) every
// acknowledged Enqueue survives a crash of Redis (SIGKILL) before any
// consumer ran, and a restart while a consumer runs: all jobs are delivered
// (at least once), and the queue ends empty. The consumer rides out the
// outage: store errors go to OnError and Run retries.
func TestNothingLostAcrossRedisRestart(t *testing.T) {
	srv := testenv.NewRedis(t, testenv.WithAOF())
	q, err := delayqueue.New(newRedisAt(t, srv.Addr, []backend.Option{backend.WithPrefix("restart")}), "jobs",
		delayqueue.Concurrency(4), delayqueue.Visibility(time.Second), delayqueue.MaxPoll(100*time.Millisecond),
		delayqueue.Backoff(func(int) time.Duration { return 10 * time.Millisecond }),
		delayqueue.OnError(func(error) {})) // outage errors are expected
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const n = 300
	rng := rand.New(rand.NewPCG(3, 4))
	for i := range n {
		d := time.Duration(rng.Int64N(int64(1500 * time.Millisecond)))
		if _, err := q.Enqueue(ctx, []byte(fmt.Sprint(i)), delayqueue.ID(fmt.Sprint(i)), delayqueue.Delay(d)); err != nil {
			t.Fatal(err)
		}
	}
	if err := srv.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	if s, err := q.Stats(ctx); err != nil || s.Scheduled+s.Ready != n {
		t.Fatalf("after a crash and restart: Stats %+v %v, want %d scheduled or ready", s, err, n)
	}

	var (
		mu   sync.Mutex
		seen = map[string]int{}
	)
	runQueue(t, q, func(_ context.Context, j *delayqueue.Job) error {
		if string(j.Payload) != j.ID {
			return fmt.Errorf("job %s: payload %q", j.ID, j.Payload)
		}
		mu.Lock()
		seen[j.ID]++
		mu.Unlock()
		return nil
	})
	time.Sleep(500 * time.Millisecond) // some delivered, some still scheduled
	mu.Lock()
	before := len(seen)
	mu.Unlock()
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, "every job delivered and the queue empty", func() bool {
		mu.Lock()
		all := len(seen) == n
		mu.Unlock()
		s, err := q.Stats(ctx)
		return all && err == nil && s == delayqueue.Stats{}
	})
	mu.Lock()
	defer mu.Unlock()
	redelivered := 0
	for _, c := range seen {
		redelivered += c - 1
	}
	t.Logf("%d of %d delivered before the restart; %d redelivered after it", before, n, redelivered)
	if before == 0 || before == n {
		t.Errorf("%d of %d delivered before the restart: the restart did not fall mid-run", before, n)
	}
}
