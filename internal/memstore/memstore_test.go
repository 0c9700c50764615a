package memstore_test

import (
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/internal/memstore"
)

// TestShardTime: a shard's time is the clock's reading, or the latest time
// it gave out when the reading is earlier (a call that read the clock
// before another took the lock, a clock set back); it never runs backwards,
// and each shard keeps its own. TimeOf gives the shards of one decision one
// time, the latest.
func TestShardTime(t *testing.T) {
	const t0 = 1_700_000_000_345_678 // µs
	clk := clock.NewFake(time.UnixMicro(t0))
	m := memstore.New(clk, 4, -1, time.Hour)
	defer m.Close()
	tb := m.Table("t")
	a := tb.Shard("a")
	var b *memstore.Shard
	for i := 0; b == nil || b == a; i++ {
		b = tb.Shard(strconv.Itoa(i))
	}
	at := func(s *memstore.Shard, f func() int64, want int64) {
		t.Helper()
		s.Lock()
		got := f()
		s.Unlock()
		if got != want {
			t.Errorf("got %d, want %d (t0%+d)", got, want, got-t0)
		}
	}
	at(a, a.Now, t0)
	at(a, func() int64 { return a.Time(t0 - 50) }, t0) // read before another's decision
	at(a, func() int64 { return a.Time(t0 + 10) }, t0+10)
	clk.Set(time.UnixMicro(t0 - 1000))
	at(a, a.Now, t0+10) // the clock set back: the shard's time stands still
	at(b, b.Now, t0-1000)
	clk.Set(time.UnixMicro(t0 + 20))
	at(a, a.Now, t0+20) // and moves on with the clock once it is past

	a.Lock()
	b.Lock()
	got := memstore.TimeOf(t0, []*memstore.Shard{a, b})
	b.Unlock()
	a.Unlock()
	if got != t0+20 {
		t.Errorf("TimeOf: got t0%+d, want the latest of the shards' times, t0+20", got-t0)
	}
	at(b, func() int64 { return b.Time(t0) }, t0+20) // it became b's time too
}
