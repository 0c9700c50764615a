// Package cohort is the local queue of a mutex: Lock calls of one process on
// one lock name wait for each other in process, and a release can hand the
// lock to the next of them. The Redis mutex of package lock and the
// PostgreSQL mutex of lock/sqllock use it.
package cohort

import (
	"context"
	"sync"
	"time"
)

// How the Redis mutex uses it (lock/sqllock's PostgreSQL mutex is the same,
// with a statement for the script). While a call of the process holds the
// lock or is trying to take it, another call waits locally. When the holder
// unlocks and no other process waits in Redis, the release hands the lock to
// the next local caller in the same script (handoff.lua): a hand-off inside a
// process costs one round trip, with no failed attempt, no subscription and
// no wake-up message. When other processes wait in Redis, the release wakes
// the first of them as usual and the next local caller makes an attempt of
// its own: both race for the free lock, so neither side starves.
//
// It applies to Lock (not TryLock) on mutexes without Owner (no re-entry to
// tell apart) and without Fair (whose order is the store's queue). A local
// waiter also goes to the store when its wait passes the holder's local
// lease deadline or MaxPoll, whichever is sooner: a holder that died,
// stalled or lost its lease never keeps the process's callers waiting longer
// than an ordinary waiter would.

// Queue names the local queue of one lock name in one store; its methods
// are safe for concurrent use.
type Queue struct {
	store any // comparable: what identifies the store in the process
	name  string
}

// New returns the local queue of lock name in store, which must be
// comparable (a pointer to the client, or a struct of pointers): every
// Queue made with equal arguments is the same queue.
func New(store any, name string) Queue { return Queue{store: store, name: name} }

// cohort is the local queue of one lock name on one backend.
type cohort struct {
	trying  int                  // calls of this process making attempts in the store
	holders map[string]time.Time // owner -> local end of its lease
	waiters []*Waiter            // FIFO
}

// Waiter is a Lock call waiting in the local queue.
type Waiter struct {
	owner string
	call  string
	ttl   time.Duration
	turn  chan turn // buffered 1: the waiter's turn, once
	state waiterState
}

// Owner is the waiter's owner id.
func (w *Waiter) Owner() string { return w.owner }

// Call is the call id the waiter gave WaitTurn.
func (w *Waiter) Call() string { return w.call }

// TTL is the lease the waiter asks for.
func (w *Waiter) TTL() time.Duration { return w.ttl }

type waiterState int

const (
	waiting   waiterState = iota // in the queue
	handed                       // out of the queue, a hand-off to it under way
	abandoned                    // its call returned while a hand-off to it was under way
)

// turn is what a waiter's turn brings: a lock handed to it (token > 0), or
// the right to make attempts in the store.
type turn struct{ token int64 }

var cohorts = struct {
	sync.Mutex
	m map[Queue]*cohort
}{m: map[Queue]*cohort{}}

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

// handOn gives the next local waiter its turn to try when nobody of the
// process is busy, and drops the queue's record when it is idle. Callers
// hold cohorts.
func (k Queue) handOn(c *cohort) {
	if c.busy(time.Now()) {
		return
	}
	if len(c.waiters) > 0 {
		w := c.waiters[0]
		c.waiters = c.waiters[1:]
		c.trying++
		w.turn <- turn{}
		return
	}
	delete(cohorts.m, k)
}

// enter reports whether the call may go to the store at once (and counts it as
// trying), or else queues it and returns its waiter and how long it waits at
// most before going to the store anyway.
func (k Queue) enter(owner, call string, ttl, maxPoll time.Duration) (*Waiter, time.Duration) {
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
	w := &Waiter{owner: owner, call: call, ttl: ttl, turn: make(chan turn, 1)}
	c.waiters = append(c.waiters, w)
	return w, wait
}

// WaitTurn waits in the local queue until the call may go to the store, or
// is handed the lock (then it returns the token; the call counts as trying
// either way, and ends with Done). call is the call's id, for a driver
// whose hand-off writes it into the store (Waiter.Call). It returns
// ctx's error when ctx ends first; the call then holds nothing and no turn:
// a lock handed to it meanwhile is released by the hand-off's caller.
func (k Queue) WaitTurn(ctx context.Context, owner, call string, ttl, maxPoll time.Duration) (int64, error) {
	w, wait := k.enter(owner, call, ttl, maxPoll)
	if w == nil {
		return 0, nil
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	timer := t.C
	for {
		select {
		case tn := <-w.turn:
			return tn.token, nil
		case <-timer:
			tn, out := k.leave(w, true)
			if out != handOffPending {
				return tn, nil
			}
			timer = nil // the hand-off under way decides: wait for it or ctx
		case <-ctx.Done():
			if tn, out := k.leave(w, false); out == gotTurn {
				return tn, nil // its turn came first
			}
			return 0, ctx.Err()
		}
	}
}

// leaveOutcome is how a wait ended in leave.
type leaveOutcome int

const (
	gotTurn        leaveOutcome = iota // the turn came meanwhile: its token is returned
	left                               // out of the queue without a turn (goOn: trying)
	handOffPending                     // a hand-off to the waiter is under way (goOn only)
)

// leave ends a wait without a turn: goOn when its timer fired (the waiter
// goes to the store), else its ctx ended. A turn that came meanwhile is taken
// instead. A hand-off under way decides for the waiter: with goOn the
// waiter waits for it; else the waiter is marked abandoned, and the
// hand-off's caller releases what it hands.
func (k Queue) leave(w *Waiter, goOn bool) (int64, leaveOutcome) {
	cohorts.Lock()
	defer cohorts.Unlock()
	select {
	case tn := <-w.turn:
		return tn.token, gotTurn
	default:
	}
	if w.state == handed {
		if goOn {
			return 0, handOffPending
		}
		w.state = abandoned
		return 0, left
	}
	c := cohorts.m[k]
	for i, x := range c.waiters {
		if x == w {
			c.waiters = append(c.waiters[:i:i], c.waiters[i+1:]...)
			break
		}
	}
	if goOn {
		c.trying++
	}
	return 0, left
}

// Done ends a trying call: holding until end when held, else passing the
// turn on.
func (k Queue) Done(owner string, held bool, end time.Time) {
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

// Extended moves owner's local lease end after a renewal.
func (k Queue) Extended(owner string, end time.Time) {
	cohorts.Lock()
	defer cohorts.Unlock()
	if c := cohorts.m[k]; c != nil {
		if _, ok := c.holders[owner]; ok {
			c.holders[owner] = end
		}
	}
}

// Released ends owner's holding in the process and gives the next local
// waiter its turn.
func (k Queue) Released(owner string) {
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

// Handing returns the local waiter to hand the lock to as owner releases
// it, if any: when owner holds it in this process, nobody else of the
// process is busy and someone waits. owner's holding then ends here, the
// waiter counts as trying, and the caller reports the hand-off's outcome
// with HandedTo. Otherwise it changes nothing: the caller releases and then
// calls Released.
func (k Queue) Handing(owner string) *Waiter {
	cohorts.Lock()
	defer cohorts.Unlock()
	c := cohorts.m[k]
	if c == nil || len(c.waiters) == 0 {
		return nil
	}
	end, ok := c.holders[owner]
	if !ok || c.trying > 0 {
		return nil
	}
	delete(c.holders, owner)
	if c.busy(time.Now()) {
		c.holders[owner] = end
		return nil
	}
	w := c.waiters[0]
	c.waiters = c.waiters[1:]
	c.trying++
	w.state = handed
	return w
}

// HandedTo reports the outcome of a hand-off to w: token > 0 when w now
// holds the lock, else w makes attempts of its own. It returns false when
// w's call has returned meanwhile: the caller must then undo what w got,
// and end w's trying with Done (held when w got the lock, which the caller
// then releases as w.Owner()).
func (k Queue) HandedTo(w *Waiter, token int64) bool {
	cohorts.Lock()
	defer cohorts.Unlock()
	if w.state == abandoned {
		return false
	}
	w.state = waiting
	w.turn <- turn{token: token}
	return true
}
