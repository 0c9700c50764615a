package counter

import (
	"github.com/floodgate-dev/floodgate/internal/memstore"
)

// The Memory engine mirrors lua/add.lua step for step, in int64: the
// conformance suite demands identical results. An entry holds the value in B
// and, for TTL counters, the expiry instant (µs) in A; for Window counters,
// the window number in A. Entry.Expires only tells the janitor when the entry
// is garbage.

// memDo is add.lua on Memory. Its time is the shard's (Shard.Now), so the
// operations on one key see non-decreasing times.
func (c *Counter) memDo(key string, delta int64) reply {
	sh := c.mem.Shard(key)
	sh.Lock()
	defer sh.Unlock()
	now := sh.Now()
	e := sh.Get(key)
	switch c.mode {
	case modeTTL:
		var v, exp int64
		if e != nil && e.A > now {
			v, exp = e.B, e.A
		}
		left := int64(0)
		if exp != 0 {
			left = exp - now
		}
		if delta == 0 {
			return reply{ok: true, value: v, reset: left}
		}
		nv := v + delta
		if !inRange(nv) {
			return reply{value: v, reset: left}
		}
		if exp == 0 || c.refresh {
			exp = now + c.period
		}
		putEntry(sh, key, e, exp, nv, exp)
		return reply{ok: true, value: nv, reset: exp - now}
	case modeWindow:
		wid := floorDiv(now-c.offset, c.period)
		left := (wid+1)*c.period + c.offset - now
		var v, reset int64
		if e != nil && e.A == wid {
			v, reset = e.B, left
		}
		if delta == 0 {
			return reply{ok: true, value: v, reset: reset}
		}
		nv := v + delta
		if !inRange(nv) {
			return reply{value: v, reset: reset}
		}
		putEntry(sh, key, e, wid, nv, now+left+c.margin)
		return reply{ok: true, value: nv, reset: left}
	default:
		var v int64
		if e != nil {
			v = e.B
		}
		if delta == 0 {
			return reply{ok: true, value: v}
		}
		nv := v + delta
		if !inRange(nv) {
			return reply{value: v}
		}
		putEntry(sh, key, e, 0, nv, 0)
		return reply{ok: true, value: nv}
	}
}

// putEntry stores (a, b) under key, reusing e when there is one. The shard
// must be locked.
func putEntry(sh *memstore.Shard, key string, e *memstore.Entry, a, b, expires int64) {
	if e == nil {
		sh.Put(key, &memstore.Entry{A: a, B: b, Expires: expires})
		return
	}
	e.A, e.B, e.Expires = a, b, expires
}

func inRange(v int64) bool { return v >= -MaxValue && v <= MaxValue }

// floorDiv returns floor(a / b) for b > 0.
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}
