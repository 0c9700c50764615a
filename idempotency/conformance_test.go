package idempotency_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/idempotency"
)

const (
	ms = time.Millisecond
	us = time.Microsecond
)

// op is one store call of a step table, made after moving the fake clock by
// advance. want is the Outcome of a begin, or "true"/"false" for the other
// calls. key "" means the table's key.
type op struct {
	advance time.Duration
	call    string // begin, renew, complete, fail (complete with an error), abort
	owner   string
	arg     string // begin: fingerprint; complete: value; fail: "value|message"
	want    any
	key     string
}

func claimed() idempotency.Outcome { return idempotency.Outcome{State: "claimed"} }
func inFlight(hint time.Duration) idempotency.Outcome {
	return idempotency.Outcome{State: "in flight", Hint: hint}
}
func doneWith(v string) idempotency.Outcome { return idempotency.Outcome{State: "done", Val: v} }
func mismatch() idempotency.Outcome         { return idempotency.Outcome{State: "mismatch"} }

// The tables run with Lease 3s and TTL 10s; hand-computed, every backend
// must reproduce them exactly.
var tables = []struct {
	name string
	ops  []op
}{
	{"claim, renew, complete, replay, expire", []op{
		{0, "begin", "A", "", claimed(), ""},
		{0, "begin", "B", "", inFlight(3 * time.Second), ""},
		{time.Second, "renew", "A", "", true, ""}, // lease now ends at 4s
		{2500 * ms, "begin", "B", "", inFlight(500 * ms), ""},
		{0, "renew", "B", "", false, ""},
		{0, "complete", "B", "stolen", false, ""},
		{0, "abort", "B", "", false, ""},
		{0, "complete", "A", "r1", true, ""}, // kept until 13.5s
		{0, "begin", "B", "", doneWith("r1"), ""},
		{0, "renew", "A", "", false, ""},
		{0, "abort", "A", "", false, ""},
		{0, "complete", "A", "again", true, ""}, // owner A stored r1: a replay, nothing changes
		{10*time.Second - us, "begin", "C", "", doneWith("r1"), ""},
		{us, "begin", "C", "", claimed(), ""},
	}},
	{"a runner's lease runs out", []op{
		{0, "begin", "A", "", claimed(), ""},
		{3*time.Second - us, "begin", "B", "", inFlight(us), ""},
		{us, "renew", "A", "", false, ""}, // never re-acquires
		{0, "begin", "B", "", claimed(), ""},
		{0, "complete", "A", "late", false, ""},
		{0, "abort", "A", "", false, ""},
		{0, "begin", "C", "", inFlight(3 * time.Second), ""},
		{time.Second, "complete", "B", "b", true, ""},
		{0, "begin", "A", "", doneWith("b"), ""},
	}},
	{"a lease that ran out with nobody taking over is still lost", []op{
		{0, "begin", "A", "", claimed(), ""},
		{3 * time.Second, "complete", "A", "late", false, ""},
		{0, "begin", "B", "", claimed(), ""},
	}},
	{"abort frees the key", []op{
		{0, "begin", "A", "", claimed(), ""},
		{ms, "abort", "A", "", true, ""},
		{0, "begin", "B", "", claimed(), ""},
		{0, "abort", "A", "", false, ""},
		{0, "begin", "C", "", inFlight(3 * time.Second), ""},
	}},
	{"stored error", []op{
		{0, "begin", "A", "", claimed(), ""},
		{0, "fail", "A", "partial|card declined", true, ""},
		{0, "begin", "B", "", idempotency.Outcome{State: "done", Val: "partial", Failed: true, Msg: "card declined"}, ""},
	}},
	{"fingerprints", []op{
		{0, "begin", "A", "fp-x", claimed(), ""},
		{0, "begin", "B", "fp-y", mismatch(), ""},
		{0, "begin", "B", "", mismatch(), ""},
		{0, "begin", "B", "fp-x", inFlight(3 * time.Second), ""},
		{0, "complete", "A", "r", true, ""},
		{0, "begin", "B", "fp-y", mismatch(), ""},
		{0, "begin", "B", "fp-x", doneWith("r"), ""},
		{10 * time.Second, "begin", "B", "fp-y", claimed(), ""},
	}},
	{"values and keys of any bytes", []op{
		{0, "begin", "A", "", claimed(), "{tag}%7B\x00é"},
		{0, "complete", "A", "\x00\xff\r\n", true, "{tag}%7B\x00é"},
		{0, "begin", "B", "", doneWith("\x00\xff\r\n"), "{tag}%7B\x00é"},
		{0, "begin", "B", "", claimed(), "{tag}%7B"}, // another key
		{0, "complete", "B", "", true, "{tag}%7B"},
		{0, "begin", "C", "", doneWith(""), "{tag}%7B"},
	}},
}

func TestConformanceStore(t *testing.T) {
	for _, bk := range allBackends() {
		t.Run(bk.Name, func(t *testing.T) {
			t.Parallel()
			for _, tb := range tables {
				t.Run(tb.name, func(t *testing.T) {
					clk := clock.NewFake(t0)
					s := newStore(t, bk.Make(t, clk), idempotency.Lease(3*time.Second), idempotency.TTL(10*time.Second))
					ctx := context.Background()
					for i, o := range tb.ops {
						clk.Advance(o.advance)
						key := o.key
						if key == "" {
							key = "order-1"
						}
						var got any
						var err error
						switch o.call {
						case "begin":
							got, err = idempotency.Begin(ctx, s, key, o.owner, o.arg)
						case "renew":
							got, err = idempotency.Renew(ctx, s, key, o.owner)
						case "complete":
							got, err = idempotency.Complete(ctx, s, key, o.owner, o.arg, false, "")
						case "fail":
							v, m, _ := strings.Cut(o.arg, "|")
							got, err = idempotency.Complete(ctx, s, key, o.owner, v, true, m)
						case "abort":
							got, err = idempotency.Abort(ctx, s, key, o.owner)
						}
						if err != nil {
							t.Fatalf("step %d %s: %v", i+1, o.call, err)
						}
						if got != o.want {
							t.Errorf("step %d (t=%v) %s by %s:\n got %+v\nwant %+v", i+1, clk.Now().Sub(t0), o.call, o.owner, got, o.want)
						}
					}
				})
			}
		})
	}
}

var errDeclined = errors.New("card declined")

// TestConformanceDo runs the public API at fixed fake times.
func TestConformanceDo(t *testing.T) {
	for _, bk := range allBackends() {
		t.Run(bk.Name, func(t *testing.T) {
			t.Parallel()
			clk := clock.NewFake(t0)
			b := bk.Make(t, clk)
			s := newStore(t, b, idempotency.TTL(10*time.Second),
				idempotency.StoreErrors(func(err error) bool { return errors.Is(err, errDeclined) }))
			ctx := context.Background()
			runs := 0
			fn := func(val string, err error) func(context.Context) ([]byte, error) {
				return func(context.Context) ([]byte, error) {
					runs++
					return []byte(val), err
				}
			}
			type want struct {
				res      string
				replayed bool
				err      string
				runs     int
			}
			check := func(step string, key string, f func(context.Context) ([]byte, error), w want) {
				t.Helper()
				res, replayed, err := s.Do(ctx, key, f)
				got := want{string(res), replayed, fmt.Sprint(err), runs}
				if err == nil {
					got.err = ""
				}
				if got != w {
					t.Errorf("%s (t=%v):\n got %+v\nwant %+v", step, clk.Now().Sub(t0), got, w)
				}
			}
			check("first call runs fn", "k", fn("A", nil), want{"A", false, "", 1})
			check("second call replays", "k", fn("B", nil), want{"A", true, "", 1})
			clk.Advance(10*time.Second - us)
			check("replayed until the TTL ends", "k", fn("B", nil), want{"A", true, "", 1})
			clk.Advance(us)
			check("runs again after the TTL", "k", fn("B", nil), want{"B", false, "", 2})
			check("errors are not stored", "k2", fn("x", errors.New("timeout")), want{"x", false, "timeout", 3})
			check("so a retry runs fn", "k2", fn("ok", nil), want{"ok", false, "", 4})
			check("StoreErrors keeps chosen errors", "k3", fn("partial", errDeclined), want{"partial", false, "card declined", 5})
			res, replayed, err := s.Do(ctx, "k3", fn("no", nil))
			var se *idempotency.StoredError
			if !errors.As(err, &se) || se.Message != "card declined" || string(res) != "partial" || !replayed || runs != 5 {
				t.Errorf("replayed stored error: %q, %v, %v (runs %d)", res, replayed, err, runs)
			}

			// Namespaces keep Stores apart on one backend.
			other := newStore(t, b, idempotency.Namespace("other"))
			if res, replayed, err := other.Do(ctx, "k", fn("O", nil)); string(res) != "O" || replayed || err != nil {
				t.Errorf("another namespace shared the key: %q %v %v", res, replayed, err)
			}
			tok, err := other.IssueToken(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if ok, err := s.ConsumeToken(ctx, tok); ok || err != nil {
				t.Errorf("a token of another namespace was consumed: %v %v", ok, err)
			}
			if ok, err := other.ConsumeToken(ctx, tok); !ok || err != nil {
				t.Errorf("token of its own namespace: %v %v", ok, err)
			}
		})
	}
}

func TestConformanceTokens(t *testing.T) {
	for _, bk := range allBackends() {
		t.Run(bk.Name, func(t *testing.T) {
			t.Parallel()
			clk := clock.NewFake(t0)
			s := newStore(t, bk.Make(t, clk), idempotency.TTL(10*time.Second))
			ctx := context.Background()
			issue := func() string {
				t.Helper()
				tok, err := s.IssueToken(ctx)
				if err != nil {
					t.Fatal(err)
				}
				if len(tok) != idempotency.TokenLen {
					t.Fatalf("token %q has %d characters, want %d", tok, len(tok), idempotency.TokenLen)
				}
				return tok
			}
			consume := func(step, tok string, want bool) {
				t.Helper()
				got, err := s.ConsumeToken(ctx, tok)
				if err != nil {
					t.Fatalf("%s: %v", step, err)
				}
				if got != want {
					t.Errorf("%s (t=%v): ConsumeToken = %v, want %v", step, clk.Now().Sub(t0), got, want)
				}
			}
			a, b, c := issue(), issue(), issue()
			if a == b || b == c {
				t.Fatalf("tokens repeat: %s %s %s", a, b, c)
			}
			consume("first consume", a, true)
			consume("second consume", a, false)
			clk.Advance(10*time.Second - us)
			consume("live until the TTL ends", b, true)
			clk.Advance(us)
			consume("expired", c, false)
			consume("expired, again", c, false)
			consume("never issued", strings.Repeat("A", idempotency.TokenLen), false)
			consume("not a token", "../../etc/passwd", false)
			consume("lower case is not a token", strings.ToLower(issue()), false)
		})
	}
}
