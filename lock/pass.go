package lock

import (
	"sync"
	"time"
)

// Local passes of the Redis mutex. A hand-off in Redis (handoff.lua) to a
// Lock call of the same process starts a run: the lock hash names the
// receiver as its owner, with a deadline passWindow longer than the
// receiver's TTL, and the fence moves passBlock tokens ahead. While the run
// lasts, a release that has a local waiter to hand to passes the lock to it
// in process, with no Redis call: the next reserved token, and the run's
// Redis owner, which the receiver's Extend and Unlock then use. A pass is
// made only when the receiver's whole lease ends before the hash's deadline
// can (judged from when the hand-off was sent, so by the local clock and
// before Redis's), and while the giver's own lease lasts; so every holder
// of a run holds the lock in Redis for its whole lease, and a token is
// never handed out twice: the hash's fence is past every token of the run.
//
// What it costs: tokens of a run that ends early are skipped (tokens still
// strictly increase, with gaps); a process that dies in a run keeps the lock
// from other processes for up to passWindow longer than its holder's TTL;
// waiters of other processes wait for the run to end (at most passBlock
// holdings or passWindow), then the release wakes the first of them as
// usual (handoff.lua does not start a run while they are queued).

// passBlock is the number of tokens a run reserves: its hand-off in Redis
// and up to passBlock-1 passes in process.
const passBlock = 32

// passWindow is how much longer than the receiver's TTL the hash's
// deadline is set when a run starts: the time within which passes can be
// made.
func passWindow(ttl time.Duration) time.Duration {
	return min(ttl/4, 5*time.Millisecond).Truncate(time.Microsecond)
}

// run is a run of local passes, held by one owner at a time.
type run struct {
	redisOwner string    // the owner the lock hash names
	next, last int64     // tokens reserved and not yet handed out
	until      time.Time // no lease of the run may end after it: the hash's deadline, at the earliest
	end        time.Time // the current holder's lease end, at the latest the local clock knows
}

// runs are the runs of this process, by the owner holding each now. Owner
// ids are unique, so one map serves every name and backend.
var runs = struct {
	sync.Mutex
	m map[string]*run
}{m: map[string]*run{}}

// startRun records that receiver holds the lock after a hand-off sent at
// sent that gave it token and deadline sent+window+ttl in Redis.
func startRun(receiver string, token int64, sent time.Time, ttl, window time.Duration) {
	runs.Lock()
	defer runs.Unlock()
	// Forget runs whose holder's lease ended a while ago without an Unlock
	// (lost, or dropped): a late Unlock or Extend of theirs then acts as its
	// own owner, which Redis answers "not held", as it would have by then.
	for o, r := range runs.m {
		if sent.Sub(r.end) > time.Minute {
			delete(runs.m, o)
		}
	}
	runs.m[receiver] = &run{
		redisOwner: receiver,
		next:       token + 1,
		last:       token + passBlock - 1,
		until:      sent.Add(ttl + window),
		end:        sent.Add(ttl),
	}
}

// redisOwner returns the owner the lock hash names for owner's holding:
// its run's, or owner itself.
func redisOwner(owner string) string {
	runs.Lock()
	defer runs.Unlock()
	if r := runs.m[owner]; r != nil {
		return r.redisOwner
	}
	return owner
}

// endRun forgets owner's run (its holding ends in Redis, or was lost) and
// returns the owner the lock hash names for it.
func endRun(owner string) string {
	runs.Lock()
	defer runs.Unlock()
	r := runs.m[owner]
	if r == nil {
		return owner
	}
	delete(runs.m, owner)
	return r.redisOwner
}

// extendedRun records that owner's holding was extended by ttl in a call
// sent at sent: the hash's deadline is now Redis's clock + ttl.
func extendedRun(owner string, sent time.Time, ttl time.Duration) {
	runs.Lock()
	defer runs.Unlock()
	if r := runs.m[owner]; r != nil {
		r.until = sent.Add(ttl)
		r.end = r.until
	}
}

// pass hands owner's holding to receiver in process when owner's run
// allows it, and returns receiver's token (0: no pass; the release goes to
// Redis).
func pass(owner, receiver string, ttl time.Duration) int64 {
	runs.Lock()
	defer runs.Unlock()
	r := runs.m[owner]
	if r == nil || r.next > r.last {
		return 0
	}
	now := time.Now()
	if !now.Before(r.end) || now.Add(ttl).After(r.until) {
		return 0
	}
	token := r.next
	r.next++
	r.end = now.Add(ttl)
	delete(runs.m, owner)
	runs.m[receiver] = r
	return token
}
