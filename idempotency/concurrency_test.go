package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/idempotency"
)

func TestConsumeTokenOnceUnderConcurrency(t *testing.T) {
	for _, bk := range coreBackends() {
		t.Run(bk.Name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t, bk.Make(t, nil))
			ctx := context.Background()
			for round := range 5 {
				tok, err := s.IssueToken(ctx)
				if err != nil {
					t.Fatal(err)
				}
				var wins, fails atomic.Int64
				var wg sync.WaitGroup
				start := make(chan struct{})
				for range 64 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						<-start
						ok, err := s.ConsumeToken(ctx, tok)
						switch {
						case err != nil:
							fails.Add(1)
						case ok:
							wins.Add(1)
						}
					}()
				}
				close(start)
				wg.Wait()
				if wins.Load() != 1 || fails.Load() != 0 {
					t.Fatalf("round %d: %d of 64 consumers saw true (%d errors), want exactly 1", round, wins.Load(), fails.Load())
				}
			}
		})
	}
}

// duplicates runs Do with one key from n goroutines at once; fn takes hold
// to run. It returns how often fn ran and every caller's outcome.
func duplicates(t *testing.T, s *idempotency.Store, key string, n int, hold time.Duration) (int64, []string) {
	t.Helper()
	var runs atomic.Int64
	outs := make([]string, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			res, replayed, err := s.Do(context.Background(), key, func(context.Context) ([]byte, error) {
				r := runs.Add(1)
				time.Sleep(hold)
				return fmt.Appendf(nil, "result of run %d", r), nil
			})
			switch {
			case errors.Is(err, idempotency.ErrInFlight):
				outs[i] = "in flight"
			case err != nil:
				outs[i] = "error: " + err.Error()
			default:
				outs[i] = fmt.Sprintf("%s replayed=%v", res, replayed)
			}
		}()
	}
	close(start)
	wg.Wait()
	return runs.Load(), outs
}

func TestDoOnceUnderConcurrency(t *testing.T) {
	for _, bk := range coreBackends() {
		t.Run(bk.Name, func(t *testing.T) {
			t.Parallel()
			b := bk.Make(t, nil)
			t.Run("no wait", func(t *testing.T) {
				runs, outs := duplicates(t, newStore(t, b), "no-wait", 32, 300*ms)
				count := map[string]int{}
				for _, o := range outs {
					count[o]++
				}
				if runs != 1 || count["result of run 1 replayed=false"] != 1 ||
					count["in flight"]+count["result of run 1 replayed=true"] != 31 {
					t.Fatalf("fn ran %d times; outcomes %v", runs, count)
				}
			})
			t.Run("wait for the result", func(t *testing.T) {
				runs, outs := duplicates(t, newStore(t, b, idempotency.WaitForResult(20*time.Second)), "wait", 32, 300*ms)
				count := map[string]int{}
				for _, o := range outs {
					count[o]++
				}
				if runs != 1 || count["result of run 1 replayed=false"] != 1 || count["result of run 1 replayed=true"] != 31 {
					t.Fatalf("fn ran %d times; outcomes %v", runs, count)
				}
			})
		})
	}
}

// TestLeaseRenewedWhileRunning: fn runs for several lease lengths; the
// renewed lease keeps every duplicate out.
func TestLeaseRenewedWhileRunning(t *testing.T) {
	for _, bk := range coreBackends() {
		t.Run(bk.Name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t, bk.Make(t, nil), idempotency.Lease(600*ms))
			ctx := context.Background()
			var runs atomic.Int64
			started := make(chan struct{}, 1)
			fn := func(ctx context.Context) ([]byte, error) {
				runs.Add(1)
				select {
				case started <- struct{}{}:
				default:
				}
				select {
				case <-time.After(2 * time.Second):
				case <-ctx.Done():
					return nil, context.Cause(ctx)
				}
				return []byte("slow"), nil
			}
			done := make(chan error, 1)
			go func() {
				_, _, err := s.Do(ctx, "slow", fn)
				done <- err
			}()
			<-started
			for i := 0; ; i++ {
				select {
				case err := <-done:
					if err != nil {
						t.Fatalf("runner: %v", err)
					}
					if runs.Load() != 1 || i < 5 {
						t.Fatalf("fn ran %d times; %d duplicates tried", runs.Load(), i)
					}
					return
				default:
				}
				res, replayed, err := s.Do(ctx, "slow", fn)
				if !errors.Is(err, idempotency.ErrInFlight) && !(replayed && string(res) == "slow") {
					t.Fatalf("duplicate %d during the run: %q %v %v", i, res, replayed, err)
				}
				time.Sleep(100 * ms)
			}
		})
	}
}

// TestWaiterWokenByResult: waiters are woken when the result is stored, not
// by their poll (MaxPoll is a minute here).
func TestWaiterWokenByResult(t *testing.T) {
	for _, bk := range coreBackends() {
		t.Run(bk.Name, func(t *testing.T) {
			t.Parallel()
			b := bk.Make(t, nil)
			opts := []idempotency.Option{idempotency.Lease(time.Minute), idempotency.MaxPoll(time.Minute), idempotency.WaitForResult(time.Minute)}
			s := newStore(t, b, opts...)
			ctx := context.Background()
			started, release := make(chan struct{}), make(chan struct{})
			go func() {
				_, _, _ = s.Do(ctx, "woken", func(context.Context) ([]byte, error) {
					close(started)
					<-release
					return []byte("stored"), nil
				})
			}()
			<-started
			got := make(chan string, 1)
			go func() {
				res, replayed, err := newStore(t, b, opts...).Do(ctx, "woken", func(context.Context) ([]byte, error) {
					return []byte("waiter ran fn"), nil
				})
				got <- fmt.Sprintf("%s %v %v", res, replayed, err)
			}()
			time.Sleep(200 * ms) // the waiter is asleep by now
			close(release)
			select {
			case g := <-got:
				if g != "stored true <nil>" {
					t.Fatalf("waiter got %s", g)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the waiter was not woken by the stored result")
			}
		})
	}
}

// TestWaiterTakesOverAfterError: the runner's error is not stored, so a
// waiter claims the key and runs its own fn.
func TestWaiterTakesOverAfterError(t *testing.T) {
	for _, bk := range coreBackends() {
		t.Run(bk.Name, func(t *testing.T) {
			t.Parallel()
			b := bk.Make(t, nil)
			opts := []idempotency.Option{idempotency.MaxPoll(time.Minute), idempotency.WaitForResult(time.Minute)}
			s := newStore(t, b, opts...)
			ctx := context.Background()
			started, release := make(chan struct{}), make(chan struct{})
			runnerErr := make(chan error, 1)
			go func() {
				_, _, err := s.Do(ctx, "flaky", func(context.Context) ([]byte, error) {
					close(started)
					<-release
					return nil, errors.New("upstream timeout")
				})
				runnerErr <- err
			}()
			<-started
			got := make(chan string, 1)
			go func() {
				res, replayed, err := s.Do(ctx, "flaky", func(context.Context) ([]byte, error) { return []byte("second try"), nil })
				got <- fmt.Sprintf("%s %v %v", res, replayed, err)
			}()
			time.Sleep(200 * ms)
			close(release)
			if err := <-runnerErr; err == nil || err.Error() != "upstream timeout" {
				t.Errorf("runner: %v", err)
			}
			select {
			case g := <-got:
				if g != "second try false <nil>" {
					t.Fatalf("waiter got %s", g)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("the waiter was not woken when the runner failed")
			}
		})
	}
}

func TestWaitEnds(t *testing.T) {
	for _, bk := range coreBackends() {
		t.Run(bk.Name, func(t *testing.T) {
			t.Parallel()
			b := bk.Make(t, nil)
			s := newStore(t, b)
			ctx := context.Background()
			started, release := make(chan struct{}), make(chan struct{})
			finished := make(chan struct{})
			go func() {
				defer close(finished)
				_, _, _ = s.Do(ctx, "busy", func(context.Context) ([]byte, error) {
					close(started)
					<-release
					return nil, nil
				})
			}()
			<-started
			defer func() { close(release); <-finished }()
			never := func(context.Context) ([]byte, error) { t.Error("fn ran while the key was in flight"); return nil, nil }
			short := newStore(t, b, idempotency.WaitForResult(100*ms))
			if _, _, err := short.Do(ctx, "busy", never); !errors.Is(err, idempotency.ErrInFlight) {
				t.Errorf("after WaitForResult ran out: %v, want ErrInFlight", err)
			}
			long := newStore(t, b, idempotency.WaitForResult(time.Minute))
			cctx, cancel := context.WithTimeout(ctx, 100*ms)
			defer cancel()
			if _, _, err := long.Do(cctx, "busy", never); !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("after ctx ended: %v, want context.DeadlineExceeded", err)
			}
		})
	}
}

// TestResultStoredAfterCallerLeft: the caller's context ends while fn runs;
// fn finishes anyway, and its result is stored, not lost.
func TestResultStoredAfterCallerLeft(t *testing.T) {
	for _, bk := range coreBackends() {
		t.Run(bk.Name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t, bk.Make(t, nil))
			ctx, cancel := context.WithCancel(context.Background())
			res, _, err := s.Do(ctx, "left", func(context.Context) ([]byte, error) {
				cancel()
				return []byte("done anyway"), nil
			})
			if err != nil || string(res) != "done anyway" {
				t.Fatalf("Do: %q %v", res, err)
			}
			res, replayed, err := s.Do(context.Background(), "left", func(context.Context) ([]byte, error) { return []byte("again"), nil })
			if err != nil || !replayed || string(res) != "done anyway" {
				t.Fatalf("replay: %q %v %v", res, replayed, err)
			}
		})
	}
}

func TestPanicFreesKey(t *testing.T) {
	for _, bk := range coreBackends() {
		t.Run(bk.Name, func(t *testing.T) {
			t.Parallel()
			s := newStore(t, bk.Make(t, nil))
			ctx := context.Background()
			func() {
				defer func() {
					if r := recover(); r != "boom" {
						t.Errorf("recovered %v, want the panic of fn", r)
					}
				}()
				_, _, _ = s.Do(ctx, "panicky", func(context.Context) ([]byte, error) { panic("boom") })
			}()
			res, replayed, err := s.Do(ctx, "panicky", func(context.Context) ([]byte, error) { return []byte("ok"), nil })
			if err != nil || replayed || string(res) != "ok" {
				t.Fatalf("after a panic: %q %v %v, want fn to run", res, replayed, err)
			}
		})
	}
}
