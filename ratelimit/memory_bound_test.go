package ratelimit_test

import (
	"context"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/ratelimit"
)

// TestMemoryBoundIssue12 reproduces issue 12 ("The memory backend has no
// bound"): 1,000,000 distinct keys on a 1-hour SlidingWindow rule took 927 MB
// of RSS, held for the hour. With a bound the estimated state stays within it,
// and the heap in use within twice it (the live heap is about the estimate;
// the spans that eviction frees are partly empty, reused rather than given
// back). Without the bound this run keeps about 370 B per key alive (370 MB
// for 1,000,000 keys, 74 MB for 200,000), far above the limit checked here.
func TestMemoryBoundIssue12(t *testing.T) {
	keys, maxBytes := 1_000_000, int64(16<<20)
	if raceEnabled {
		// Five times fewer calls; the bound shrinks too, so that the keys
		// still exceed it about ten times over.
		keys, maxBytes = 200_000, 8<<20
	}
	heapBound := uint64(2*maxBytes + 16<<20)
	baseline := heapInuse()

	m := backend.NewMemory(backend.WithMaxBytes(maxBytes))
	defer m.Close()
	lim, err := ratelimit.New(m, ratelimit.SlidingWindow{Limit: 100, Window: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	buf := []byte("user:")
	var last string
	for i := range keys {
		last = string(strconv.AppendInt(buf[:5], int64(i), 10))
		r, err := lim.Allow(ctx, last)
		if err != nil {
			t.Fatal(err)
		}
		if !r.Allowed || r.Remaining != 99 {
			t.Fatalf("%s: %+v, want the first call of a fresh key", last, r)
		}
	}
	st := m.Stats()
	t.Logf("%d keys, bound %d: %+v", keys, maxBytes, st)
	if st.Bytes > maxBytes {
		t.Errorf("%d bytes estimated, over the bound of %d", st.Bytes, maxBytes)
	}
	if st.EvictedLRU == 0 || st.Entries+int64(st.EvictedLRU) != int64(keys) {
		t.Errorf("stats %+v: want %d keys either stored or evicted", st, keys)
	}
	heap := heapInuse()
	grown := heap - min(baseline, heap)
	t.Logf("heap in use grew by %.1f MiB (%.0f B per key kept)", float64(grown)/(1<<20), float64(grown)/float64(st.Entries))
	if grown > heapBound {
		t.Errorf("heap in use grew by %d bytes, over %d", grown, heapBound)
	}

	// The most recent key kept its state: it is limited, not afresh.
	r, err := lim.AllowN(ctx, last, 99)
	if err != nil || !r.Allowed || r.Remaining != 0 {
		t.Fatalf("last key: %+v, %v: its state was lost", r, err)
	}
	if r, _ := lim.Allow(ctx, last); r.Allowed {
		t.Fatalf("last key admitted beyond its limit: %+v", r)
	}
	runtime.KeepAlive(lim)
}

func heapInuse() uint64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse
}

// BenchmarkMemoryChurn: every call is a new key, as in issue 12, on a backend
// whose bound (16 MiB) holds about 45,000 of them: past the first ones, every
// call evicts one.
func BenchmarkMemoryChurn(b *testing.B) {
	m := backend.NewMemory(backend.WithMaxBytes(16 << 20))
	defer m.Close()
	lim, err := ratelimit.New(m, ratelimit.SlidingWindow{Limit: 100, Window: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	buf := []byte("user:")
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, err := lim.Allow(ctx, string(strconv.AppendInt(buf[:5], int64(i), 10))); err != nil {
			b.Fatal(err)
		}
	}
}
