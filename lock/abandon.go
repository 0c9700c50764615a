package lock

import (
	"context"
	"sync"
	"time"
)

// This file holds what the Redis drivers do with a call whose answer never
// came. A request whose reply is lost may still run, later, and a client may
// resend it (go-redis does after a read timeout): an acquire that the caller
// gave up on must not leave a lease that no one holds.

// cancels counts the background cancels and leaves still running, for tests.
var cancels sync.WaitGroup

// abandon gives up an acquire call in the background: it runs cancel (a
// script that releases what the call took, if it landed, and leaves a
// tombstone that refuses it if it lands later) until cancel gets an answer or
// ttl — the lease the call asked for — has passed: an acquire that landed is
// over by itself then. Tries are bounded by a second each and spaced from
// 10ms to 500ms.
func abandon(ttl time.Duration, cancel func(context.Context) error) {
	retry(ttl, cancel)
}

// leaveQueue makes a waiter that gave up leave the queue: one try before
// returning (bounded by a second, as before), then in the background until
// it succeeds or the waiter's place lapses by itself (3 × maxPoll).
func leaveQueue(ctx context.Context, maxPoll time.Duration, leave func(context.Context) error) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	err := leave(ctx)
	cancel()
	if err != nil {
		retry(3*maxPoll, leave)
	}
}

func retry(bound time.Duration, f func(context.Context) error) {
	end := time.Now().Add(bound)
	cancels.Add(1)
	go func() {
		defer cancels.Done()
		pause := 10 * time.Millisecond
		for {
			left := time.Until(end)
			if left <= 0 {
				return
			}
			ctx, cancel := context.WithTimeout(context.Background(), min(left, time.Second))
			err := f(ctx)
			cancel()
			if err == nil {
				return
			}
			t := time.NewTimer(min(pause, max(time.Until(end), 0)))
			<-t.C
			pause = min(2*pause, 500*time.Millisecond)
		}
	}()
}
