package lock_test

// Issue 13, "Safe when replies are lost": a request whose reply is lost still
// runs, and a client resends it (go-redis after a read timeout or a closed
// connection), so every lock script may run twice, and a call the caller
// gave up on may land after it returned.

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/internal/backendtest"
	"github.com/floodgate-dev/floodgate/internal/testenv"
	"github.com/floodgate-dev/floodgate/internal/unwrap"
	"github.com/floodgate-dev/floodgate/lock"
	"github.com/floodgate-dev/floodgate/lock/internal/lockdriver"
)

// faultyRedis returns a backend that reaches the shared Redis through a
// fault-injecting proxy with a go-redis client that resends once (as its
// default MaxRetries does, up to 3 times), and a backend that reaches it
// directly, both with the same prefix.
func faultyRedis(t *testing.T) (*testenv.Proxy, *backend.Redis, *backend.Redis) {
	t.Helper()
	addr := testenv.SharedRedis(t).Addr
	p := testenv.NewProxy(t, addr)
	fc := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: 1, ContextTimeoutEnabled: true})
	dc := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { fc.Close(); dc.Close() })
	ctx := context.Background()
	if err := fc.Ping(ctx).Err(); err != nil { // handshake replies count as replies
		t.Fatal(err)
	}
	return p, backendtest.NewRedis(t, fc, backend.WithPrefix("lr")), backendtest.NewRedis(t, dc, backend.WithPrefix("lr"))
}

// warm locks and unlocks l once, so that its scripts are loaded: a lost
// NOSCRIPT reply would show nothing.
func warm(t *testing.T, l lock.Locker) {
	t.Helper()
	lease, err := l.Lock(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if err := lease.Unlock(context.Background()); err != nil {
		t.Fatal(err)
	}
}

func lockName(t *testing.T) string { return t.Name() + "-" + lockdriver.NewOwnerID()[:8] }

// waitFree polls TryLock on l until it succeeds, for at most 5s: far less
// than the 30s TTL of the leases in these tests, so only a release — not an
// expiry — can make it pass.
func waitFree(t *testing.T, l lock.Locker) *lock.Lease {
	t.Helper()
	end := time.Now().Add(5 * time.Second)
	for {
		lease, err := l.TryLock(context.Background())
		if err == nil {
			return lease
		}
		if !errors.Is(err, lock.ErrLocked) || time.Now().After(end) {
			t.Fatalf("lock still held 5s after a failed Lock (lease TTL 30s): %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Defect 1: the acquire of one Lock ran twice (its reply lost, go-redis
// resent it) and the second run counted as a re-entry, although no Owner was
// set: Unlock returned nil and the lock stayed held until its TTL.
func TestLostAcquireReplyHoldsOnce(t *testing.T) {
	p, fb, db := faultyRedis(t)
	name := lockName(t)
	mu, err := lock.NewMutex(fb, name, lock.TTL(30*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	other, _ := lock.NewMutex(db, name, lock.TTL(30*time.Second))
	ctx := context.Background()
	warm(t, mu)
	p.LoseNextReplies(1)
	lease, err := mu.Lock(ctx)
	if err != nil {
		t.Fatalf("Lock with one lost reply and MaxRetries 1: %v", err)
	}
	if !p.WaitLost(1, 5*time.Second) {
		t.Fatal("the proxy lost no reply")
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Fatalf("Unlock: %v", err)
	}
	l2, err := other.TryLock(ctx)
	if err != nil {
		t.Fatalf("after the only Unlock, TryLock by another handle: %v (the replayed acquire counted as a re-entry)", err)
	}
	if l2.Token() <= lease.Token() {
		t.Errorf("token %d after %d", l2.Token(), lease.Token())
	}
	_ = l2.Unlock(ctx)
}

// The same for Unlock: its reply lost, the resend does not release a second
// level of a reentrant owner's lock, and answers as the first run did.
func TestLostReleaseReplyReleasesOnce(t *testing.T) {
	p, fb, db := faultyRedis(t)
	name := lockName(t)
	mu, _ := lock.NewMutex(fb, name, lock.TTL(30*time.Second), lock.Owner("o1"))
	other, _ := lock.NewMutex(db, name, lock.TTL(30*time.Second))
	ctx := context.Background()
	warm(t, mu)
	l1, err := mu.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	l2, err := mu.Lock(ctx) // re-entry: count 2
	if err != nil {
		t.Fatal(err)
	}
	p.LoseNextReplies(1)
	if err := l2.Unlock(ctx); err != nil {
		t.Fatalf("Unlock with a lost reply: %v", err)
	}
	if !p.WaitLost(1, 5*time.Second) {
		t.Fatal("the proxy lost no reply")
	}
	if _, err := other.TryLock(ctx); !errors.Is(err, lock.ErrLocked) {
		t.Fatalf("one level left, TryLock by another: %v, want ErrLocked", err)
	}
	p.LoseNextReplies(1)
	if err := l1.Unlock(ctx); err != nil {
		t.Fatalf("last Unlock with a lost reply: %v (its resend must answer as the first run)", err)
	}
	l3 := waitFree(t, other)
	_ = l3.Unlock(ctx)
}

// failStalled makes a call whose request reaches Redis only after the
// caller's 300ms context ended: it must fail, and hold nothing once its
// request lands.
func failStalled(t *testing.T, p *testenv.Proxy, call func(context.Context) (*lock.Lease, error)) {
	t.Helper()
	p.Stall()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	lease, err := call(ctx)
	cancel()
	if err == nil {
		p.Resume()
		t.Fatalf("call through a stalled proxy succeeded: %v", lease.Token())
	}
	p.Resume()
}

// Defect 2: a Lock whose context ended during a stall returned an error, yet
// its acquire landed on resume: the lock was held, for the caller's TTL, by an
// owner no one had a Lease for.
func TestFailedLockHoldsNothing(t *testing.T) {
	for _, tc := range []struct {
		name string
		mk   func(b backend.Backend, name string) (fail, other func(context.Context) (*lock.Lease, error))
	}{
		{"mutex-lock", func(b backend.Backend, name string) (_, _ func(context.Context) (*lock.Lease, error)) {
			m, _ := lock.NewMutex(b, name, lock.TTL(30*time.Second))
			return m.Lock, m.TryLock
		}},
		{"mutex-trylock-owner", func(b backend.Backend, name string) (_, _ func(context.Context) (*lock.Lease, error)) {
			m, _ := lock.NewMutex(b, name, lock.TTL(30*time.Second), lock.Owner("own"))
			return m.TryLock, nil
		}},
		{"rw-write", func(b backend.Backend, name string) (_, _ func(context.Context) (*lock.Lease, error)) {
			m, _ := lock.NewRWMutex(b, name, lock.TTL(30*time.Second))
			return m.Lock, m.TryLock
		}},
		{"rw-read", func(b backend.Backend, name string) (_, _ func(context.Context) (*lock.Lease, error)) {
			m, _ := lock.NewRWMutex(b, name, lock.TTL(30*time.Second))
			return m.RLock, m.TryLock
		}},
		{"semaphore", func(b backend.Backend, name string) (_, _ func(context.Context) (*lock.Lease, error)) {
			m, _ := lock.NewSemaphore(b, name, 1, lock.TTL(30*time.Second))
			return m.Lock, m.TryLock
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, fb, db := faultyRedis(t)
			name := lockName(t)
			fail, _ := tc.mk(fb, name)
			_, try := tc.mk(db, name)
			if try == nil { // the same owner would re-enter: take the write side of a plain handle
				m, _ := lock.NewMutex(db, name, lock.TTL(30*time.Second))
				try = m.TryLock
			}
			warm(t, lockerFunc(fail))
			failStalled(t, p, fail)
			// Let the stalled acquire land (it may, before or after the cancel).
			time.Sleep(100 * time.Millisecond)
			waitFree(t, lockerFunc(try))
			lock.WaitCancels()
		})
	}
}

type lockerFunc func(context.Context) (*lock.Lease, error)

func (f lockerFunc) Lock(ctx context.Context) (*lock.Lease, error)    { return f(ctx) }
func (f lockerFunc) TryLock(ctx context.Context) (*lock.Lease, error) { return f(ctx) }

// A waiter of a Fair lock that gave up while its attempt was in flight leaves
// the queue too, by the cancel, not by the waiter's place lapsing (30s here):
// the holder's lease ends at 1s, the waiter's retry then is stalled, its
// context ends at 1.5s, and on resume neither the late retry (which finds
// the lock free) nor the queue entry may survive.
func TestFailedWaiterLeavesFairQueue(t *testing.T) {
	p, fb, db := faultyRedis(t)
	dbs := unwrap.Redis(db)
	name := lockName(t)
	opts := []lock.Option{lock.TTL(30 * time.Second), lock.Fair(), lock.MaxPoll(10 * time.Second)}
	holder, _ := lock.NewMutex(db, name, lock.TTL(time.Second), lock.Fair(), lock.MaxPoll(10*time.Second))
	waiter, _ := lock.NewMutex(fb, name, opts...)
	other, _ := lock.NewMutex(db, name, opts...)
	ctx := context.Background()
	warm(t, waiter)
	if _, err := holder.Lock(ctx); err != nil {
		t.Fatal(err)
	}
	stalled := time.AfterFunc(500*time.Millisecond, p.Stall)
	defer stalled.Stop()
	wctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	_, err := waiter.Lock(wctx)
	cancel()
	p.Resume()
	if err == nil {
		t.Fatal("Lock through a stalled proxy succeeded")
	}
	end := time.Now().Add(5 * time.Second)
	for {
		n, err := dbs.Run(ctx, zcards, []string{dbs.Key(name, "lq")}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if n.(int64) == 0 {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("%d waiters still queued 5s after the waiter gave up", n)
		}
		time.Sleep(20 * time.Millisecond)
	}
	_ = waitFree(t, other).Unlock(ctx)
	lock.WaitCancels()
}

// replayer is a Scripter that runs every script call twice, as a client's
// resend after a lost reply does, and answers with the second run's reply.
type replayer struct {
	c  *redis.Client
	on atomic.Bool // replay only while on
	n  atomic.Int64
}

func (r *replayer) EvalSha(ctx context.Context, sha string, keys, args []string) (any, error) {
	if !r.on.Load() {
		return r.once(r.c.EvalSha(ctx, sha, keys, anys(args)...).Result())
	}
	if _, err := r.c.EvalSha(ctx, sha, keys, anys(args)...).Result(); err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	r.n.Add(1)
	v, err := r.c.EvalSha(ctx, sha, keys, anys(args)...).Result()
	if errors.Is(err, redis.Nil) {
		err = nil
	}
	return v, err
}

func (r *replayer) once(v any, err error) (any, error) {
	if errors.Is(err, redis.Nil) {
		err = nil
	}
	return v, err
}

func (r *replayer) Eval(ctx context.Context, src string, keys, args []string) (any, error) {
	if !r.on.Load() {
		return r.once(r.c.Eval(ctx, src, keys, anys(args)...).Result())
	}
	if _, err := r.c.Eval(ctx, src, keys, anys(args)...).Result(); err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	r.n.Add(1)
	v, err := r.c.Eval(ctx, src, keys, anys(args)...).Result()
	if errors.Is(err, redis.Nil) {
		err = nil
	}
	return v, err
}

func anys(s []string) []any {
	a := make([]any, len(s))
	for i, v := range s {
		a[i] = v
	}
	return a
}

// Every acquire, re-entry, release and extend run twice answers as once:
// the same token, one hold level per call, and the lock free after as many
// Unlocks as Locks.
func TestReplayedCallsActOnce(t *testing.T) {
	addr := testenv.SharedRedis(t).Addr
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { c.Close() })
	rp := &replayer{c: c}
	rb, err := backend.NewRedisScripter(rp, backend.WithPrefix("lr"))
	if err != nil {
		t.Fatal(err)
	}
	db := backendtest.NewRedis(t, c, backend.WithPrefix("lr"))
	ctx := context.Background()
	type kind struct {
		name string
		mk   func(b backend.Backend, name string, opts ...lock.Option) lock.Locker
	}
	for _, k := range []kind{
		{"mutex", func(b backend.Backend, name string, opts ...lock.Option) lock.Locker {
			l, _ := lock.NewMutex(b, name, opts...)
			return l
		}},
		{"rw-write", func(b backend.Backend, name string, opts ...lock.Option) lock.Locker {
			l, _ := lock.NewRWMutex(b, name, opts...)
			return l
		}},
		{"rw-read", func(b backend.Backend, name string, opts ...lock.Option) lock.Locker {
			l, _ := lock.NewRWMutex(b, name, opts...)
			return l.RLocker()
		}},
		{"semaphore", func(b backend.Backend, name string, opts ...lock.Option) lock.Locker {
			l, _ := lock.NewSemaphore(b, name, 1, opts...)
			return l
		}},
	} {
		for _, owner := range []string{"", "owner-1"} {
			t.Run(k.name+"/owner="+owner, func(t *testing.T) {
				name := lockName(t)
				opts := []lock.Option{lock.TTL(30 * time.Second)}
				if owner != "" {
					opts = append(opts, lock.Owner(owner))
				}
				l := k.mk(rb, name, opts...)
				// The other side is a writer: it conflicts with every kind.
				var other lock.Locker
				if rw, err := lock.NewRWMutex(db, name, lock.TTL(30*time.Second)); err == nil && k.name[:2] == "rw" {
					other = rw
				} else {
					other = k.mk(db, name, lock.TTL(30*time.Second))
				}
				// Acquires run twice: one holding, one level per call, the
				// same token.
				rp.on.Store(true)
				before := rp.n.Load()
				l1, err := l.Lock(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if rp.n.Load() == before {
					t.Fatal("nothing was replayed")
				}
				if err := l1.Extend(ctx, 30*time.Second); err != nil {
					t.Fatalf("replayed Extend: %v", err)
				}
				levels := []*lock.Lease{l1}
				// More levels than the call log keeps (8 calls).
				for i := 0; owner != "" && i < 9; i++ {
					l2, err := l.Lock(ctx)
					if err != nil {
						t.Fatal(err)
					}
					if l2.Token() != l1.Token() {
						t.Errorf("re-entry token %d, want %d", l2.Token(), l1.Token())
					}
					levels = append(levels, l2)
				}
				rp.on.Store(false)
				for i := len(levels) - 1; i >= 0; i-- {
					if _, err := other.TryLock(ctx); !errors.Is(err, lock.ErrLocked) {
						t.Fatalf("%d levels held, TryLock by another: %v", i+1, err)
					}
					if err := levels[i].Unlock(ctx); err != nil {
						t.Fatalf("Unlock of level %d: %v", i+1, err)
					}
				}
				o, err := other.TryLock(ctx)
				if err != nil {
					t.Fatalf("after as many Unlocks as Locks, TryLock by another: %v", err)
				}
				if o.Token() <= l1.Token() {
					t.Errorf("token %d after %d", o.Token(), l1.Token())
				}
				_ = o.Unlock(ctx)
				// Releases run twice: one level per call, and the last one
				// answers nil again. Twice, so that the logs overflow.
				for round := range 2 {
					levels = levels[:0]
					for range cap(levels) {
						lv, err := l.Lock(ctx)
						if err != nil {
							t.Fatal(err)
						}
						levels = append(levels, lv)
					}
					rp.on.Store(true)
					for i := len(levels) - 1; i >= 0; i-- {
						if _, err := other.TryLock(ctx); !errors.Is(err, lock.ErrLocked) {
							t.Fatalf("%d levels held, TryLock by another: %v", i+1, err)
						}
						if err := levels[i].Unlock(ctx); err != nil {
							t.Fatalf("replayed Unlock of level %d: %v", i+1, err)
						}
					}
					rp.on.Store(false)
					o, err = other.TryLock(ctx)
					if err != nil {
						t.Fatalf("round %d: after as many Unlocks as Locks, TryLock by another: %v", round, err)
					}
					if round == 0 {
						_ = o.Unlock(ctx)
					}
				}
				_ = o.Unlock(ctx)
			})
		}
	}
}
