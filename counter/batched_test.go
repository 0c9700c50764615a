package counter_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/counter"
	"github.com/floodgate-dev/floodgate/internal/testenv"
)

// TestBatchedSum: goroutines add positive and negative deltas to a few keys
// while background flushes and explicit Flushes run; after Close every key's
// stored value equals the sum of what was added, Add returns ErrClosed and a
// second Close returns nil.
func TestBatchedSum(t *testing.T) {
	const workers, each, keys = 16, 3000, 5
	for _, bk := range threeBackends() {
		t.Run(bk.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			c, err := counter.New(bk.Make(t, nil), "views")
			if err != nil {
				t.Fatal(err)
			}
			bt, err := counter.NewBatched(c, 2*time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			var want [keys]atomic.Int64
			var wg sync.WaitGroup
			for w := range workers {
				wg.Go(func() {
					for i := range each {
						k := (w + i) % keys
						d := int64(i%7 - 2)
						if err := bt.Add(fmt.Sprint("page-", k), d); err != nil {
							t.Error(err)
							return
						}
						want[k].Add(d)
						if i%1000 == 999 {
							if err := bt.Flush(ctx); err != nil {
								t.Error(err)
							}
						}
					}
				})
			}
			wg.Wait()
			cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			defer cancel()
			if err := bt.Close(cctx); err != nil {
				t.Fatal(err)
			}
			for k := range keys {
				got, err := c.Get(ctx, fmt.Sprint("page-", k))
				if err != nil {
					t.Fatal(err)
				}
				if got != want[k].Load() {
					t.Errorf("page-%d: stored %d, added %d", k, got, want[k].Load())
				}
			}
			if err := bt.Add("page-0", 1); !errors.Is(err, counter.ErrClosed) {
				t.Errorf("Add after Close: %v, want ErrClosed", err)
			}
			if err := bt.Close(ctx); err != nil {
				t.Errorf("second Close: %v", err)
			}
			if got, _ := c.Get(ctx, "page-0"); got != want[0].Load() {
				t.Errorf("page-0 changed after Close: %d", got)
			}
		})
	}
}

// waitFor polls cond every 5ms for up to 5s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestBatchedBackground: sums reach the store without Flush or Close, on the
// interval, and early when MaxKeys keys are pending.
func TestBatchedBackground(t *testing.T) {
	ctx := context.Background()
	c, err := counter.New(newRedis(t, nil), "bg")
	if err != nil {
		t.Fatal(err)
	}
	stored := func(key string, want int64) func() bool {
		return func() bool { v, err := c.Get(ctx, key); return err == nil && v == want }
	}

	bt, err := counter.NewBatched(c, 20*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if err := bt.Add("k", 4); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the interval flush", stored("k", 4))
	if err := bt.Close(ctx); err != nil {
		t.Fatal(err)
	}

	early, err := counter.NewBatched(c, time.Hour, counter.MaxKeys(10))
	if err != nil {
		t.Fatal(err)
	}
	defer early.Close(ctx)
	for i := range 9 {
		if err := early.Add(fmt.Sprint("m", i), 1); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(50 * time.Millisecond)
	if n := early.Pending(); n != 9 {
		t.Fatalf("9 keys < MaxKeys: Pending = %d, want 9 (no flush yet)", n)
	}
	if err := early.Add("m9", 1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the early flush at MaxKeys", stored("m9", 1))
	waitFor(t, "an empty buffer", func() bool { return early.Pending() == 0 })
}

// TestBatchedOutage: while the Redis server is down, flushes fail and keep
// the sums (OnError sees the failures), Close gives up when its context ends
// and reports it; after a restart a second Close stores everything exactly
// once (a refused connection never reaches Redis, so nothing is doubled).
func TestBatchedOutage(t *testing.T) {
	ctx := context.Background()
	srv := testenv.NewRedis(t)
	c, err := counter.New(newRedisAt(t, srv.Addr, nil), "outage")
	if err != nil {
		t.Fatal(err)
	}
	var flushErrs atomic.Int64
	bt, err := counter.NewBatched(c, 10*time.Millisecond,
		counter.FlushTimeout(time.Second), counter.OnError(func(error) { flushErrs.Add(1) }))
	if err != nil {
		t.Fatal(err)
	}
	if err := bt.Add("a", 5); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the first flush", func() bool { v, _ := c.Get(ctx, "a"); return v == 5 })

	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		if err := bt.Add(fmt.Sprint("k", i%3), 2); err != nil {
			t.Fatal(err)
		}
	}
	if err := bt.Add("a", 1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a failed background flush", func() bool { return flushErrs.Load() > 0 })
	cctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err = bt.Close(cctx)
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "pending") {
		t.Fatalf("Close with the server down: %v; want pending keys and DeadlineExceeded", err)
	}
	if n := bt.Pending(); n != 4 {
		t.Fatalf("after a failed Close: Pending = %d keys, want 4", n)
	}
	if err := bt.Add("a", 1); !errors.Is(err, counter.ErrClosed) {
		t.Fatalf("Add after a failed Close: %v, want ErrClosed", err)
	}

	if err := srv.Restart(); err != nil { // no AOF: the server comes back empty
		t.Fatal(err)
	}
	cctx, cancel = context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := bt.Close(cctx); err != nil {
		t.Fatalf("Close after the restart: %v", err)
	}
	want := map[string]int64{"a": 1, "k0": 8, "k1": 6, "k2": 6}
	for k, w := range want {
		if v, err := c.Get(ctx, k); err != nil || v != w {
			t.Errorf("%s = %d, %v; want %d", k, v, err, w)
		}
	}
}

// TestBatchedStall: a flush that times out against a stalled Redis is not
// lost, and it is not counted twice when Redis comes back and runs the sends
// that were waiting for it: every resend of a sum in doubt repeats its
// replay ID. (Before, each flush sent the sum again as a new Add, and a
// scripts/test.sh run on a busy machine saw TestBatchedOutage count its sums
// 2 to 3 times.)
func TestBatchedStall(t *testing.T) {
	ctx := context.Background()
	srv := testenv.NewRedis(t)
	c, err := counter.New(newRedisAt(t, srv.Addr, nil), "stall")
	if err != nil {
		t.Fatal(err)
	}
	var flushErrs atomic.Int64
	bt, err := counter.NewBatched(c, 5*time.Millisecond,
		counter.FlushTimeout(50*time.Millisecond), counter.OnError(func(error) { flushErrs.Add(1) }))
	if err != nil {
		t.Fatal(err)
	}
	if err := bt.Add("a", 5); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the first flush", func() bool { v, _ := c.Get(ctx, "a"); return v == 5 })

	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			srv.Resume()
		}
	}()
	if err := bt.Add("a", 3); err != nil {
		t.Fatal(err)
	}
	if err := bt.Add("b", 7); err != nil {
		t.Fatal(err)
	}
	// Several flushes time out while Redis is stopped: each leaves its
	// sends queued on the clients' connections.
	waitFor(t, "five failed flushes", func() bool { return flushErrs.Load() >= 5 })
	if err := bt.Add("a", 1); err != nil { // a newer Add of a key in doubt
		t.Fatal(err)
	}
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}
	resumed = true
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := bt.Close(cctx); err != nil {
		t.Fatalf("Close after the stall: %v", err)
	}
	// Sends still queued when Close returned may run after it: give them
	// time to, then read.
	time.Sleep(200 * time.Millisecond)
	for k, w := range map[string]int64{"a": 9, "b": 7} {
		if v, err := c.Get(ctx, k); err != nil || v != w {
			t.Errorf("%s = %d, %v; want %d, each sum counted once after %d failed flushes", k, v, err, w, flushErrs.Load())
		}
	}
}

// TestBatchedOverflow: a sum that the stored value cannot take is dropped and
// reported, not retried forever; pending sums beyond ±MaxValue are refused.
func TestBatchedOverflow(t *testing.T) {
	ctx := context.Background()
	c, err := counter.New(newRedis(t, nil), "big")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Add(ctx, "k", counter.MaxValue); err != nil {
		t.Fatal(err)
	}
	bt, err := counter.NewBatched(c, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := bt.Add("k", 1); err != nil {
		t.Fatal(err)
	}
	if err := bt.Add("j", counter.MaxValue); err != nil {
		t.Fatal(err)
	}
	if err := bt.Add("j", 1); !errors.Is(err, counter.ErrOverflow) {
		t.Fatalf("pending sum beyond MaxValue: %v, want ErrOverflow", err)
	}
	err = bt.Close(ctx)
	if !errors.Is(err, counter.ErrOverflow) || !strings.Contains(err.Error(), `dropped the sum of "k"`) {
		t.Fatalf("Close: %v, want the dropped sum of k reported", err)
	}
	if n := bt.Pending(); n != 0 {
		t.Errorf("Pending = %d after dropping, want 0", n)
	}
	if v, _ := c.Get(ctx, "k"); v != counter.MaxValue {
		t.Errorf("k = %d, want MaxValue unchanged", v)
	}
	if v, _ := c.Get(ctx, "j"); v != counter.MaxValue {
		t.Errorf("j = %d, want MaxValue", v)
	}
	if err := bt.Close(ctx); err != nil {
		t.Errorf("second Close: %v", err)
	}
}
