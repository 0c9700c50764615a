package ratelimit_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/ratelimit"
)

func TestWait(t *testing.T) {
	for _, bk := range allBackends()[:2] {
		t.Run(bk.name, func(t *testing.T) {
			lim, err := ratelimit.New(bk.make(t, nil), ratelimit.GCRA{Rate: 20, Per: time.Second, Burst: 1})
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if r, _ := lim.Allow(ctx, "w"); !r.Allowed {
				t.Fatal("first call denied")
			}
			// The next unit is due in 50ms: a 10ms deadline cannot be met, and Wait
			// says so at once instead of sleeping until the deadline.
			short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
			err = lim.Wait(short, "w")
			cancel()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("Wait with a short deadline: %v", err)
			}
			// With time to spare, Wait returns once the unit is admitted and
			// consumed: right after it, the key has nothing left.
			long, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			if err := lim.Wait(long, "w"); err != nil {
				t.Fatalf("Wait: %v", err)
			}
			if r, _ := lim.AllowN(ctx, "w", 0); r.Remaining != 0 {
				t.Fatalf("after Wait the unit must be consumed, got %+v", r)
			}
			if err := lim.WaitN(long, "w", 2); err == nil {
				t.Fatal("WaitN of more than the burst must fail at once")
			}
		})
	}
}
