package ratelimit

import (
	"cmp"
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"strings"
	"sync"
	"unsafe"
	"weak"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/internal/memstore"
	"github.com/floodgate-dev/floodgate/internal/redisstore"
)

// Request is one part of an AllowAll call: N units for Key against every rule
// of Limiter.
type Request struct {
	Limiter *Limiter
	Key     string
	N       int64 // 0 peeks
}

// AllowAll decides every request in one atomic step: either every request is
// admitted and consumed, or nothing is consumed from any. results must have
// len(reqs); results[i] is request i's decision. It is what a decision server
// needs for a request that carries several descriptors, each with its own key
// and Limiter: an over-limit request consumes nothing.
//
// When allowed is true, every results[i] is what reqs[i].Limiter.AllowN would
// have returned for that request alone: Allowed true, Remaining after the
// consumption, Delay, and so on (for requests that share state, see below,
// with their summed units).
//
// When allowed is false, nothing was consumed from any key (but see Redis
// Cluster below), and every results[i].Allowed is false. A request that alone would have been denied
// reports its own denial, as AllowN does: RetryAfter > 0 (< 0 when it can
// never be admitted), Remaining, Rule. A request that alone would have been
// admitted reports RetryAfter == 0 and the state as it is, as a peek (N == 0)
// would: Remaining is what is left with nothing taken, at most Limit. So a
// caller tells "this request is over its limit" (RetryAfter != 0) from "denied
// because of another request" (RetryAfter == 0).
//
// Requests whose Limiters name the same rule state for the same key are
// decided against that state with the sum of their N. In particular the same
// Limiter with the same Key twice is decided as one request with the summed N
// (both results are equal); and so are two different Limiters with identical
// rules (which share state, see Limiter) for the same key: each is checked
// against the state before the call with the units of both, so that together
// they never admit more than the rule allows.
//
// Every Limiter must use one backend (the same *backend.Memory or
// *backend.Redis value). On Memory the call locks each shard it touches once,
// in a fixed order, so concurrent calls over overlapping keys cannot deadlock.
// On Redis it is one script call with the server's clock (the injected clock's
// time when the backend has one).
//
// On a Redis Cluster a script may only touch keys of one hash slot, and the
// keys of different user keys usually lie in different slots. AllowAll is
// therefore atomic within a hash slot; across slots it is check-then-commit.
// The first call that spans slots gets CROSSSLOT from the server and marks the
// backend as a Cluster; from then on AllowAll groups the requests by slot.
// Phase 1 checks every group (concurrently, consuming nothing); when any
// request is denied, AllowAll returns as above with nothing consumed. Phase 2
// commits the groups one by one, in slot order, each atomically re-checked.
// When a group is denied in phase 2 (another client consumed between the
// phases), the groups committed before it stay consumed and report
// results[i].Allowed true, that group reports its denial, the later groups are
// not consumed and report as for a denial, and allowed is false. When phase 2
// fails with an error, the groups committed before the error stay consumed.
//
// A key longer than backend.MaxKeyLen is decided by its digest, as in
// Limiter.AllowN (see Keys in the package doc).
//
// Zero requests are allowed without a call. Errors: len(results) !=
// len(reqs), a nil or zero Limiter, Limiters on different backends,
// backend.ErrEmptyKey and ErrNegativeN (each naming the index, as
// "reqs[2]"), the context's error, and store errors (wrapped; on Redis
// bounded by ctx). results are undefined when err != nil.
func AllowAll(ctx context.Context, reqs []Request, results []Result) (allowed bool, err error) {
	if len(results) != len(reqs) {
		return false, fmt.Errorf("ratelimit: AllowAll: len(results) is %d, want len(reqs) = %d", len(results), len(reqs))
	}
	if len(reqs) == 0 {
		return true, nil
	}
	var b backend.Backend
	copied := false
	for i, q := range reqs {
		l := q.Limiter
		switch {
		case l == nil:
			return false, fmt.Errorf("ratelimit: reqs[%d].Limiter is nil", i)
		case l.mem == nil && l.redis == nil:
			return false, fmt.Errorf("ratelimit: reqs[%d].Limiter was not made by New", i)
		case b == nil:
			b = l.b
		case l.b != b:
			return false, fmt.Errorf("ratelimit: reqs[%d].Limiter uses another backend than reqs[0].Limiter; AllowAll needs one", i)
		}
		key, err := storeKey(q.Key)
		if err != nil {
			return false, fmt.Errorf("%w (reqs[%d])", err, i)
		}
		if key != q.Key {
			// A long key is decided by its digest, on a copy: reqs is
			// the caller's.
			if !copied {
				reqs, copied = slices.Clone(reqs), true
			}
			reqs[i].Key = key
		}
		if q.N < 0 {
			return false, fmt.Errorf("%w, got %d (reqs[%d])", ErrNegativeN, q.N, i)
		}
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	if t := reqs[0].Limiter.mem; t != nil {
		return allowAllMemory(t, reqs, results), nil
	}
	return allowAllRedis(ctx, reqs[0].Limiter.redis, reqs, results)
}

// --- Memory

// memRule is one rule of one request in allowAllMemory.
type memRule struct {
	req     int32  // index of the request
	owner   int32  // the first rule of the call with the same key and state
	last    int32  // at an owner: the last request whose N was added to n
	tag     uint64 // the rule's state within the key's entry
	n       int64  // at an owner: the units of every request naming the state
	pending int64  // what checkRule computed for commitRule
}

// memReq is one request in allowAllMemory.
type memReq struct {
	sh     *memstore.Shard
	off    int  // index of its first rule
	denied bool // a rule denies it on its own
}

// indexAbove is the number of rules from which allowAllMemory finds shared
// states with a map instead of a linear scan.
const indexAbove = 32

type stateID struct {
	key string
	tag uint64
}

func allowAllMemory(t *memstore.Table, reqs []Request, results []Result) bool {
	var (
		rb [16]memRule
		vb [16]verdict
		qb [8]memReq
		sb [8]*memstore.Shard
	)
	total := 0
	for _, q := range reqs {
		total += len(q.Limiter.specs)
	}
	rules, mreqs, shards := rb[:0], qb[:0], sb[:0]
	var vs []verdict // indexed as rules
	if total > len(rb) {
		rules, vs = make([]memRule, 0, total), make([]verdict, total)
	} else {
		vs = vb[:total]
	}
	if len(reqs) > len(qb) {
		mreqs, shards = make([]memReq, 0, len(reqs)), make([]*memstore.Shard, 0, len(reqs))
	}
	var index map[stateID]int32
	if total > indexAbove {
		index = make(map[stateID]int32, total)
	}

	// Find each rule's state owner and sum the units of every request that
	// names the state (once per request: its SlidingLog rules share a log).
	for i, q := range reqs {
		sh := t.Shard(q.Key)
		mreqs = append(mreqs, memReq{sh: sh, off: len(rules)})
		shards = append(shards, sh)
		for j := range q.Limiter.specs {
			tag := q.Limiter.specs[j].tag
			owner := int32(len(rules))
			if index != nil {
				id := stateID{q.Key, tag}
				if o, ok := index[id]; ok {
					owner = o
				} else {
					index[id] = owner
				}
			} else {
				for k := range rules {
					if rules[k].tag == tag && reqs[rules[k].req].Key == q.Key {
						owner = int32(k)
						break
					}
				}
			}
			rules = append(rules, memRule{req: int32(i), owner: owner, last: -1, tag: tag})
			if o := &rules[owner]; o.last != int32(i) {
				o.n = min(o.n, math.MaxInt64-q.N) + q.N // saturates: beyond every limit anyway
				o.last = int32(i)
			}
		}
	}

	// Lock every shard once, in address order: concurrent calls take their
	// shards in one order, so they cannot deadlock. As in allowMemory the
	// clock is read before locking, and the decision's time is never earlier
	// than any of the shards' (memstore.TimeOf).
	slices.SortFunc(shards, func(a, b *memstore.Shard) int {
		return cmp.Compare(uintptr(unsafe.Pointer(a)), uintptr(unsafe.Pointer(b)))
	})
	shards = slices.Compact(shards)
	now := t.NowMicros()
	for _, sh := range shards {
		sh.Lock()
	}
	now = memstore.TimeOf(now, shards)

	ok := true
	for i, q := range reqs {
		l, m := q.Limiter, &mreqs[i]
		e := m.sh.Get(q.Key)
		var lg *logState
		if l.logTag != 0 {
			lg = logOf(e, l.logTag)
		}
		for j := range l.specs {
			k := m.off + j
			r := &rules[k]
			vs[k], r.pending = l.checkRule(j, e, lg, now, rules[r.owner].n)
			if vs[k].status != statusAllowed {
				m.denied, ok = true, false
			}
		}
	}
	if ok {
		// Commit each state once, at its owner, with the summed units.
		for i, q := range reqs {
			l, m := q.Limiter, &mreqs[i]
			e := m.sh.Get(q.Key)
			var life int64 // as limits.lua's PX of the request's state key
			for j := range l.specs {
				if k := m.off + j; int(rules[k].owner) == k && rules[k].n > 0 {
					life = max(life, l.commitUntil(j, e, now, rules[k].pending)-now)
				}
			}
			for j := range l.specs {
				k := m.off + j
				r := &rules[k]
				if int(r.owner) != k || r.n == 0 {
					continue
				}
				if e == nil {
					e = &memstore.Entry{}
					m.sh.Put(q.Key, e)
				}
				e.Expires = max(e.Expires, l.commitRule(j, e, now, r.n, r.pending, life))
			}
		}
	} else {
		// Nothing is consumed: a request that alone would be admitted reports
		// the state as a peek sees it.
		for i, q := range reqs {
			l, m := q.Limiter, &mreqs[i]
			if m.denied {
				continue
			}
			e := m.sh.Get(q.Key)
			var lg *logState
			if l.logTag != 0 {
				lg = logOf(e, l.logTag)
			}
			for j := range l.specs {
				vs[m.off+j], _ = l.checkRule(j, e, lg, now, 0)
			}
		}
	}
	for _, sh := range shards {
		sh.Unlock()
	}

	for i, q := range reqs {
		l, off := q.Limiter, mreqs[i].off
		results[i] = l.result(vs[off : off+len(l.specs)])
		results[i].Allowed = ok
	}
	return ok
}

// --- Redis

// Modes of limits.lua.
const (
	modeDecide = "0" // check all, commit when all admit
	modeCheck  = "c" // check all, commit nothing, reply as for a denial
	modeCharge = "f" // decide as modeDecide, then commit even when denied (Limiter.Charge)
	modeReset  = "r" // forget every request's state
)

// clusters holds the Redis backends whose store answered CROSSSLOT to an
// AllowAll call: their calls are grouped by hash slot from then on. Keys are
// weak, and an entry goes when its backend does.
var clusters sync.Map // weak.Pointer[redisstore.Store] → struct{}

func isCluster(r *redisstore.Store) bool {
	_, ok := clusters.Load(weak.Make(r))
	return ok
}

func markCluster(r *redisstore.Store) {
	wp := weak.Make(r)
	if _, loaded := clusters.LoadOrStore(wp, struct{}{}); !loaded {
		runtime.AddCleanup(r, func(wp weak.Pointer[redisstore.Store]) { clusters.Delete(wp) }, wp)
	}
}

func allowAllRedis(ctx context.Context, r *redisstore.Store, reqs []Request, results []Result) (bool, error) {
	if !isCluster(r) {
		allowed, err := runAllowAll(ctx, r, reqs, results, modeDecide, nil)
		if err == nil || !strings.Contains(err.Error(), "CROSSSLOT") {
			return allowed, err
		}
		markCluster(r)
	}
	return allowAllSlots(ctx, r, reqs, results)
}

// runAllowAll runs limits.lua once for reqs, whose keys must share a hash
// slot on a Cluster, and fills results. When out is not nil, it also gets
// the verdicts of reqs[0]'s rules.
func runAllowAll(ctx context.Context, r *redisstore.Store, reqs []Request, results []Result, mode string, out []verdict) (bool, error) {
	nkeys, nargs, nrules := 0, 2, 0
	for _, q := range reqs {
		nkeys += 2
		nargs += 1 + len(q.Limiter.reqArgs)
		nrules += len(q.Limiter.specs)
	}
	keys := make([]string, 0, nkeys)
	args := make([]any, 0, nargs)
	args = append(args, r.NowArg(), mode)
	for _, q := range reqs {
		keys = q.Limiter.redisKeys(keys, q.Key)
		args = append(args, q.N)
		args = append(args, q.Limiter.reqArgs...)
	}
	want := 1 + 5*nrules
	if mode == modeReset {
		want = 1
	}
	ints, err := r.RunInts(ctx, limitsScript, keys, args, want)
	if err != nil {
		return false, fmt.Errorf("ratelimit: %w", err)
	}
	if mode == modeReset {
		return true, nil
	}
	allowed := ints[0] == 1
	var vb [8]verdict
	o := 1
	for i, q := range reqs {
		l := q.Limiter
		vs := vb[:0]
		if i == 0 && out != nil {
			vs = out[:0]
		} else if len(l.specs) > len(vb) {
			vs = make([]verdict, 0, len(l.specs))
		}
		for range l.specs {
			vs = append(vs, verdict{ints[o], ints[o+1], ints[o+2], ints[o+3], ints[o+4]})
			o += 5
		}
		results[i] = l.result(vs)
		results[i].Allowed = allowed && (mode == modeDecide || mode == modeCharge)
	}
	return allowed, nil
}

// slotGroup is the requests of one hash slot, in call order.
type slotGroup struct {
	slot    int
	idx     []int // indexes into the call's reqs
	reqs    []Request
	results []Result
}

func (g *slotGroup) scatter(results []Result) {
	for j, i := range g.idx {
		results[i] = g.results[j]
	}
}

// allowAllSlots is AllowAll on a Redis Cluster: atomic within a hash slot,
// check-then-commit across slots.
func allowAllSlots(ctx context.Context, r *redisstore.Store, reqs []Request, results []Result) (bool, error) {
	var groups []*slotGroup
	bySlot := map[int]*slotGroup{}
	for i, q := range reqs {
		s := r.Slot(q.Key)
		g := bySlot[s]
		if g == nil {
			g = &slotGroup{slot: s}
			bySlot[s] = g
			groups = append(groups, g)
		}
		g.idx = append(g.idx, i)
		g.reqs = append(g.reqs, q)
	}
	if len(groups) == 1 {
		return runAllowAll(ctx, r, reqs, results, modeDecide, nil)
	}
	slices.SortFunc(groups, func(a, b *slotGroup) int { return cmp.Compare(a.slot, b.slot) })
	for _, g := range groups {
		g.results = make([]Result, len(g.reqs))
	}

	// Phase 1: check every group, consuming nothing. Each reports a request
	// that alone would be admitted as a peek, which is its result unless
	// every group commits.
	oks := make([]bool, len(groups))
	errs := make([]error, len(groups))
	var wg sync.WaitGroup
	for k, g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			oks[k], errs[k] = runAllowAll(ctx, r, g.reqs, g.results, modeCheck, nil)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return false, err
	}
	allowed := true
	for k, g := range groups {
		g.scatter(results)
		allowed = allowed && oks[k]
	}
	if !allowed {
		return false, nil
	}

	// Phase 2: commit group by group, each atomically re-checked.
	for _, g := range groups {
		ok, err := runAllowAll(ctx, r, g.reqs, g.results, modeDecide, nil)
		if err != nil {
			return false, err
		}
		g.scatter(results)
		if !ok {
			return false, nil
		}
	}
	return true, nil
}
