package bloom_test

import (
	"context"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/backend"
)

func newUnreachable(t *testing.T) *backend.Redis {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens there now
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true, MaxRetries: -1, DialTimeout: 200 * time.Millisecond})
	t.Cleanup(func() { c.Close() })
	return newRedisOn(t, c, uniquePrefix())
}

// TestConcurrentAdd has many goroutines add the same fresh items, each in its
// own order and batches: every item must be reported new exactly once, since
// each batch is atomic; afterwards every item is present.
func TestConcurrentAdd(t *testing.T) {
	const (
		workers = 8
		n       = 300
	)
	all := keys("evt-", 0, n)
	for _, bk := range allBackends() {
		for _, kind := range []struct {
			name string
			make maker
		}{{"filter", makeFilter}, {"counting", makeCounting}} {
			t.Run(bk.name+"/"+kind.name, func(t *testing.T) {
				t.Parallel()
				f := kind.make(t, bk.make(t), "conc", 100_000, 0.001, 0)
				var mu sync.Mutex
				newCount := make(map[string]int)
				var wg sync.WaitGroup
				for w := range workers {
					wg.Add(1)
					go func() {
						defer wg.Done()
						r := rand.New(rand.NewPCG(uint64(w), 7))
						order := append([]string(nil), all...)
						r.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
						for len(order) > 0 {
							b := order[:min(len(order), 1+r.IntN(40))]
							order = order[len(b):]
							isNew, err := f.add(context.Background(), b...)
							if err != nil {
								t.Error(err)
								return
							}
							mu.Lock()
							for i, it := range b {
								if isNew[i] {
									newCount[it]++
								}
							}
							mu.Unlock()
						}
					}()
				}
				wg.Wait()
				for _, it := range all {
					if newCount[it] != 1 {
						t.Errorf("%q was reported new %d times, want exactly once", it, newCount[it])
					}
				}
				got, err := f.contains(context.Background(), all...)
				if err != nil {
					t.Fatal(err)
				}
				for i, ok := range got {
					if !ok {
						t.Errorf("%q absent after concurrent adds", all[i])
					}
				}
			})
		}
	}
}

// TestConcurrentAddRemove has goroutines each add and remove their own items
// on one counting filter while others do the same: removals of one
// goroutine's items never make another's disappear (the filter is large, so
// items do not share counters), and at the end only the kept items remain.
func TestConcurrentAddRemove(t *testing.T) {
	for _, bk := range allBackends() {
		t.Run(bk.name, func(t *testing.T) {
			t.Parallel()
			f := makeCounting(t, bk.make(t), "conc-rm", 100_000, 0.0001, 0)
			var wg sync.WaitGroup
			for w := range 6 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ctx := context.Background()
					for round := range 20 {
						mine := keys("w"+strconv.Itoa(w)+"r"+strconv.Itoa(round)+"-", 0, 10)
						if _, err := f.add(ctx, mine...); err != nil {
							t.Error(err)
							return
						}
						if err := f.remove(ctx, mine[:5]...); err != nil {
							t.Error(err)
							return
						}
						got, err := f.contains(ctx, mine...)
						if err != nil {
							t.Error(err)
							return
						}
						for i, ok := range got {
							if ok != (i >= 5) {
								t.Errorf("worker %d round %d: Contains(%q) = %v", w, round, mine[i], ok)
							}
						}
					}
				}()
			}
			wg.Wait()
		})
	}
}
