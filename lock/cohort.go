package lock

import (
	"context"
	"sync"
	"time"

	"github.com/floodgate-dev/floodgate/backend"
)

// This file holds the local queue of the Redis mutex: Lock calls of one
// process on one lock name (and one backend) wait for each other here, in
// process, instead of each trying Redis and queueing there. While a call of
// the process holds the lock or is trying to take it, another call waits
// locally; when the holder releases, the next local caller is woken directly
// and makes one attempt, which the release has made likely to succeed. So
// under contention inside a process a hand-off costs the release and one
// acquire, with no failed attempt, no subscription and no wake-up message;
// calls of other processes still queue in Redis and are woken by the
// release, and race the local caller for the free lock.
//
// It applies to Lock (not TryLock) on mutexes without Owner (no re-entry to
// tell apart) and without Fair (whose order is Redis's queue). A local
// waiter also goes to Redis when its wait passes the holder's local lease
// deadline or MaxPoll, whichever is sooner: a holder that died, stalled or
// lost its lease never keeps the process's callers waiting longer than an
// ordinary waiter would.

// cohortKey names the local queue of one lock name on one backend.
type cohortKey struct {
	r    *backend.Redis
	name string
}

// cohort is the local queue of one lock name on one backend.
type cohort struct {
	trying  int                  // calls of this process making attempts in Redis
	holders map[string]time.Time // owner -> local end of its lease
	waiters []chan struct{}      // FIFO; each buffered 1: a send gives that waiter a turn
}

var cohorts = struct {
	sync.Mutex
	m map[cohortKey]*cohort
}{m: map[cohortKey]*cohort{}}

// busy reports whether a call of the process is trying or holds a lease
// that has not ended on the local clock; it forgets ended holders.
func (c *cohort) busy(now time.Time) bool {
	for o, end := range c.holders {
		if !now.Before(end) {
			delete(c.holders, o)
		}
	}
	return c.trying > 0 || len(c.holders) > 0
}

// handOn gives the next local waiter its turn when nobody of the process
// is busy, and drops the queue's record when it is idle. Callers hold
// cohorts.
func (k cohortKey) handOn(c *cohort) {
	if c.busy(time.Now()) {
		return
	}
	if len(c.waiters) > 0 {
		w := c.waiters[0]
		c.waiters = c.waiters[1:]
		c.trying++
		w <- struct{}{}
		return
	}
	delete(cohorts.m, k)
}

// enter reports whether the call may go to Redis at once (and counts it as
// trying), or else queues it and returns the channel its turn comes on and
// how long it waits at most before going to Redis anyway.
func (k cohortKey) enter(maxPoll time.Duration) (chan struct{}, time.Duration) {
	cohorts.Lock()
	defer cohorts.Unlock()
	c := cohorts.m[k]
	if c == nil {
		c = &cohort{holders: map[string]time.Time{}}
		cohorts.m[k] = c
	}
	now := time.Now()
	if !c.busy(now) {
		c.trying++
		return nil, 0
	}
	wait := maxPoll
	for _, end := range c.holders {
		wait = min(wait, end.Sub(now)+time.Millisecond)
	}
	turn := make(chan struct{}, 1)
	c.waiters = append(c.waiters, turn)
	return turn, wait
}

// leave takes a waiter out of the queue when its wait ended without its
// turn (ctx ended, or its timer). It reports whether the turn had come
// meanwhile: the call then counts as trying, and must go on or pass it on.
// When go is set (the timer), a waiter without its turn becomes trying too.
func (k cohortKey) leave(turn chan struct{}, goOn bool) (hadTurn bool) {
	cohorts.Lock()
	defer cohorts.Unlock()
	c := cohorts.m[k]
	select {
	case <-turn:
		hadTurn = true
	default:
		for i, w := range c.waiters {
			if w == turn {
				c.waiters = append(c.waiters[:i:i], c.waiters[i+1:]...)
				break
			}
		}
		if goOn {
			c.trying++
		}
	}
	if !goOn && hadTurn {
		c.trying--
		k.handOn(c)
	}
	return hadTurn
}

// done ends a trying call: holding until end when held, else passing the
// turn on.
func (k cohortKey) done(owner string, held bool, end time.Time) {
	cohorts.Lock()
	defer cohorts.Unlock()
	c := cohorts.m[k]
	c.trying--
	if held {
		c.holders[owner] = end
		return
	}
	k.handOn(c)
}

// extended moves owner's local lease end after a renewal.
func (k cohortKey) extended(owner string, end time.Time) {
	cohorts.Lock()
	defer cohorts.Unlock()
	if c := cohorts.m[k]; c != nil {
		if _, ok := c.holders[owner]; ok {
			c.holders[owner] = end
		}
	}
}

// released ends owner's holding and gives the next local waiter its turn.
func (k cohortKey) released(owner string) {
	cohorts.Lock()
	defer cohorts.Unlock()
	c := cohorts.m[k]
	if c == nil {
		return
	}
	if _, ok := c.holders[owner]; !ok {
		return
	}
	delete(c.holders, owner)
	k.handOn(c)
}

// waitTurn waits in the local queue until the call may go to Redis. It
// returns ctx's error when ctx ends first; the call then holds no turn.
func (k cohortKey) waitTurn(ctx context.Context, maxPoll time.Duration) error {
	turn, wait := k.enter(maxPoll)
	if turn == nil {
		return nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-turn:
		return nil
	case <-t.C:
		k.leave(turn, true)
		return nil
	case <-ctx.Done():
		k.leave(turn, false)
		return ctx.Err()
	}
}
