package counter_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/counter"
	"github.com/floodgate-dev/floodgate/internal/backendtest"
)

type opKind int

const (
	opAdd opKind = iota
	opGet
	opReset
)

// step is one call of a step table: move the fake clock by advance, run op
// on key ("user-42" when empty), and demand want from the call (Add: the
// returned value; Get: the value) and from an Inspect right after it.
type step struct {
	advance  time.Duration
	op       opKind
	delta    int64
	want     counter.Info
	overflow bool // Add must fail with ErrOverflow (want is then the unchanged state)
	key      string
}

func add(adv time.Duration, delta, value int64, reset time.Duration) step {
	return step{advance: adv, op: opAdd, delta: delta, want: counter.Info{Value: value, ResetAfter: reset}}
}

func get(adv time.Duration, value int64, reset time.Duration) step {
	return step{advance: adv, op: opGet, want: counter.Info{Value: value, ResetAfter: reset}}
}

func reset(adv time.Duration) step { return step{advance: adv, op: opReset} }

func (s step) on(key string) step { s.key = key; return s }

func (s step) overflows() step { s.overflow = true; return s }

type table struct {
	name  string
	opts  []counter.Option
	steps []step
}

const (
	us  = time.Microsecond
	sec = time.Second
	h   = time.Hour
)

// tables hold hand-computed results; every backend must reproduce them.
var tables = []table{
	{"plain: never expires", nil, []step{
		add(0, 1, 1, 0),
		add(0, 5, 6, 0),
		get(1000*h, 6, 0),
		add(0, -10, -4, 0),
		reset(0),
		get(0, 0, 0),
		add(0, 0, 0, 0), // delta 0 reads: creates nothing
		add(0, 3, 3, 0),
	}},
	{"TTL: fixed expiry from the first Add", []counter.Option{counter.TTL(10 * sec)}, []step{
		add(0, 1, 1, 10*sec),
		add(4*sec, 2, 3, 6*sec), // no refresh
		get(6*sec-us, 3, us),
		get(us, 0, 0), // expired exactly 10s after the first Add
		add(0, 1, 1, 10*sec),
		add(0, 0, 1, 10*sec),
		reset(3 * sec),
		get(0, 0, 0),
		add(0, 7, 7, 10*sec), // a new lifetime after Reset
	}},
	{"TTL with RefreshOnAdd: idle timeout", []counter.Option{counter.TTL(10 * sec), counter.RefreshOnAdd()}, []step{
		add(0, 1, 1, 10*sec),
		add(4*sec, 1, 2, 10*sec),
		get(9*sec, 2, sec),
		add(0, 0, 2, sec), // delta 0 does not refresh
		get(sec, 0, 0),
		add(0, -1, -1, 10*sec),
	}},
	{"Window 24h: a daily sequence", []counter.Option{counter.Window(24 * h)}, []step{
		add(0, 1, 1, 24*h),
		add(h, 1, 2, 23*h),
		add(0, 1, 3, 23*h),
		get(23*h-us, 3, us),
		get(us, 0, 0), // a new day starts from zero
		add(0, 1, 1, 24*h),
		get(48*h, 0, 0),
		add(30*time.Minute, 5, 5, 23*h+30*time.Minute),
		reset(0),
		get(0, 0, 0),
		add(0, 1, 1, 23*h+30*time.Minute),
	}},
	{"Window 1h with WindowOffset -30m", []counter.Option{counter.Window(h), counter.WindowOffset(-30 * time.Minute)}, []step{
		add(0, 1, 1, 30*time.Minute),
		add(30*time.Minute-us, 1, 2, us),
		get(us, 0, 0),
		add(0, 1, 1, h),
	}},
	{"keys are independent", []counter.Option{counter.TTL(10 * sec)}, []step{
		add(0, 1, 1, 10*sec).on("a"),
		add(5*sec, 1, 1, 10*sec).on("b"),
		add(0, 1, 2, 5*sec).on("a"),
		get(5*sec, 0, 0).on("a"),
		get(0, 1, 5*sec).on("b"),
		reset(0).on("b"),
		get(0, 0, 0).on("b"),
	}},
	{"plain: overflow changes nothing", nil, []step{
		add(0, counter.MaxValue, counter.MaxValue, 0),
		add(0, 1, counter.MaxValue, 0).overflows(),
		add(0, -counter.MaxValue, 0, 0),
		add(0, -counter.MaxValue, -counter.MaxValue, 0),
		add(0, -1, -counter.MaxValue, 0).overflows(),
		add(0, counter.MaxValue+1, -counter.MaxValue, 0).overflows(), // the delta itself
	}},
	{"TTL: overflow keeps value and expiry", []counter.Option{counter.TTL(10 * sec), counter.RefreshOnAdd()}, []step{
		add(0, counter.MaxValue-1, counter.MaxValue-1, 10*sec),
		add(sec, 2, counter.MaxValue-1, 9*sec).overflows(),
		add(0, 1, counter.MaxValue, 10*sec),
	}},
	{"Window: overflow", []counter.Option{counter.Window(h)}, []step{
		add(0, -counter.MaxValue, -counter.MaxValue, h),
		add(sec, -1, -counter.MaxValue, h-sec).overflows(),
		add(h, -1, -1, h-sec), // a new window
	}},
}

func TestConformance(t *testing.T) {
	// On "redis-replay" every script call runs twice, as a client's resend
	// after a lost reply does: a counter must count each Add once.
	replay := kindOfBackend{Name: "redis-replay", Make: func(t testing.TB, clk clock.Clock) backend.Backend {
		b, _ := backendtest.Replaying(t, clk)
		return b
	}}
	for _, bk := range append(allBackends(), replay) {
		t.Run(bk.Name, func(t *testing.T) {
			t.Parallel()
			for _, tb := range tables {
				t.Run(tb.name, func(t *testing.T) {
					clk := clock.NewFake(t0)
					c, err := counter.New(bk.Make(t, clk), "visits", tb.opts...)
					if err != nil {
						t.Fatal(err)
					}
					runSteps(t, c, clk, tb.steps)
				})
			}
		})
	}
}

func runSteps(t *testing.T, c *counter.Counter, clk *clock.Fake, steps []step) {
	t.Helper()
	ctx := context.Background()
	for i, s := range steps {
		clk.Advance(s.advance)
		key := s.key
		if key == "" {
			key = "user-42"
		}
		at := clk.Now().Sub(t0)
		switch s.op {
		case opAdd:
			got, err := c.Add(ctx, key, s.delta)
			switch {
			case s.overflow && !errors.Is(err, counter.ErrOverflow):
				t.Fatalf("step %d (t=%v, Add %d): err %v, want ErrOverflow", i+1, at, s.delta, err)
			case !s.overflow && err != nil:
				t.Fatalf("step %d (t=%v, Add %d): %v", i+1, at, s.delta, err)
			case !s.overflow && got != s.want.Value:
				t.Errorf("step %d (t=%v, Add %d): got %d, want %d", i+1, at, s.delta, got, s.want.Value)
			}
		case opGet:
			got, err := c.Get(ctx, key)
			if err != nil {
				t.Fatalf("step %d (t=%v, Get): %v", i+1, at, err)
			}
			if got != s.want.Value {
				t.Errorf("step %d (t=%v, Get): got %d, want %d", i+1, at, got, s.want.Value)
			}
		case opReset:
			if err := c.Reset(ctx, key); err != nil {
				t.Fatalf("step %d (t=%v, Reset): %v", i+1, at, err)
			}
		}
		got, err := c.Inspect(ctx, key)
		if err != nil {
			t.Fatalf("step %d (t=%v, Inspect): %v", i+1, at, err)
		}
		if got != s.want {
			t.Errorf("step %d (t=%v): Inspect got %+v, want %+v", i+1, at, got, s.want)
		}
	}
}

// TestIdentity checks which Counters share values: the same name and
// options do, whatever the object; another name, another mode or another
// window length do not. WindowOffset(-30m) and (+30m) name the same windows.
func TestIdentity(t *testing.T) {
	for _, bk := range allBackends() {
		t.Run(bk.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			clk := clock.NewFake(t0)
			b := bk.Make(t, clk)
			mk := func(name string, opts ...counter.Option) *counter.Counter {
				c, err := counter.New(b, name, opts...)
				if err != nil {
					t.Fatal(err)
				}
				return c
			}
			first := mk("n", counter.Window(h))
			if _, err := first.Add(ctx, "k", 5); err != nil {
				t.Fatal(err)
			}
			cases := []struct {
				c    *counter.Counter
				want int64
				what string
			}{
				{mk("n", counter.Window(h)), 5, "same name and window"},
				{mk("n", counter.Window(2*h)), 0, "another window length"},
				{mk("n"), 0, "a plain counter"},
				{mk("n", counter.TTL(h)), 0, "a TTL counter"},
				{mk("m", counter.Window(h)), 0, "another name"},
			}
			for _, c := range cases {
				got, err := c.c.Get(ctx, "k")
				if err != nil {
					t.Fatal(err)
				}
				if got != c.want {
					t.Errorf("%s: Get = %d, want %d", c.what, got, c.want)
				}
			}
			a, bb := mk("o", counter.Window(h), counter.WindowOffset(-30*time.Minute)), mk("o", counter.Window(h), counter.WindowOffset(30*time.Minute))
			if _, err := a.Add(ctx, "k", 2); err != nil {
				t.Fatal(err)
			}
			if got, err := bb.Get(ctx, "k"); err != nil || got != 2 {
				t.Errorf("offsets -30m and 30m of 1h windows: Get = %d, %v; want 2", got, err)
			}
		})
	}
}
