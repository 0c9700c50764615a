package fallback_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/internal/testenv"
	"github.com/floodgate-dev/floodgate/ratelimit"
	"github.com/floodgate-dev/floodgate/ratelimit/fallback"
)

// TestCountServers: three processes (each its own client) counting on one
// store and prefix agree they are three; a process on another prefix is
// not counted; one that stops beating is forgotten after its three beats.
// On the memory backend the count is 1.
func TestCountServers(t *testing.T) {
	if testing.Short() {
		testenv.NotInstalled(t, "a private Redis for the heartbeats (skipped under -short: it waits for beats)")
	}
	mem := backend.NewMemory()
	defer mem.Close()
	if n := fallback.CountServers(t.Context(), mem)(); n != 1 {
		t.Fatalf("on the memory backend: %d servers", n)
	}

	r := testenv.NewRedis(t)
	var counts []func() int
	var stop []context.CancelFunc
	for range 3 {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		stop = append(stop, cancel)
		counts = append(counts, fallback.CountServers(ctx, goRedisPrefix(t, r, "fleet")))
	}
	other := fallback.CountServers(t.Context(), goRedisPrefix(t, r, "another-prefix"))
	waitCount := func(want int, which []func() int) {
		t.Helper()
		deadline := time.Now().Add(15 * time.Second)
		for i := 0; i < len(which); {
			if which[i]() == want {
				i++
				continue
			}
			if time.Now().After(deadline) {
				t.Fatalf("process %d counts %d servers after 15 s, want %d", i, which[i](), want)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitCount(3, counts)
	if n := other(); n != 1 {
		t.Errorf("a process on another prefix counts %d servers, want 1", n)
	}
	stop[2]()
	waitCount(2, counts[:2])
}

// TestCountServersShares: two processes counting each other share a
// limit in Degraded mode while Redis is paused: each admits half of what
// the store had left, and together exactly that.
func TestCountServersShares(t *testing.T) {
	if testing.Short() {
		testenv.NotInstalled(t, "a private Redis to pause (skipped under -short)")
	}
	r := testenv.NewRedis(t)
	prefix := "shares"
	var procs []*fallback.Limiter
	var counts []func() int
	for range 2 {
		b := goRedisPrefix(t, r, prefix)
		lim, err := ratelimit.New(b, ratelimit.FixedWindow{Limit: 100, Window: 24 * time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		servers := fallback.CountServers(t.Context(), b)
		counts = append(counts, servers)
		f, err := fallback.New(lim, fallback.Options{Mode: fallback.Degraded, Servers: servers, Timeout: 100 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		procs = append(procs, f)
	}
	deadline := time.Now().Add(15 * time.Second)
	for counts[0]() != 2 || counts[1]() != 2 {
		if time.Now().After(deadline) {
			t.Fatalf("the processes count %d and %d servers after 15 s, want 2", counts[0](), counts[1]())
		}
		time.Sleep(100 * time.Millisecond)
	}
	ctx := context.Background()
	for i := range 20 { // the store admits 20, 10 through each
		if res, err := procs[i%2].Allow(ctx, "k"); err != nil || !res.Allowed || res.Fallback {
			t.Fatalf("healthy call %d: %+v, %v", i, res, err)
		}
	}
	if err := r.Pause(); err != nil {
		t.Fatal(err)
	}
	defer r.Resume()
	// Concurrently: each call that finds the store paused waits for the
	// Timeout before its process decides.
	var admitted [2]atomic.Int64
	var wg sync.WaitGroup
	for g := range 10 {
		wg.Go(func() {
			p := g % 2
			for range 20 {
				res, err := procs[p].Allow(ctx, "k")
				if err != nil {
					t.Errorf("process %d while paused: %v", p, err)
					return
				}
				if res.Allowed {
					if !res.Fallback {
						t.Errorf("process %d admitted by the paused store: %+v", p, res)
					}
					admitted[p].Add(1)
				}
			}
		})
	}
	wg.Wait()
	if a, b := admitted[0].Load(), admitted[1].Load(); a != 40 || b != 40 {
		t.Fatalf("while Redis was paused the processes admitted %d and %d; want each half of the 80 left: 40 and 40", a, b)
	}
}

// goRedisPrefix is a backend on r through a go-redis client of its own,
// under prefix: the processes of a fleet share one.
func goRedisPrefix(t *testing.T, r *testenv.Redis, prefix string) backend.Backend {
	c := redis.NewClient(&redis.Options{Addr: r.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	b, err := backend.NewRedis(c, backend.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	return b
}
