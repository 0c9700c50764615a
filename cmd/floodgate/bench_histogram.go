package main

import (
	"math"
	"math/bits"
	"time"
)

// benchHist counts durations in log-linear buckets, as HdrHistogram does:
// exact below 256 ns, above that 128 buckets per power of two, so a reported
// quantile (a bucket's midpoint) is within 0.4% of the true one; the maximum
// and the mean are exact. Durations up to 2^40 ns (about 18 minutes) have
// buckets of their own; longer ones share the last. The zero value is empty
// and ready to use. A benchHist is not safe for concurrent use: each worker
// records into its own, and merge adds them up at the end.
type benchHist struct {
	counts []uint64 // allocated by the first record
	n      uint64
	sum    float64 // ns
	max    int64   // ns
}

const (
	histSubBits = 7
	histSub     = 1 << histSubBits                 // buckets per power of two
	histBuckets = histSub * (40 - histSubBits + 2) // up to 2^40 ns
)

// histBucket returns the bucket of ns.
func histBucket(ns uint64) int {
	if ns < 2*histSub {
		return int(ns)
	}
	shift := bits.Len64(ns) - histSubBits - 1 // ns>>shift is in [histSub, 2*histSub)
	return min(histSub*(shift+1)+int(ns>>shift)-histSub, histBuckets-1)
}

// histValue returns the middle of bucket i.
func histValue(i int) uint64 {
	if i < 2*histSub {
		return uint64(i)
	}
	shift := i/histSub - 1
	m := uint64(i%histSub + histSub)
	return m<<shift + (uint64(1)<<shift)/2
}

func (h *benchHist) record(d time.Duration) {
	if d < 0 {
		d = 0
	}
	if h.counts == nil {
		h.counts = make([]uint64, histBuckets)
	}
	h.counts[histBucket(uint64(d))]++
	h.n++
	h.sum += float64(d)
	h.max = max(h.max, int64(d))
}

func (h *benchHist) merge(o *benchHist) {
	if o == nil || o.n == 0 {
		return
	}
	if h.counts == nil {
		h.counts = make([]uint64, histBuckets)
	}
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
	h.sum += o.sum
	h.max = max(h.max, o.max)
}

// quantile returns the q-quantile (0 < q ≤ 1) of the recorded durations:
// the smallest bucket value at or below which a share q of them lie, never
// more than the maximum. It is 0 when nothing was recorded.
func (h *benchHist) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	rank = min(max(rank, 1), h.n)
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return time.Duration(min(int64(histValue(i)), h.max))
		}
	}
	return time.Duration(h.max)
}

func (h *benchHist) mean() time.Duration {
	if h.n == 0 {
		return 0
	}
	return time.Duration(h.sum / float64(h.n))
}
