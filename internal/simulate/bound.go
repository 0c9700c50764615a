package simulate

import (
	"fmt"
	"math"
	"math/big"
	"math/bits"
	"time"
)

// BoundKind is the shape of a documented bound.
type BoundKind int

const (
	// InAnySpan: at most Max units in any span of length Span, closed
	// ([t, t+Span]) unless Open ((t-Span, t]).
	InAnySpan BoundKind = iota
	// PerAlignedWindow: at most Max units in each epoch-aligned window
	// [k·Span, (k+1)·Span).
	PerAlignedWindow
	// BurstPlusRate: at most Max + ⌊Rate·d/Per⌋ units in any closed span of
	// any length d.
	BurstPlusRate
)

// Bound is a limit on what a rule admits, as documented.
type Bound struct {
	Kind   BoundKind
	Max    int64
	Span   time.Duration // InAnySpan, PerAlignedWindow
	Open   bool          // InAnySpan: the span is (t-Span, t]
	Rate   int64         // BurstPlusRate
	Per    time.Duration // BurstPlusRate
	Served bool          // the bound is on the times requests are served (admitted + Result.Delay)
	Slack  time.Duration // BurstPlusRate: spans count as this much longer (rounding of the times checked)
	Doc    string        // where the bound is documented
}

// String says the bound in words: "at most 10 in any closed 1s span".
func (b Bound) String() string {
	what := ""
	if b.Served {
		what = " served"
	}
	switch b.Kind {
	case InAnySpan:
		shape := "closed "
		if b.Open {
			shape = "half-open "
		}
		return fmt.Sprintf("at most %d%s in any %s%s span", b.Max, what, shape, fmtDur(b.Span))
	case PerAlignedWindow:
		return fmt.Sprintf("at most %d%s per aligned %s window", b.Max, what, fmtDur(b.Span))
	default:
		s := fmt.Sprintf("at most %d + %d per %s%s in any span", b.Max, b.Rate, fmtDur(b.Per), what)
		if b.Slack > 0 {
			s += fmt.Sprintf(" (+%v)", b.Slack)
		}
		return s
	}
}

// Check is the outcome of checking a Bound against admitted requests: the
// span where the bound is tightest (the most admitted over what it allows,
// the first such span when several tie), and whether it held.
type Check struct {
	Bound    Bound
	Held     bool
	Observed int64 // requests in the tightest span
	Allowed  int64 // what the bound allows there
	From, To int64 // the tightest span's first and last request, µs since the epoch (From = To = 0 when none)
	Key      int   // the key whose requests made it, an index into Traffic.Keys
}

// CheckBound checks b against the times of one key's admitted requests (µs,
// ascending). With no requests the bound holds with nothing observed.
func CheckBound(b Bound, times []int64) Check {
	c := Check{Bound: b, Held: true}
	if len(times) == 0 {
		c.Allowed = b.Max
		return c
	}
	switch b.Kind {
	case InAnySpan:
		c.Observed, c.From, c.To = mostInSpan(times, int64(b.Span/time.Microsecond), b.Open)
		c.Allowed = b.Max
	case PerAlignedWindow:
		w := int64(b.Span / time.Microsecond)
		for i := 0; i < len(times); {
			j := i
			for j < len(times) && times[j]/w == times[i]/w {
				j++
			}
			if n := int64(j - i); n > c.Observed {
				c.Observed, c.From, c.To = n, times[i], times[j-1]
			}
			i = j
		}
		c.Allowed = b.Max
	case BurstPlusRate:
		c.Observed, c.Allowed, c.From, c.To = tightestRateSpan(b, times)
	}
	c.Held = c.Observed <= c.Allowed
	return c
}

// mostInSpan returns the most requests in any span of length span, closed
// or half-open, and the first and last request of the first such span.
func mostInSpan(times []int64, span int64, open bool) (most, from, to int64) {
	j := 0
	for i, t := range times {
		for times[j] < t-span || open && times[j] == t-span {
			j++
		}
		if n := int64(i - j + 1); n > most {
			most, from, to = n, times[j], t
		}
	}
	return most, from, to
}

// tightestRateSpan finds the closed span [times[j], times[i]] that exceeds
// Max + Rate·d/Per by the most (or comes closest to it), exactly.
//
// A Slack adds the same amount to what every span allows, so it does not
// change which span is tightest.
//
// Requests j..i lie in that span, so it holds at least i-j+1 of them, and the
// bound allows Max + ⌊Rate·(t_i - t_j)/Per⌋. Multiplying by Per (in µs),
// i-j+1 - Rate·(t_i-t_j)/Per = (g(i) - g(j) + Per)/Per with g(k) = k·Per -
// Rate·t_k, so the tightest span ends at some i and starts at the j <= i
// with the least g(j): one pass. The count is exact at the maximum (the first
// request at t_j has the least g among those at t_j).
func tightestRateSpan(b Bound, times []int64) (observed, allowed, from, to int64) {
	per := int64(b.Per / time.Microsecond)
	rate := b.Rate
	if g := gcd(rate, per); g > 1 {
		rate, per = rate/g, per/g
	}
	t0 := times[0]
	n := int64(len(times))
	span := times[len(times)-1] - t0
	var bi, bj int
	if hi, lo := bits.Mul64(uint64(n), uint64(per)); hi == 0 && lo < 1<<61 {
		if hi, lo := bits.Mul64(uint64(rate), uint64(span)); hi == 0 && lo < 1<<61 {
			// Fast path: every g(k) fits in an int64.
			var minG int64
			best := int64(-1) << 62
			minJ := 0
			for i, t := range times {
				g := int64(i)*per - rate*(t-t0)
				if i == 0 || g < minG {
					minG, minJ = g, i
				}
				if v := g - minG; v > best {
					best, bi, bj = v, i, minJ
				}
			}
			return spanCount(b, times, bi, bj)
		}
	}
	// Slow path in big integers, for long periods and spans.
	bigPer, bigRate := big.NewInt(per), big.NewInt(rate)
	var minG, best, g, tmp big.Int
	minJ := 0
	for i, t := range times {
		g.Mul(big.NewInt(int64(i)), bigPer)
		tmp.Mul(bigRate, big.NewInt(t-t0))
		g.Sub(&g, &tmp)
		if i == 0 || g.Cmp(&minG) < 0 {
			minG.Set(&g)
			minJ = i
		}
		tmp.Sub(&g, &minG)
		if i == 0 || tmp.Cmp(&best) > 0 {
			best.Set(&tmp)
			bi, bj = i, minJ
		}
	}
	return spanCount(b, times, bi, bj)
}

// spanCount returns the requests in [times[j], times[i]] and what b allows there.
func spanCount(b Bound, times []int64, i, j int) (observed, allowed, from, to int64) {
	d := times[i] - times[j] + int64(b.Slack/time.Microsecond)
	var q big.Int
	q.Mul(big.NewInt(b.Rate), big.NewInt(d))
	q.Quo(&q, big.NewInt(int64(b.Per/time.Microsecond)))
	allowed = math.MaxInt64
	if q.IsInt64() && q.Int64() <= math.MaxInt64-b.Max {
		allowed = b.Max + q.Int64()
	}
	return int64(i - j + 1), allowed, times[j], times[i]
}

func gcd(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}
