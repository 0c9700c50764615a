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
	reserve int64 // of the limit, left for newcomers: never granted at steady state
	even    int64 // of the rest, split evenly: the floor of every member
}

// defaultQuotaPolicy keeps 3% of a limit for newcomers, and splits 5% of the
// rest evenly: a data plane that has seen one request gets at least that
// much of the budget divided by the fleet's size.
var defaultQuotaPolicy = quotaPolicy{reserve: 300, even: 500}

// split returns the budget of limit (what the fleet's shares add up to at
// steady state: the limit less the reserve) and the part of it split evenly.
// limit is below 2^32·quotaScale, so the products stay below 2^63.
func (p quotaPolicy) split(limit int64) (budget, evenPart int64) {
	budget = limit - limit*p.reserve/10000
	return budget, budget * p.even / 10000
}

// quotaGrant is share.lua's reply.
type quotaGrant struct {
	grant   int64 // thousandths of a request per unit
	members int64 // live members, the caller included
	demand  int64 // the fleet's total demand, thousandths per second
}

// quotaShare records member's demand (thousandths of a request per second) of
// the bucket stored under key and returns its grant of limit (thousandths
// per unit), valid for ttlUS microseconds, on b.
//
// first says that this is member's first report of the bucket: its demand
// is then taken to be at least the other members' average.
func quotaShare(ctx context.Context, b backend.Backend, key, member string, demand, limit, ttlUS int64, first bool, p quotaPolicy) (quotaGrant, error) {
	demand = min(max(demand, 0), maxQuotaDemand)
	budget, evenPart := p.split(limit)
	switch b := b.(type) {
	case *backend.Memory:
		return quotaShareMemory(unwrap.Memory(b).Table("rlqs"), key, member, demand, limit, ttlUS, budget, evenPart, first), nil
	case *backend.Redis:
		r := unwrap.Redis(b)
		args := []string{r.NowArg(), member, strconv.FormatInt(demand, 10), strconv.FormatInt(limit, 10),
			strconv.FormatInt(ttlUS, 10), strconv.FormatInt(budget, 10), strconv.FormatInt(evenPart, 10), "0"}
		if first {
			args[7] = "1"
		}
		raw, err := r.Run(ctx, quotaShareScript, []string{r.Key(key, "rlqs")}, args)
		if err != nil {
			return quotaGrant{}, err
		}
		v, err := redisstore.ReplyInts(raw, 3)
		if err != nil {
			return quotaGrant{}, err
		}
		return quotaGrant{grant: v[0], members: v[1], demand: v[2]}, nil
	}
	return quotaGrant{}, fmt.Errorf("rlqs: backend %T is not supported", b)
}

// fleetMember is one member's entry in a Memory fleet.
type fleetMember struct{ demand, grant, expires int64 }

// fleetMap is the Value of a Memory fleet's entry.
type fleetMap map[string]fleetMember

// MemSize implements memstore.Sizer: the map and its keys, roughly.
func (m fleetMap) MemSize() int {
	n := 48 + len(m)*48
	for k := range m {
		n += memstore.AllocBytes(len(k))
	}
	return n
}

// quotaShareMemory is share.lua on Memory, step for step.
func quotaShareMemory(t *memstore.Table, key, member string, demand, limit, ttl, budget, evenPart int64, first bool) quotaGrant {
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
	n, total, others, last, prev := int64(1), demand, int64(0), now+ttl, int64(0)
	for k, m := range fleet {
		if k == member {
			if m.expires > now {
				prev = m.grant
			}
			continue
		}
		if m.expires <= now {
			delete(fleet, k)
			continue
		}
		n++
		total += m.demand
		others += m.grant
		last = max(last, m.expires)
	}
	if first && n > 1 {
		if avg := (total - demand) / (n - 1); avg > demand {
			total, demand = total-demand+avg, avg
		}
	}
	grant := evenPart / n
	if total > 0 {
		grant += int64(math.Floor(float64(budget-evenPart) * float64(demand) / float64(total)))
	} else {
		grant += (budget - evenPart) / n
	}
	if free := limit - others; grant > free {
		grant = min(max(prev, free/2), free)
	}
	grant = max(grant, 0)
	fleet[member] = fleetMember{demand: demand, grant: grant, expires: now + ttl}
	if e == nil {
		sh.Put(key, &memstore.Entry{Value: fleet, Expires: last + 1000*1000})
	} else {
		e.Value, e.Expires = fleet, last+1000*1000
	}
	return quotaGrant{grant: grant, members: n, demand: total}
}
