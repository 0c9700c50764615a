package ratelimit

import (
	"context"
	"runtime"
	"testing"
	"time"
	"weak"

	"github.com/floodgate-dev/floodgate/backend"
)

// TestLeasedFlushesInBackground: a key gone quiet gives back its lease's
// unspent units without anyone calling Flush, and is forgotten.
func TestLeasedFlushesInBackground(t *testing.T) {
	l, peek := quietLease(t, LeaseTarget(10*time.Millisecond), LeaseFlushEvery(20*time.Millisecond))
	if got := peek(); got != 990 && got != 999 { // 999 if flushed already
		t.Fatalf("after the grant %d left, want 990", got)
	}
	deadline := time.Now().Add(10 * time.Second)
	for peek() != 999 {
		if time.Now().After(deadline) {
			t.Fatalf("the quiet key still holds its lease: %d left, want 999; %+v", peek(), l.Stats())
		}
		time.Sleep(5 * time.Millisecond)
	}
	if st := l.Stats(); st.GiveBacks != 1 || st.Decisions != 1 || st.FlushErrors != 0 {
		t.Errorf("stats %+v: want 1 give-back, 1 decision, no flush errors", st)
	}
	for time.Now().Before(deadline) {
		if _, ok := l.keys.Load("k"); !ok {
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Error("the quiet key is still in the Leased's map")
}

// TestLeasedFlusherStops: the background flusher ends once its Leased is
// collected.
func TestLeasedFlusherStops(t *testing.T) {
	m := backend.NewMemory()
	defer m.Close()
	lim, err := New(m, FixedWindow{Limit: 10, Window: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	func() {
		l, err := NewLeased(lim, LeaseFlushEvery(-1))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := l.Allow(context.Background(), "k"); err != nil {
			t.Fatal(err)
		}
		wp := weak.Make(l)
		go func() { flushEvery(wp, time.Millisecond); close(done) }()
	}()
	deadline := time.After(10 * time.Second)
	for {
		runtime.GC()
		select {
		case <-done:
			return
		case <-deadline:
			t.Fatal("the flusher still runs 10 s after its Leased was dropped")
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// TestLeasedNoBackgroundFlush: with LeaseFlushEvery(-1) a quiet key keeps
// its lease until someone calls Flush; a LeaseFlushEvery above MaxPeriod is
// an error.
func TestLeasedNoBackgroundFlush(t *testing.T) {
	ctx := context.Background()
	l, peek := quietLease(t, LeaseTarget(time.Millisecond), LeaseFlushEvery(-1))
	time.Sleep(50 * time.Millisecond) // 25 lifetimes
	if got := peek(); got != 990 {
		t.Errorf("no flusher: %d left, want 990 (the lease still held)", got)
	}
	if err := l.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if got := peek(); got != 999 {
		t.Errorf("after Flush: %d left, want 999", got)
	}
	if _, err := NewLeased(l.Limiter(), LeaseFlushEvery(MaxPeriod+time.Second)); err == nil {
		t.Error("LeaseFlushEvery above MaxPeriod: no error")
	}
}

// quietLease returns a Leased of 10-unit leases of a FixedWindow of 1000 an
// hour on the memory backend, with opts, whose key "k" has taken one lease
// and admitted one unit, and a peek at what the store has left of "k".
func quietLease(t *testing.T, opts ...LeaseOption) (*Leased, func() int64) {
	t.Helper()
	ctx := context.Background()
	m := backend.NewMemory()
	t.Cleanup(func() { m.Close() })
	lim, err := New(m, FixedWindow{Limit: 1000, Window: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	l, err := NewLeased(lim, append([]LeaseOption{LeaseSize(10, 10)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	if r, err := l.Allow(ctx, "k"); err != nil || !r.Allowed {
		t.Fatalf("Allow: %+v %v", r, err)
	}
	return l, func() int64 {
		r, err := lim.AllowN(ctx, "k", 0)
		if err != nil {
			t.Fatal(err)
		}
		return r.Remaining
	}
}
