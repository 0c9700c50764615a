package lock

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/floodgate-dev/floodgate/internal/callid"
	"github.com/floodgate-dev/floodgate/internal/redisstore"
	"github.com/floodgate-dev/floodgate/lock/internal/lockdriver"
)

// This file holds the waiting machinery that RWMutex and Semaphore share on
// both backends. Waiters queue with a place: a number unique among the
// waiters of one lock, increasing in arrival order (the largest place queued
// + 1), so that FIFO does not depend on clock resolution. A release names who
// may retry by side and place, so that only they do.

// Sides of a wake-up message and of a queue.
const (
	sideRead  = 'r' // RWMutex readers
	sideWrite = 'w' // RWMutex writers
	sideSem   = 's' // Semaphore waiters
)

// wakes reports whether the wake-up message msg concerns a waiter of side at
// place: "<side><p>" wakes that side's waiters at places up to p, "<side>"
// all of them. A waiter that does not know its place (0) takes every message
// of its side, and anything malformed wakes everyone: a stray message costs
// a retry, a missed one a wait of up to MaxPoll.
func wakes(msg string, side byte, place int64) bool {
	if msg == "" {
		return true
	}
	if msg[0] != sideRead && msg[0] != sideWrite && msg[0] != sideSem {
		return true
	}
	if msg[0] != side {
		return false
	}
	if len(msg) == 1 || place == 0 {
		return true
	}
	p, err := strconv.ParseInt(msg[1:], 10, 64)
	return err != nil || place <= p
}

// pollAfter is how long a waiter waits at most before retrying: until the
// blocking lease ends (hint, µs; 0 = unknown), capped by maxPoll.
func pollAfter(hint int64, maxPoll time.Duration) time.Duration {
	if hint > 0 {
		return min(maxPoll, time.Duration(hint+1)*time.Microsecond)
	}
	return maxPoll
}

// waiter is a queued Lock call on the Memory backend. Its fields are guarded
// by the shard of the lock's state.
type waiter struct {
	owner string
	place int64         // 0 while not queued
	wake  chan struct{} // buffered 1
}

// signal wakes w; a wake-up already pending is enough.
func (w *waiter) signal() {
	select {
	case w.wake <- struct{}{}:
	default:
	}
}

// memWait is the Acquire of the Memory RW and semaphore drivers. try makes
// one attempt under the state's lock: on success it takes w (if not nil) out
// of the queue; on failure it queues w (if not nil) and returns how long to
// wait at most. leave takes w out of the queue and wakes whoever can go
// instead, passing on a wake-up that w may have consumed.
func memWait(ctx context.Context, owner string, wait bool,
	try func(w *waiter) (lockdriver.Grant, time.Duration, error), leave func(w *waiter)) (lockdriver.Grant, error) {
	if !wait {
		g, _, err := try(nil)
		return g, err
	}
	w := &waiter{owner: owner, wake: make(chan struct{}, 1)}
	for {
		g, retry, err := try(w)
		if err == nil {
			return g, nil
		}
		t := time.NewTimer(retry)
		select {
		case <-ctx.Done():
			t.Stop()
			leave(w)
			return lockdriver.Grant{}, ctx.Err()
		case <-w.wake:
		case <-t.C:
		}
		t.Stop()
	}
}

// queueRemove removes w from q, keeping the order, and marks it not queued.
func queueRemove(q []*waiter, w *waiter) []*waiter {
	if w == nil || w.place == 0 {
		return q
	}
	for i, x := range q {
		if x == w {
			q = append(q[:i], q[i+1:]...)
			break
		}
	}
	w.place = 0
	return q
}

// redisAttempt makes one acquire attempt on Redis, the call named call;
// waiting means join or stay in the queue on failure. On failure it returns
// ErrLocked, how long to wait at most and the waiter's place.
type redisAttempt func(ctx context.Context, waiting bool, call string) (g lockdriver.Grant, retry time.Duration, place int64, err error)

// parseAttempt reads the reply of rw_acquire.lua and sem_acquire.lua:
// {1, token, 0} or {0, wait_hint_us, place}.
func parseAttempt(reply any, maxPoll time.Duration) (lockdriver.Grant, time.Duration, int64, error) {
	v, err := redisstore.ReplyInts(reply, 3)
	if err != nil {
		return lockdriver.Grant{}, 0, 0, fmt.Errorf("lock: %w", err)
	}
	if v[0] == 1 {
		return lockdriver.Grant{Token: v[1]}, 0, 0, nil
	}
	return lockdriver.Grant{}, pollAfter(v[1], maxPoll), v[2], ErrLocked
}

// redisWait is the Acquire of the Redis RW and semaphore drivers. It makes
// one attempt first, without joining the queue: a free lock is taken without
// the subscription a waiter needs (as the mutex's acquire). Then it
// subscribes to the lock's channel before the next attempt, so that a
// release between an attempt and the wait is not missed, and retries when a
// message names its side and place, when the blocking lease should have
// ended, and at least every MaxPoll (for holders that die without releasing
// and for lost messages; without pub/sub, only then). When it gives up
// between attempts it calls leave, which takes the waiter out of the queue
// and wakes whoever can go instead; when it gives up during an attempt (an
// error other than ErrLocked: the attempt may land later, or have landed),
// it gives that call up with cancel in the background (see abandon), which
// also leaves the queue. ttl bounds the cancel and maxPoll the leave.
func redisWait(ctx context.Context, r *redisstore.Store, channel string, side byte, wait bool, ttl, maxPoll time.Duration,
	try redisAttempt, leave func(context.Context) error, cancel func(ctx context.Context, call string) error) (lockdriver.Grant, error) {
	attempt := func(waiting bool) (lockdriver.Grant, time.Duration, int64, error) {
		call := callid.New()
		g, retry, place, err := try(ctx, waiting, call)
		if err != nil && !errors.Is(err, ErrLocked) {
			abandon(ttl, func(ctx context.Context) error { return cancel(ctx, call) })
		}
		return g, retry, place, err
	}
	g, _, _, err := attempt(false)
	if !wait || !errors.Is(err, ErrLocked) {
		return g, err
	}
	var wake <-chan string
	if sub, err := r.Subscribe(ctx, channel); err == nil {
		defer sub.Close()
		wake = sub.C
	} else if !errors.Is(err, redisstore.ErrNoPubSub) {
		return lockdriver.Grant{}, fmt.Errorf("lock: %w", err) // ctx's error too, when it explains err
	}
	// Leave when giving up between attempts; an attempt whose answer never
	// came is cancelled instead, which leaves the queue too.
	queued := true
	defer func() {
		if queued {
			leaveQueue(ctx, maxPoll, leave)
		}
	}()
	for {
		g, retry, place, err := attempt(true)
		if err == nil {
			queued = false
			return g, nil
		}
		if !errors.Is(err, ErrLocked) {
			queued = false
			return lockdriver.Grant{}, err
		}
		t := time.NewTimer(retry)
	wait:
		for {
			select {
			case <-ctx.Done():
				t.Stop()
				return lockdriver.Grant{}, ctx.Err()
			case msg := <-wake:
				if wakes(msg, side, place) {
					break wait
				}
			case <-t.C:
				break wait
			}
		}
		t.Stop()
	}
}
