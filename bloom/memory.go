package bloom

import (
	"context"

	"github.com/floodgate-dev/floodgate/internal/memstore"
)

// memStore keeps a filter in a Memory backend's "bloom" table under
// "<kind>:<name>": one entry whose value is a *memCells, guarded by the
// table shard's mutex. It mirrors the Redis layout (one cell array per shard,
// grown on demand as Redis grows a string), so that filters sharing a name
// share cells exactly as on Redis.
type memStore struct {
	t   *memstore.Table
	key string
	g   geo
}

// memCells holds the shards of a filter: cells packed little-end first into
// 64-bit words, 64 bits or 16 counters per word.
type memCells struct {
	shards [][]uint64
}

func newMemStore(m *memstore.Store, name string, g geo) *memStore {
	return &memStore{t: m.Table("bloom"), key: g.kind.suffix + ":" + name, g: g}
}

// cellsLocked returns the filter's cells; with create, it makes them when
// missing (otherwise it returns nil). The table shard must be locked.
func (s *memStore) cellsLocked(sh *memstore.Shard, create bool) *memCells {
	if e := sh.Get(s.key); e != nil {
		return e.Value.(*memCells)
	}
	if !create {
		return nil
	}
	mc := &memCells{}
	sh.Put(s.key, &memstore.Entry{Value: mc})
	return mc
}

// words returns the words of shard i, grown to hold word w: at first to the
// whole shard of this filter's geometry, as Redis allocates a string up to the
// highest offset written.
func (s *memStore) words(mc *memCells, i int, w uint32) []uint64 {
	for len(mc.shards) <= i {
		mc.shards = append(mc.shards, nil)
	}
	ws := mc.shards[i]
	if int(w) < len(ws) {
		return ws
	}
	shardCells := uint64(1) << s.g.shardLog
	cells := min(shardCells, s.g.m-min(s.g.m, uint64(i)*shardCells))
	n := max(int(w)+1, int((cells*uint64(s.g.kind.width)+63)/64))
	grown := make([]uint64, n)
	copy(grown, ws)
	mc.shards[i] = grown
	return grown
}

// cell locates cell p: its shard, word and bit shift.
func (s *memStore) cell(p uint32) (shard int, word uint32, shift uint) {
	shard, off := s.g.shard(p)
	if s.g.kind.width == 1 {
		return shard, off >> 6, uint(off & 63)
	}
	return shard, off >> 4, uint(off&15) * 4
}

// get returns the value of cell p, 0 when its shard or word does not exist.
func (s *memStore) get(mc *memCells, p uint32) uint64 {
	i, w, sh := s.cell(p)
	if i >= len(mc.shards) || int(w) >= len(mc.shards[i]) {
		return 0
	}
	return mc.shards[i][w] >> sh & (1<<s.g.kind.width - 1)
}

// bump adds delta (+1 or -1) to cell p, saturating at 0 and at the cell's
// maximum (1 for a bit, 15 for a counter), as BITFIELD OVERFLOW SAT does.
// It returns the value before.
func (s *memStore) bump(mc *memCells, p uint32, delta int) uint64 {
	i, w, sh := s.cell(p)
	ws := s.words(mc, i, w)
	maxv := uint64(1)<<s.g.kind.width - 1
	v := ws[w] >> sh & maxv
	switch {
	case delta > 0 && v < maxv:
		ws[w] += 1 << sh
	case delta < 0 && v > 0:
		ws[w] -= 1 << sh
	}
	return v
}

func (s *memStore) add(_ context.Context, pos []uint32) ([]bool, error) {
	k := s.g.k
	out := make([]bool, len(pos)/k)
	sh := s.t.Shard(s.key)
	sh.Lock()
	defer sh.Unlock()
	mc := s.cellsLocked(sh, true)
	for i := range out {
		for _, p := range pos[i*k : (i+1)*k] {
			if s.bump(mc, p, 1) == 0 {
				out[i] = true
			}
		}
	}
	return out, nil
}

func (s *memStore) contains(_ context.Context, pos []uint32) ([]bool, error) {
	k := s.g.k
	out := make([]bool, len(pos)/k)
	sh := s.t.Shard(s.key)
	sh.Lock()
	defer sh.Unlock()
	mc := s.cellsLocked(sh, false)
	if mc == nil {
		return out, nil
	}
	for i := range out {
		out[i] = true
		for _, p := range pos[i*k : (i+1)*k] {
			if s.get(mc, p) == 0 {
				out[i] = false
				break
			}
		}
	}
	return out, nil
}

// remove follows remove.lua: per item, read all k counters first; if none is
// zero, decrement (saturating at 0) each counter whose value read was below
// 15, in order.
func (s *memStore) remove(_ context.Context, pos []uint32) error {
	k := s.g.k
	sh := s.t.Shard(s.key)
	sh.Lock()
	defer sh.Unlock()
	mc := s.cellsLocked(sh, false)
	if mc == nil {
		return nil
	}
	var read [MaxHashes]uint64
	for i := 0; i < len(pos)/k; i++ {
		cells := pos[i*k : (i+1)*k]
		present := true
		for j, p := range cells {
			read[j] = s.get(mc, p)
			if read[j] == 0 {
				present = false
			}
		}
		if !present {
			continue
		}
		for j, p := range cells {
			if read[j] < 15 {
				s.bump(mc, p, -1)
			}
		}
	}
	return nil
}

func (s *memStore) reset(context.Context) error {
	sh := s.t.Shard(s.key)
	sh.Lock()
	sh.Delete(s.key)
	sh.Unlock()
	return nil
}
