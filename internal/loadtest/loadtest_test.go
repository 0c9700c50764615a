package loadtest

import (
	"sync/atomic"
	"testing"
	"time"
)

// TestWindows: decisions are placed by their window's end, rounded, so a
// decision known a little after its window ended still counts in it.
func TestWindows(t *testing.T) {
	var w Windows
	end := time.Unix(1_800_000_001, 0)
	w.Add(end.Add(-900*time.Millisecond), 900*time.Millisecond)                     // exactly at the end
	w.Add(end.Add(-100*time.Millisecond+20*time.Millisecond), 100*time.Millisecond) // known 20 ms late
	w.Add(end, time.Second)                                                         // the next window
	if got := w.String(); got != " 2 1" {
		t.Fatalf("counts %q, want \" 2 1\"", got)
	}
	var ft fakeT
	w.Check(&ft, 1)
	if ft.errors != 1 {
		t.Fatalf("Check with most 1 reported %d windows, want 1", ft.errors)
	}
}

// TestRun: calls run before, through and after the fault, and Run returns
// after the last one ended.
func TestRun(t *testing.T) {
	var calls, inFault atomic.Int64
	var during int64
	Run(4, 20*time.Millisecond, 20*time.Millisecond, func() {
		calls.Add(1)
		time.Sleep(time.Millisecond)
	}, func() {
		before := calls.Load()
		time.Sleep(20 * time.Millisecond)
		during = calls.Load() - before
		inFault.Add(1)
	})
	after := calls.Load()
	time.Sleep(10 * time.Millisecond)
	if calls.Load() != after || inFault.Load() != 1 || during == 0 {
		t.Fatalf("calls %d then %d after Run returned, fault ran %d times, %d calls during it", after, calls.Load(), inFault.Load(), during)
	}
}

type fakeT struct {
	testing.TB
	errors int
}

func (f *fakeT) Helper()               {}
func (f *fakeT) Errorf(string, ...any) { f.errors++ }

// TestHog: the hog's goroutines run until stop, which returns once they
// have all ended.
func TestHog(t *testing.T) {
	stop := Hog(2)
	deadline := time.Now().Add(10 * time.Second)
	for hogRunning.Load() != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("%d of the hog's 2 goroutines running after 10 s", hogRunning.Load())
		}
		time.Sleep(time.Millisecond)
	}
	stop()
	if n := hogRunning.Load(); n != 0 {
		t.Fatalf("%d of the hog's goroutines still running after stop", n)
	}
}
