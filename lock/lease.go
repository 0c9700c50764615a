package lock

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/floodgate-dev/floodgate/lock/internal/lockdriver"
)

func init() {
	lockdriver.SetConstructors(
		func(d lockdriver.Driver, o lockdriver.Options) any { return newLocker(d, o) },
		func(r, w lockdriver.Driver, o lockdriver.Options) any { return newRWLocker(r, w, o) })
}

// newLocker returns a Locker over a Driver, with leases, AutoRenew and Lost
// handled here; o comes from lockdriver.BuildOptions. The stores of
// lock/sqllock and lock/zklock reach it as lockdriver.NewLocker.
func newLocker(d lockdriver.Driver, o lockdriver.Options) Locker { return &locker{d: d, o: o} }

type locker struct {
	d lockdriver.Driver
	o lockdriver.Options
}

func (l *locker) Lock(ctx context.Context) (*Lease, error) { return l.acquire(ctx, true) }

func (l *locker) TryLock(ctx context.Context) (*Lease, error) { return l.acquire(ctx, false) }

func (l *locker) acquire(ctx context.Context, wait bool) (*Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	owner := l.o.Owner
	if owner == "" {
		owner = lockdriver.NewOwnerID()
	}
	return acquireLease(ctx, l.d, owner, l.o, wait)
}

// acquireLease takes d for owner and wraps the grant in a Lease.
//
// The lease's local deadline counts from the moment the acquiring request was
// sent. When Acquire waited, that moment is unknown here, so a grant that
// arrives more than a TTL after the call began is confirmed with an Extend,
// and the deadline counts from that request.
func acquireLease(ctx context.Context, d lockdriver.Driver, owner string, o lockdriver.Options, wait bool) (*Lease, error) {
	for {
		start := time.Now()
		g, err := d.Acquire(ctx, owner, o.TTL, wait)
		if err != nil {
			return nil, err
		}
		if time.Since(start) < o.TTL {
			return newLease(d, owner, g.Token, start, o), nil
		}
		confirm := time.Now()
		err = d.Extend(ctx, owner, o.TTL)
		if err == nil {
			return newLease(d, owner, g.Token, confirm, o), nil
		}
		if !errors.Is(err, ErrNotHeld) {
			_ = d.Release(context.WithoutCancel(ctx), owner)
			return nil, err
		}
		if !wait {
			return nil, ErrLocked
		}
	}
}

// Lease is a held lock. Its methods are safe for concurrent use.
type Lease struct {
	d     lockdriver.Driver
	owner string
	token int64
	ttl   time.Duration

	mu       sync.Mutex
	deadline time.Time // last confirmed end of the lease, on the monotonic clock
	timer    *time.Timer
	ended    bool // Unlock was called
	lost     chan struct{}
	lostOnce sync.Once
	stop     chan struct{}
	renewing sync.WaitGroup
}

func newLease(d lockdriver.Driver, owner string, token int64, start time.Time, o lockdriver.Options) *Lease {
	l := &Lease{
		d:        d,
		owner:    owner,
		token:    token,
		ttl:      o.TTL,
		deadline: start.Add(o.TTL),
		lost:     make(chan struct{}),
		stop:     make(chan struct{}),
	}
	l.timer = time.AfterFunc(time.Until(l.deadline), l.markLost)
	if o.AutoRenew {
		l.renewing.Add(1)
		go l.autoRenew()
	}
	return l
}

// Token returns the fencing token: strictly increasing per lock name across
// all holders. A resource should accept a write only with a token not lower
// than the last one it accepted (see Fence).
func (l *Lease) Token() int64 { return l.token }

// Owner returns the owner id the lease was acquired for.
func (l *Lease) Owner() string { return l.owner }

// Deadline returns the last confirmed end of the lease on the local monotonic
// clock: the time of the request that set it plus its TTL, so never later than
// the store's own deadline.
func (l *Lease) Deadline() time.Time {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.deadline
}

// Lost returns a channel that is closed as soon as the lease can no longer be
// known to be held: a renewal or Extend found it gone or owned by another, or
// its last confirmed deadline passed on the local clock. It is also closed by
// Unlock, so that goroutines waiting on it end.
func (l *Lease) Lost() <-chan struct{} { return l.lost }

func (l *Lease) markLost() { l.lostOnce.Do(func() { close(l.lost) }) }

// Unlock releases one hold level. It returns ErrNotHeld when the lease was
// lost (expired, removed or taken over) — it never frees another owner's lock
// — and when Unlock was already called. Store errors are returned as they
// are; the lease then ends at its TTL.
func (l *Lease) Unlock(ctx context.Context) error {
	l.mu.Lock()
	if l.ended {
		l.mu.Unlock()
		return ErrNotHeld
	}
	l.ended = true
	close(l.stop)
	l.timer.Stop()
	l.mu.Unlock()
	l.renewing.Wait()
	err := l.d.Release(ctx, l.owner)
	l.markLost()
	return err
}

// Extend makes the lease end d from now, by the store's clock. It returns
// ErrNotHeld, and closes Lost, when the lease was already lost; it never
// re-acquires a lost lock.
func (l *Lease) Extend(ctx context.Context, d time.Duration) error {
	if d < time.Millisecond {
		return errors.New("lock: Extend needs a duration >= 1ms")
	}
	l.mu.Lock()
	ended := l.ended
	l.mu.Unlock()
	if ended {
		return ErrNotHeld
	}
	return l.extend(ctx, d)
}

func (l *Lease) extend(ctx context.Context, d time.Duration) error {
	start := time.Now()
	err := l.d.Extend(ctx, l.owner, d)
	if errors.Is(err, ErrNotHeld) {
		l.markLost()
		return err
	}
	if err != nil {
		return err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	select {
	case <-l.lost:
		return ErrNotHeld // the deadline passed before the answer came
	default:
	}
	// The store's deadline is now its clock + d, no earlier than start + d.
	l.deadline = start.Add(d)
	l.timer.Reset(time.Until(l.deadline))
	return nil
}

// autoRenew extends the lease by its TTL every TTL/3, retrying transient
// errors every TTL/10, until Unlock or loss.
func (l *Lease) autoRenew() {
	defer l.renewing.Done()
	every := l.ttl / 3
	t := time.NewTimer(every)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-l.lost:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), every)
		err := l.extend(ctx, l.ttl)
		cancel()
		switch {
		case errors.Is(err, ErrNotHeld):
			return
		case err != nil:
			t.Reset(max(l.ttl/10, time.Millisecond))
		default:
			t.Reset(every)
		}
	}
}
