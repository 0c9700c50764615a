package lock_test

// Issue 27, "Locks across a stall": a Lock or Unlock whose Redis is paused
// (SIGSTOP) for longer than go-redis's ReadTimeout goes out twice. The first
// send waits in the stopped server's socket buffer; go-redis gives up on it
// and resends the same command on a new connection. When Redis resumes it
// runs both, and the caller acts on the resend's reply. The lease must hold
// one level per Lock call, and the lock must be free when Unlock returns nil.

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/internal/backendtest"
	"github.com/floodgate-dev/floodgate/internal/testenv"
	"github.com/floodgate-dev/floodgate/lock"
)

// stallReadTimeout is the ReadTimeout of the clients under test, and
// stallPause how long Redis is stopped: longer, so that every call is resent,
// and short enough that the resend's connection hand-shake, sent at most
// go-redis's 512ms retry back-off after the timeout, still has 700ms of its
// own ReadTimeout left when Redis resumes (the 6s pause under the
// default 5s timeout, scaled down).
const (
	stallReadTimeout = time.Second
	stallPause       = 1300 * time.Millisecond
)

// stallCase is one kind of lock: mk makes the locker under test, other one
// of another owner that conflicts with it.
type stallCase struct {
	name  string
	owner string // Owner, "" for none; with it the lock is reentrant
	mk    func(b backend.Backend, name string, opts ...lock.Option) lock.Locker
	other func(b backend.Backend, name string) lock.Locker
}

func stallCases() []stallCase {
	ttl := lock.TTL(30 * time.Second)
	mutex := func(b backend.Backend, name string, opts ...lock.Option) lock.Locker {
		l, _ := lock.NewMutex(b, name, append(opts, ttl)...)
		return l
	}
	writer := func(b backend.Backend, name string, opts ...lock.Option) lock.Locker {
		l, _ := lock.NewRWMutex(b, name, append(opts, ttl)...)
		return l
	}
	reader := func(b backend.Backend, name string, opts ...lock.Option) lock.Locker {
		l, _ := lock.NewRWMutex(b, name, append(opts, ttl)...)
		return l.RLocker()
	}
	sem := func(b backend.Backend, name string, opts ...lock.Option) lock.Locker {
		l, _ := lock.NewSemaphore(b, name, 1, append(opts, ttl)...)
		return l
	}
	var cases []stallCase
	for _, k := range []struct {
		name  string
		mk    func(b backend.Backend, name string, opts ...lock.Option) lock.Locker
		other func(b backend.Backend, name string) lock.Locker
	}{
		{"mutex", mutex, func(b backend.Backend, name string) lock.Locker { return mutex(b, name) }},
		{"rw-write", writer, func(b backend.Backend, name string) lock.Locker { return writer(b, name) }},
		{"rw-read", reader, func(b backend.Backend, name string) lock.Locker { return writer(b, name) }},
		{"semaphore", sem, func(b backend.Backend, name string) lock.Locker { return sem(b, name) }},
	} {
		// Owner ids differ between kinds, so that the slow log tells their
		// calls apart.
		for _, owner := range []string{"", "stall-" + k.name} {
			cases = append(cases, stallCase{name: k.name + "/owner=" + owner, owner: owner, mk: k.mk, other: k.other})
		}
	}
	return cases
}

// stalled stops r, runs each of calls in a goroutine of its own, resumes r
// after stallPause and returns the calls' errors once all have returned.
// Redis's slow log, set to record every command, holds what ran meanwhile.
func stalled(t *testing.T, r *testenv.Redis, calls []func() error) []error {
	t.Helper()
	if _, err := r.Do(context.Background(), "SLOWLOG", "RESET"); err != nil {
		t.Fatal(err)
	}
	if err := r.Pause(); err != nil {
		t.Fatal(err)
	}
	errs := make([]error, len(calls))
	var wg sync.WaitGroup
	for i, call := range calls {
		wg.Go(func() { errs[i] = call() })
	}
	time.Sleep(stallPause)
	if err := r.Resume(); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	return errs
}

// scriptRuns returns how many script calls in Redis's slow log name owner
// among their arguments.
func scriptRuns(t *testing.T, r *testenv.Redis, owner string) int {
	t.Helper()
	v, err := r.Do(context.Background(), "SLOWLOG", "GET", "-1")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range v.([]any) {
		args, _ := e.([]any)[3].([]any)
		if len(args) == 0 || !strings.EqualFold(args[0].(string), "evalsha") {
			continue
		}
		for _, a := range args[1:] {
			if a == owner {
				n++
				break
			}
		}
	}
	return n
}

// TestStallResendsActOnce: Lock and then Unlock, each through a Redis
// stopped past the client's ReadTimeout, on every kind of lock, with and
// without Owner (then Lock is a second level of the owner's holding). Each
// script runs twice; yet the lease holds one level, and when Unlock returns
// nil the level is gone: another owner's TryLock succeeds at once (with a
// higher token) unless the owner still holds its first level.
func TestStallResendsActOnce(t *testing.T) {
	r := testenv.NewRedis(t)
	t.Cleanup(func() { _ = r.Resume() }) // a failed test never leaves it stopped
	ctx := context.Background()
	for _, args := range [][]string{
		{"CONFIG", "SET", "slowlog-log-slower-than", "0"},
		{"CONFIG", "SET", "slowlog-max-len", "100000"},
	} {
		if _, err := r.Do(ctx, args...); err != nil {
			t.Fatal(err)
		}
	}
	oc := redis.NewClient(&redis.Options{Addr: r.Addr})
	t.Cleanup(func() { oc.Close() })
	ob := backendtest.NewRedis(t, oc, backend.WithPrefix("ls"))

	type run struct {
		stallCase
		l, other     lock.Locker
		outer, lease *lock.Lease // outer: the owner's first level, taken before the stall
	}
	var runs []*run
	for _, c := range stallCases() {
		// One client per case, as in the issue: go-redis defaults but a
		// shorter ReadTimeout; its one pooled connection is the first send's.
		cl := redis.NewClient(&redis.Options{Addr: r.Addr, ReadTimeout: stallReadTimeout})
		t.Cleanup(func() { cl.Close() })
		b := backendtest.NewRedis(t, cl, backend.WithPrefix("ls"))
		name := lockName(t) + "-" + c.name
		var opts []lock.Option
		if c.owner != "" {
			opts = append(opts, lock.Owner(c.owner))
		}
		u := &run{stallCase: c, l: c.mk(b, name, opts...), other: c.other(ob, name)}
		warm(t, u.l)
		if c.owner != "" {
			var err error
			if u.outer, err = u.l.Lock(ctx); err != nil {
				t.Fatal(err)
			}
		}
		runs = append(runs, u)
	}
	calls := make([]func() error, len(runs))
	for i, u := range runs {
		calls[i] = func() (err error) {
			u.lease, err = u.l.Lock(ctx)
			return err
		}
	}
	for i, err := range stalled(t, r, calls) {
		if err != nil {
			t.Fatalf("%s: Lock across the stall: %v", runs[i].name, err)
		}
	}
	for _, u := range runs {
		if n := scriptRuns(t, r, u.lease.Owner()); n < 2 {
			t.Fatalf("%s: the acquire ran %d times: the stall did not make go-redis resend it", u.name, n)
		}
		if _, err := u.other.TryLock(ctx); !errors.Is(err, lock.ErrLocked) {
			t.Fatalf("%s: held after Lock, TryLock by another owner: %v, want ErrLocked", u.name, err)
		}
		if u.outer != nil && u.lease.Token() != u.outer.Token() {
			t.Errorf("%s: re-entry token %d, want the first level's %d", u.name, u.lease.Token(), u.outer.Token())
		}
	}

	for i, u := range runs {
		calls[i] = func() error { return u.lease.Unlock(ctx) }
	}
	for i, err := range stalled(t, r, calls) {
		if err != nil {
			t.Fatalf("%s: Unlock across the stall: %v", runs[i].name, err)
		}
	}
	for _, u := range runs {
		if n := scriptRuns(t, r, u.lease.Owner()); n < 2 {
			t.Fatalf("%s: the release ran %d times: the stall did not make go-redis resend it", u.name, n)
		}
		if u.outer != nil {
			if _, err := u.other.TryLock(ctx); !errors.Is(err, lock.ErrLocked) {
				t.Fatalf("%s: one level left after the resent Unlock, TryLock by another owner: %v, want ErrLocked", u.name, err)
			}
			if err := u.outer.Unlock(ctx); err != nil {
				t.Fatalf("%s: Unlock of the first level: %v", u.name, err)
			}
		}
		o, err := u.other.TryLock(ctx)
		if err != nil {
			t.Fatalf("%s: Unlock returned nil, yet TryLock by another owner at once: %v", u.name, err)
		}
		if o.Token() <= u.lease.Token() {
			t.Errorf("%s: token %d after %d", u.name, o.Token(), u.lease.Token())
		}
		if err := o.Unlock(ctx); err != nil {
			t.Fatal(err)
		}
	}
}
