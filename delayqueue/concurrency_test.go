package delayqueue_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/delayqueue"
)

// TestConcurrentClaims: goroutines claiming from one queue through separate
// clients each get different jobs; together they get every job once.
func TestConcurrentClaims(t *testing.T) {
	for _, bk := range threeBackends() {
		t.Run(bk.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			store := bk.make(t, clock.NewFake(t0))
			q0, err := delayqueue.New(store(), "claims")
			if err != nil {
				t.Fatal(err)
			}
			const n, g = 300, 8
			for i := range n {
				if _, err := q0.Enqueue(ctx, nil, delayqueue.ID(fmt.Sprint(i))); err != nil {
					t.Fatal(err)
				}
			}
			if st, err := q0.Stats(ctx); err != nil || st.Ready != n {
				t.Fatalf("stats %+v %v, want %d ready", st, err, n)
			}
			var (
				mu  sync.Mutex
				got = map[string]int{}
				wg  sync.WaitGroup
			)
			for range g {
				q, err := delayqueue.New(store(), "claims")
				if err != nil {
					t.Fatal(err)
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						d, err := q.Claim(ctx)
						if err != nil {
							t.Error(err)
							return
						}
						if d == nil {
							return
						}
						mu.Lock()
						got[d.ID]++
						mu.Unlock()
					}
				}()
			}
			wg.Wait()
			for i := range n {
				if c := got[fmt.Sprint(i)]; c != 1 {
					t.Errorf("job %d claimed %d times, want once", i, c)
				}
			}
		})
	}
}

// TestConcurrentDuplicateEnqueue: of many concurrent Enqueues with one ID,
// exactly one adds the job; the others get ErrDuplicate and the ID.
func TestConcurrentDuplicateEnqueue(t *testing.T) {
	for _, bk := range threeBackends() {
		t.Run(bk.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			store := bk.make(t, nil)
			const g = 16
			var (
				wg          sync.WaitGroup
				mu          sync.Mutex
				added, dups int
			)
			for i := range g {
				q, err := delayqueue.New(store(), "dedupe")
				if err != nil {
					t.Fatal(err)
				}
				wg.Add(1)
				go func() {
					defer wg.Done()
					id, err := q.Enqueue(ctx, []byte(fmt.Sprint(i)), delayqueue.ID("order-42"))
					mu.Lock()
					defer mu.Unlock()
					switch {
					case id != "order-42":
						t.Errorf("Enqueue returned id %q", id)
					case err == nil:
						added++
					case errors.Is(err, delayqueue.ErrDuplicate):
						dups++
					default:
						t.Error(err)
					}
				}()
			}
			wg.Wait()
			if added != 1 || dups != g-1 {
				t.Errorf("%d added, %d duplicates; want 1 and %d", added, dups, g-1)
			}
			q, _ := delayqueue.New(store(), "dedupe")
			if s, err := q.Stats(ctx); err != nil || s != (delayqueue.Stats{Ready: 1}) {
				t.Errorf("Stats %+v %v, want one job", s, err)
			}
		})
	}
}
