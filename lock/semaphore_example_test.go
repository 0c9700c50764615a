package lock_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/lock"
)

// A semaphore of 2 permits: a third holder is refused until a permit comes
// back.
func ExampleNewSemaphore() {
	b := backend.NewMemory()
	defer b.Close()
	ctx := context.Background()

	sem, err := lock.NewSemaphore(b, "encoder", 2, lock.TTL(time.Minute))
	if err != nil {
		fmt.Println(err)
		return
	}
	a, _ := sem.Lock(ctx)
	c, _ := sem.Lock(ctx)
	_, err = sem.TryLock(ctx)
	fmt.Println(err)
	_ = a.Unlock(ctx)
	d, err := sem.TryLock(ctx)
	fmt.Println("after a release:", err)
	_ = c.Unlock(ctx)
	_ = d.Unlock(ctx)
	// Output:
	// lock: locked by another owner
	// after a release: <nil>
}

// Bounding how many jobs run at once, across every process that uses the
// same backend and name. Lock waits for a permit; Unlock gives it back and
// wakes a waiter.
func ExampleNewSemaphore_jobs() {
	b := backend.NewMemory()
	defer b.Close()
	ctx := context.Background()

	sem, _ := lock.NewSemaphore(b, "transcode", 2, lock.TTL(time.Minute))
	var running, peak atomic.Int32
	var wg sync.WaitGroup
	for range 6 {
		wg.Go(func() {
			lease, err := sem.Lock(ctx)
			if err != nil {
				fmt.Println(err)
				return
			}
			defer lease.Unlock(ctx)
			n := running.Add(1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			time.Sleep(5 * time.Millisecond) // the job
			running.Add(-1)
		})
	}
	wg.Wait()
	fmt.Println("jobs at once, at most:", peak.Load() <= 2)
	// Output:
	// jobs at once, at most: true
}
