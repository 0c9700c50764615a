package rlqs

import (
	"context"
	_ "embed"
	"fmt"
	"math"
	"strconv"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/internal/memstore"
	"github.com/floodgate-dev/floodgate/internal/redisstore"
	"github.com/floodgate-dev/floodgate/internal/unwrap"
)

// The fleet of an RLQS bucket is every data plane (every stream, on any
// floodgate server sharing the store) reporting usage of it, each with its
// demand, the share it was granted and when that grant expires. Shares are
// sized from the whole fleet: one floodgate server behind a Redis sees the
// demand the others recorded. On Redis a fleet is one small hash
// (share.lua); on Memory, the same in a table entry.

//go:embed share.lua
var luaQuotaShare string

var quotaShareScript = redisstore.NewScript(luaQuotaShare)

// quotaScale is the fixed point of fleet rates: demands are in thousandths
// of a request per second, grants in thousandths of a request per unit of
// the limit.
const quotaScale = 1000

// maxQuotaDemand caps a demand (in quotaScale units: 10^9 requests a second)
// so that sums over a fleet of up to 8192 data planes stay exact in Lua's
// doubles.
const maxQuotaDemand = 1 << 40

// quotaPolicy is how a limit is shared, in parts in 10000.
type quotaPolicy struct {
	reserve int64 // of the limit, kept free at steady state: newcomers' and changes' room
	even    int64 // of the rest, split evenly: the floor of every member
}

// defaultQuotaPolicy keeps 0.3% of a limit free, and splits 5% of the rest
// evenly: a data plane that has seen one request gets at least that much of
// the budget divided by the fleet's size.
var defaultQuotaPolicy = quotaPolicy{reserve: 30, even: 500}

// split returns the reserve of limit (what shares leave free at steady state:
// at least two requests per unit, when the limit has eight, so that a change
// always has a token's room), the budget (what the fleet's shares add up to
// at steady state) and the part of the budget split evenly. limit is below
// 2^32·quotaScale, so the products stay below 2^63.
func (p quotaPolicy) split(limit int64) (reserve, budget, evenPart int64) {
	reserve = max(limit*p.reserve/10000, min(2*quotaScale, limit/4))
	budget = limit - reserve
	return reserve, budget, budget * p.even / 10000
}

// quotaGrant is share.lua's reply.
type quotaGrant struct {
	grant   int64 // the share: thousandths of a request per unit
	members int64 // live members, the caller included
	demand  int64 // the fleet's total demand, thousandths per second
	burst   int64 // the token bucket's max_tokens, in thousandths
}

// quotaShare records member's demand (thousandths of a request per second) of
// the bucket stored under key and sizes its share of limit (thousandths
// per unit of unitUS microseconds), valid for ttlUS microseconds, on b.
//
// first says that this is member's first report of the bucket: its demand
// is then taken to be at least the other members' average.
func quotaShare(ctx context.Context, b backend.Backend, key, member string, demand, limit, ttlUS, unitUS int64, first bool, p quotaPolicy) (quotaGrant, error) {
	demand = min(max(demand, 0), maxQuotaDemand)
	reserve, budget, evenPart := p.split(limit)
	f := fleetArgs{member: member, demand: demand, limit: limit, ttl: ttlUS, unit: unitUS, budget: budget, evenPart: evenPart, reserve: reserve, first: first}
	switch b := b.(type) {
	case *backend.Memory:
		return quotaShareMemory(unwrap.Memory(b).Table("rlqs"), key, f), nil
	case *backend.Redis:
		r := unwrap.Redis(b)
		args := []string{r.NowArg(), member, strconv.FormatInt(demand, 10), strconv.FormatInt(limit, 10),
			strconv.FormatInt(ttlUS, 10), strconv.FormatInt(budget, 10), strconv.FormatInt(evenPart, 10), "0",
			strconv.FormatInt(unitUS, 10), strconv.FormatInt(reserve, 10)}
		if first {
			args[7] = "1"
		}
		raw, err := r.Run(ctx, quotaShareScript, []string{r.Key(key, "rlqs")}, args)
		if err != nil {
			return quotaGrant{}, err
		}
		v, err := redisstore.ReplyInts(raw, 4)
		if err != nil {
			return quotaGrant{}, err
		}
		return quotaGrant{grant: v[0], members: v[1], demand: v[2], burst: v[3]}, nil
	}
	return quotaGrant{}, fmt.Errorf("rlqs: backend %T is not supported", b)
}

// fleetArgs are one report's arguments of the sizing, as share.lua gets them.
type fleetArgs struct {
	member                    string
	demand, limit, ttl, unit  int64
	budget, evenPart, reserve int64
	first                     bool
}

// fleetMember is one member's entry in a fleet: its demand, its share
// (grant), when its assignment expires, its token bucket's burst, and what
// it may admit in a unit's window (holdB + holdF) until holdUntil, after
// its assignment changed.
type fleetMember struct{ demand, grant, expires, burst, holdB, holdF, holdUntil int64 }

// fleetMap is the Value of a Memory fleet's entry.
type fleetMap map[string]fleetMember

// MemSize implements memstore.Sizer: the map and its keys, roughly.
func (m fleetMap) MemSize() int {
	n := 48 + len(m)*72
	for k := range m {
		n += memstore.AllocBytes(len(k))
	}
	return n
}

// burstOf is the burst of a share w (thousandths of a request per unit): the
// token bucket's max_tokens, in whole tokens. A share of two or more
// requests per unit holds a tenth of its fill, rounded up: ⌈w/11⌉ (so a
// data plane whose requests come in bursts up to a tenth of a unit apart is
// served its whole fill); under two, none is counted: its bucket holds one
// token, which tokenBucket documents as the exception to the bound.
func burstOf(w int64) int64 {
	if w < 2*quotaScale {
		return 0 // its bucket's one token is tokenBucket's documented exception
	}
	return (w + 11*quotaScale - 1) / (11 * quotaScale) * quotaScale
}

// wholeShare is a target t in whole requests, rounded down, when it is two
// or more a unit (a token bucket admits whole requests: a fraction would be
// lost), and shareFraction what that rounding leaves (-1 for a smaller t,
// kept as it is). The budget's whole requests that rounding leaves go one
// each to the members whose fractions were largest, ties to the first name
// in byte order, so that a fleet's targets still add up to its budget.
func wholeShare(t int64) int64 {
	if t < 2*quotaScale {
		return t
	}
	return t - t%quotaScale
}

func shareFraction(t int64) int64 {
	if t < 2*quotaScale {
		return -1
	}
	return t % quotaScale
}

// fillOf is what a share w with burst b fills per unit.
func fillOf(w, b int64) int64 { return w - b }

// commitment is what m's data plane may admit in one unit's window from
// now on: a full bucket and a unit's fill, or, within a unit of a change of
// its assignment, the bursts of both buckets and the larger fill.
func (m fleetMember) commitment(now int64) int64 {
	if m.holdUntil > now {
		return m.holdB + m.holdF
	}
	return m.burst + fillOf(m.grant, m.burst)
}

// quotaShareMemory is share.lua on Memory, step for step.
//
// The policy. A member's target is the even part of the budget split among
// the live members plus the rest in proportion to demand. Envoy enforces a
// share as a token bucket of burst B and fill F per unit, which admits up to
// B + F in a unit's window; a new strategy starts a new bucket, full, so in
// a window that holds a change from (B1, F1) to (B2, F2) a data plane may
// admit B1 + B2 + max(F1, F2). Each member's commitment (that, for a unit
// after a change; B + F otherwise; until a unit after its assignment
// expires) is recorded, and no change may make the fleet's commitments add
// up to more than the limit. So:
//
//   - a member whose target is at most 2% under its share, or less than a
//     token and 0.5% over it, keeps its strategy (Envoy keeps its bucket): at
//     steady state nothing changes;
//   - a shrink costs its new burst for a unit, and may use all of the
//     limit's room; when there is not room for the whole burst it takes a
//     smaller one, restored later;
//   - a growth, and a newcomer, must leave the reserve and the others'
//     missing bursts free, so that shrinks can always proceed; a newcomer
//     takes at most half of what else is free but half the reserve, so that
//     in a crowd of newcomers each gets something and a shrink has room.
func quotaShareMemory(t *memstore.Table, key string, f fleetArgs) quotaGrant {
	sh := t.Shard(key)
	sh.Lock()
	defer sh.Unlock()
	now := sh.Now()
	e := sh.Get(key)
	var fleet fleetMap
	if e != nil {
		fleet, _ = e.Value.(fleetMap)
	}
	if fleet == nil {
		fleet = fleetMap{}
	}
	demand := f.demand
	n, total, others, deficit, last := int64(1), demand, int64(0), int64(0), now+f.ttl+f.unit
	mine, found := fleet[f.member]
	type liveMember struct {
		name   string
		demand int64
	}
	var live []liveMember // the other live members
	for k, m := range fleet {
		if k == f.member {
			continue
		}
		if m.expires+f.unit <= now && m.holdUntil <= now {
			delete(fleet, k)
			continue
		}
		others += m.commitment(now)
		if m.expires > now {
			n++
			total += m.demand
			live = append(live, liveMember{k, m.demand})
			if want := burstOf(m.grant); want > m.burst {
				deficit += want - m.burst
			}
		}
		last = max(last, m.expires+f.unit, m.holdUntil)
	}
	if f.first && n > 1 {
		if avg := (total - demand) / (n - 1); avg > demand {
			total, demand = total-demand+avg, avg
		}
	}
	targetOf := func(d int64) int64 {
		if total > 0 {
			return f.evenPart/n + int64(math.Floor(float64(f.budget-f.evenPart)*float64(d)/float64(total)))
		}
		return f.evenPart/n + (f.budget-f.evenPart)/n
	}
	target := targetOf(demand)
	if mine := shareFraction(target); mine >= 0 {
		sum, ahead := wholeShare(target), int64(0)
		for _, o := range live {
			t := targetOf(o.demand)
			sum += wholeShare(t)
			if fr := shareFraction(t); fr > mine || (fr == mine && o.name < f.member) {
				ahead++
			}
		}
		target = wholeShare(target)
		if ahead < floorDiv(f.budget-sum, quotaScale) {
			target += quotaScale
		}
	}

	var w1, b1, hb, hf, hu int64
	inForce := false
	if found && (mine.expires+f.unit > now || mine.holdUntil > now) {
		w1, b1 = mine.grant, mine.burst
		inForce = mine.expires > now
		if mine.holdUntil > now {
			hb, hf, hu = mine.holdB, mine.holdF, mine.holdUntil
		} else {
			hb, hf = b1, fillOf(w1, b1)
		}
	}
	c1 := hb + hf
	avail := f.limit - others
	growth := avail - f.reserve - deficit
	newcomer := floorDiv(avail-deficit-f.reserve/2, 2)
	cost := func(w, b int64) int64 { return hb + b + max(hf, fillOf(w, b)) }
	largest := func(lo, hi, limit int64) int64 {
		if lo > hi || cost(lo, burstOf(lo)) > limit {
			return -1
		}
		for lo < hi {
			mid := lo + (hi-lo+1)/2
			if cost(mid, burstOf(mid)) <= limit {
				lo = mid
			} else {
				hi = mid - 1
			}
		}
		return lo
	}

	grant, burst, change := w1, b1, true
	// Kept: a target at most 2% under the share, or less than a token or
	// 0.5% over it.
	within := (target <= w1 && (w1-target)*50 <= w1) ||
		(target > w1 && target-w1 < quotaScale && (target-w1)*200 < w1)
	switch {
	case inForce && b1 == burstOf(w1) && within && c1 <= avail:
		change = false
	case inForce && target <= w1:
		bt := burstOf(target)
		b := min(bt, floorDiv(avail-c1, quotaScale)*quotaScale)
		switch {
		case cost(target, bt) <= avail:
			grant, burst = target, bt
		case b >= quotaScale && (target < w1 || b > b1) && cost(target, b) <= avail:
			grant, burst = target, b
		case c1 <= avail:
			change = false
		default:
			grant, burst = 0, 0
		}
	case inForce:
		w := largest(w1, target, growth)
		switch {
		case w > 0 && (w-w1 >= quotaScale || (w-w1)*200 >= w1):
			grant, burst = w, burstOf(w)
		case b1 < burstOf(w1) && cost(w1, burstOf(w1)) <= avail:
			grant, burst = w1, burstOf(w1)
		case c1 <= avail:
			change = false
		default:
			grant, burst = 0, 0
		}
	default:
		w := max(largest(0, target, max(growth, newcomer)), 0)
		grant, burst = w, burstOf(w)
	}
	if change && inForce && grant == w1 && burst == b1 {
		change = false
	}
	if change {
		hb, hf, hu = hb+burst, max(hf, fillOf(grant, burst)), now+f.unit
	}
	fleet[f.member] = fleetMember{demand: demand, grant: grant, expires: now + f.ttl, burst: burst, holdB: hb, holdF: hf, holdUntil: hu}
	last = max(last, now+f.ttl+f.unit, hu)
	if e == nil {
		sh.Put(key, &memstore.Entry{Value: fleet, Expires: last + 1000*1000})
	} else {
		e.Value, e.Expires = fleet, last+1000*1000
	}
	return quotaGrant{grant: grant, members: n, demand: total, burst: burst}
}

// floorDiv is a / b rounded down (b > 0), as Lua's math.floor(a / b).
func floorDiv(a, b int64) int64 {
	q := a / b
	if a%b != 0 && a < 0 {
		q--
	}
	return q
}
