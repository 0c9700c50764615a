package ratelimit

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/internal/memstore"
	"github.com/floodgate-dev/floodgate/internal/testenv"
)

// drainForm is what lua/codec.lua's drain_encode writes for level nl at now
// in a key that lives life µs, computed in Go: the value, and the state
// (t, L) it describes, which the memory backend's drainCommit must store.
// fake: an injected clock, which writes the short form's state as text.
func drainForm(now, nl, rate, life int64, fake bool) (v string, t, l int64) {
	sec := now / 1e6
	sub := now - sec*1e6
	if sub <= codecMaxShort/rate {
		l := nl + sub*rate
		if rel := sec - codecEpoch; l < codecMaxL && rel >= 0 && rel < codecMaxSec {
			return fmt.Sprintf("%d%010d", rel, l), sec * 1e6, l
		}
		if l < codecMaxShort && life < codecShortLife {
			if fake {
				return fmt.Sprintf("%d:%d", sec*1e6, l), sec * 1e6, l
			}
			m := ((sec-1)%90000+90000)%90000 + 1
			return fmt.Sprintf("-%d%014d", m, l), sec * 1e6, l
		}
	}
	return fmt.Sprintf("%d:%d", now, nl), now, nl
}

// TestDrainCodecLua runs codec.lua's drain_encode and drain_decode on Redis,
// called as functions (limits.lua) and inlined (generated scripts), over
// random states, lives and read times, as TIME (ARGV[1] "") and as an
// injected clock would: each value is the one drainForm predicts, decodes to
// the state the memory backend stores, and reads back alike from 4 hours
// before it was written (a clock stepped back) to 20 hours after it (the
// longest life of a short value). Values Redis should keep as integers are
// integers.
func TestDrainCodecLua(t *testing.T) {
	ctx := context.Background()
	srv := testenv.SharedRedis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { c.Close() })
	// The codec as limits.lua calls it, and as generated scripts inline it.
	loop := func(encode, decode string) string {
		return `
local out, i = {}, 2
while i <= #ARGV do
  local now, nl, rate, life, at = tonumber(ARGV[i]), tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3]), tonumber(ARGV[i + 4])
  local v, t, l
` + encode + decode + `
  out[#out + 1] = v
  out[#out + 1] = string.format('%d', t)
  out[#out + 1] = string.format('%d', l)
  i = i + 5
end
return out
`
	}
	scripts := map[string]string{
		"functions": luaCodec + loop("v = drain_encode(now, nl, rate, life)\n", "t, l = drain_decode(v, at)\n"),
		"inlined": codecHead + loop(inlineCall("drain_encode", "now, nl, rate, life", "v"),
			inlineCall("drain_decode", "v, at", "t, l")),
	}
	rng := rand.New(rand.NewPCG(15, 2026))
	rates := []int64{1, 7, 999, 10_000, 1_000_000, 30_000_000, 1 << 40}
	lives := []int64{0, 1, int64(time.Hour / time.Microsecond), codecShortLife - 1, codecShortLife, lifeUnknown}
	reads := []int64{0, 1, 999_999, 1_000_000, int64(20 * time.Hour / time.Microsecond),
		-1, -int64(time.Hour / time.Microsecond), -int64(4 * time.Hour / time.Microsecond)}
	base := time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC).Unix() / 90000 * 90000 // a whole period: m = 90000
	type tc struct{ now, nl, rate, life, at int64 }
	var cases []tc
	for range 3000 {
		now := (base+rng.Int64N(3)-1)*1e6 + rng.Int64N(1e6)
		switch rng.IntN(4) {
		case 0:
			now = rng.Int64N(4e15) // before 2020 and after 2048 too
		case 1:
			now -= now % 1e6
		}
		rate := rates[rng.IntN(len(rates))]
		nl := rng.Int64N(int64(1) << (1 + rng.IntN(51)))
		life := lives[rng.IntN(len(lives))]
		cases = append(cases, tc{now, nl, rate, life, now + reads[rng.IntN(len(reads))]})
	}
	forms := map[string]int{}
	for form, script := range scripts {
		for _, fake := range []bool{false, true} {
			args := []any{""}
			if fake {
				args[0] = "1"
			}
			for _, k := range cases {
				lifeArg := strconv.FormatInt(k.life, 10)
				if k.life == lifeUnknown {
					lifeArg = "1e300" // math.huge as limits.lua passes it
				}
				args = append(args, k.now, k.nl, k.rate, lifeArg, k.at)
			}
			out, err := c.Eval(ctx, script, nil, args...).StringSlice()
			if err != nil {
				t.Fatal(err)
			}
			for i, k := range cases {
				v, wt, wl := drainForm(k.now, k.nl, k.rate, k.life, fake)
				gt, _ := strconv.ParseInt(out[3*i+1], 10, 64)
				gl, _ := strconv.ParseInt(out[3*i+2], 10, 64)
				if out[3*i] != v || gt != wt || gl != wl {
					t.Fatalf("%s, fake %v %+v: wrote %q read (%s, %s), want %q (%d, %d)", form, fake, k, out[3*i], out[3*i+1], out[3*i+2], v, wt, wl)
				}
				e := &memstore.Entry{}
				s := &spec{tag: 1, rate: k.rate}
				s.drainCommit(e, k.now, k.nl, k.life)
				if e.A != wt || e.B != wl {
					t.Fatalf("%+v: memory stores (%d, %d), Redis (%d, %d)", k, e.A, e.B, wt, wl)
				}
				switch {
				case strings.HasPrefix(v, "-"):
					forms["short"]++
				case strings.Contains(v, ":"):
					forms["text"]++
				default:
					forms["long"]++
				}
			}
		}
	}
	for _, f := range []string{"long", "short", "text"} {
		if forms[f] < 200 {
			t.Errorf("only %d values in the %s form: %v", forms[f], f, forms)
		}
	}

	// Redis keeps both integer forms as integers, also where m = 90000.
	key := "fg-codec-" + strconv.Itoa(rng.Int())
	t.Cleanup(func() { c.Del(context.Background(), key) })
	for _, k := range []tc{
		{base*1e6 + 500_000, 3_000_000, 1_000_000, 1_000_000, 0},
		{(base+1)*1e6 + 1, 99_999_999_999_999 - 1_000_000, 1_000_000, 0, 0},
		{(base-1)*1e6 + 999_999, 1, 1, codecShortLife - 1, 0},
		{(base+7)*1e6 + 999_999, 5, 1, 0, 0},
	} {
		v, _, _ := drainForm(k.now, k.nl, k.rate, k.life, false)
		if err := c.Set(ctx, key, v, 0).Err(); err != nil {
			t.Fatal(err)
		}
		if enc, err := c.ObjectEncoding(ctx, key).Result(); err != nil || enc != "int" {
			t.Errorf("%q: OBJECT ENCODING %q, %v; want int", v, enc, err)
		}
	}
}
