package counter_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/counter"
)

// BenchmarkAdd measures Counter.Add on one hot key and on many keys, on
// memory and a standalone Redis; BenchmarkBatchedAdd the local Add of a
// Batched, which never touches the network.
//
// On Redis, replay=on is the default (each Add leaves a replay record that
// makes a resent call count once); replay=off is ReplayWindow(0): the
// difference is the record's cost.
func BenchmarkAdd(b *testing.B) {
	for _, bk := range allBackends()[:2] {
		for _, keys := range []int{1, 1024} {
			for _, replay := range []bool{true, false} {
				if bk.Name == "memory" && !replay {
					continue
				}
				name := bk.Name + "/keys=" + strconv.Itoa(keys)
				opts := []counter.Option{counter.Window(time.Hour)}
				if bk.Name != "memory" {
					name += "/replay=on"
					if !replay {
						name = name[:len(name)-2] + "off"
						opts = append(opts, counter.ReplayWindow(0))
					}
				}
				b.Run(name, func(b *testing.B) {
					c, err := counter.New(bk.Make(b, nil), "bench", opts...)
					if err != nil {
						b.Fatal(err)
					}
					names := make([]string, keys)
					for i := range names {
						names[i] = "k" + strconv.Itoa(i)
					}
					ctx := context.Background()
					b.ReportAllocs()
					b.RunParallel(func(pb *testing.PB) {
						i := 0
						for pb.Next() {
							if _, err := c.Add(ctx, names[i%keys], 1); err != nil {
								b.Error(err)
								return
							}
							i++
						}
					})
				})
			}
		}
	}
}

func BenchmarkBatchedAdd(b *testing.B) {
	c, err := counter.New(newRedis(b, nil), "bench-batched")
	if err != nil {
		b.Fatal(err)
	}
	bt, err := counter.NewBatched(c, 100*time.Millisecond)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := bt.Add("hot", 1); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	if err := bt.Close(context.Background()); err != nil {
		b.Fatal(err)
	}
}
