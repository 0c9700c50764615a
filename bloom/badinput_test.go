package bloom_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/bloom"
)

func TestBadArguments(t *testing.T) {
	mem := backend.NewMemory()
	defer mem.Close()
	long := strings.Repeat("n", backend.MaxKeyLen+1)
	cases := []struct {
		name     string
		b        backend.Backend
		capacity int64
		p        float64
		want     string
	}{
		{"f", nil, 10, 0.01, "bloom: backend is nil"},
		{"", mem, 10, 0.01, "bloom: name must not be empty"},
		{long, mem, 10, 0.01, "bloom: name must be at most 1024 bytes, got 1025"},
		{"f", mem, 0, 0.01, "bloom: capacity must be > 0, got 0"},
		{"f", mem, -5, 0.01, "bloom: capacity must be > 0, got -5"},
		{"f", mem, 10, 0, "bloom: fpRate must be in (0, 1), got 0"},
		{"f", mem, 10, 1, "bloom: fpRate must be in (0, 1), got 1"},
		{"f", mem, 10, -0.1, "bloom: fpRate must be in (0, 1), got -0.1"},
		{"f", mem, 10, 1.5, "bloom: fpRate must be in (0, 1), got 1.5"},
		{"f", mem, 10, math.NaN(), "bloom: fpRate must be in (0, 1), got NaN"},
		{"f", mem, 10, math.Inf(1), "bloom: fpRate must be in (0, 1), got +Inf"},
		{"f", mem, 1_000_000_000, 0.0001, "bloom: capacity 1000000000 at fpRate 0.0001 needs 19170116755 cells, more than MaxCells (4294967296)"},
		{"f", mem, math.MaxInt64, 0.5, "bloom: capacity 9223372036854775807 at fpRate 0.5 needs"},
		{"f", mem, 1, 1e-30, "bloom: fpRate 1e-30 needs 100 hash functions, more than MaxHashes (64)"},
	}
	for _, c := range cases {
		_, err := bloom.New(c.b, c.name, c.capacity, c.p)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("New(%.10q, %d, %v): got %v, want %q", c.name, c.capacity, c.p, err, c.want)
		}
		_, err = bloom.NewCounting(c.b, c.name, c.capacity, c.p)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("NewCounting(%.10q, %d, %v): got %v, want %q", c.name, c.capacity, c.p, err, c.want)
		}
	}
}

func TestLimits(t *testing.T) {
	mem := backend.NewMemory()
	defer mem.Close()
	// The largest filters fit: 2^32 cells split into 16 MiB keys.
	f, err := bloom.New(mem, "big", 440_000_000, 0.01)
	if err != nil {
		t.Fatal(err)
	}
	if i := f.Info(); i.Cells > bloom.MaxCells || i.Shards != int((i.Bytes+bloom.ShardBytes-1)/bloom.ShardBytes) || i.Shards != 32 {
		t.Errorf("Info of a 440M-item filter: %+v, want at most 2^32 cells in 32 shards", i)
	}
	c, err := bloom.NewCounting(mem, "big", 440_000_000, 0.01)
	if err != nil {
		t.Fatal(err)
	}
	if i := c.Info(); i.Shards != 126 || i.CellBits != 4 || i.Bytes != int64((i.Cells+1)/2) {
		t.Errorf("Info of a 440M-item counting filter: %+v, want 126 shards of 4-bit cells", i)
	}
	// A tiny filter still has a cell and a hash.
	f, err = bloom.New(mem, "tiny", 1, 0.99)
	if err != nil {
		t.Fatal(err)
	}
	if i := f.Info(); i.Cells != 1 || i.Hashes != 1 {
		t.Errorf("tiny filter: m=%d k=%d, want 1 and 1", i.Cells, i.Hashes)
	}
	ctx := context.Background()
	if got, err := f.Add(ctx, "a", "b"); err != nil || !got[0] || got[1] {
		t.Errorf("one-cell filter: Add(a, b) = %v, %v; want [true false]", got, err)
	}
}

func TestInfo(t *testing.T) {
	mem := backend.NewMemory()
	defer mem.Close()
	f, err := bloom.New(mem, "info", 10_000, 0.01)
	if err != nil {
		t.Fatal(err)
	}
	// m = ceil(-10000·ln 0.01 / ln²2) = ceil(95850.58...) and
	// k = round(9.585·ln 2) = round(6.64) = 7.
	want := bloom.Info{Name: "info", Capacity: 10_000, FPRate: 0.01, Cells: 95851, Hashes: 7, CellBits: 1, Bytes: 11982, Shards: 1}
	got := f.Info()
	if math.Abs(got.ExpectedFPRate-0.01003) > 0.00001 {
		t.Errorf("ExpectedFPRate = %v, want about 0.01003", got.ExpectedFPRate)
	}
	got.ExpectedFPRate = 0
	if got != want {
		t.Errorf("Info:\n got %+v\nwant %+v", got, want)
	}
	c, err := bloom.NewCounting(mem, "info", 10_000, 0.01)
	if err != nil {
		t.Fatal(err)
	}
	if got := c.Info(); got.Cells != 95851 || got.Hashes != 7 || got.CellBits != 4 || got.Bytes != 47926 || got.Shards != 1 {
		t.Errorf("counting Info: %+v", got)
	}
}

// TestZeroValues checks that zero and nil filters return errors, not panics.
func TestZeroValues(t *testing.T) {
	ctx := context.Background()
	var f bloom.Filter
	var c bloom.CountingFilter
	var nf *bloom.Filter
	var nc *bloom.CountingFilter
	errs := []error{}
	_, err := f.Add(ctx, "a")
	errs = append(errs, err)
	_, err = f.Contains(ctx, "a")
	errs = append(errs, err, f.Reset(ctx))
	_, err = c.Add(ctx, "a")
	errs = append(errs, err)
	_, err = c.Contains(ctx, "a")
	errs = append(errs, err, c.Remove(ctx, "a"), c.Reset(ctx))
	_, err = nf.Add(ctx, "a")
	errs = append(errs, err)
	_, err = nc.Contains(ctx, "a")
	errs = append(errs, err, nc.Remove(ctx, "a"), nc.Reset(ctx))
	for i, err := range errs {
		if err == nil || !strings.Contains(err.Error(), "bloom: filter was not created by New or NewCounting") {
			t.Errorf("call %d: got %v", i, err)
		}
	}
	if (f.Info() != bloom.Info{}) || (nc.Info() != bloom.Info{}) {
		t.Error("Info of a zero filter is not zero")
	}
}

// TestCanceledContext checks that a canceled context fails every call on
// every backend without touching the filter.
func TestCanceledContext(t *testing.T) {
	for _, bk := range allBackends() {
		t.Run(bk.name, func(t *testing.T) {
			f := makeCounting(t, bk.make(t), "ctx", 100, 0.01, 0)
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			_, err := f.add(ctx, "a")
			if !errors.Is(err, context.Canceled) {
				t.Errorf("Add: got %v, want context.Canceled", err)
			}
			if _, err := f.contains(ctx, "a"); !errors.Is(err, context.Canceled) {
				t.Errorf("Contains: got %v", err)
			}
			if err := f.remove(ctx, "a"); !errors.Is(err, context.Canceled) {
				t.Errorf("Remove: got %v", err)
			}
			if got, err := f.contains(context.Background(), "a"); err != nil || got[0] {
				t.Errorf("after a canceled Add: Contains = %v, %v; want false", got, err)
			}
		})
	}
}

// TestRedisDown checks that a store that cannot be reached gives an error
// quickly, not a hang or a panic.
func TestRedisDown(t *testing.T) {
	c := newUnreachable(t)
	f, err := bloom.New(c, "down", 100, 0.01)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Add(context.Background(), "a"); err == nil || !strings.Contains(err.Error(), "backend: redis") {
		t.Errorf("Add on an unreachable Redis: got %v", err)
	}
}
