package simulate

import (
	"errors"
	"fmt"
	"math"
	"math/bits"
	"math/rand/v2"
	"sort"
	"strings"
	"time"
)

// MaxRequests is the most requests one Traffic may hold: 10,000,000, about
// 120 MB of arrivals and a few seconds per rule.
const MaxRequests = 10_000_000

// maxMicros is the end of the time range of the limiters: 2^53 µs after the
// Unix epoch, in the year 2255 (see package internal/memstore).
const maxMicros = int64(1) << 53

// Traffic is a sequence of requests. Times are integer microseconds since
// the Unix epoch, the limiters' unit of time, in ascending order.
type Traffic struct {
	Name       string    // what made it, for titles: a pattern's description or a file name
	Start, End time.Time // the span to show; every request is in [Start, End)
	Times      []int64   // request times, µs since the Unix epoch, ascending
	Key        []int32   // per request, an index into Keys; nil when every request has key 0
	Keys       []string  // the distinct keys in order of first appearance; [""] when the traffic has none
}

// Len returns the number of requests.
func (t *Traffic) Len() int { return len(t.Times) }

// keyOf returns the index of the key of request i.
func (t *Traffic) keyOf(i int) int {
	if t.Key == nil {
		return 0
	}
	return int(t.Key[i])
}

// The built-in traffic patterns.
const (
	Steady   = "steady"   // Rate requests per second, evenly spaced
	Bursty   = "bursty"   // Rate requests per second during On, none during Off, repeated
	Boundary = "boundary" // Count requests in the Spread before a window edge and Count in the Spread after it
	Ramp     = "ramp"     // a rate rising (or falling) linearly from From to Rate
	Poisson  = "poisson"  // random arrivals at a mean Rate per second (exponential gaps), from Seed
)

// Patterns lists the built-in patterns.
var Patterns = []string{Steady, Bursty, Boundary, Ramp, Poisson}

// Pattern describes built-in traffic: all requests of one key.
type Pattern struct {
	Kind     string        // one of Patterns
	Start    time.Time     // the first instant; Boundary's edge is Start+Window
	Duration time.Duration // the span of the traffic, from Start
	Rate     float64       // requests per second: Steady, Poisson; Bursty while on; Ramp at the end
	From     float64       // Ramp: requests per second at Start
	On, Off  time.Duration // Bursty
	Window   time.Duration // Boundary: the window whose edge (Start+Window) is attacked
	Count    int64         // Boundary: requests on each side of the edge
	Spread   time.Duration // Boundary: the span on each side of the edge the requests share
	Seed     uint64        // Poisson
}

// Describe says what the pattern sends, in a few words.
func (p Pattern) Describe() string {
	switch p.Kind {
	case Steady:
		return fmt.Sprintf("steady %s/s for %v", num(p.Rate), p.Duration)
	case Bursty:
		return fmt.Sprintf("bursty %s/s for %v every %v, for %v", num(p.Rate), p.On, p.On+p.Off, p.Duration)
	case Boundary:
		return fmt.Sprintf("boundary attack: %d requests in the %v before a %v window edge and %d in the %v after", p.Count, p.Spread, p.Window, p.Count, p.Spread)
	case Ramp:
		return fmt.Sprintf("ramp %s/s to %s/s over %v", num(p.From), num(p.Rate), p.Duration)
	case Poisson:
		return fmt.Sprintf("poisson %s/s for %v, seed %d", num(p.Rate), p.Duration, p.Seed)
	}
	return p.Kind
}

// num formats a rate without needless decimals.
func num(f float64) string { return strings.TrimSuffix(fmt.Sprintf("%.6g", f), ".0") }

// Generate returns the pattern's requests. It fails when a parameter is out
// of range or the pattern would send more than MaxRequests.
func (p Pattern) Generate() (*Traffic, error) {
	if err := p.check(); err != nil {
		return nil, err
	}
	start := p.Start.UnixMicro()
	dur := int64(p.Duration / time.Microsecond)
	var times []int64
	add := func(off int64) error {
		if len(times) >= MaxRequests {
			return fmt.Errorf("simulate: %s traffic has more than %d requests; lower the rate or the duration", p.Kind, MaxRequests)
		}
		times = append(times, start+off)
		return nil
	}
	// at converts seconds from Start to whole µs, or to dur when that is past the end.
	at := func(sec float64) int64 {
		us := math.Round(sec * 1e6)
		if !(us < float64(dur)) {
			return dur
		}
		return int64(us)
	}
	switch p.Kind {
	case Steady:
		for i := int64(0); ; i++ {
			off := at(float64(i) / p.Rate)
			if off >= dur {
				break
			}
			if err := add(off); err != nil {
				return nil, err
			}
		}
	case Bursty:
		on, cycle := int64(p.On/time.Microsecond), int64((p.On+p.Off)/time.Microsecond)
		for c := int64(0); c < dur; c += cycle {
			for i := int64(0); ; i++ {
				off := at(float64(i) / p.Rate)
				if off >= on || c+off >= dur {
					break
				}
				if err := add(c + off); err != nil {
					return nil, err
				}
			}
		}
	case Boundary:
		edge, spread := int64(p.Window/time.Microsecond), int64(p.Spread/time.Microsecond)
		// Count requests evenly in [edge-spread, edge), then in [edge, edge+spread).
		for _, from := range []int64{edge - spread, edge} {
			for i := range p.Count {
				if err := add(from + mulDiv(i, spread, p.Count)); err != nil {
					return nil, err
				}
			}
		}
	case Ramp:
		// The rate at t seconds is From + (Rate-From)·t/D, so N(t) = From·t + a·t² requests
		// have come by t, with a = (Rate-From)/(2D). Request k comes when N(t) = k:
		// t = 2k / (From + sqrt(From² + 4ak)), which is k/From when a = 0.
		d := p.Duration.Seconds()
		a := (p.Rate - p.From) / (2 * d)
		for k := 0.0; ; k++ {
			disc := p.From*p.From + 4*a*k
			if disc < 0 {
				break // a falling ramp that reaches 0 before the end
			}
			den := p.From + math.Sqrt(disc)
			if den <= 0 {
				if k == 0 {
					if err := add(0); err != nil {
						return nil, err
					}
					continue
				}
				break
			}
			off := at(2 * k / den)
			if off >= dur {
				break
			}
			if err := add(off); err != nil {
				return nil, err
			}
		}
	case Poisson:
		rng := rand.New(rand.NewPCG(p.Seed, 0x5eed))
		sec := rng.ExpFloat64() / p.Rate
		for {
			off := at(sec)
			if off >= dur {
				break
			}
			if err := add(off); err != nil {
				return nil, err
			}
			sec += rng.ExpFloat64() / p.Rate
		}
	}
	return &Traffic{
		Name:  p.Describe(),
		Start: p.Start,
		End:   p.Start.Add(p.Duration),
		Times: times,
		Keys:  []string{""},
	}, nil
}

// check validates a pattern's parameters.
func (p Pattern) check() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("simulate: %s traffic: "+format, append([]any{p.Kind}, args...)...)
	}
	known := false
	for _, k := range Patterns {
		known = known || k == p.Kind
	}
	if !known {
		return fmt.Errorf("simulate: unknown traffic pattern %q (want %s)", p.Kind, strings.Join(Patterns, ", "))
	}
	if p.Duration <= 0 {
		return bad("duration must be > 0, got %v", p.Duration)
	}
	s := p.Start.UnixMicro()
	if s < 0 || s > maxMicros-int64(p.Duration/time.Microsecond) {
		return bad("the traffic must lie between 1970 and 2255, got %v to %v", p.Start, p.Start.Add(p.Duration))
	}
	rate := func(name string, v float64, zeroOK bool) error {
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 || v == 0 && !zeroOK {
			want := "> 0"
			if zeroOK {
				want = ">= 0"
			}
			return bad("%s must be %s requests per second, got %v", name, want, v)
		}
		if v*p.Duration.Seconds() > 2*MaxRequests {
			return bad("%s %v for %v would be more than %d requests; lower the rate or the duration", name, v, p.Duration, MaxRequests)
		}
		return nil
	}
	switch p.Kind {
	case Steady, Poisson:
		return rate("rate", p.Rate, false)
	case Bursty:
		if p.On < time.Microsecond || p.Off < 0 {
			return bad("on must be at least 1µs and off >= 0, got on %v, off %v", p.On, p.Off)
		}
		return rate("rate", p.Rate, false)
	case Ramp:
		if err := rate("rate", p.Rate, true); err != nil {
			return err
		}
		if err := rate("from", p.From, true); err != nil {
			return err
		}
		if p.Rate == 0 && p.From == 0 {
			return bad("rate and from are both 0: nothing to send")
		}
	case Boundary:
		if p.Window <= 0 {
			return bad("window must be > 0, got %v", p.Window)
		}
		if p.Spread <= 0 || p.Spread > p.Window {
			return bad("spread must be > 0 and at most the window (%v), got %v", p.Window, p.Spread)
		}
		if p.Count < 1 || p.Count > MaxRequests/2 {
			return bad("count must be between 1 and %d, got %d", MaxRequests/2, p.Count)
		}
		if p.Duration <= p.Window+p.Spread-p.Spread/time.Duration(p.Count) {
			return bad("duration (%v) must reach past the burst after the edge at %v", p.Duration, p.Window)
		}
	}
	return nil
}

// AlignedStart returns the first instant at or after base that is a whole
// multiple of w after the Unix epoch: an edge of every epoch-aligned window
// of length w (and of every length that divides w).
func AlignedStart(base time.Time, w time.Duration) time.Time {
	us, wus := base.UnixMicro(), int64(w/time.Microsecond)
	if wus <= 0 {
		return time.UnixMicro(us).UTC()
	}
	return time.UnixMicro((us + wus - 1) / wus * wus).UTC()
}

// mulDiv returns a·b/c for a, b >= 0 and c > 0, rounded down, without
// overflowing a·b; the quotient must fit in an int64.
func mulDiv(a, b, c int64) int64 {
	hi, lo := bits.Mul64(uint64(a), uint64(b))
	q, _ := bits.Div64(hi, lo, uint64(c))
	return int64(q)
}

// errNoRequests is returned for traffic without a request.
var errNoRequests = errors.New("no requests")

// fromArrivals builds a Traffic from requests in any order: it sorts them
// (stably, so that requests at one instant keep their order) and interns keys.
func fromArrivals(name string, times []int64, keys []string) (*Traffic, error) {
	if len(times) == 0 {
		return nil, errNoRequests
	}
	idx := make([]int, len(times))
	for i := range idx {
		idx[i] = i
	}
	if !sort.SliceIsSorted(idx, func(a, b int) bool { return times[idx[a]] < times[idx[b]] }) {
		sort.SliceStable(idx, func(a, b int) bool { return times[idx[a]] < times[idx[b]] })
	}
	t := &Traffic{Name: name, Times: make([]int64, len(times))}
	ids := map[string]int32{}
	withKeys := false
	for _, k := range keys {
		if k != "" {
			withKeys = true
			break
		}
	}
	if withKeys {
		t.Key = make([]int32, len(times))
	}
	for n, i := range idx {
		t.Times[n] = times[i]
		if !withKeys {
			continue
		}
		id, ok := ids[keys[i]]
		if !ok {
			id = int32(len(t.Keys))
			ids[keys[i]] = id
			t.Keys = append(t.Keys, keys[i])
		}
		t.Key[n] = id
	}
	if !withKeys {
		t.Keys = []string{""}
	}
	// Show whole seconds: from the second of the first request to the second after the last.
	t.Start = time.UnixMicro(t.Times[0] - t.Times[0]%1e6).UTC()
	last := t.Times[len(t.Times)-1] + 1
	t.End = time.UnixMicro(last + (1e6-last%1e6)%1e6).UTC()
	return t, nil
}
