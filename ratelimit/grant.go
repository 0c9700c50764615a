package ratelimit

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/floodgate-dev/floodgate/internal/memstore"
)

// A grant is what one lease took from a key's budget: units consumed in the
// store at time now, as AllowN(units) would, with a mark per rule that the
// lease's deadlines and its refund need (see lua/limits.lua, modes "g" and
// "u"): a drain rule's level after the grant, a FixedWindow's window id, a
// SlidingWindow's bucket id.
type grant struct {
	id    uint64  // unique in all processes (grantIDs), names its give-back
	res   Result  // the store's decision of the grant
	now   int64   // the store's time of the grant, µs
	units int64   // units taken; 0 when denied
	marks []int64 // per rule
}

// grantIDs numbers grants from a random start, so that the ids of two
// processes meet only by a chance of about one in 2^40 per give-back: then
// the later give-back is taken for a resend of the other and gives nothing
// back, which is safe.
var grantIDs = func() *atomic.Uint64 {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		binary.LittleEndian.PutUint64(b[:], uint64(time.Now().UnixNano()))
	}
	var c atomic.Uint64
	c.Store(binary.LittleEndian.Uint64(b[:]))
	return &c
}()

// leasable reports why a rule cannot lease, or "".
func (s *spec) leasable() string {
	switch {
	case s.kind == kindLog:
		return "SlidingLog keeps one entry per admitted unit with its own time, so units cannot be taken before they are used"
	case s.kind == kindDrain && s.delay != NoDelay:
		return "LeakyBucket with a Delay shapes: each request's Delay depends on its own place in the bucket at its own time"
	}
	return ""
}

// grant takes between least and most units of key's budget in one atomic
// step: as many of most as every rule has left, and denied (nothing taken)
// when that is fewer than least. It requires 0 < least <= most, hold >= 0
// and rules that are all leasable.
//
// A drain rule admits a unit of a lease no later than its place in the
// bucket (see Leased), which in a bucket near empty comes at the rule's own
// rate: a lease of a process slower than the rule would lose its units
// before using them. So the grant first raises a drain rule's level to what
// it drains in hold µs (the pad), at most so far that most units still fit:
// the lease's units then have places at least hold µs ahead (or as far as
// the capacity allows). When every rule drains, the pad's whole units are
// the lease's first units, valid until their places (which come first): a
// process that uses its lease at once, as in a burst, loses none of them.
// Otherwise (a window rule beside, which would not count them) the pad is
// consumed as if admitted and never used. Either way it costs at most the
// rule's refill of hold µs, and only when the bucket was below it and the
// lease's units are not used before their places.
func (l *Limiter) grant(ctx context.Context, key string, least, most, hold int64) (grant, error) {
	var vs [8]verdict
	verdicts := l.verdictsIn(&vs)
	g := grant{id: grantIDs.Add(1), marks: make([]int64, len(l.specs))}
	if l.mem != nil {
		l.grantMemory(key, least, most, hold, verdicts, &g)
	} else {
		args := make([]any, 0, 3+len(l.reqArgs))
		args = append(args, l.redis.NowArg(), "g"+strconv.FormatInt(least, 10)+":"+strconv.FormatInt(hold, 10), most)
		args = append(args, l.reqArgs...)
		r := len(l.specs)
		ints, err := l.redis.RunInts(ctx, limitsScript, l.redisKeys(nil, key), args, 1+5*r+2+r)
		if err != nil {
			return grant{}, fmt.Errorf("ratelimit: lease: %w", err)
		}
		for i := range verdicts {
			o := 1 + 5*i
			verdicts[i] = verdict{ints[o], ints[o+1], ints[o+2], ints[o+3], ints[o+4]}
		}
		g.now, g.units = ints[1+5*r], ints[2+5*r]
		copy(g.marks, ints[3+5*r:])
	}
	g.res = l.result(verdicts)
	if !g.res.Allowed {
		g.units = 0
	}
	return g, nil
}

// grantMemory is grant on Memory, step for step as limits.lua's mode "g".
func (l *Limiter) grantMemory(key string, least, most, hold int64, vs []verdict, g *grant) {
	pending := make([]int64, len(l.specs))
	pads := make([]int64, len(l.specs)) // a drain rule's level, padded
	now := l.mem.NowMicros()
	sh := l.mem.Shard(key)
	sh.Lock()
	defer sh.Unlock()
	now = sh.Time(now) // as allowMemory
	e := sh.Get(key)
	levels := make([]int64, len(l.specs)) // a drain rule's level, unpadded
	padUnits := int64(-1)                 // -1: a rule does not drain
	if l.allDrain() {
		padUnits = math.MaxInt64
	}
	for i := range l.specs {
		if s := &l.specs[i]; s.kind == kindDrain {
			if a, b := cellOf(e, s.tag); a != nil {
				pads[i] = drainLevel(s, *a, *b, now)
			}
			levels[i] = pads[i]
			if most <= s.capacity { // else no room: no pad (and most*s.per could overflow)
				pad := s.full - most*s.per // room for the most units asked for
				if hold < ceilDiv(pad, s.rate) {
					pad = hold * s.rate
				}
				pads[i] = max(pads[i], pad)
			}
			if padUnits >= 0 {
				padUnits = min(padUnits, (pads[i]-levels[i])/s.per)
			}
		}
	}
	check := func(i int, n int64) (verdict, int64) {
		if s := &l.specs[i]; s.kind == kindDrain {
			return s.drainCheckAt(pads[i], n)
		}
		return l.checkRule(i, e, nil, now, n)
	}
	n := most
	for i := range l.specs {
		v, _ := check(i, 0)
		n = min(n, v.remaining)
	}
	if n >= least && padUnits > 0 {
		// The pad's whole units are the lease's first units (see grant).
		copy(pads, levels)
		n += padUnits
	}
	n = max(n, least)
	ok := true
	for i := range l.specs {
		vs[i], pending[i] = check(i, n)
		ok = ok && vs[i].status == statusAllowed
	}
	g.now, g.units = now, n
	if !ok {
		return
	}
	for i := range l.specs {
		s := &l.specs[i]
		switch s.kind {
		case kindDrain:
			g.marks[i] = pending[i]
		case kindFixed:
			g.marks[i], _ = s.fixedWindow(e, now)
		case kindSliding:
			_, _, _, g.marks[i], _ = s.slidingView(s.slidingOf(e), now)
		}
	}
	if e == nil {
		e = &memstore.Entry{}
		sh.Put(key, e)
	}
	l.commitMemory(e, now, n, pending)
}

// refund gives u unused units of g back to key's budget where the rules
// allow it (see refund in lua/limits.lua): never more than g took, and
// nothing once g's window or bucket has ended or, for a drain rule, once
// another decision changed the level.
func (l *Limiter) refund(ctx context.Context, key string, g *grant, u int64) error {
	if u <= 0 || g.units == 0 {
		return nil
	}
	u = min(u, g.units)
	if l.mem == nil {
		var mode strings.Builder
		mode.WriteString("u")
		mode.WriteString(strconv.FormatInt(g.now, 10))
		for _, m := range g.marks {
			mode.WriteByte(':')
			mode.WriteString(strconv.FormatInt(m, 10))
		}
		args := make([]any, 0, 3+len(l.reqArgs))
		args = append(args, l.redis.NowArg(), mode.String(), u)
		args = append(args, l.reqArgs...)
		// The give-back's mark of done, named by the grant's id.
		keys := append(l.redisKeys(nil, key), l.redis.Key(key, l.stateKey+"r"+strconv.FormatUint(g.id, 36)))
		if _, err := l.redis.RunInts(ctx, limitsScript, keys, args, 1); err != nil {
			return fmt.Errorf("ratelimit: lease refund: %w", err)
		}
		return nil
	}
	now := l.mem.NowMicros()
	sh := l.mem.Shard(key)
	sh.Lock()
	defer sh.Unlock()
	now = sh.Time(now)
	e := sh.Get(key)
	if e == nil {
		return nil
	}
	for i := range l.specs {
		s := &l.specs[i]
		mark := g.marks[i]
		switch s.kind {
		case kindDrain:
			a, b := cellOf(e, s.tag)
			if a == nil {
				continue
			}
			level := drainLevel(s, *a, *b, now)
			want := mark
			if d := now - g.now; d > 0 {
				if d >= ceilDiv(mark, s.rate) {
					want = 0
				} else {
					want -= d * s.rate
				}
			}
			if want > 0 && level == want {
				s.drainCommit(e, now, max(level-u*s.per, 0), lifeUnknown)
			}
		case kindFixed:
			a, b := cellOf(e, s.tag)
			if a != nil && *a == mark && now/s.window == mark && *b > 0 {
				*b = max(*b-u, 0)
			}
		case kindSliding:
			w := s.slidingOf(e)
			if w == nil || w.nonexists || mark < w.lo || mark > w.hi || mark < now/s.bucket-s.buckets {
				continue
			}
			c := &w.counts[mark%int64(len(w.counts))]
			back := min(u, *c)
			*c -= back
			w.total -= back
		}
	}
	return nil
}

// allDrain reports whether every rule of l drains (TokenBucket, GCRA,
// LeakyBucket): its grants' pads can be leased (see grant).
func (l *Limiter) allDrain() bool {
	for i := range l.specs {
		if l.specs[i].kind != kindDrain {
			return false
		}
	}
	return true
}
