package delayqueue_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/delayqueue"
)

// Jobs are delivered in due order, never before they are due. The same code
// runs on Redis with backend.NewRedis(client) instead of the Memory backend.
func ExampleQueue_Run() {
	mem := backend.NewMemory()
	defer mem.Close()
	q, err := delayqueue.New(mem, "reminders")
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for _, r := range []struct {
		text string
		in   time.Duration
	}{{"third", 60 * time.Millisecond}, {"first", 20 * time.Millisecond}, {"second", 40 * time.Millisecond}} {
		if _, err := q.Enqueue(ctx, []byte(r.text), delayqueue.Delay(r.in)); err != nil {
			fmt.Println(err)
			return
		}
	}
	n := 0
	err = q.Run(ctx, func(_ context.Context, j *delayqueue.Job) error {
		fmt.Printf("%s (attempt %d, on time: %v)\n", j.Payload, j.Attempt, !time.Now().Before(j.DueAt))
		if n++; n == 3 {
			cancel() // Run returns once this handler is done
		}
		return nil // ack
	})
	fmt.Println("Run:", err)
	// Output:
	// first (attempt 1, on time: true)
	// second (attempt 1, on time: true)
	// third (attempt 1, on time: true)
	// Run: <nil>
}

// A handler's error retries the job after Backoff; after MaxAttempts
// attempts it goes to the dead set.
func ExampleBackoff() {
	mem := backend.NewMemory()
	defer mem.Close()
	q, err := delayqueue.New(mem, "webhooks",
		delayqueue.MaxAttempts(3),
		delayqueue.Backoff(func(attempt int) time.Duration { return time.Duration(attempt) * 10 * time.Millisecond }))
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := q.Enqueue(ctx, []byte("POST /hook"), delayqueue.ID("hook-1")); err != nil {
		fmt.Println(err)
		return
	}
	_ = q.Run(ctx, func(_ context.Context, j *delayqueue.Job) error {
		fmt.Printf("%s attempt %d: 503\n", j.ID, j.Attempt)
		if j.Attempt == 3 {
			defer cancel()
		}
		return errors.New("503 Service Unavailable")
	})
	s, _ := q.Stats(context.Background())
	fmt.Printf("dead: %d\n", s.Dead)
	// Output:
	// hook-1 attempt 1: 503
	// hook-1 attempt 2: 503
	// hook-1 attempt 3: 503
	// dead: 1
}

// With the ID option a job is enqueued once, however often Enqueue is
// called while it is in the queue; Cancel removes it.
func ExampleID() {
	mem := backend.NewMemory()
	defer mem.Close()
	q, err := delayqueue.New(mem, "invoices")
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	for range 3 {
		id, err := q.Enqueue(ctx, []byte("invoice 1017"), delayqueue.ID("invoice-1017"), delayqueue.Delay(24*time.Hour))
		switch {
		case errors.Is(err, delayqueue.ErrDuplicate):
			fmt.Println(id, "is already scheduled")
		case err != nil:
			fmt.Println(err)
		default:
			fmt.Println(id, "scheduled")
		}
	}
	s, _ := q.Stats(ctx)
	fmt.Printf("%+v\n", s)
	fmt.Println(q.Cancel(ctx, "invoice-1017"))
	fmt.Println(q.Cancel(ctx, "invoice-1017"))
	// Output:
	// invoice-1017 scheduled
	// invoice-1017 is already scheduled
	// invoice-1017 is already scheduled
	// {Scheduled:1 Ready:0 InFlight:0 Dead:0}
	// <nil>
	// delayqueue: no such job
}

// EnqueueBatch adds many jobs in one call; a job whose ID is in the queue
// already is left out, and reported.
func ExampleQueue_EnqueueBatch() {
	mem := backend.NewMemory()
	defer mem.Close()
	q, err := delayqueue.New(mem, "invoices")
	if err != nil {
		fmt.Println(err)
		return
	}
	ctx := context.Background()
	if _, err := q.Enqueue(ctx, []byte("march"), delayqueue.ID("invoice-3"), delayqueue.Delay(time.Hour)); err != nil {
		fmt.Println(err)
		return
	}
	var items []delayqueue.Item
	for _, month := range []string{"january", "february", "march"} {
		items = append(items, delayqueue.Item{
			Payload: []byte(month),
			Options: []delayqueue.EnqueueOption{delayqueue.ID("invoice-" + fmt.Sprint(len(items)+1)), delayqueue.Delay(time.Hour)},
		})
	}
	ids, err := q.EnqueueBatch(ctx, items)
	var dup *delayqueue.DuplicateError
	if errors.As(err, &dup) {
		fmt.Println("already queued:", dup.IDs)
	}
	st, _ := q.Stats(ctx)
	fmt.Println(ids, "scheduled:", st.Scheduled)
	// Output:
	// already queued: [invoice-3]
	// [invoice-1 invoice-2 invoice-3] scheduled: 3
}
