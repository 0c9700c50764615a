// Package memstore is the state of floodgate's in-process backend
// (backend.Memory): tables of sharded maps, one per primitive, whose entries
// carry an expiry and an estimate of their size, with a janitor that sweeps
// expired entries and eviction of the least recently used entries of
// evictable tables when the estimate passes a bound.
//
// It is internal: applications construct a backend.Memory and pass it on;
// floodgate's primitives reach its Store through package unwrap.
//
// Times are integer microseconds since the Unix epoch (time.Time.UnixMicro),
// the unit of every script and state record: exact in Lua's doubles (below
// 2^53) for the years 1970 to 2255. A decision takes its time from the shard
// whose lock it holds (Shard.Now, Shard.Time, TimeOf), which never runs
// backwards: not for a call that read the clock before another took the lock
// and committed, nor when an injected clock is set back.
package memstore

import (
	"hash/maphash"
	"math"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-dev/floodgate/clock"
)

// Store is the state of a backend.Memory: its tables, its clock and its
// memory bound (see backend.Memory for the policy). A Store is safe for
// concurrent use.
type Store struct {
	clk    clock.Clock // nil: time.Now
	seed   maphash.Seed
	nshard int
	stop   chan struct{}
	once   sync.Once

	// maxBytes bounds the estimated bytes of every table (< 0: unbounded).
	maxBytes int64
	// share is the bytes each shard of an evictable table may hold: what
	// maxBytes leaves to evictable tables, split evenly between their shards.
	// setShare keeps it current; shards read it when they settle.
	share atomic.Int64
	// pinned is the estimated bytes of the non-evictable tables, as of the
	// last Sweep or Stats.
	pinned atomic.Int64

	mu          sync.Mutex
	tables      map[string]*Table
	evictShards int // shards of evictable tables; guarded by mu
}

// New returns an empty Store of at least shards shards per table (rounded up
// to a power of two) bounded to maxBytes (< 0: unbounded), and starts its
// janitor, which sweeps every sweepEvery until Close. clk nil means the
// Store's own time (see NowMicros).
func New(clk clock.Clock, shards int, maxBytes int64, sweepEvery time.Duration) *Store {
	n := 1
	for n < shards {
		n <<= 1
	}
	m := &Store{
		clk:      clk,
		seed:     maphash.MakeSeed(),
		tables:   make(map[string]*Table),
		nshard:   n,
		stop:     make(chan struct{}),
		maxBytes: maxBytes,
	}
	m.mu.Lock()
	m.setShare()
	m.mu.Unlock()
	go m.janitor(sweepEvery)
	return m
}

// Clock returns the injected clock, or nil when the Store keeps its own time
// (see NowMicros).
func (m *Store) Clock() clock.Clock { return m.clk }

// NowMicros returns the current time of this Store in microseconds: the
// injected clock's, or else the wall clock's at process start plus the
// monotonic time since (see monoMicros). A decision on a key does not use it
// as it is, but as Shard.Time makes it under the key's shard lock.
func (m *Store) NowMicros() int64 { return m.now() }

func (m *Store) now() int64 {
	if m.clk != nil {
		return m.clk.Now().UnixMicro()
	}
	return monoMicros()
}

// start is the time the package was initialised, with its monotonic
// reading, and startNanos its wall clock reading in ns since the epoch.
var start, startNanos = func() (time.Time, int64) { t := time.Now(); return t, t.UnixNano() }()

// monoMicros is the memory backend's own time, in µs since the epoch: the
// wall clock at start plus the monotonic clock's time since, truncated once,
// so that it reads as time.Now().UnixMicro() would while the wall clock is
// not stepped (truncating the start and the time since separately made it
// trail time.Now by up to 2µs, and a job enqueued with Delay(d) came due
// before time.Now()+d). A step of the wall clock (NTP, an operator) neither
// resets a window nor freezes a bucket of the process's state, which no
// other process shares, and reading it is one clock read, where time.Now is
// two.
func monoMicros() int64 { return (startNanos + int64(time.Since(start))) / int64(time.Microsecond) }

// Close stops the janitor. The state stays usable; expired entries are then
// only replaced or evicted, not swept. Close is idempotent.
func (m *Store) Close() { m.once.Do(func() { close(m.stop) }) }

// Table returns the table with the given name, creating it on first use. Each
// primitive keeps its state in its own table, so keys of different primitives
// never collide. Entries of a table made by Table are never evicted: use it for
// state whose loss would break a guarantee or lose data. A table that was
// created by EvictableTable stops being evictable when Table asks for it.
func (m *Store) Table(name string) *Table { return m.table(name, false) }

// EvictableTable is Table for state that may be forgotten when the memory
// bound (backend.WithMaxBytes) is reached: state whose loss merely makes its
// key start afresh, such as rate limit state (the table "ratelimit").
// Expired entries go first, then the least recently used. If the table
// exists, it is returned as it is: a table made by Table stays
// non-evictable.
func (m *Store) EvictableTable(name string) *Table { return m.table(name, true) }

func (m *Store) table(name string, evictable bool) *Table {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.tables[name]
	if !ok {
		t = &Table{m: m, shards: make([]Shard, m.nshard)}
		for i := range t.shards {
			t.shards[i].entries = make(map[string]*Entry)
			t.shards[i].t = t
		}
		t.evictable.Store(evictable)
		if evictable {
			m.evictShards += len(t.shards)
			m.setShare()
		}
		m.tables[name] = t
		return t
	}
	if !evictable && t.evictable.Load() {
		t.evictable.Store(false)
		m.evictShards -= len(t.shards)
		m.setShare()
	}
	return t
}

// setShare recomputes share from maxBytes, pinned and evictShards. Evictable
// tables get what the non-evictable ones leave of maxBytes, but never less
// than a quarter of it, so that rate limiting keeps a working set even when
// state that cannot be evicted fills the bound. m.mu must be held.
func (m *Store) setShare() {
	if m.maxBytes < 0 || m.evictShards == 0 {
		m.share.Store(math.MaxInt64)
		return
	}
	budget := max(m.maxBytes-m.pinned.Load(), m.maxBytes/4)
	m.share.Store(max(budget/int64(m.evictShards), 1))
}

func (m *Store) tableList() []*Table {
	m.mu.Lock()
	defer m.mu.Unlock()
	tables := make([]*Table, 0, len(m.tables))
	for _, t := range m.tables {
		tables = append(tables, t)
	}
	return tables
}

// Len returns the number of entries in every table, expired or not.
func (m *Store) Len() int {
	n := 0
	for _, t := range m.tableList() {
		n += t.Len()
	}
	return n
}

// Stats describes a Store's state: the fields of backend.MemoryStats, which
// documents them (it converts from Stats).
type Stats struct {
	Entries        int64
	Bytes          int64
	PinnedBytes    int64
	MaxBytes       int64
	Swept          uint64
	EvictedExpired uint64
	EvictedLRU     uint64
}

// Stats returns the current size of the state and the eviction counts. It
// locks every shard in turn, so it is meant for a metrics scrape, not for
// every request.
func (m *Store) Stats() Stats {
	st := Stats{MaxBytes: m.maxBytes}
	for _, t := range m.tableList() {
		evictable := t.evictable.Load()
		for i := range t.shards {
			s := &t.shards[i]
			s.mu.Lock()
			st.Entries += int64(len(s.entries))
			st.Bytes += s.bytes
			if !evictable {
				st.PinnedBytes += s.bytes
			}
			st.Swept += s.swept
			st.EvictedExpired += s.evictedExpired
			st.EvictedLRU += s.evictedLRU
			s.mu.Unlock()
		}
	}
	m.setPinned(st.PinnedBytes)
	return st
}

func (m *Store) setPinned(n int64) {
	m.mu.Lock()
	m.pinned.Store(n)
	m.setShare()
	m.mu.Unlock()
}

// Sweep removes every entry whose expiry has passed and returns how many it
// removed. The janitor calls it; tests may call it to be deterministic.
func (m *Store) Sweep() int {
	tables := m.tableList()
	now := m.now()
	n := 0
	var pinned int64
	for _, t := range tables {
		evictable := t.evictable.Load()
		for i := range t.shards {
			s := &t.shards[i]
			s.mu.Lock()
			for k, e := range s.entries {
				if e.Expires != 0 && e.Expires <= now {
					s.remove(k, e)
					s.swept++
					n++
				}
			}
			s.shrink()
			if !evictable {
				pinned += s.bytes
			}
			s.mu.Unlock()
			// Let callers waiting for a processor run between shards: with
			// GOMAXPROCS=1 a sweep of many keys would otherwise stall every
			// decision for its whole length.
			runtime.Gosched()
		}
	}
	m.setPinned(pinned)
	return n
}

func (m *Store) janitor(every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
			m.Sweep()
		}
	}
}

// Table is one primitive's sharded key space in a Memory backend.
type Table struct {
	m         *Store
	shards    []Shard
	evictable atomic.Bool
}

// Evictable reports whether the table's entries may be evicted when the
// memory bound is reached (see Store.EvictableTable).
func (t *Table) Evictable() bool { return t.evictable.Load() }

// Entry is the state of one key. Everything but Expires belongs to the
// primitive that owns the table: Tag, A and B hold small state inline (so that
// the common case needs no further allocation), Value anything larger.
// Expires (microseconds, 0 = never) tells the janitor when the entry may be
// removed; in an evictable table it must be the time from which forgetting
// the entry changes nothing (for a rate limiter: when the key is back to full),
// since eviction forgets expired entries first.
//
// When Value's size varies (slices, maps), let it implement Sizer so that the
// memory bound sees it. An Entry belongs to one key of one table.
type Entry struct {
	Value   any
	Expires int64
	Tag     uint64
	A, B    int64

	used uint64 // the shard's tick at the last Get or Put: the LRU order
	size int64  // estimated bytes of Value when last settled; < 0 when not stored
}

// Sizer is implemented by Entry values that know their size: Memory counts
// MemSize() bytes for them, and ValueBytes for any other non-nil value. A
// Value is measured when the shard that holds it is unlocked after a Get or
// Put, so MemSize must be cheap and must not lock the shard.
type Sizer interface {
	// MemSize returns the bytes the value holds on the heap, its own struct
	// included (AllocBytes rounds one allocation as the Go allocator does).
	MemSize() int
}

// ValueBytes is the estimated size of an Entry.Value that does not implement
// Sizer: right for a small struct, an underestimate for a large one (a Bloom
// filter's bitmap), whose table is then under-counted in Stats and against
// the bound.
const ValueBytes = 64

// EntryOverhead is the estimated bytes of an entry beyond its key's bytes and
// its Value: the Entry itself and its share of the shard's map (which, like
// every Go map, holds spare room after it grows). Measured with
// runtime.MemStats over tables of 10^3 to 10^6 entries with Go 1.26, it was
// 100 to 127 bytes; TestEntryOverhead checks it.
const EntryOverhead = 128

// entryBytes is the estimate for an entry of key, beyond its Value.
func entryBytes(key string) int64 { return EntryOverhead + int64(AllocBytes(len(key))) }

func valueBytes(v any) int64 {
	switch v := v.(type) {
	case nil:
		return 0
	case Sizer:
		return int64(v.MemSize())
	default:
		return ValueBytes
	}
}

// Shard is a slice of a Table guarded by its own mutex. Callers Lock it, use
// Get/Put/Delete, and Unlock. Unlock settles the accounting: it measures the
// entries that were got or put (their Values may have changed) and, when the
// shard of an evictable table is over its share of the memory bound, evicts.
// A decision under the lock takes its time from Now or Time, never from the
// Store's clock directly.
type Shard struct {
	mu      sync.Mutex
	t       *Table
	entries map[string]*Entry
	peak    int      // most entries since the map was last rebuilt
	bytes   int64    // estimated bytes of the entries
	tick    uint64   // LRU clock: advanced by every Get that finds an entry and every Put
	settled uint64   // tick when the shard was last unlocked after a Get or Put
	dirty   []*Entry // entries got or put since Lock, to be measured by Unlock
	last    int64    // the latest time Time returned (µs): the shard's time never runs backwards

	swept, evictedExpired, evictedLRU uint64

	_ [16]byte // keep shards on separate cache lines
}

// evictSamples is how many entries eviction looks at to choose the least
// recently used one, as Redis's maxmemory-samples (whose default is 5).
const evictSamples = 8

// Lock locks the shard.
func (s *Shard) Lock() { s.mu.Lock() }

// Unlock settles the shard's accounting (see Shard) and unlocks it.
func (s *Shard) Unlock() {
	if len(s.dirty) != 0 {
		s.settle()
	}
	s.mu.Unlock()
}

// settle measures the entries got or put since Lock and evicts while the
// shard is over its share. The entries got or put since Lock are never
// evicted by it: their caller has just used them. The shard must be locked.
func (s *Shard) settle() {
	for i, e := range s.dirty {
		if e.size >= 0 {
			if n := valueBytes(e.Value); n != e.size {
				s.bytes += n - e.size
				e.size = n
			}
		}
		s.dirty[i] = nil
	}
	if cap(s.dirty) > 64 {
		s.dirty = nil // a burst of keys in one critical section; do not keep its buffer
	} else {
		s.dirty = s.dirty[:0]
	}
	if s.t.evictable.Load() {
		if share := s.t.m.share.Load(); s.bytes > share {
			s.evict(share)
		}
	}
	s.settled = s.tick
}

// evict removes entries until the shard holds at most share bytes or only
// entries used since Lock remain. Each round looks at up to evictSamples
// entries from a random point of the map (Go randomises where iteration
// starts): it removes the expired ones it meets, then, if still over, the
// least recently used of them — approximate LRU, as Redis's allkeys-lru. The
// shard must be locked.
func (s *Shard) evict(share int64) {
	now := s.t.m.now()
	for s.bytes > share {
		progress := false
		var lruKey string
		var lru *Entry
		n := 0
		for k, e := range s.entries {
			if e.used > s.settled {
				continue // used since Lock
			}
			if e.Expires != 0 && e.Expires <= now {
				s.remove(k, e)
				s.evictedExpired++
				progress = true
				if s.bytes <= share {
					return
				}
				continue
			}
			if lru == nil || e.used < lru.used {
				lruKey, lru = k, e
			}
			if n++; n == evictSamples {
				break
			}
		}
		if lru != nil {
			s.remove(lruKey, lru)
			s.evictedLRU++
		} else if !progress {
			return // nothing left that may be evicted
		}
	}
}

// remove deletes key, whose entry is e, and its bytes. The shard must be
// locked.
func (s *Shard) remove(key string, e *Entry) {
	delete(s.entries, key)
	s.bytes -= entryBytes(key) + e.size
	e.size = -1
}

// shrink rebuilds the map when it holds less than a quarter of its peak: Go
// maps never give back their buckets, so after a burst of keys expires this
// is what returns the memory. The shard must be locked.
func (s *Shard) shrink() {
	if n := len(s.entries); s.peak >= 64 && n < s.peak/4 {
		m := make(map[string]*Entry, n)
		for k, e := range s.entries {
			m[k] = e
		}
		s.entries, s.peak = m, n
	}
}

// Shard returns the shard that holds key.
func (t *Table) Shard(key string) *Shard {
	h := maphash.String(t.m.seed, key)
	return &t.shards[h&uint64(len(t.shards)-1)]
}

// NowMicros returns the backend's current time in microseconds (see
// Store.NowMicros): a decision under a shard's lock uses Shard.Now instead,
// or passes this reading, taken before Lock, to Shard.Time.
func (t *Table) NowMicros() int64 { return t.m.now() }

// Now returns the time of a decision made under the shard's lock:
// Time(the Store's time, read now). The shard must be locked.
func (s *Shard) Now() int64 { return s.Time(s.t.m.now()) }

// Time returns the time, in µs, of a decision made under the shard's lock
// by a caller that read the Store's time now (NowMicros), before Lock or
// after: now, or when that is earlier, the latest time the shard has
// returned. Time so never runs backwards for a shard, nor for any key in it.
// A call that read the clock, then waited for the lock while another read a
// later time and committed, decides as of that commit, not before it (where
// a bucket reads less drained than the commit left it). When an injected
// clock is set back (clock.Fake, a stepped wall clock), the time of the
// shard's keys stands still until the clock is past it again. The time is
// never later than the latest reading of the clock by a decision on the
// shard. The shard must be locked.
func (s *Shard) Time(now int64) int64 {
	if now < s.last {
		return s.last
	}
	s.last = now
	return now
}

// TimeOf is Time for a decision that holds the locks of all shards (which may
// repeat): the latest of now and the shards' times, which becomes the time of
// each.
func TimeOf(now int64, shards []*Shard) int64 {
	for _, s := range shards {
		now = max(now, s.last)
	}
	for _, s := range shards {
		s.last = now
	}
	return now
}

// Len returns the number of entries, expired or not.
func (t *Table) Len() int {
	n := 0
	for i := range t.shards {
		s := &t.shards[i]
		s.mu.Lock()
		n += len(s.entries)
		s.mu.Unlock()
	}
	return n
}

// Get returns the entry of key, or nil, and marks it used. The shard must be
// locked.
func (s *Shard) Get(key string) *Entry {
	e := s.entries[key]
	if e != nil {
		s.touch(e)
	}
	return e
}

// touch marks e used now and to be measured by Unlock.
func (s *Shard) touch(e *Entry) {
	s.tick++
	e.used = s.tick
	if n := len(s.dirty); n == 0 || s.dirty[n-1] != e {
		s.dirty = append(s.dirty, e)
	}
}

// Put stores e under key, copying the key so that the table never pins the
// caller's memory. The caller may go on changing e until it unlocks the
// shard, which then measures it. The shard must be locked.
func (s *Shard) Put(key string, e *Entry) {
	if old, ok := s.entries[key]; ok {
		if old == e {
			s.touch(e)
			return
		}
		s.remove(key, old)
	}
	s.entries[strings.Clone(key)] = e
	s.peak = max(s.peak, len(s.entries))
	e.size = 0
	s.bytes += entryBytes(key)
	s.touch(e)
}

// Delete removes key. The shard must be locked.
func (s *Shard) Delete(key string) {
	if e, ok := s.entries[key]; ok {
		s.remove(key, e)
	}
}

// sizeClasses are the Go allocator's object sizes up to 32 KiB
// (internal/runtime/gc.SizeClassToSize, unchanged since Go 1.15).
var sizeClasses = [...]uint16{8, 16, 24, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240, 256, 288, 320, 352, 384, 416, 448, 480, 512, 576, 640, 704, 768, 896, 1024, 1152, 1280, 1408, 1536, 1792, 2048, 2304, 2688, 3072, 3200, 3456, 4096, 4864, 5376, 6144, 6528, 6784, 6912, 8192, 9472, 9728, 10240, 10880, 12288, 13568, 14336, 16384, 18432, 19072, 20480, 21760, 24576, 27264, 28672, 32768}

// smallClass[(n+7)/8] is the size class of n <= 1024 bytes.
var smallClass = func() (c [1024/8 + 1]uint16) {
	k := 0
	for i := range c {
		for int(sizeClasses[k]) < i*8 {
			k++
		}
		c[i] = sizeClasses[k]
	}
	return c
}()

// AllocBytes returns the bytes the Go allocator uses for one object of n
// bytes: n rounded up to its size class, or to whole 8 KiB pages above 32 KiB.
// Sizer implementations use it for each allocation they count.
func AllocBytes(n int) int {
	switch {
	case n <= 0:
		return 0
	case n <= 1024:
		return int(smallClass[(n+7)>>3])
	case n <= 32768:
		lo, hi := 0, len(sizeClasses)-1
		for lo < hi {
			mid := (lo + hi) / 2
			if int(sizeClasses[mid]) < n {
				lo = mid + 1
			} else {
				hi = mid
			}
		}
		return int(sizeClasses[lo])
	default:
		return (n + 8191) &^ 8191
	}
}
