package counter_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/counter"
)

func TestBadOptions(t *testing.T) {
	m := backend.NewMemory()
	defer m.Close()
	cases := []struct {
		name string
		opts []counter.Option
		want string // must appear in the error
	}{
		{"", nil, "counter: name is empty"},
		{strings.Repeat("n", 513), nil, "counter: name must be at most 512 bytes, got 513"},
		{"n", []counter.Option{counter.TTL(-time.Second)}, "counter: TTL must be >= 0 (0 for none), got -1s"},
		{"n", []counter.Option{counter.TTL(1500 * time.Nanosecond)}, "counter: TTL must be a whole number of microseconds, got 1.5µs"},
		{"n", []counter.Option{counter.TTL(87601 * time.Hour)}, "counter: TTL must be at most MaxPeriod (87600h), got 87601h0m0s"},
		{"n", []counter.Option{counter.Window(-time.Hour)}, "counter: Window must be >= 0 (0 for none), got -1h0m0s"},
		{"n", []counter.Option{counter.Window(time.Nanosecond)}, "counter: Window must be a whole number of microseconds, got 1ns"},
		{"n", []counter.Option{counter.Window(87601 * time.Hour)}, "counter: Window must be at most MaxPeriod"},
		{"n", []counter.Option{counter.TTL(time.Hour), counter.Window(24 * time.Hour)}, "counter: TTL (1h0m0s) and Window (24h0m0s) exclude each other"},
		{"n", []counter.Option{counter.RefreshOnAdd()}, "counter: RefreshOnAdd needs a TTL"},
		{"n", []counter.Option{counter.Window(time.Hour), counter.RefreshOnAdd()}, "counter: RefreshOnAdd needs a TTL"},
		{"n", []counter.Option{counter.WindowOffset(time.Minute)}, "counter: WindowOffset (1m0s) needs a Window"},
		{"n", []counter.Option{counter.Window(time.Hour), counter.WindowOffset(time.Hour)}, "counter: WindowOffset must lie strictly between -Window and Window (1h0m0s), got 1h0m0s"},
		{"n", []counter.Option{counter.Window(time.Hour), counter.WindowOffset(-2 * time.Hour)}, "got -2h0m0s"},
		{"n", []counter.Option{counter.Window(time.Hour), counter.WindowOffset(time.Nanosecond)}, "counter: WindowOffset must be a whole number of microseconds, got 1ns"},
	}
	for _, c := range cases {
		_, err := counter.New(m, c.name, c.opts...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%.10q, %d options): %v\nwant an error containing %q", c.name, len(c.opts), err, c.want)
		}
	}
	if _, err := counter.New(nil, "n"); err == nil || !strings.Contains(err.Error(), "backend is nil") {
		t.Errorf("nil backend: %v", err)
	}
	// Zero values mean "none", and nil options are ignored.
	if _, err := counter.New(m, "n", counter.TTL(0), counter.Window(0), nil); err != nil {
		t.Errorf("TTL(0), Window(0): %v", err)
	}
	if _, err := counter.New(m, "n", counter.TTL(0), counter.Window(time.Hour)); err != nil {
		t.Errorf("TTL(0) with a Window: %v", err)
	}
}

func TestBadCalls(t *testing.T) {
	ctx := context.Background()
	for _, bk := range []kindOfBackend{allBackends()[0], allBackends()[1]} {
		t.Run(bk.Name, func(t *testing.T) {
			c, err := counter.New(bk.Make(t, nil), "n", counter.TTL(time.Hour))
			if err != nil {
				t.Fatal(err)
			}
			// The empty key is refused; a long one is a key like any other
			// (TestLongKeys).
			want := backend.ErrEmptyKey
			if _, err := c.Add(ctx, "", 1); !errors.Is(err, want) {
				t.Errorf("Add(\"\"): %v, want %v", err, want)
			}
			if _, err := c.Get(ctx, ""); !errors.Is(err, want) {
				t.Errorf("Get(\"\"): %v, want %v", err, want)
			}
			if _, err := c.Inspect(ctx, ""); !errors.Is(err, want) {
				t.Errorf("Inspect(\"\"): %v, want %v", err, want)
			}
			if err := c.Reset(ctx, ""); !errors.Is(err, want) {
				t.Errorf("Reset(\"\"): %v, want %v", err, want)
			}
			long := strings.Repeat("k", backend.MaxKeyLen+1)
			if v, err := c.Add(ctx, long, 1); err != nil || v != 1 {
				t.Errorf("Add of a key of MaxKeyLen+1 bytes: %d, %v; want 1", v, err)
			}
			for _, d := range []int64{counter.MaxValue + 1, -counter.MaxValue - 1, 1 << 62} {
				if _, err := c.Add(ctx, "k", d); !errors.Is(err, counter.ErrOverflow) || !strings.Contains(err.Error(), "delta") {
					t.Errorf("Add(%d): %v, want ErrOverflow naming the delta", d, err)
				}
			}
			cancelled, cancel := context.WithCancel(ctx)
			cancel()
			if _, err := c.Add(cancelled, "k", 1); !errors.Is(err, context.Canceled) {
				t.Errorf("Add with a cancelled context: %v", err)
			}
			if v, err := c.Get(ctx, "k"); err != nil || v != 0 {
				t.Errorf("after rejected calls: Get = %d, %v; want 0", v, err)
			}
		})
	}
}

func TestBadBatched(t *testing.T) {
	m := backend.NewMemory()
	defer m.Close()
	c, err := counter.New(m, "n")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		c     *counter.Counter
		every time.Duration
		opts  []counter.BatchOption
		want  string
	}{
		{nil, time.Second, nil, "counter: NewBatched: counter is nil"},
		{c, 0, nil, "counter: NewBatched: flushEvery must be > 0, got 0s"},
		{c, -time.Second, nil, "counter: NewBatched: flushEvery must be > 0, got -1s"},
		{c, time.Second, []counter.BatchOption{counter.FlushTimeout(0)}, "counter: FlushTimeout must be > 0, got 0s"},
		{c, time.Second, []counter.BatchOption{counter.MaxKeys(-1)}, "counter: MaxKeys must be >= 0, got -1"},
	}
	for _, tc := range cases {
		if _, err := counter.NewBatched(tc.c, tc.every, tc.opts...); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewBatched: %v\nwant an error containing %q", err, tc.want)
		}
	}
	bt, err := counter.NewBatched(c, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if err := bt.Add("", 1); !errors.Is(err, backend.ErrEmptyKey) {
		t.Errorf("Add with an empty key: %v", err)
	}
	if err := bt.Add("k", counter.MaxValue+1); !errors.Is(err, counter.ErrOverflow) {
		t.Errorf("Add beyond MaxValue: %v", err)
	}
	if n := bt.Pending(); n != 0 {
		t.Errorf("rejected Adds left %d keys pending", n)
	}
	if err := bt.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
}
