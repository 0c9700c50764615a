package backend

import (
	"hash/maphash"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/floodgate-dev/floodgate/clock"
)

// Memory is an in-process backend: state lives in sharded maps guarded by one
// mutex per shard, so decisions on different keys rarely contend. It is the
// embedded default of the decision server and the reference the Redis backend
// is tested against.
//
// Entries carry an expiry; a janitor goroutine removes expired entries every
// sweep interval so that idle keys do not accumulate. Correctness never depends
// on the janitor: primitives store their own timestamps and judge them against
// now. Close stops the janitor; a Memory that becomes unreachable stops it too.
//
// A Memory is safe for concurrent use.
type Memory struct {
	*memory
}

type memory struct {
	clk    clock.Clock // nil: time.Now
	seed   maphash.Seed
	mu     sync.Mutex
	tables map[string]*Table
	nshard int
	stop   chan struct{}
	once   sync.Once
}

// NewMemory returns an empty in-process backend. Options: WithClock,
// WithSweepInterval, WithShards.
func NewMemory(opts ...Option) *Memory {
	cfg := newConfig(opts)
	n := 1
	for n < cfg.shards {
		n <<= 1
	}
	m := &memory{
		clk:    cfg.clock,
		seed:   maphash.MakeSeed(),
		tables: make(map[string]*Table),
		nshard: n,
		stop:   make(chan struct{}),
	}
	go m.janitor(cfg.sweepEvery)
	outer := &Memory{m}
	runtime.AddCleanup(outer, func(m *memory) { m.close() }, m)
	return outer
}

// Clock returns the injected clock, or nil when Memory uses time.Now.
func (m *Memory) Clock() clock.Clock { return m.clk }

func (*Memory) sealed() {}

// NowMicros returns the current time of this backend in microseconds.
func (m *Memory) NowMicros() int64 { return m.memory.now() }

func (m *memory) now() int64 {
	if m.clk != nil {
		return Micros(m.clk.Now())
	}
	return Micros(time.Now())
}

// Close stops the janitor. The state stays usable; expired entries are then
// only replaced, not removed. Close is idempotent and returns nil.
func (m *Memory) Close() error {
	m.memory.close()
	return nil
}

func (m *memory) close() { m.once.Do(func() { close(m.stop) }) }

// Table returns the table with the given name, creating it on first use. Each
// primitive keeps its state in its own table, so keys of different primitives
// never collide.
func (m *Memory) Table(name string) *Table {
	m.mu.Lock()
	defer m.mu.Unlock()
	t, ok := m.tables[name]
	if !ok {
		t = &Table{m: m.memory, shards: make([]Shard, m.nshard)}
		for i := range t.shards {
			t.shards[i].entries = make(map[string]*Entry)
		}
		m.tables[name] = t
	}
	return t
}

// Len returns the number of entries in every table, expired or not.
func (m *Memory) Len() int {
	m.mu.Lock()
	tables := make([]*Table, 0, len(m.tables))
	for _, t := range m.tables {
		tables = append(tables, t)
	}
	m.mu.Unlock()
	n := 0
	for _, t := range tables {
		n += t.Len()
	}
	return n
}

// Sweep removes every entry whose expiry has passed and returns how many it
// removed. The janitor calls it; tests may call it to be deterministic.
func (m *Memory) Sweep() int {
	m.mu.Lock()
	tables := make([]*Table, 0, len(m.tables))
	for _, t := range m.tables {
		tables = append(tables, t)
	}
	m.mu.Unlock()
	now := m.now()
	n := 0
	for _, t := range tables {
		for i := range t.shards {
			s := &t.shards[i]
			s.Lock()
			for k, e := range s.entries {
				if e.Expires != 0 && e.Expires <= now {
					delete(s.entries, k)
					n++
				}
			}
			s.shrink()
			s.Unlock()
			// Let callers waiting for a processor run between shards: with
			// GOMAXPROCS=1 a sweep of many keys would otherwise stall every
			// decision for its whole length.
			runtime.Gosched()
		}
	}
	return n
}

func (m *memory) janitor(every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-m.stop:
			return
		case <-t.C:
			(&Memory{m}).Sweep()
		}
	}
}

// Table is one primitive's sharded key space in a Memory backend.
type Table struct {
	m      *memory
	shards []Shard
}

// Entry is the state of one key. Everything but Expires belongs to the
// primitive that owns the table: Tag, A and B hold small state inline (so that
// the common case needs no further allocation), Value anything larger.
// Expires (microseconds, 0 = never) tells the janitor when the entry may be
// removed.
type Entry struct {
	Value   any
	Expires int64
	Tag     uint64
	A, B    int64
}

// Shard is a slice of a Table guarded by its own mutex. Callers Lock it, use
// Get/Put/Delete, and Unlock.
type Shard struct {
	sync.Mutex
	entries map[string]*Entry
	peak    int      // most entries since the map was last rebuilt
	_       [32]byte // keep shards on separate cache lines
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

// NowMicros returns the backend's current time in microseconds.
func (t *Table) NowMicros() int64 { return t.m.now() }

// Len returns the number of entries, expired or not.
func (t *Table) Len() int {
	n := 0
	for i := range t.shards {
		s := &t.shards[i]
		s.Lock()
		n += len(s.entries)
		s.Unlock()
	}
	return n
}

// Get returns the entry of key, or nil. The shard must be locked.
func (s *Shard) Get(key string) *Entry { return s.entries[key] }

// Put stores e under key, copying the key so that the table never pins the
// caller's memory. The shard must be locked.
func (s *Shard) Put(key string, e *Entry) {
	s.entries[strings.Clone(key)] = e
	s.peak = max(s.peak, len(s.entries))
}

// Delete removes key. The shard must be locked.
func (s *Shard) Delete(key string) { delete(s.entries, key) }
