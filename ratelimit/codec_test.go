package ratelimit_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/internal/testenv"
	"github.com/floodgate-dev/floodgate/internal/unwrap"
	"github.com/floodgate-dev/floodgate/ratelimit"
	"github.com/redis/go-redis/v9"
)

// TestRedisStateEncoding: a single-rule GCRA, TokenBucket or FixedWindow
// keeps one Redis key whose value Redis stores as an integer (the smallest
// form) at common parameters, and falls back to text where no integer form
// can hold the state; either way the decisions are the memory backend's.
// encoding is Redis's on its own clock (TIME), fake on an injected one, which
// writes the state that the short drain form would hold as text (see
// lua/codec.lua).
func TestRedisStateEncoding(t *testing.T) {
	ctx := context.Background()
	srv := testenv.SharedRedis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { c.Close() })
	cases := []struct {
		name           string
		rule           ratelimit.Rule
		n              int64
		encoding, fake string
	}{
		{"gcra per second", ratelimit.GCRA{Rate: 100, Per: time.Second, Burst: 200}, 3, "int", "int"},
		{"token bucket per minute", ratelimit.TokenBucket{Capacity: 50, Refill: 10, Every: time.Minute}, 2, "int", "int"},
		{"leaky bucket", ratelimit.LeakyBucket{Rate: 5, Per: time.Second, Burst: 10, Delay: 2}, 4, "int", "int"},
		{"fixed window per hour", ratelimit.FixedWindow{Limit: 1000, Window: time.Hour}, 7, "int", "int"},
		{"fixed window per day", ratelimit.FixedWindow{Limit: 1 << 40, Window: 24 * time.Hour}, 1 << 33, "int", "int"},
		// Beyond the long form's 10^10 units, within the short form's 10^14
		// for a key that lives less than 20 hours: the bench's GCRA (10^6
		// units a request, and up to 10^12 more for the time moved back to
		// the whole second; n such that the key outlives the test's look at
		// it), a per-minute bucket of 1000 (6·10^7 units a request), and 3
		// hours of units.
		{"gcra 10^6/s burst 10^6", ratelimit.GCRA{Rate: 1_000_000, Per: time.Second, Burst: 1_000_000}, 500_000, "int", "embstr"},
		{"gcra per minute, capacity 1000", ratelimit.GCRA{Rate: 1000, Per: time.Minute, Burst: 1000}, 1000, "int", "embstr"},
		{"token bucket per hour", ratelimit.TokenBucket{Capacity: 10, Refill: 1, Every: time.Hour}, 3, "int", "embstr"},
		// 30 hours of units: a key that lives too long for the short form.
		{"token bucket, 30 hours", ratelimit.TokenBucket{Capacity: 100, Refill: 1, Every: time.Hour}, 30, "embstr", "embstr"},
		{"fixed window, huge count", ratelimit.FixedWindow{Limit: 1 << 50, Window: time.Hour}, 1 << 40, "embstr", "embstr"},
	}
	encoding := func(t *testing.T, rb *backend.Redis) string {
		t.Helper()
		keys, err := c.Keys(ctx, unwrap.Redis(rb).Prefix()+":*").Result()
		if err != nil || len(keys) != 1 {
			t.Fatalf("keys %v, %v: want one key", keys, err)
		}
		enc, err := c.ObjectEncoding(ctx, keys[0]).Result()
		if err != nil {
			t.Fatal(err)
		}
		return enc
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			timed, err := ratelimit.New(newRedisOn(t, c, nil), tc.rule)
			if err != nil {
				t.Fatal(err)
			}
			if r := allowN(t, timed, "k", tc.n); !r.Allowed {
				t.Fatalf("on TIME: %+v", r)
			}
			if enc := encoding(t, timed.Backend().(*backend.Redis)); enc != tc.encoding {
				t.Errorf("on TIME: OBJECT ENCODING %q, want %q", enc, tc.encoding)
			}
			// A clock off the whole second, so that the integer form has to
			// move the time back to it.
			start := t0.Add(123_457 * time.Microsecond)
			mclk, rclk := clock.NewFake(start), clock.NewFake(start)
			mem := backend.NewMemory(backend.WithClock(mclk))
			t.Cleanup(func() { mem.Close() })
			rb := newRedisOn(t, c, rclk)
			ml, err := ratelimit.New(mem, tc.rule)
			if err != nil {
				t.Fatal(err)
			}
			rl, err := ratelimit.New(rb, tc.rule)
			if err != nil {
				t.Fatal(err)
			}
			var prev ratelimit.Result
			for i, step := range []struct {
				wait time.Duration
				n    int64
			}{{0, tc.n}, {700 * time.Millisecond, 1}, {0, 0}, {3 * time.Second, tc.n}, {90 * time.Minute, 1}, {0, 0}} {
				// Redis expires the key when its state is back to full in
				// real time (a TTL of ResetAfter), while the fake clocks
				// stand still: a state less than a second from full may
				// vanish from Redis on a busy machine before the next step.
				// Both clocks then move on to full, where the two agree
				// whether the key is still there or not.
				if pad := prev.ResetAfter; pad > 0 && pad < time.Second {
					mclk.Advance(pad)
					rclk.Advance(pad)
				}
				mclk.Advance(step.wait)
				rclk.Advance(step.wait)
				want := allowN(t, ml, "k", step.n)
				prev = want
				if got := allowN(t, rl, "k", step.n); got != want {
					t.Fatalf("step %d: redis %+v, memory %+v", i, got, want)
				}
				if i > 0 {
					continue
				}
				if enc := encoding(t, rb); enc != tc.fake {
					t.Errorf("on a fake clock: OBJECT ENCODING %q, want %q", enc, tc.fake)
				}
			}
		})
	}
}

// drainValue parses a drain value in any form, read at now (µs), into its
// state: level l at time at (µs).
func drainValue(t *testing.T, v string, now int64) (at, l int64) {
	t.Helper()
	var err1, err2 error
	if a, b, ok := strings.Cut(v, ":"); ok {
		at, err1 = strconv.ParseInt(a, 10, 64)
		l, err2 = strconv.ParseInt(b, 10, 64)
	} else if v[0] == '-' && len(v) > 15 {
		var m int64
		m, err1 = strconv.ParseInt(v[1:len(v)-14], 10, 64)
		l, err2 = strconv.ParseInt(v[len(v)-14:], 10, 64)
		ns := now / 1e6
		d := ((ns-m)%90000 + 90000) % 90000
		if d >= 75600 {
			d -= 90000
		}
		at = (ns - d) * 1e6
	} else if a, b, ok := strings.Cut(v, ":"); ok {
		at, err1 = strconv.ParseInt(a, 10, 64)
		l, err2 = strconv.ParseInt(b, 10, 64)
	} else if len(v) > 10 {
		at, err1 = strconv.ParseInt(v[:len(v)-10], 10, 64)
		at = (at + 1577836800) * 1e6
		l, err2 = strconv.ParseInt(v[len(v)-10:], 10, 64)
	} else {
		t.Fatalf("drain value %q", v)
	}
	if err1 != nil || err2 != nil {
		t.Fatalf("drain value %q: %v %v", v, err1, err2)
	}
	return at, l
}

// TestDrainFormsDecodeAlike: a drain state stored in any of codec.lua's three
// forms (long integer, short integer, text) reads as the same state. Before
// every call the test rewrites each drain value of a Redis key in the form
// given (where the state has it), and each value of a twin key, which the
// same calls reach on a clock of its own, in text; the calls, on a clock
// that moves on, steps back by up to an hour and moves on again, decide on
// both keys alike, and until the clock steps back as the memory backend's.
// From then on the memory backend decides as of the latest time it has seen
// (its time never runs backwards for a key, TestEarlierClockReading), while
// Redis takes an injected clock's reading as it is. The Limiters cover one
// rule (the fast path), several in one string and a hash (limits.lua).
func TestDrainFormsDecodeAlike(t *testing.T) {
	ctx := context.Background()
	srv := testenv.SharedRedis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { c.Close() })
	benchGCRA := ratelimit.GCRA{Rate: 1_000_000, Per: time.Second, Burst: 1_000_000}
	perMinute := ratelimit.TokenBucket{Capacity: 1000, Refill: 1000, Every: time.Minute}
	limiters := []struct {
		name  string
		rules []ratelimit.Rule
		n     int64
		forms []string // those the first call's state has
	}{
		{"bench gcra", []ratelimit.Rule{benchGCRA}, 400_000, []string{"short", "text"}},
		{"per minute", []ratelimit.Rule{perMinute}, 700, []string{"short", "text"}},
		{"per hour", []ratelimit.Rule{ratelimit.TokenBucket{Capacity: 5000, Refill: 5000, Every: time.Hour}}, 4000, []string{"short", "text"}},
		{"small", []ratelimit.Rule{ratelimit.GCRA{Rate: 10, Per: time.Second, Burst: 20}}, 15, []string{"long", "short", "text"}},
		{"two small drains", []ratelimit.Rule{
			ratelimit.GCRA{Rate: 10, Per: time.Second, Burst: 20},
			ratelimit.TokenBucket{Capacity: 50, Refill: 10, Every: time.Minute}}, 12, []string{"long", "short", "text"}},
		{"two drains", []ratelimit.Rule{benchGCRA,
			ratelimit.LeakyBucket{Rate: 100, Per: time.Second, Burst: 1_000_000, Delay: 10}}, 300_000, []string{"short", "text"}},
		{"drain in a hash", []ratelimit.Rule{perMinute,
			ratelimit.SlidingWindow{Limit: 5000, Window: time.Minute}}, 800, []string{"short", "text"}},
	}
	steps := []struct {
		wait time.Duration
		n    int64
	}{
		{300 * time.Millisecond, 0}, {0, 1}, {-30 * time.Minute, 0}, {-29 * time.Minute, 3},
		{0, 0}, {59*time.Minute + 500*time.Millisecond, 0}, {40 * time.Second, 1}, {3 * time.Hour, 0},
	}
	for _, lt := range limiters {
		for _, form := range lt.forms {
			t.Run(lt.name+"/"+form, func(t *testing.T) {
				start := t0.Add(345_678 * time.Microsecond)
				mclk, rclk, tclk := clock.NewFake(start), clock.NewFake(start), clock.NewFake(start)
				rb, tb := newRedisOn(t, c, rclk), newRedisOn(t, c, tclk)
				rl, err := ratelimit.New(rb, lt.rules...)
				if err != nil {
					t.Fatal(err)
				}
				tl, err := ratelimit.New(tb, lt.rules...)
				if err != nil {
					t.Fatal(err)
				}
				// Redis would expire a key on its own clock, after the
				// state's life on the fake clocks but as little as a few ms
				// of real time later (a busy machine lost it between two
				// calls): kept, it outlives its state, which reads as none.
				// The first call's keys may expire before they are kept (the
				// bench GCRA's lives 400ms): then both are deleted and the
				// call is made again, on a fresh memory backend too.
				var (
					ml        *ratelimit.Limiter
					key, tkey string
				)
				keep := func(b *backend.Redis) string {
					keys, err := c.Keys(ctx, unwrap.Redis(b).Prefix()+":*").Result()
					if err != nil || len(keys) > 1 {
						t.Fatalf("keys %v, %v: want one key", keys, err)
					}
					if len(keys) == 1 {
						c.Persist(ctx, keys[0]) // then it stays, if it was there
						if c.Exists(ctx, keys[0]).Val() == 1 {
							return keys[0]
						}
					}
					return ""
				}
				for attempt := 1; key == "" || tkey == ""; attempt++ {
					if attempt > 1 {
						if attempt == 6 {
							t.Fatalf("the first call's keys expired before they could be kept, %d times", attempt-1)
						}
						for _, k := range []string{key, tkey} {
							if k != "" {
								c.Del(ctx, k)
							}
						}
					}
					mem := backend.NewMemory(backend.WithClock(mclk))
					t.Cleanup(func() { mem.Close() })
					if ml, err = ratelimit.New(mem, lt.rules...); err != nil {
						t.Fatal(err)
					}
					want := allowN(t, ml, "k", lt.n)
					if got := allowN(t, rl, "k", lt.n); got != want || !got.Allowed {
						t.Fatalf("first call: redis %+v, memory %+v", got, want)
					}
					if got := allowN(t, tl, "k", lt.n); got != want {
						t.Fatalf("first call: redis (twin) %+v, memory %+v", got, want)
					}
					key, tkey = keep(rb), keep(tb)
				}
				persist := func() {
					for _, k := range []string{key, tkey} {
						if err := c.Persist(ctx, k).Err(); err != nil {
							t.Fatal(err)
						}
					}
				}
				persist()
				// recode returns the state of v in form f, or v when the
				// state has no such form (only a state whose time is a whole
				// second has the integer forms).
				recode := func(v, f string) (string, bool) {
					at, l := drainValue(t, v, rclk.Now().UnixMicro())
					sec := at / 1e6
					switch {
					case f == "text":
						return fmt.Sprintf("%d:%d", at, l), true
					case at != sec*1e6:
					case f == "long" && l < 1e10:
						return fmt.Sprintf("%d%010d", sec-1577836800, l), true
					case f == "short" && l < 1e14:
						return fmt.Sprintf("-%d%014d", (sec-1)%90000+1, l), true
					}
					return v, false
				}
				// rewrite recodes every drain value of key in form f; strict:
				// each must have the form.
				rewrite := func(key, f string, strict bool, step int) {
					switch typ := c.Type(ctx, key).Val(); typ {
					case "string":
						vals := strings.Split(c.Get(ctx, key).Val(), " ")
						for i, v := range vals {
							w, ok := recode(v, f)
							if strict && !ok {
								t.Fatalf("%q has no %s form", v, f)
							}
							vals[i] = w
						}
						if err := c.Set(ctx, key, strings.Join(vals, " "), redis.KeepTTL).Err(); err != nil {
							t.Fatal(err)
						}
						if strict && f != "text" && len(vals) == 1 {
							if enc := c.ObjectEncoding(ctx, key).Val(); enc != "int" {
								t.Errorf("%s form %q: OBJECT ENCODING %q", f, vals[0], enc)
							}
						}
					case "hash":
						for fd, v := range c.HGetAll(ctx, key).Val() {
							if len(fd) != 1 { // a SlidingWindow's field
								continue
							}
							w, ok := recode(v, f)
							if strict && !ok {
								t.Fatalf("%q has no %s form", v, f)
							}
							if err := c.HSet(ctx, key, fd, w).Err(); err != nil {
								t.Fatal(err)
							}
						}
					case "none":
						// Gone before persist() could keep it: a state with
						// a life of 1ms of real time (a bucket 1µs from full
						// at step 6) under load. It had nothing left to
						// recode; the twin's and memory's states have run
						// out by the next step too, or the step's comparison
						// says so.
						if strict {
							t.Fatalf("before step %d: the key is gone", step)
						}
					default:
						t.Fatalf("before step %d: key type %q", step, typ)
					}
				}
				rewrite(key, form, true, 0)
				rewrite(tkey, "text", true, 0)
				back := false // the clock has stepped back
				for i, step := range steps {
					if i > 0 {
						rewrite(key, form, false, i)
						rewrite(tkey, "text", false, i)
					}
					back = back || step.wait < 0
					mclk.Advance(step.wait)
					rclk.Advance(step.wait)
					tclk.Advance(step.wait)
					got := allowN(t, rl, "k", step.n)
					if twin := allowN(t, tl, "k", step.n); got != twin {
						t.Fatalf("step %d (%v, n %d): redis %+v, in text %+v", i, step.wait, step.n, got, twin)
					}
					if !back {
						if want := allowN(t, ml, "k", step.n); got != want {
							t.Fatalf("step %d (%v, n %d): redis %+v, memory %+v", i, step.wait, step.n, got, want)
						}
					}
					persist()
				}
			})
		}
	}
}
