package backend_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/counter"
	"github.com/floodgate-dev/floodgate/internal/memstore"
	"github.com/floodgate-dev/floodgate/internal/unwrap"
	"github.com/floodgate-dev/floodgate/lock"
	"github.com/floodgate-dev/floodgate/ratelimit"
)

// Tests of Memory's bound (issue 12, "The memory backend has no bound").

// blob is a Value whose size the test chooses.
type blob struct{ n int }

func (b *blob) MemSize() int { return b.n }

func put(tb *memstore.Table, key string, e *memstore.Entry) {
	sh := tb.Shard(key)
	sh.Lock()
	sh.Put(key, e)
	sh.Unlock()
}

// get looks key up; like any Get it marks the entry used.
func get(tb *memstore.Table, key string) *memstore.Entry {
	sh := tb.Shard(key)
	sh.Lock()
	defer sh.Unlock()
	return sh.Get(key)
}

// cost is Memory's estimate for an entry of key whose Value is v.
func cost(key string, v int) int64 {
	return memstore.EntryOverhead + int64(memstore.AllocBytes(len(key))) + int64(v)
}

func newBounded(t *testing.T, maxBytes int64, opts ...backend.Option) (*backend.Memory, *clock.Fake) {
	t.Helper()
	fk := clock.NewFake(time.Unix(1_700_000_000, 0))
	m := backend.NewMemory(append([]backend.Option{backend.WithClock(fk), backend.WithSweepInterval(time.Hour), backend.WithMaxBytes(maxBytes)}, opts...)...)
	t.Cleanup(func() { m.Close() })
	return m, fk
}

func TestAllocBytes(t *testing.T) {
	for n, want := range map[int]int{-1: 0, 0: 0, 1: 8, 8: 8, 9: 16, 17: 24, 33: 48, 520: 576, 1024: 1024, 1025: 1152, 20000: 20480, 32768: 32768, 32769: 40960} {
		if got := memstore.AllocBytes(n); got != want {
			t.Errorf("AllocBytes(%d) = %d, want %d", n, got, want)
		}
	}
}

func TestWithMaxBytes(t *testing.T) {
	for _, c := range []struct {
		opt  []backend.Option
		want int64
	}{
		{nil, backend.DefaultMaxBytes},
		{[]backend.Option{backend.WithMaxBytes(0)}, backend.DefaultMaxBytes},
		{[]backend.Option{backend.WithMaxBytes(1 << 20)}, 1 << 20},
		{[]backend.Option{backend.WithMaxBytes(-5)}, -1},
	} {
		m := backend.NewMemory(c.opt...)
		if got := m.Stats().MaxBytes; got != c.want {
			t.Errorf("MaxBytes = %d, want %d", got, c.want)
		}
		m.Close()
	}
}

// TestMemoryBoundRespected: after each Unlock, the estimate of an evictable
// table stays within the bound, with no slack when every entry is smaller
// than a shard's share (MaxBytes / shards); and the room is used.
func TestMemoryBoundRespected(t *testing.T) {
	const maxBytes = 256 << 10
	m, _ := newBounded(t, maxBytes)
	tb := unwrap.Memory(m).EvictableTable("rl")
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 20_000
	for i := range n {
		put(tb, "key:"+strconv.Itoa(i), &memstore.Entry{Value: &blob{rng.IntN(512)}})
		if i%500 == 0 || i == n-1 {
			if st := m.Stats(); st.Bytes > maxBytes {
				t.Fatalf("after %d puts: %d bytes, bound %d", i+1, st.Bytes, maxBytes)
			}
		}
	}
	st := m.Stats()
	if st.Entries >= n || st.EvictedLRU == 0 || st.EvictedExpired != 0 {
		t.Errorf("stats %+v: want evictions, all LRU", st)
	}
	if st.Entries+int64(st.EvictedLRU) != n {
		t.Errorf("%d entries + %d evicted != %d put", st.Entries, st.EvictedLRU, n)
	}
	if st.Bytes < maxBytes*3/4 {
		t.Errorf("%d bytes: the bound of %d is not used", st.Bytes, maxBytes)
	}

	// A Value that grows after it was stored is measured when its shard is
	// unlocked, and the growth evicts too.
	sh := tb.Shard("key:19999")
	sh.Lock()
	e := sh.Get("key:19999")
	e.Value.(*blob).n = 3000
	sh.Unlock()
	if st := m.Stats(); st.Bytes > maxBytes {
		t.Fatalf("after growth: %d bytes, bound %d", st.Bytes, maxBytes)
	}
	if get(tb, "key:19999") == nil {
		t.Fatal("the entry that grew was evicted by its own growth")
	}
}

// TestMemoryBoundBigEntry: an entry larger than its shard's share is kept
// (its caller just stored it), and is the only slack over the bound.
func TestMemoryBoundBigEntry(t *testing.T) {
	m, _ := newBounded(t, 4096, backend.WithShards(1))
	tb := unwrap.Memory(m).EvictableTable("rl")
	for i := range 10 {
		put(tb, "k"+strconv.Itoa(i), &memstore.Entry{})
	}
	put(tb, "big", &memstore.Entry{Value: &blob{10_000}})
	st := m.Stats()
	if st.Entries != 1 || st.Bytes != cost("big", 10_000) || get(tb, "big") == nil {
		t.Fatalf("stats %+v: want only the big entry", st)
	}
	put(tb, "next", &memstore.Entry{})
	if st := m.Stats(); st.Entries != 1 || get(tb, "next") == nil {
		t.Fatalf("stats %+v: the big entry should go for the next one", st)
	}
}

// TestEvictExpiredFirst: over the bound, an entry that has expired goes
// before any live one, even the least recently used. The shard holds no more
// entries than eviction samples, so the order is deterministic.
func TestEvictExpiredFirst(t *testing.T) {
	per := cost("k0", 0)
	m, fk := newBounded(t, 6*per, backend.WithShards(1))
	tb := unwrap.Memory(m).EvictableTable("rl")
	now := tb.NowMicros()
	for i := range 6 {
		e := &memstore.Entry{Expires: now + 3600e6} // live for an hour
		if i == 2 || i == 4 {
			e.Expires = now + 1e6
		}
		put(tb, "k"+strconv.Itoa(i), e)
	}
	if st := m.Stats(); st.Bytes != 6*per || st.EvictedExpired+st.EvictedLRU != 0 {
		t.Fatalf("at the bound: %+v", st)
	}
	fk.Advance(2 * time.Second) // k2 and k4 expire
	put(tb, "k6", &memstore.Entry{})
	put(tb, "k7", &memstore.Entry{})
	if st := m.Stats(); st.EvictedExpired != 2 || st.EvictedLRU != 0 || st.Entries != 6 {
		t.Fatalf("want the 2 expired entries evicted and no live one: %+v", st)
	}
	put(tb, "k8", &memstore.Entry{})
	if st := m.Stats(); st.EvictedExpired != 2 || st.EvictedLRU != 1 {
		t.Fatalf("want 1 LRU eviction once nothing has expired: %+v", st)
	}
	for _, k := range []string{"k1", "k3", "k5", "k6", "k7", "k8"} {
		if get(tb, k) == nil {
			t.Errorf("%s was evicted", k)
		}
	}
	for _, k := range []string{"k0", "k2", "k4"} {
		if get(tb, k) != nil {
			t.Errorf("%s was kept", k)
		}
	}
}

// TestEvictLeastRecentlyUsed: Get and Put mark an entry used; the least
// recently used goes first. Deterministic: the shard holds fewer entries than
// eviction samples.
func TestEvictLeastRecentlyUsed(t *testing.T) {
	m, _ := newBounded(t, 4*cost("a", 0), backend.WithShards(1))
	tb := unwrap.Memory(m).EvictableTable("rl")
	for _, k := range []string{"a", "b", "c", "d"} {
		put(tb, k, &memstore.Entry{})
	}
	get(tb, "a")                    // order of use: b c d a
	put(tb, "e", &memstore.Entry{}) // evicts b
	get(tb, "c")                    // d a e c
	put(tb, "f", &memstore.Entry{}) // evicts d
	put(tb, "g", &memstore.Entry{}) // evicts a
	if st := m.Stats(); st.EvictedLRU != 3 || st.Entries != 4 {
		t.Fatalf("stats %+v", st)
	}
	for _, k := range []string{"c", "e", "f", "g"} {
		if get(tb, k) == nil {
			t.Errorf("%s was evicted", k)
		}
	}
}

// TestEvictApproximateLRU: with many entries per shard eviction samples, as
// Redis's allkeys-lru does; keys in use survive a stream of new keys.
func TestEvictApproximateLRU(t *testing.T) {
	per := cost("cold:00000", 0)
	m, _ := newBounded(t, 10_000*per)
	tb := unwrap.Memory(m).EvictableTable("rl")
	const hot, rounds, coldPerRound = 500, 100, 500
	for i := range hot {
		put(tb, "hot:"+strconv.Itoa(i), &memstore.Entry{})
	}
	for r := range rounds {
		for i := range coldPerRound {
			put(tb, fmt.Sprintf("cold:%05d", r*coldPerRound+i), &memstore.Entry{})
		}
		for i := range hot {
			get(tb, "hot:"+strconv.Itoa(i))
		}
	}
	lost := 0
	for i := range hot {
		if get(tb, "hot:"+strconv.Itoa(i)) == nil {
			lost++
		}
	}
	st := m.Stats()
	if st.EvictedLRU < rounds*coldPerRound-10_000 {
		t.Fatalf("too few evictions: %+v", st)
	}
	if lost > hot/100 {
		t.Errorf("%d of %d keys in use were evicted (%d evictions)", lost, hot, st.EvictedLRU)
	}
}

// TestNonEvictableNeverEvicted: tables made by Table are never evicted, even
// when they alone exceed the bound; they count in Bytes and PinnedBytes, and
// evictable tables then keep a quarter of the bound.
func TestNonEvictableNeverEvicted(t *testing.T) {
	const maxBytes = 1 << 20
	m, _ := newBounded(t, maxBytes)
	ctx := context.Background()
	pinned := unwrap.Memory(m).Table("pinned")
	for i := range 5000 {
		put(pinned, "p"+strconv.Itoa(i), &memstore.Entry{Value: &blob{100}})
	}
	// Real primitives whose state must never be forgotten.
	var mutexes []lock.Locker
	for i := range 200 {
		mu, err := lock.NewMutex(m, "mutex"+strconv.Itoa(i), lock.TTL(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := mu.TryLock(ctx); err != nil {
			t.Fatal(err)
		}
		mutexes = append(mutexes, mu)
	}
	conc, err := ratelimit.NewConcurrency(m, ratelimit.Concurrency{Limit: 1, Lease: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		if _, r, err := conc.Acquire(ctx, "conn"+strconv.Itoa(i)); err != nil || !r.Allowed {
			t.Fatalf("Acquire: %+v %v", r, err)
		}
	}
	ctr, err := counter.New(m, "seq", counter.TTL(time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 200 {
		if _, err := ctr.Add(ctx, "c"+strconv.Itoa(i), int64(i+1)); err != nil {
			t.Fatal(err)
		}
	}
	before := m.Stats() // also tells the evictable tables how much is pinned
	if before.PinnedBytes <= maxBytes || before.Bytes != before.PinnedBytes {
		t.Fatalf("pinned state should exceed the bound on its own: %+v", before)
	}

	// A stream of rate-limited keys, far beyond the bound.
	lim, err := ratelimit.New(m, ratelimit.SlidingWindow{Limit: 10, Window: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20_000 {
		if _, err := lim.Allow(ctx, "user:"+strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	st := m.Stats()
	if st.EvictedLRU == 0 {
		t.Fatalf("no rate limit state was evicted: %+v", st)
	}
	if st.PinnedBytes != before.PinnedBytes {
		t.Errorf("pinned bytes changed from %d to %d", before.PinnedBytes, st.PinnedBytes)
	}
	if ev := st.Bytes - st.PinnedBytes; ev > maxBytes/4 || ev < maxBytes/8 {
		t.Errorf("evictable state is %d bytes, want at most (and near) a quarter of %d", ev, maxBytes)
	}
	for i := range 5000 {
		if get(pinned, "p"+strconv.Itoa(i)) == nil {
			t.Fatalf("pinned entry p%d was evicted", i)
		}
	}
	for i, mu := range mutexes {
		if _, err := mu.TryLock(ctx); !errors.Is(err, lock.ErrLocked) {
			t.Fatalf("mutex%d: TryLock = %v, want ErrLocked: the held lock was forgotten", i, err)
		}
	}
	for i := range 200 {
		if _, r, err := conc.Acquire(ctx, "conn"+strconv.Itoa(i)); err != nil || r.Allowed {
			t.Fatalf("conn%d: a second holder was admitted (%+v, %v): the lease was forgotten", i, r, err)
		}
	}
	for i := range 200 {
		if v, err := ctr.Get(ctx, "c"+strconv.Itoa(i)); err != nil || v != int64(i+1) {
			t.Fatalf("counter c%d = %d, %v, want %d", i, v, err, i+1)
		}
	}
}

// TestTableStaysNonEvictable: whoever asks for a table with Table gets a table
// that is never evicted, whatever EvictableTable asked before or after.
func TestTableStaysNonEvictable(t *testing.T) {
	m, _ := newBounded(t, 1024)
	ms := unwrap.Memory(m)
	if !ms.EvictableTable("a").Evictable() {
		t.Fatal("EvictableTable made a non-evictable table")
	}
	if ms.Table("a").Evictable() || ms.EvictableTable("a").Evictable() {
		t.Fatal("Table must make an evictable table non-evictable")
	}
	if ms.Table("b").Evictable() || ms.EvictableTable("b").Evictable() {
		t.Fatal("EvictableTable must not make a table evictable")
	}
	tb := ms.Table("a")
	for i := range 100 {
		put(tb, strconv.Itoa(i), &memstore.Entry{})
	}
	if n := tb.Len(); n != 100 {
		t.Fatalf("Len = %d", n)
	}
}

// TestMemoryStats checks the accounting of Put, replace, Delete, Sweep and
// growth, exactly.
func TestMemoryStats(t *testing.T) {
	m, fk := newBounded(t, -1)
	ms := unwrap.Memory(m)
	tb := ms.Table("t")
	rl := ms.EvictableTable("rl")
	now := tb.NowMicros()
	put(tb, "a", &memstore.Entry{})
	put(tb, "bb", &memstore.Entry{Value: &blob{100}, Expires: now + 1e6})
	put(rl, "ccc", &memstore.Entry{Value: "any value that is no Sizer"})
	want := cost("a", 0) + cost("bb", 100) + cost("ccc", memstore.ValueBytes)
	st := m.Stats()
	if st != (backend.MemoryStats{Entries: 3, Bytes: want, PinnedBytes: want - cost("ccc", memstore.ValueBytes), MaxBytes: -1}) {
		t.Fatalf("stats %+v, want %d bytes", st, want)
	}
	put(tb, "a", &memstore.Entry{Value: &blob{50}}) // replaces
	sh := tb.Shard("bb")
	sh.Lock()
	sh.Get("bb").Value.(*blob).n = 300 // grows
	sh.Unlock()
	want += 50 + 200
	if st := m.Stats(); st.Bytes != want || st.Entries != 3 {
		t.Fatalf("after replace and growth: %+v, want %d bytes", st, want)
	}
	sh = rl.Shard("ccc")
	sh.Lock()
	sh.Delete("ccc")
	sh.Delete("missing")
	sh.Unlock()
	want -= cost("ccc", memstore.ValueBytes)
	fk.Advance(time.Second)
	if n := m.Sweep(); n != 1 {
		t.Fatalf("swept %d", n)
	}
	want -= cost("bb", 300)
	if st := m.Stats(); st != (backend.MemoryStats{Entries: 1, Bytes: want, PinnedBytes: want, MaxBytes: -1, Swept: 1}) || want != cost("a", 50) {
		t.Fatalf("after delete and sweep: %+v, want %d bytes", st, want)
	}
}

// TestEntryOverhead checks that EntryOverhead is honest: what an entry with a
// 16-byte key and no Value adds to the live heap, map included, is no more
// than the estimate.
func TestEntryOverhead(t *testing.T) {
	live := func() uint64 {
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	for _, n := range []int{10_000, 100_000} {
		m := backend.NewMemory(backend.WithMaxBytes(-1), backend.WithSweepInterval(time.Hour))
		tb := unwrap.Memory(m).Table("t")
		keys := make([]string, n)
		for i := range keys {
			keys[i] = fmt.Sprintf("k%015d", i)
		}
		before := live()
		for _, k := range keys {
			put(tb, k, &memstore.Entry{})
		}
		after := live()
		measured := float64(after-before) / float64(n)
		est := float64(m.Stats().Bytes) / float64(n)
		t.Logf("%d entries: %.1f B/entry on the heap, %.1f estimated", n, measured, est)
		if measured > est*1.05 {
			t.Errorf("%d entries: %.1f B/entry on the heap, estimate %.1f: raise EntryOverhead", n, measured, est)
		}
		runtime.KeepAlive(keys)
		m.Close()
	}
}

// BenchmarkShard measures a critical section on one key that exists (hit:
// the accounting every call pays) and one that stores a new key in an
// evictable table at its bound (churn: every call also evicts an entry).
func BenchmarkShard(b *testing.B) {
	b.Run("hit", func(b *testing.B) {
		m := backend.NewMemory()
		defer m.Close()
		tb := unwrap.Memory(m).EvictableTable("rl")
		put(tb, "user:1", &memstore.Entry{Value: &blob{64}})
		sh := tb.Shard("user:1")
		b.ReportAllocs()
		for b.Loop() {
			sh.Lock()
			sh.Get("user:1").A++
			sh.Unlock()
		}
	})
	b.Run("churn", func(b *testing.B) {
		m := backend.NewMemory(backend.WithMaxBytes(8 << 20))
		defer m.Close()
		tb := unwrap.Memory(m).EvictableTable("rl")
		keys := make([]string, 1<<20) // 8 MiB holds about 50,000 of them
		for i := range keys {
			keys[i] = "user:" + strconv.Itoa(i)
		}
		b.ReportAllocs()
		for i := 0; b.Loop(); i++ {
			k := keys[i&(len(keys)-1)]
			sh := tb.Shard(k)
			sh.Lock()
			if sh.Get(k) == nil {
				sh.Put(k, &memstore.Entry{})
			}
			sh.Unlock()
		}
		if st := m.Stats(); b.N > 1<<17 && st.EvictedLRU == 0 {
			b.Fatalf("no eviction: %+v", st)
		}
	})
}
