package bloom_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/floodgate-dev/floodgate/bloom"
)

// TestPositionsGolden pins the cells of a few items. They are the storage
// format that every process sharing a filter relies on: if this test fails,
// filters written by an older release would read wrong.
func TestPositionsGolden(t *testing.T) {
	cases := []struct {
		m    uint64
		k    int
		item string
		want []uint32
	}{
		// XXH64("hello") = 0x26c7827d889f6da3; h1 = 14519, h2 = 42870 after
		// fast range; g_i = h1 + i·h2 + (i³-i)/6 mod m.
		{95851, 7, "hello", []uint32{14519, 57389, 4409, 47282, 90158, 37187, 80072}},
		{95851, 7, "", []uint32{89589, 52290, 14992, 73547, 36254, 94816, 57532}},
		{1 << 32, 3, "user:42", []uint32{3693079165, 2310732270, 928385376}},
		{5752, 13, "a", []uint32{4725, 428, 1884, 3342, 4803, 516, 1986, 3462, 4945, 684, 2184, 3694, 5215}},
	}
	for _, c := range cases {
		got := bloom.Positions(c.m, c.k, c.item)
		if !slices.Equal(got, c.want) {
			t.Errorf("Positions(%d, %d, %q) = %v, want %v", c.m, c.k, c.item, got, c.want)
		}
	}
}

// TestRedisLayout checks the keys a split filter uses on Redis: shard keys
// "<prefix>:{<name>}:b<i>" (counting: c<i>) sharing the hash tag, each at
// most the shard size, all deleted by Reset.
func TestRedisLayout(t *testing.T) {
	ctx := context.Background()
	c := redisClient(t)
	prefix := uniquePrefix()
	r := newRedisOn(t, c, prefix)
	const shardBytes = 64 // 512 bits or 128 counters per key
	f, err := bloom.NewSharded(r, "a{b}c", 1000, 0.01, shardBytes)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := bloom.NewCountingSharded(r, "a{b}c", 1000, 0.01, shardBytes)
	if err != nil {
		t.Fatal(err)
	}
	fi, ci := f.Info(), cf.Info()
	if fi.Shards != 19 || ci.Shards != 75 { // ceil(9586/512), ceil(9586/128)
		t.Fatalf("shards: filter %d, counting %d; want 19 and 75", fi.Shards, ci.Shards)
	}
	items := keys("k", 0, 1000)
	if _, err := f.Add(ctx, items...); err != nil {
		t.Fatal(err)
	}
	if _, err := cf.Add(ctx, items[:10]...); err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := range fi.Shards {
		want = append(want, fmt.Sprintf("%s:{a%%7Bb%%7Dc}:b%d", prefix, i))
	}
	got, err := c.Keys(ctx, prefix+":*:b*").Result()
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("filter keys:\n got %v\nwant %v", got, want)
	}
	for _, k := range got {
		if n, err := c.StrLen(ctx, k).Result(); err != nil || n > shardBytes {
			t.Errorf("STRLEN %s = %d, %v; want at most %d", k, n, err, shardBytes)
		}
	}
	// The counting filter is separate: its 10 items touched some c keys only.
	cKeys, err := c.Keys(ctx, prefix+":*:c*").Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(cKeys) == 0 || len(cKeys) > 70 {
		t.Errorf("counting keys: %d, want between 1 and 70 (10 items × 7 cells)", len(cKeys))
	}
	if got, _ := cf.Contains(ctx, items[10:20]...); slices.Contains(got, true) {
		t.Errorf("the counting filter sees the bitmap filter's items: %v", got)
	}
	for _, reset := range []func(context.Context) error{f.Reset, cf.Reset} {
		if err := reset(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if left, _ := c.Keys(ctx, prefix+":*").Result(); len(left) != 0 {
		t.Errorf("keys left after Reset: %v", left)
	}
}

// TestSharedByName checks that two Filter values with the same name, on two
// clients, are one filter (as two processes would share it), and that a
// different name is a different filter.
func TestSharedByName(t *testing.T) {
	ctx := context.Background()
	prefix := uniquePrefix()
	a, err := bloom.New(newRedisOn(t, redisClient(t), prefix), "shared", 1000, 0.01)
	if err != nil {
		t.Fatal(err)
	}
	b, err := bloom.New(newRedisOn(t, redisClient(t), prefix), "shared", 1000, 0.01)
	if err != nil {
		t.Fatal(err)
	}
	other, err := bloom.New(newRedisOn(t, redisClient(t), prefix), "other", 1000, 0.01)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Add(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	if got, _ := b.Add(ctx, "x"); got[0] {
		t.Error("b: x is new, but a added it")
	}
	if got, _ := other.Contains(ctx, "x"); got[0] {
		t.Error("another name sees x")
	}
}
