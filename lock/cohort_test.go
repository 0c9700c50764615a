package lock_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/internal/backendtest"
	"github.com/floodgate-dev/floodgate/internal/testenv"
	"github.com/floodgate-dev/floodgate/internal/unwrap"
	"github.com/floodgate-dev/floodgate/lock"
	"github.com/floodgate-dev/floodgate/lock/internal/locktest"
)

// scriptCalls is a go-redis hook counting script commands (EVALSHA, EVAL).
type scriptCalls struct{ n atomic.Int64 }

func (h *scriptCalls) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *scriptCalls) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if name := cmd.Name(); name == "evalsha" || name == "eval" {
			h.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (h *scriptCalls) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, cmd := range cmds {
			if name := cmd.Name(); name == "evalsha" || name == "eval" {
				h.n.Add(1)
			}
		}
		return next(ctx, cmds)
	}
}

// cohortBackend returns a Redis backend on a client of its own, with its
// script calls counted, and a unique prefix shared by every call.
func cohortBackend(t *testing.T, prefix string) (*backend.Redis, *scriptCalls) {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: testenv.SharedRedis(t).Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	h := &scriptCalls{}
	c.AddHook(h)
	b := backendtest.NewRedis(t, c, backend.WithPrefix(prefix))
	t.Cleanup(func() { b.Close() })
	return b, h
}

// TestLocalQueue: 16 goroutines of one process, each with its own Mutex of
// one name on one backend, take turns in process: mutual exclusion holds,
// tokens strictly increase in the order of the holdings, and each
// acquisition costs one script: the release that hands the lock over — no
// failed attempt, no queueing in Redis.
func TestLocalQueue(t *testing.T) {
	b, calls := cohortBackend(t, backendtest.UniquePrefix())
	const goroutines, each = 16, 40
	ls := make([]lock.Locker, goroutines)
	for i := range ls {
		l, err := lock.NewMutex(b, "local-queue", lock.TTL(10*time.Second), lock.MaxPoll(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		ls[i] = l
	}
	tokens := locktest.PassAround(t, context.Background(), ls, each)
	n := calls.n.Load()
	t.Logf("%d script calls for %d acquisitions", n, len(tokens))
	if max := int64(len(tokens) + 2*goroutines); n > max {
		t.Errorf("%d script calls for %d acquisitions: want at most %d (one release that hands the lock over each)", n, len(tokens), max)
	}
}

// TestLocalQueueRemoteNotStarved: while 8 goroutines of one process pass a
// lock among themselves, a Lock of another process (another backend and
// client) on the same name gets it too, woken in Redis by their releases.
func TestLocalQueueRemoteNotStarved(t *testing.T) {
	prefix := backendtest.UniquePrefix()
	local, _ := cohortBackend(t, prefix)
	remote, _ := cohortBackend(t, prefix)
	ctx := context.Background()
	ls := make([]lock.Locker, 8)
	for i := range ls {
		l, err := lock.NewMutex(local, "starve", lock.TTL(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		ls[i] = l
	}
	held, stop := locktest.KeepBusy(t, ctx, ls, 100*time.Microsecond)
	defer stop()
	for held.Load() < 50 {
		time.Sleep(time.Millisecond)
	}
	r, err := lock.NewMutex(remote, "starve", lock.TTL(10*time.Second), lock.MaxPoll(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		start, before := time.Now(), held.Load()
		lease, err := r.Lock(rctx)
		cancel()
		if err != nil {
			t.Fatalf("remote Lock %d while the local goroutines held the lock %d times: %v", i, held.Load()-before, err)
		}
		t.Logf("remote Lock %d: %v, after %d local holdings", i, time.Since(start), held.Load()-before)
		if err := lease.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}

// TestLocalQueueTurns: a local waiter whose context ends returns its error
// and loses nothing for the others; when the holder unlocks, the next local
// waiter gets the lock at once (MaxPoll is 30s: no poll does it); and when a
// holder's lease ends without Unlock, local waiters go to Redis at its end.
func TestLocalQueueTurns(t *testing.T) {
	b, _ := cohortBackend(t, backendtest.UniquePrefix())
	ctx := context.Background()
	newMutex := func(ttl time.Duration) lock.Locker {
		l, err := lock.NewMutex(b, "turns", lock.TTL(ttl), lock.MaxPoll(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	holder, err := newMutex(10 * time.Second).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// A waiter that gives up.
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err = newMutex(10 * time.Second).Lock(short)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a local waiter whose context ended: %v", err)
	}
	// A waiter that stays, woken by the Unlock.
	got := make(chan time.Time, 1)
	var next *lock.Lease
	go func() {
		l, err := newMutex(300 * time.Millisecond).Lock(ctx)
		if err != nil {
			t.Error(err)
		}
		next = l
		got <- time.Now()
	}()
	time.Sleep(100 * time.Millisecond)
	unlocked := time.Now()
	if err := holder.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case at := <-got:
		if d := at.Sub(unlocked); d > time.Second {
			t.Fatalf("the local waiter got the lock %v after Unlock", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the local waiter did not get the lock after Unlock")
	}
	// next's lease (300ms) ends without Unlock: a local waiter goes to Redis
	// at its end, not at MaxPoll.
	start := time.Now()
	l, err := newMutex(10 * time.Second).Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Fatalf("a local waiter behind a lapsed lease waited %v", d)
	}
	if l.Token() <= next.Token() {
		t.Fatalf("token %d after %d", l.Token(), next.Token())
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// startWaiter starts a Lock call on l with ctx and returns where its result
// arrives; it waits until the call has had time to queue locally.
func startWaiter(ctx context.Context, l lock.Locker) chan lockResult {
	res := make(chan lockResult, 1)
	go func() {
		lease, err := l.Lock(ctx)
		res <- lockResult{lease, err}
	}()
	time.Sleep(50 * time.Millisecond)
	return res
}

type lockResult struct {
	lease *lock.Lease
	err   error
}

// slowMutex returns a maker of Mutexes of name with a 30s TTL and MaxPoll:
// only a release, never an expiry or a poll, can free them within a test.
func slowMutex(t *testing.T, name string) func(b *backend.Redis) lock.Locker {
	return func(b *backend.Redis) lock.Locker {
		l, err := lock.NewMutex(b, name, lock.TTL(30*time.Second), lock.MaxPoll(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
}

// holding warms l up (its scripts loaded) and locks it.
func holding(t *testing.T, l lock.Locker) *lock.Lease {
	t.Helper()
	warm(t, l)
	lease, err := l.Lock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return lease
}

// TestHandOffWaiterGivesUp: the local waiter's context ends while the
// release that hands it the lock is stalled; its Lock returns the error, and
// when the release lands the lock handed to it is released again: another
// process takes it long before the 30s TTL.
func TestHandOffWaiterGivesUp(t *testing.T) {
	p, fb, db := faultyRedis(t)
	name := lockName(t)
	newMutex := slowMutex(t, name)
	ctx := context.Background()
	holder := newMutex(fb)
	lease := holding(t, holder)
	wctx, cancelWaiter := context.WithCancel(ctx)
	waiter := startWaiter(wctx, newMutex(fb))
	p.Stall()
	unlocked := make(chan error, 1)
	go func() {
		uctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		unlocked <- lease.Unlock(uctx)
	}()
	time.Sleep(100 * time.Millisecond) // the hand-off is under way, stalled
	cancelWaiter()
	select {
	case r := <-waiter:
		if !errors.Is(r.err, context.Canceled) {
			p.Resume()
			t.Fatalf("the waiter whose context ended: %v, %v", r.lease, r.err)
		}
	case <-time.After(5 * time.Second):
		p.Resume()
		t.Fatal("the waiter did not return when its context ended")
	}
	p.Resume()
	if err := <-unlocked; err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	free := waitFree(t, newMutex(db))
	if free.Token() <= lease.Token() {
		t.Errorf("token %d after %d", free.Token(), lease.Token())
	}
	_ = free.Unlock(ctx)
	lock.WaitCancels()
}

// TestHandOffLostReply: the reply of the release that hands the lock over
// is lost and go-redis resends it; the resend hands nothing, and the waiter's
// own attempt finds the lock handed to it: one holding, one Unlock frees it.
func TestHandOffLostReply(t *testing.T) {
	p, fb, db := faultyRedis(t)
	name := lockName(t)
	newMutex := slowMutex(t, name)
	ctx := context.Background()
	holder := newMutex(fb)
	lease := holding(t, holder)
	waiter := startWaiter(ctx, newMutex(fb))
	p.LoseNextRepliesTo(1, "EVALSHA")
	if err := lease.Unlock(ctx); err != nil {
		t.Fatalf("Unlock with its reply lost once: %v", err)
	}
	if !p.WaitLost(1, 5*time.Second) {
		t.Fatal("the proxy lost no reply")
	}
	var r lockResult
	select {
	case r = <-waiter:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter did not get the lock")
	}
	if r.err != nil {
		t.Fatalf("the waiter: %v", r.err)
	}
	if r.lease.Token() <= lease.Token() {
		t.Errorf("the waiter's token %d after %d", r.lease.Token(), lease.Token())
	}
	other := newMutex(db)
	if _, err := other.TryLock(ctx); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("while the waiter holds, TryLock of another process: %v", err)
	}
	if err := r.lease.Unlock(ctx); err != nil {
		t.Fatalf("the waiter's Unlock: %v", err)
	}
	l, err := other.TryLock(ctx)
	if err != nil {
		t.Fatalf("after the waiter's Unlock: %v (it held more than once)", err)
	}
	_ = l.Unlock(ctx)
}

// TestLocalPassRun follows one run of local passes (lock/pass.go): the
// hand-off in Redis that starts it costs one script and leaves the hash
// naming the receiver with a deadline at most 5ms past its TTL and the fence
// passBlock tokens ahead; a pass soon after costs no script and gives the
// next token; the receiver of a pass extends and unlocks through the run's
// Redis owner; and another process's Lock then gets a token past every
// token the run reserved.
func TestLocalPassRun(t *testing.T) {
	prefix := backendtest.UniquePrefix()
	b, calls := cohortBackend(t, prefix)
	remote, _ := cohortBackend(t, prefix)
	rc := redis.NewClient(&redis.Options{Addr: testenv.SharedRedis(t).Addr})
	defer rc.Close()
	const ttl = 10 * time.Second
	ctx := context.Background()
	newMutex := func(b *backend.Redis, name string) lock.Locker {
		l, err := lock.NewMutex(b, name, lock.TTL(ttl), lock.MaxPoll(30*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	// A holds, B and C wait in process; A's Unlock hands the lock to B in
	// Redis (a run starts), and B's Unlock, made at once, passes it to C.
	// A pass must come within 5ms of the run's start: on a machine too busy
	// for that, the scenario runs again.
	var (
		name   string
		rb, rv lockResult
	)
	for attempt := 1; ; attempt++ {
		name = fmt.Sprintf("run%d", attempt)
		a := holding(t, newMutex(b, name))
		waiterB := startWaiter(ctx, newMutex(b, name))
		waiterC := startWaiter(ctx, newMutex(b, name))
		before := calls.n.Load()
		if err := a.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if rb = <-waiterB; rb.err != nil {
			t.Fatal(rb.err)
		}
		if err := rb.lease.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
		if rv = <-waiterC; rv.err != nil {
			t.Fatal(rv.err)
		}
		n := calls.n.Load() - before
		if n == 1 {
			break
		}
		if n != 2 || attempt == 5 {
			t.Fatalf("attempt %d: %d script calls for a hand-off and a pass, want 1 (no script for the pass)", attempt, n)
		}
		t.Logf("attempt %d: B's Unlock came too late for a pass", attempt)
		_ = rv.lease.Unlock(ctx)
	}
	if rv.lease.Token() != rb.lease.Token()+1 {
		t.Fatalf("the pass gave token %d after %d, want the next", rv.lease.Token(), rb.lease.Token())
	}
	key := unwrap.Redis(b).Key(name, "lk")
	h, err := rc.HGetAll(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	now, err := rc.Time(ctx).Result()
	if err != nil {
		t.Fatal(err)
	}
	d, _ := strconv.ParseInt(h["d"], 10, 64)
	if left := time.Duration(d-now.UnixMicro()) * time.Microsecond; left < ttl-time.Second || left > ttl+5*time.Millisecond {
		t.Fatalf("the hash's deadline is %v away, want the TTL (%v) and at most 5ms more", left, ttl)
	}
	if h["o"] != rb.lease.Owner() || h["t"] != strconv.FormatInt(rb.lease.Token(), 10) {
		t.Fatalf("the hash names %s with token %s, want the run's first receiver %s with %d", h["o"], h["t"], rb.lease.Owner(), rb.lease.Token())
	}
	if f, _ := strconv.ParseInt(h["f"], 10, 64); f != rb.lease.Token()+31 {
		t.Fatalf("the fence is %d after a run starting at token %d, want 31 more", f, rb.lease.Token())
	}
	if _, err := newMutex(remote, name).TryLock(ctx); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("TryLock of another process during the run: %v", err)
	}
	if err := rv.lease.Extend(ctx, 20*time.Second); err != nil {
		t.Fatalf("Extend by the receiver of a pass: %v", err)
	}
	if d2, _ := rc.HGet(ctx, key, "d").Int64(); d2 <= d {
		t.Fatalf("Extend by the receiver of a pass left the deadline at %d (was %d)", d2, d)
	}
	if err := rv.lease.Unlock(ctx); err != nil {
		t.Fatalf("Unlock by the receiver of a pass: %v", err)
	}
	l, err := newMutex(remote, name).TryLock(ctx)
	if err != nil {
		t.Fatalf("after the run's last Unlock, TryLock of another process: %v", err)
	}
	if l.Token() <= rb.lease.Token()+31 {
		t.Fatalf("another process's token %d, within the run's reserved tokens from %d", l.Token(), rb.lease.Token())
	}
	_ = l.Unlock(ctx)
}

// TestLocalPassesMostlyFree: 16 goroutines of one process passing a lock
// around make fewer script calls than acquisitions (runs of passes), and
// another process's Lock afterwards gets a token past all of theirs.
func TestLocalPassesMostlyFree(t *testing.T) {
	prefix := backendtest.UniquePrefix()
	b, calls := cohortBackend(t, prefix)
	remote, _ := cohortBackend(t, prefix)
	ls := make([]lock.Locker, 16)
	for i := range ls {
		l, err := lock.NewMutex(b, "passes", lock.TTL(10*time.Second), lock.MaxPoll(10*time.Second))
		if err != nil {
			t.Fatal(err)
		}
		ls[i] = l
	}
	tokens := locktest.PassAround(t, context.Background(), ls, 40)
	n := calls.n.Load()
	t.Logf("%d script calls for %d acquisitions", n, len(tokens))
	// About one in 25 on an idle machine; a pass must come within 5ms of
	// its run's hand-off, which a busy machine misses more often.
	if n > int64(len(tokens)*3/4) {
		t.Errorf("%d script calls for %d acquisitions: want at most three in four (passes in process)", n, len(tokens))
	}
	r, err := lock.NewMutex(remote, "passes")
	if err != nil {
		t.Fatal(err)
	}
	l, err := r.Lock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if last := tokens[len(tokens)-1]; l.Token() <= last {
		t.Fatalf("another process's token %d after the local ones up to %d", l.Token(), last)
	}
	_ = l.Unlock(context.Background())
}
