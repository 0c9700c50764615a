package zklock_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/internal/testenv"
	"github.com/floodgate-dev/floodgate/lock"
	"github.com/floodgate-dev/floodgate/lock/internal/locktest"
)

// waitUntil polls cond every 10ms and fails the test after d.
func waitUntil(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Errorf("%s: not within %v", what, d)
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// expireWhileHolding is a fault inside a critical section: the holder's
// client is cut off from ZooKeeper until its session expired and another
// holder made progress (progress reports a count that must grow), then
// reconnects and waits until the lease is known lost. The holder then goes
// on to write late, as a process that was paused would.
func expireWhileHolding(t *testing.T, f *faultDialer, lease *lock.Lease, progress func() int64) func() {
	return func() {
		before := progress()
		f.partition()
		waitUntil(t, 30*time.Second, "another holder after the session expired", func() bool { return progress() > before })
		f.heal()
		select {
		case <-lease.Lost():
		case <-time.After(30 * time.Second):
			t.Error("Lost did not close after the session expired")
		}
	}
}

// TestLinearizableUnderSessionExpiry: clients increment a fenced register
// under a ZooKeeper lock while one holder's session expires in the middle
// of its critical section, twice. ZooKeeper gives the lock to the next
// client; the old holder's late write must be refused by the fencing check,
// and the recorded history must be linearizable, with no refusal of a holder
// whose lease was live (exclusion held).
func TestLinearizableUnderSessionExpiry(t *testing.T) {
	addr := testenv.SharedZooKeeper(t).Addr
	p := uniquePath(t)
	reg := &locktest.MemRegister{}
	h := &locktest.History{}
	// A TTL past the session timeout, and AutoRenew: the lease is lost
	// through the session's expiry, not its own deadline.
	opts := []lock.Option{lock.TTL(3 * sessionTimeout), lock.AutoRenew(), lock.MaxPoll(500 * time.Millisecond)}

	stop := make(chan struct{})
	errs := make(chan error, 4)
	var wg sync.WaitGroup
	for c := 1; c <= 3; c++ {
		l := mustNew(t, connect(t, addr, nil), p, opts...)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					if i >= 5 {
						return
					}
				default:
				}
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				lease, err := l.Lock(ctx)
				if err != nil {
					cancel()
					errs <- err
					return
				}
				h.Increment(ctx, c, lease, reg, nil)
				_ = lease.Unlock(ctx)
				cancel()
				time.Sleep(5 * time.Millisecond) // a history porcupine checks at once
			}
		}()
	}

	f := &faultDialer{}
	faulty := mustNew(t, connect(t, addr, f.dial), p, opts...)
	for round := range 2 {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		lease, err := faulty.Lock(ctx)
		if err != nil {
			cancel()
			t.Fatalf("round %d: %v", round, err)
		}
		out := h.Increment(ctx, 0, lease, reg, expireWhileHolding(t, f, lease, h.Won))
		if !out.ReadOK {
			t.Errorf("round %d: the holder's read was refused before the fault", round)
		}
		if out.Wrote {
			t.Errorf("round %d: the late write of a holder whose session expired was admitted (token %d)", round, lease.Token())
		}
		if err := lease.Unlock(ctx); !errors.Is(err, lock.ErrNotHeld) {
			t.Errorf("round %d: Unlock after the session expired: %v, want ErrNotHeld", round, err)
		}
		cancel()
	}
	close(stop)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if h.Refused() < 2 {
		t.Fatalf("%d refused increments, want at least the 2 late writes", h.Refused())
	}
	h.Check(t, reg, true)
}

// TestLinearizabilityCheckCatchesLateWriteAfterSessionExpiry is the
// negative control of the test above, in the same fault: a holder reads,
// its session expires, the next holder reads and writes, and the old holder
// writes late. Against a register that ignores tokens the checker must
// reject the history; the fenced register refuses the late write.
func TestLinearizabilityCheckCatchesLateWriteAfterSessionExpiry(t *testing.T) {
	addr := testenv.SharedZooKeeper(t).Addr
	p := uniquePath(t)
	opts := []lock.Option{lock.TTL(3 * sessionTimeout), lock.AutoRenew()}
	f := &faultDialer{}
	old := mustNew(t, connect(t, addr, f.dial), p, opts...)
	next := mustNew(t, connect(t, addr, nil), p, opts...)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	regs := []*locktest.MemRegister{{Unfenced: true}, {}}
	hs := []*locktest.History{{}, {}}
	a, err := old.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	callA := time.Now()
	var readA [2]int64
	for i, r := range regs {
		readA[i], _, _ = r.Read(ctx, a.Token())
	}
	waiting := acquired(t, next)
	var progressed int64
	expireWhileHolding(t, f, a, func() int64 {
		select {
		case r := <-waiting:
			if r.err != nil {
				t.Fatal(r.err)
			}
			// The next holder reads and writes both registers.
			for i, reg := range regs {
				hs[i].Increment(ctx, 1, r.lease, reg, nil)
			}
			_ = r.lease.Unlock(ctx)
			progressed = 1
		default:
		}
		return progressed
	})()
	for i, r := range regs {
		wrote, _ := r.Write(ctx, a.Token(), readA[i]+1)
		hs[i].Add(0, callA, time.Now(), locktest.IncOutput{Read: readA[i], ReadOK: true, Wrote: wrote, Lost: true})
	}
	if hs[0].Linearizable() {
		t.Fatal("two increments from the same read were judged linearizable")
	}
	if !hs[1].Linearizable() {
		t.Fatal("the fenced history is not linearizable")
	}
	if v, _, _ := regs[1].Read(ctx, 1<<62); v != 1 {
		t.Fatalf("the fenced register holds %d, want 1: it admitted the late write", v)
	}
}
