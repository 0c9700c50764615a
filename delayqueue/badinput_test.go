package delayqueue_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/delayqueue"
)

func TestBadOptions(t *testing.T) {
	m := backend.NewMemory()
	defer m.Close()
	cases := []struct {
		name string
		opts []delayqueue.Option
		want string // must appear in the error
	}{
		{"", nil, "delayqueue: name is empty"},
		{strings.Repeat("n", 513), nil, "delayqueue: name must be at most 512 bytes, got 513"},
		{"q", []delayqueue.Option{delayqueue.Visibility(0)}, "delayqueue: Visibility must be a whole number of microseconds between 1ms and MaxDelay, got 0s"},
		{"q", []delayqueue.Option{delayqueue.Visibility(time.Millisecond + 500)}, "delayqueue: Visibility must be a whole number of microseconds between 1ms and MaxDelay, got 1.0005ms"},
		{"q", []delayqueue.Option{delayqueue.MaxAttempts(0)}, "delayqueue: MaxAttempts must be >= 1, got 0"},
		{"q", []delayqueue.Option{delayqueue.Backoff(nil)}, "delayqueue: Backoff must not be nil"},
		{"q", []delayqueue.Option{delayqueue.Concurrency(0)}, "delayqueue: Concurrency must be between 1 and 10000, got 0"},
		{"q", []delayqueue.Option{delayqueue.Concurrency(10001)}, "got 10001"},
		{"q", []delayqueue.Option{delayqueue.MaxPoll(0)}, "delayqueue: MaxPoll must be >= 1ms, got 0s"},
		{"q", []delayqueue.Option{delayqueue.ShutdownTimeout(-time.Second)}, "delayqueue: ShutdownTimeout must be >= 0, got -1s"},
		{"q", []delayqueue.Option{delayqueue.OnError(nil)}, "delayqueue: OnError must not be nil"},
		{"q", []delayqueue.Option{delayqueue.MaxAttempts(-1), delayqueue.Concurrency(-2)}, "MaxAttempts must be >= 1, got -1\ndelayqueue: Concurrency must be between 1 and 10000, got -2"},
	}
	for _, c := range cases {
		_, err := delayqueue.New(m, c.name, c.opts...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%.10q, %d options): %v\nwant an error containing %q", c.name, len(c.opts), err, c.want)
		}
	}
	if _, err := delayqueue.New(nil, "q"); err == nil || !strings.Contains(err.Error(), "delayqueue: backend is nil") {
		t.Errorf("nil backend: %v", err)
	}
	if _, err := delayqueue.New(m, "q", nil, delayqueue.ShutdownTimeout(0)); err != nil {
		t.Errorf("nil option, ShutdownTimeout(0): %v", err)
	}
}

func TestBadCalls(t *testing.T) {
	for _, bk := range threeBackends()[:2] {
		t.Run(bk.name, func(t *testing.T) {
			ctx := context.Background()
			q, err := delayqueue.New(bk.make(t, nil)(), "q")
			if err != nil {
				t.Fatal(err)
			}
			long := strings.Repeat("i", delayqueue.MaxIDLen+1)
			cases := []struct {
				opts []delayqueue.EnqueueOption
				want string
			}{
				{[]delayqueue.EnqueueOption{delayqueue.Delay(-time.Second)}, "delayqueue: Delay must be between 0 and MaxDelay (876000h), got -1s"},
				{[]delayqueue.EnqueueOption{delayqueue.Delay(delayqueue.MaxDelay + time.Hour)}, "delayqueue: Delay must be between 0 and MaxDelay (876000h), got 876001h0m0s"},
				{[]delayqueue.EnqueueOption{delayqueue.At(time.Time{})}, "delayqueue: At must be after the Unix epoch and at most MaxDelay from now, got 0001-01-01 00:00:00 +0000 UTC"},
				{[]delayqueue.EnqueueOption{delayqueue.At(time.Now().Add(delayqueue.MaxDelay + time.Hour))}, "delayqueue: At must be after the Unix epoch and at most MaxDelay from now"},
				{[]delayqueue.EnqueueOption{delayqueue.At(time.Now()), delayqueue.Delay(time.Second)}, "delayqueue: At ("},
				{[]delayqueue.EnqueueOption{delayqueue.ID("")}, "delayqueue: ID is empty"},
				{[]delayqueue.EnqueueOption{delayqueue.ID(long)}, "delayqueue: ID must be at most 1024 bytes, got 1025"},
			}
			for _, c := range cases {
				id, err := q.Enqueue(ctx, nil, c.opts...)
				if err == nil || !strings.Contains(err.Error(), c.want) || id != "" {
					t.Errorf("Enqueue: %q %v\nwant an error containing %q", id, err, c.want)
				}
			}
			if err := q.Cancel(ctx, ""); err == nil || err.Error() != "delayqueue: ID is empty" {
				t.Errorf("Cancel(\"\"): %v", err)
			}
			if err := q.Cancel(ctx, long); err == nil || !strings.Contains(err.Error(), "got 1025") {
				t.Errorf("Cancel(long): %v", err)
			}
			for _, limit := range []int{0, delayqueue.MaxList + 1} {
				if _, err := q.ListDead(ctx, limit); err == nil || !strings.Contains(err.Error(), "delayqueue: ListDead limit must be between 1 and 1000, got") {
					t.Errorf("ListDead(%d): %v", limit, err)
				}
			}
			if err := q.Requeue(ctx, ""); err == nil || err.Error() != "delayqueue: ID is empty" {
				t.Errorf("Requeue(\"\"): %v", err)
			}
			if err := q.Run(ctx, nil); err == nil || err.Error() != "delayqueue: Handler is nil" {
				t.Errorf("Run(nil): %v", err)
			}
			if s, err := q.Stats(ctx); err != nil || s != (delayqueue.Stats{}) {
				t.Errorf("bad calls changed the queue: %+v %v", s, err)
			}

			done, cancel := context.WithCancel(ctx)
			cancel()
			if _, err := q.Enqueue(done, nil); !errors.Is(err, context.Canceled) {
				t.Errorf("Enqueue with an ended context: %v", err)
			}
			if err := q.Cancel(done, "x"); !errors.Is(err, context.Canceled) {
				t.Errorf("Cancel with an ended context: %v", err)
			}
			if _, err := q.Stats(done); !errors.Is(err, context.Canceled) {
				t.Errorf("Stats with an ended context: %v", err)
			}
			if err := q.Run(done, func(context.Context, *delayqueue.Job) error { return nil }); err != nil {
				t.Errorf("Run with an ended context: %v, want nil at once", err)
			}
		})
	}
}

func TestDefaultBackoff(t *testing.T) {
	want := []time.Duration{time.Second, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second,
		16 * time.Second, 32 * time.Second, 64 * time.Second, 128 * time.Second, 256 * time.Second, 512 * time.Second,
		10 * time.Minute, 10 * time.Minute}
	for a, w := range want {
		if got := delayqueue.DefaultBackoff(a); got != w {
			t.Errorf("DefaultBackoff(%d) = %v, want %v", a, got, w)
		}
	}
	if got := delayqueue.DefaultBackoff(1 << 30); got != 10*time.Minute {
		t.Errorf("DefaultBackoff(2^30) = %v, want the cap", got)
	}
}
