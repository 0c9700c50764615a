package lock_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/internal/backendtest"
	"github.com/floodgate-dev/floodgate/internal/testenv"
	"github.com/floodgate-dev/floodgate/lock"
)

// TestSharedLocksMatchMemory: random TryLock, TryRLock, Unlock, Extend and
// clock steps on an RWMutex and a Semaphore, on Memory and on Redis driven by
// fake clocks in step, must get the same answers. It checks the Redis
// layout's bookkeeping of shared holdings (the count n, the deadline bound m
// and the sweeps it triggers) against the Memory backend's plain lists:
// leases end on their deadlines, also when moved earlier by Extend, and
// re-entry (Owner), upgrade and expiry on the boundary (deadline == now)
// agree. Fencing tokens must go up on each backend.
func TestSharedLocksMatchMemory(t *testing.T) {
	addr := testenv.SharedRedis(t).Addr
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	for _, kind := range []string{"rwmutex", "semaphore"} {
		for seed := uint64(1); seed <= 6; seed++ {
			t.Run(fmt.Sprintf("%s/seed=%d", kind, seed), func(t *testing.T) {
				runDifferential(t, c, kind, seed)
			})
		}
	}
}

// diffHandle is one lock handle on both backends: acquire takes the read
// side, the write side or a permit.
type diffHandle struct {
	name    string
	acquire [2]func(context.Context) (*lock.Lease, error) // memory, redis
}

func runDifferential(t *testing.T, c *redis.Client, kind string, seed uint64) {
	ctx := context.Background()
	start := time.UnixMicro(1_700_000_000_000_000)
	clocks := [2]*clock.Fake{clock.NewFake(start), clock.NewFake(start)}
	mem := backend.NewMemory(backend.WithClock(clocks[0]))
	t.Cleanup(func() { mem.Close() })
	red := backendtest.NewRedis(t, c, backend.WithPrefix(backendtest.UniquePrefix()), backend.WithClock(clocks[1]))
	backends := [2]backend.Backend{mem, red}
	name := "diff"

	// Handles: plain ones (each Lock call its own owner) with two TTLs, and
	// two sharing Owner "o" (re-entry; on the RWMutex, the writer also reads
	// and a reader upgrades).
	// Durations are in minutes of the fake clocks: a Lease also watches its
	// deadline on the real clock (Lost), which must not fire while the test
	// runs, however slow the machine (with milliseconds, a busy CI machine
	// marked one backend's lease lost before the other's).
	const unit = time.Minute
	opts := [][]lock.Option{
		{lock.TTL(10 * unit)},
		{lock.TTL(40 * unit)},
		{lock.TTL(20 * unit), lock.Owner("o")},
	}
	var handles []diffHandle
	for i, o := range opts {
		var h [2]diffHandle
		for b := range backends {
			switch kind {
			case "rwmutex":
				rw, err := lock.NewRWMutex(backends[b], name, o...)
				if err != nil {
					t.Fatal(err)
				}
				h[0].acquire[b] = rw.TryRLock
				h[1].acquire[b] = rw.TryLock
			default:
				s, err := lock.NewSemaphore(backends[b], name, 3, o...)
				if err != nil {
					t.Fatal(err)
				}
				h[0].acquire[b] = s.TryLock
				h[1].acquire[b] = s.TryLock
			}
		}
		h[0].name, h[1].name = fmt.Sprintf("r%d", i), fmt.Sprintf("w%d", i)
		handles = append(handles, h[0])
		if kind == "rwmutex" {
			handles = append(handles, h[1])
		}
	}

	type held struct {
		what   string
		leases [2]*lock.Lease
	}
	var leases []held
	var last [2]int64
	rng := rand.New(rand.NewPCG(seed, 17))
	same := func(step int, op string, errs [2]error) {
		t.Helper()
		if (errs[0] == nil) != (errs[1] == nil) || (errs[0] != nil && errors.Is(errs[0], lock.ErrLocked) != errors.Is(errs[1], lock.ErrLocked)) {
			t.Fatalf("step %d, %s: memory %v, redis %v", step, op, errs[0], errs[1])
		}
	}
	for step := range 2000 {
		switch r := rng.IntN(10); {
		case r < 4: // acquire
			h := handles[rng.IntN(len(handles))]
			var got [2]*lock.Lease
			var errs [2]error
			for b := range backends {
				got[b], errs[b] = h.acquire[b](ctx)
				if errs[b] != nil && !errors.Is(errs[b], lock.ErrLocked) {
					t.Fatalf("step %d, %s on backend %d: %v", step, h.name, b, errs[b])
				}
			}
			same(step, "acquire "+h.name, errs)
			if errs[0] == nil {
				// A new holding gets a token above every earlier one; a
				// re-entry (Owner) the token of the holding it enters.
				var fresh [2]bool
				for b := range backends {
					fresh[b] = got[b].Token() > last[b]
					if fresh[b] {
						last[b] = got[b].Token()
						continue
					}
					known := false
					for _, l := range leases {
						known = known || l.leases[b].Token() == got[b].Token()
					}
					if !known {
						t.Fatalf("step %d, %s on backend %d: token %d, neither new (last %d) nor a held one's", step, h.name, b, got[b].Token(), last[b])
					}
				}
				if fresh[0] != fresh[1] {
					t.Fatalf("step %d, %s: a new holding on memory %v, on redis %v", step, h.name, fresh[0], fresh[1])
				}
				leases = append(leases, held{h.name, got})
			}
		case r < 7 && len(leases) > 0: // unlock
			i := rng.IntN(len(leases))
			l := leases[i]
			leases = append(leases[:i], leases[i+1:]...)
			var errs [2]error
			for b := range backends {
				errs[b] = l.leases[b].Unlock(ctx)
			}
			same(step, "unlock "+l.what, errs)
		case r < 8 && len(leases) > 0: // extend, often below the lease's TTL
			l := leases[rng.IntN(len(leases))]
			d := time.Duration(1+rng.IntN(30)) * unit
			var errs [2]error
			for b := range backends {
				errs[b] = l.leases[b].Extend(ctx, d)
			}
			same(step, fmt.Sprintf("extend %s by %v", l.what, d), errs)
		default: // time passes
			d := time.Duration(rng.IntN(8)) * unit
			for _, clk := range clocks {
				clk.Advance(d)
			}
		}
	}
}
