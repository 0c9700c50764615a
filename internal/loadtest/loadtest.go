// Package loadtest drives closed-loop load through a fault, for the tests
// that bound what a limit admits while its store stalls or dies, and
// counts the admitted decisions per one-second window.
package loadtest

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Run calls call in a closed loop on clients goroutines: for lead, then
// through fault (which returns when the fault is over), then for tail;
// it returns once every call has ended.
func Run(clients int, lead, tail time.Duration, call func(), fault func()) {
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				call()
			}
		})
	}
	time.Sleep(lead)
	fault()
	time.Sleep(tail)
	close(stop)
	wg.Wait()
}

// Windows counts admitted decisions by the one-second window they fall
// in, each placed by the window's end: when the decision was known plus
// its reset time (the end of a fixed window), rounded to the second. The
// rounding absorbs a decision's latency (under half a second). The zero
// value is ready; safe for concurrent use.
type Windows struct {
	mu sync.Mutex
	n  map[int64]int // window end, Unix s -> admitted
}

// Add counts one admitted decision known at at, whose window ends
// resetAfter later.
func (w *Windows) Add(at time.Time, resetAfter time.Duration) {
	end := int64(math.Round(float64(at.Add(resetAfter).UnixNano()) / 1e9))
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.n == nil {
		w.n = map[int64]int{}
	}
	w.n[end]++
}

// Check fails t for every window that admitted more than most, and
// returns the counts in window order, for the log.
func (w *Windows) Check(t testing.TB, most int) string {
	t.Helper()
	ends, n := w.sorted()
	for _, e := range ends {
		if n[e] > most {
			t.Errorf("the window ending at %d admitted %d, over %d", e, n[e], most)
		}
	}
	return w.String()
}

// String returns the counts in window order.
func (w *Windows) String() string {
	ends, n := w.sorted()
	var b strings.Builder
	for _, e := range ends {
		fmt.Fprintf(&b, " %d", n[e])
	}
	return b.String()
}

// sorted returns the windows' ends in order and a copy of the counts.
func (w *Windows) sorted() ([]int64, map[int64]int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := make(map[int64]int, len(w.n))
	ends := make([]int64, 0, len(w.n))
	for e, c := range w.n {
		ends = append(ends, e)
		n[e] = c
	}
	slices.Sort(ends)
	return ends, n
}

// Hog keeps n goroutines busy computing until the returned stop is
// called (it waits for them to end): a CPU hog inside the test process,
// for the bounds that must hold on a machine busy with other work.
func Hog(n int) (stop func()) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			hogRunning.Add(1)
			defer hogRunning.Add(^uint64(0))
			x := uint64(1)
			for {
				for range 1 << 16 {
					x = x*6364136223846793005 + 1442695040888963407
				}
				select {
				case <-done:
					hogSink.Add(x)
					return
				default:
				}
			}
		})
	}
	return func() {
		close(done)
		wg.Wait()
	}
}

// hogSink keeps Hog's arithmetic from being optimized away; hogRunning
// counts Hog's goroutines, for its test.
var hogSink, hogRunning atomic.Uint64
