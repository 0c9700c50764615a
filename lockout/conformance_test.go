package lockout_test

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/lockout"
)

type opKind int

const (
	opCheck opKind = iota
	opFail
	opSucceed
	opReset
)

// step is one call of a step table: move the fake clock by advance, run op
// on the key, and demand want from it (for Succeed and Reset: from a Check
// right after it).
type step struct {
	advance time.Duration
	op      opKind
	want    lockout.Status
}

func open(remaining int64) lockout.Status { return lockout.Status{Remaining: remaining} }

func banned(retry time.Duration) lockout.Status {
	return lockout.Status{Banned: true, RetryAfter: retry}
}

type table struct {
	name   string
	policy lockout.Policy
	steps  []step
}

const (
	us  = time.Microsecond
	ms  = time.Millisecond
	sec = time.Second
)

var p3 = lockout.Policy{MaxFailures: 3, Window: 10 * sec, BanFor: time.Minute}

// tables hold hand-computed statuses; every backend must reproduce them.
var tables = []table{
	{"ban at the MaxFailures-th failure within the window", p3, []step{
		{0, opCheck, open(3)},
		{0, opFail, open(2)},
		{4 * sec, opFail, open(1)},
		{0, opCheck, open(1)},
		{6 * sec, opFail, open(1)},                // t=10s: the failure at 0 has left the window
		{4*sec - us, opFail, banned(time.Minute)}, // t=14s-1µs: 4s, 10s and now
		{time.Minute - us, opCheck, banned(us)},
		{0, opFail, banned(us)}, // not counted, does not extend the ban
		{us, opCheck, open(3)},  // the ban is over and the failures were cleared
		{0, opFail, open(2)},
	}},
	{"sliding: failures bunched around a boundary are caught", p3, []step{
		{0, opFail, open(2)},
		{9900 * ms, opFail, open(1)},
		{200 * ms, opFail, open(1)}, // t=10.1s: a fixed window anchored at 0 would count 1
		{100 * ms, opFail, banned(time.Minute)},
	}},
	{"Succeed clears failures, not a ban; Reset lifts it", p3, []step{
		{0, opFail, open(2)},
		{0, opFail, open(1)},
		{sec, opSucceed, open(3)},
		{0, opFail, open(2)},
		{0, opFail, open(1)},
		{0, opFail, banned(time.Minute)},
		{10 * sec, opSucceed, banned(50 * sec)},
		{0, opFail, banned(50 * sec)},
		{0, opReset, open(3)},
		{0, opFail, open(2)},
	}},
	{"MaxFailures 1 bans at once", lockout.Policy{MaxFailures: 1, Window: sec, BanFor: 5 * sec}, []step{
		{0, opCheck, open(1)},
		{0, opFail, banned(5 * sec)},
		{2 * sec, opCheck, banned(3 * sec)},
		{3 * sec, opCheck, open(1)},
		{0, opSucceed, open(1)},
		{0, opFail, banned(5 * sec)},
	}},
	{"failures expire one by one", lockout.Policy{MaxFailures: 4, Window: 3 * sec, BanFor: sec}, []step{
		{0, opFail, open(3)},
		{sec, opFail, open(2)},
		{sec, opFail, open(1)},
		{sec, opCheck, open(2)}, // t=3s: the first has left
		{sec, opCheck, open(3)},
		{sec - us, opCheck, open(3)},
		{us, opCheck, open(4)},
		{0, opFail, open(3)},
	}},
}

func TestConformance(t *testing.T) {
	for _, bk := range allBackends() {
		t.Run(bk.Name, func(t *testing.T) {
			t.Parallel()
			for _, tb := range tables {
				t.Run(tb.name, func(t *testing.T) {
					clk := clock.NewFake(t0)
					g, err := lockout.New(bk.Make(t, clk), tb.policy)
					if err != nil {
						t.Fatal(err)
					}
					runSteps(t, g, clk, "alice|203.0.113.7", tb.steps)
				})
			}
		})
	}
}

func runSteps(t *testing.T, g *lockout.Guard, clk *clock.Fake, key string, steps []step) {
	t.Helper()
	ctx := context.Background()
	names := []string{"Check", "Fail", "Succeed", "Reset"}
	for i, s := range steps {
		clk.Advance(s.advance)
		var got lockout.Status
		var err error
		switch s.op {
		case opCheck:
			got, err = g.Check(ctx, key)
		case opFail:
			got, err = g.Fail(ctx, key)
		case opSucceed, opReset:
			if s.op == opSucceed {
				err = g.Succeed(ctx, key)
			} else {
				err = g.Reset(ctx, key)
			}
			if err == nil {
				got, err = g.Check(ctx, key)
			}
		}
		if err != nil {
			t.Fatalf("step %d (t=%v, %s): %v", i+1, clk.Now().Sub(t0), names[s.op], err)
		}
		if got != s.want {
			t.Errorf("step %d (t=%v, %s):\n got %+v\nwant %+v", i+1, clk.Now().Sub(t0), names[s.op], got, s.want)
		}
	}
}

// TestIdentity: Guards with the same policy share a key's state; another
// policy or another key does not.
func TestIdentity(t *testing.T) {
	for _, bk := range allBackends() {
		t.Run(bk.Name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			clk := clock.NewFake(t0)
			b := bk.Make(t, clk)
			mk := func(p lockout.Policy) *lockout.Guard {
				g, err := lockout.New(b, p)
				if err != nil {
					t.Fatal(err)
				}
				return g
			}
			a, same, other := mk(p3), mk(p3), mk(lockout.Policy{MaxFailures: 3, Window: 10 * sec, BanFor: 2 * time.Minute})
			for range 3 {
				if _, err := a.Fail(ctx, "k"); err != nil {
					t.Fatal(err)
				}
			}
			if st, err := same.Check(ctx, "k"); err != nil || st != banned(time.Minute) {
				t.Errorf("same policy: %+v, %v; want banned", st, err)
			}
			if st, err := other.Check(ctx, "k"); err != nil || st != open(3) {
				t.Errorf("another policy: %+v, %v; want untouched", st, err)
			}
			if st, err := a.Check(ctx, "k2"); err != nil || st != open(3) {
				t.Errorf("another key: %+v, %v; want untouched", st, err)
			}
		})
	}
}
