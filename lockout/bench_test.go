package lockout_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/lockout"
)

// BenchmarkCheck and BenchmarkFail run over 1024 keys on memory and a
// standalone Redis. Fail's policy never bans within the run, so every call
// writes the log.
func BenchmarkCheck(b *testing.B) { bench(b, false) }

func BenchmarkFail(b *testing.B) { bench(b, true) }

func bench(b *testing.B, fail bool) {
	p := lockout.Policy{MaxFailures: lockout.MaxMaxFailures, Window: time.Millisecond, BanFor: time.Minute}
	for _, bk := range allBackends()[:2] {
		b.Run(bk.Name, func(b *testing.B) {
			g, err := lockout.New(bk.Make(b, nil), p)
			if err != nil {
				b.Fatal(err)
			}
			keys := make([]string, 1024)
			for i := range keys {
				keys[i] = "user" + strconv.Itoa(i) + "|10.0.0.1"
			}
			ctx := context.Background()
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := 0
				for pb.Next() {
					var err error
					if fail {
						_, err = g.Fail(ctx, keys[i%len(keys)])
					} else {
						_, err = g.Check(ctx, keys[i%len(keys)])
					}
					if err != nil {
						b.Error(err)
						return
					}
					i++
				}
			})
		})
	}
}
