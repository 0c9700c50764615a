package ratelimit_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/ratelimit"
)

// FuzzRules feeds arbitrary rule parameters and call sequences to New,
// AllowN and Charge (a call byte >= 128 charges, up to 127 units, or
// math.MaxInt64 for 255): New either rejects the rule or every decision is
// well formed, a key in debt is denied even a peek, and nothing panics or
// overflows.
func FuzzRules(f *testing.F) {
	f.Add(uint8(0), int64(3), int64(1_000_000), int64(0), int64(0), []byte{1, 2, 0, 5})
	f.Add(uint8(1), int64(4), int64(1_000_000), int64(4), int64(0), []byte{2, 2, 9, 1})
	f.Add(uint8(2), int64(2), int64(100_000), int64(0), int64(0), []byte{1, 1, 1, 200})
	f.Add(uint8(3), int64(3), int64(300_000), int64(1), int64(0), []byte{3, 0, 4, 7})
	f.Add(uint8(4), int64(2), int64(1_000_000), int64(2), int64(1), []byte{1, 1, 1, 1})
	f.Add(uint8(5), int64(3), int64(1_000_000), int64(2), int64(-1), []byte{1, 1, 1, 1})
	f.Add(uint8(3), int64(1<<40), int64(1<<40), int64(1<<40), int64(0), []byte{255})
	// Levels in the short integer form of lua/codec.lua: the bench's GCRA
	// (10^6/s, burst 10^6) and a per-minute bucket of 1000.
	f.Add(uint8(5), int64(1_000_000), int64(1_000_000), int64(1_000_000), int64(0), []byte{3, 200, 0, 17, 255, 4})
	f.Add(uint8(3), int64(1000), int64(60_000_000), int64(1000), int64(0), []byte{4, 4, 90, 1, 250})
	// Charges past the limit, then peeks and admissions.
	f.Add(uint8(0), int64(3), int64(1_000_000), int64(0), int64(0), []byte{200, 0, 1, 30, 255, 0, 90})
	f.Add(uint8(2), int64(2), int64(100_000), int64(0), int64(0), []byte{140, 0, 1, 60})
	f.Add(uint8(3), int64(3), int64(300_000), int64(1), int64(0), []byte{170, 0, 2, 3, 255, 9})
	f.Add(uint8(1), int64(4), int64(1_000_000), int64(4), int64(0), []byte{150, 7, 0, 40})
	f.Fuzz(func(t *testing.T, kind uint8, a, us, c, d int64, calls []byte) {
		dur := time.Duration(us) * time.Microsecond
		var rule ratelimit.Rule
		switch kind % 6 {
		case 0:
			rule = ratelimit.FixedWindow{Limit: a, Window: dur}
		case 1:
			rule = ratelimit.SlidingWindow{Limit: a, Window: dur, Buckets: int(c)}
		case 2:
			rule = ratelimit.SlidingLog{Limit: a, Window: dur}
		case 3:
			rule = ratelimit.TokenBucket{Capacity: a, Refill: c, Every: dur}
		case 4:
			rule = ratelimit.LeakyBucket{Rate: c, Per: dur, Burst: a, Delay: d}
		default:
			rule = ratelimit.GCRA{Rate: c, Per: dur, Burst: a}
		}
		clk := clock.NewFake(time.Unix(1_700_000_000, 0))
		m := backend.NewMemory(backend.WithClock(clk))
		defer m.Close()
		lim, err := ratelimit.New(m, rule)
		if err != nil {
			return
		}
		for i, b := range calls {
			if i > 64 {
				break
			}
			ctx := context.Background()
			if b < 128 {
				clk.Advance(time.Duration(b) * time.Duration(b) * time.Millisecond)
			}
			n, call := int64(b%5), lim.AllowN
			if b >= 128 {
				n, call = int64(b-128), lim.Charge
				if b == 255 {
					n = math.MaxInt64
				}
			}
			r, err := call(ctx, "k", n)
			if err != nil {
				t.Fatalf("%+v n=%d: %v", rule, n, err)
			}
			if r.Remaining < 0 || r.Remaining > r.Limit || r.ResetAfter < 0 || r.Delay < 0 || r.Debt < 0 {
				t.Fatalf("%+v n=%d: malformed %+v", rule, n, r)
			}
			if r.Allowed != (r.RetryAfter == 0) {
				t.Fatalf("%+v n=%d: Allowed %v with RetryAfter %v", rule, n, r.Allowed, r.RetryAfter)
			}
			if r.Debt > 0 && (r.Allowed || r.Remaining != 0) {
				t.Fatalf("%+v n=%d: Debt with %+v", rule, n, r)
			}
			if b >= 128 && !r.Allowed {
				// A charge that did not fit is recorded: the key is in debt.
				p, err := lim.AllowN(ctx, "k", 0)
				if err != nil {
					t.Fatal(err)
				}
				if r.Debt == 0 || p != r {
					t.Fatalf("%+v Charge(%d) = %+v, then a peek %+v: want a debt, and the peek to agree", rule, n, r, p)
				}
			}
		}
	})
}
