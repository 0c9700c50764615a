package idempotency

import (
	"context"
	"sync"
	"time"
)

// runLease keeps a runner's in-flight marker alive while fn runs, even when
// the caller's context has ended (fn is still running): it renews the lease
// every Lease/3 (retrying failed renewals every Lease/10) and
// cancels fn's context with cause ErrLeaseLost as soon as the lease may have
// passed to another caller: a renewal found it gone, or the last confirmed
// deadline passed on the local clock.
type runLease struct {
	s          *Store
	key, owner string
	ctx        context.Context
	cancel     context.CancelCauseFunc
	deadline   *time.Timer
	lost       chan struct{} // closed by markLost
	lostOnce   sync.Once
	stop       chan struct{}
	done       chan struct{}
}

func (l *runLease) markLost() {
	l.lostOnce.Do(func() {
		close(l.lost)
		l.cancel(ErrLeaseLost)
	})
}

// startLease starts the renewal of a lease claimed by a request sent at
// start; its deadline by the store's clock is no earlier than start + Lease.
func (s *Store) startLease(parent context.Context, key, owner string, start time.Time) *runLease {
	ctx, cancel := context.WithCancelCause(parent)
	l := &runLease{
		s: s, key: key, owner: owner,
		ctx: ctx, cancel: cancel,
		lost: make(chan struct{}),
		stop: make(chan struct{}),
		done: make(chan struct{}),
	}
	l.deadline = time.AfterFunc(time.Until(start.Add(s.cfg.lease)), l.markLost)
	go l.renew()
	return l
}

// end stops the renewal, waits for it, and releases fn's context. It must
// be called once.
func (l *runLease) end() {
	close(l.stop)
	<-l.done
	l.deadline.Stop()
	l.cancel(context.Canceled)
}

func (l *runLease) renew() {
	defer close(l.done)
	lease := l.s.cfg.lease
	every := lease / 3
	t := time.NewTimer(every)
	defer t.Stop()
	tick := t.C
	if l.s.noRenew {
		tick = nil
	}
	for {
		select {
		case <-l.stop:
			return
		case <-l.lost:
			return
		case <-tick:
		}
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(l.ctx), every)
		ok, err := l.s.d.renew(ctx, l.key, l.owner, lease)
		cancel()
		switch {
		case err != nil:
			t.Reset(max(lease/10, time.Millisecond))
		case !ok:
			l.markLost()
			return
		default:
			l.deadline.Reset(time.Until(start.Add(lease)))
			t.Reset(every)
		}
	}
}
