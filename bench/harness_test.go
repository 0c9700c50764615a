package bench

import (
	"fmt"
	"math/bits"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// Goroutine counts of the Redis benchmarks, and the key spaces.
var (
	redisGoroutines  = []int{1, 16, 64, 256}
	memoryGoroutines = []int{1, 64}
	keySpaces        = []int{1, 100000}
)

// userKeys returns n distinct 16-byte user keys, "user:00000000000" on.
func userKeys(n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("user:%011d", i)
	}
	return keys
}

var (
	keysOnce sync.Once
	allKeys  []string // max(keySpaces) keys, shared by every benchmark
)

func benchKeys(n int) []string {
	keysOnce.Do(func() { allKeys = userKeys(100000) })
	return allKeys[:n]
}

// decide is one rate limiting decision for key: whether it was admitted.
type decide func(key string) (allowed bool, err error)

// run makes b.N decisions with g goroutines started explicitly (so the
// concurrency does not depend on GOMAXPROCS), b.N/g each, on keys picked
// uniformly at random per goroutine (every call on keys[0] when there is one
// key). It reports decisions/s and denied/op, and with latency p50-µs and
// p99-µs per call from a log-linear histogram (≤ 1.6% bucket error).
// Goroutines and histograms are set up before the timer starts. It returns
// the wall time of the calls.
func run(b *testing.B, g int, keys []string, latency bool, f decide) time.Duration {
	b.Helper()
	b.ReportAllocs()
	b.StopTimer()
	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		hists   = make([]*histogram, g)
		denied  = make([]int64, g)
		errOnce sync.Once
		firstEr error
	)
	for i := range g {
		n := b.N / g
		if i < b.N%g {
			n++
		}
		if latency {
			hists[i] = new(histogram)
		}
		wg.Add(1)
		go func(i, n int) {
			defer wg.Done()
			h := hists[i]
			rng := uint64(i)*0x9E3779B97F4A7C15 + 1
			var d int64
			<-start
			for range n {
				k := keys[0]
				if len(keys) > 1 {
					// xorshift64*, then a multiply-shift range reduction.
					rng ^= rng >> 12
					rng ^= rng << 25
					rng ^= rng >> 27
					hi, _ := bits.Mul64(rng*2685821657736338717, uint64(len(keys)))
					k = keys[hi]
				}
				var t0 time.Time
				if h != nil {
					t0 = time.Now()
				}
				ok, err := f(k)
				if h != nil {
					h.record(time.Since(t0))
				}
				if err != nil {
					errOnce.Do(func() { firstEr = err })
					return
				}
				if !ok {
					d++
				}
			}
			denied[i] = d
		}(i, n)
	}
	b.StartTimer()
	t0 := time.Now()
	close(start)
	wg.Wait()
	elapsed := time.Since(t0)
	b.StopTimer()
	if firstEr != nil {
		b.Fatalf("decision failed: %v", firstEr)
	}
	var total int64
	for _, d := range denied {
		total += d
	}
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "decisions/s")
	b.ReportMetric(float64(total)/float64(b.N), "denied/op")
	if latency {
		all := new(histogram)
		for _, h := range hists {
			all.merge(h)
		}
		b.ReportMetric(all.quantile(0.50).Seconds()*1e6, "p50-µs")
		b.ReportMetric(all.quantile(0.99).Seconds()*1e6, "p99-µs")
	}
	return elapsed
}

// histogram counts durations in nanoseconds in log-linear buckets: values
// below 128 exactly, above that 64 buckets per power of two.
type histogram struct {
	counts [histBuckets]uint64
	n      uint64
}

const (
	histSub     = 64
	histBuckets = histSub * 40 // up to 2^40 ns, about 18 minutes
)

func bucketOf(ns uint64) int {
	if ns < 2*histSub {
		return int(ns)
	}
	shift := bits.Len64(ns) - 7 // ns>>shift is in [64, 128)
	i := histSub*(shift+1) + int(ns>>shift) - histSub
	return min(i, histBuckets-1)
}

// valueOf returns the middle of bucket i.
func valueOf(i int) uint64 {
	if i < 2*histSub {
		return uint64(i)
	}
	shift := i/histSub - 1
	m := uint64(i%histSub + histSub)
	return m<<shift + (uint64(1)<<shift)/2
}

func (h *histogram) record(d time.Duration) {
	if d < 0 {
		d = 0
	}
	h.counts[bucketOf(uint64(d))]++
	h.n++
}

func (h *histogram) merge(o *histogram) {
	if o == nil {
		return
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
}

func (h *histogram) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(q*float64(h.n-1)) + 1
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return time.Duration(valueOf(i))
		}
	}
	return 0
}

func TestHistogram(t *testing.T) {
	for _, ns := range []uint64{0, 1, 127, 128, 129, 1000, 12345, 1e6, 987654321, 1 << 39} {
		got := valueOf(bucketOf(ns))
		diff := float64(got) - float64(ns)
		if diff < 0 {
			diff = -diff
		}
		if diff > float64(ns)/60+1 {
			t.Errorf("valueOf(bucketOf(%d)) = %d, more than 1.7%% off", ns, got)
		}
	}
	var h histogram
	for i := 1; i <= 1000; i++ {
		h.record(time.Duration(i) * time.Microsecond)
	}
	for _, c := range []struct {
		q    float64
		want time.Duration
	}{{0.5, 500 * time.Microsecond}, {0.99, 990 * time.Microsecond}} {
		got := h.quantile(c.q)
		if d := got - c.want; d < -c.want/50 || d > c.want/50 {
			t.Errorf("quantile(%v) = %v, want about %v", c.q, got, c.want)
		}
	}
}
