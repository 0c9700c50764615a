package fallback_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/backend/rueidisadapter"
	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/internal/backendtest"
	"github.com/floodgate-dev/floodgate/internal/loadtest"
	"github.com/floodgate-dev/floodgate/internal/testenv"
	"github.com/floodgate-dev/floodgate/ratelimit"
	"github.com/floodgate-dev/floodgate/ratelimit/fallback"
)

// client is a way to reach a private Redis: go-redis or rueidis.
type client struct {
	name string
	make func(t *testing.T, r *testenv.Redis, clk clock.Clock) backend.Backend
}

var clients = []client{
	{"go-redis", goRedis},
	{"rueidis", func(t *testing.T, r *testenv.Redis, clk clock.Clock) backend.Backend {
		c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{r.Addr}, DisableCache: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		b, err := rueidisadapter.New(c, backendtest.Options(clk)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	}},
}

func goRedis(t *testing.T, r *testenv.Redis, clk clock.Clock) backend.Backend {
	return goRedisWith(t, r, clk, &redis.Options{})
}

// goRedisWith is goRedis with the client options o (Addr set here).
func goRedisWith(t *testing.T, r *testenv.Redis, clk clock.Clock, o *redis.Options) backend.Backend {
	o.Addr, o.ContextTimeoutEnabled = r.Addr, true
	c := redis.NewClient(o)
	t.Cleanup(func() { c.Close() })
	return backendtest.NewRedis(t, c, backendtest.Options(clk)...)
}

// stall is the store-hiccup measure in process: 20 goroutines in a closed
// loop on one key of f (a fixed window of 100 a second), Redis paused for
// pause after 1.5 s and resumed for 1.5 s more. Each admitted result is
// placed in its window by the window's end (call time + ResetAfter,
// rounded to the second).
type stall struct {
	windows  loadtest.Windows
	answered int
	failed   int // calls that returned an error
	during   int // answers while Redis was paused
	fallback int // answers made by the fallback
	admitted int // of those, admitted
}

func runStall(t *testing.T, f *fallback.Limiter, r *testenv.Redis, pause time.Duration) *stall {
	t.Helper()
	s := &stall{}
	var mu sync.Mutex
	call := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		res, err := f.Allow(ctx, "k")
		got := time.Now()
		cancel()
		if err == nil && res.Allowed {
			s.windows.Add(got, res.ResetAfter)
		}
		mu.Lock()
		defer mu.Unlock()
		s.answered++
		if err != nil {
			s.failed++
		}
		if err == nil && res.Fallback {
			s.fallback++
			if res.Allowed {
				s.admitted++
			}
		}
	}
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return s.answered
	}
	loadtest.Run(20, 1500*time.Millisecond, 1500*time.Millisecond, call, func() {
		before := count()
		if err := r.Pause(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(pause)
		s.during = count() - before
		if err := r.Resume(); err != nil {
			t.Fatal(err)
		}
	})
	return s
}

func newStallLimiter(t *testing.T, b backend.Backend, o fallback.Options) *fallback.Limiter {
	t.Helper()
	lim, err := ratelimit.New(b, ratelimit.FixedWindow{Limit: 100, Window: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	f, err := fallback.New(lim, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

// TestStallBound is the decision server's TestStallBound in process: in
// Degraded mode, with a 50 ms bound on store calls, every one-second
// window admits at most 1.05 × 100 + 2 while Redis is paused for 100 ms
// and for 2 s, no call fails, and the fallback decides during the pause.
func TestStallBound(t *testing.T) {
	for _, c := range clients {
		for _, pause := range []time.Duration{100 * time.Millisecond, 2 * time.Second} {
			t.Run(c.name+"/"+pause.String(), func(t *testing.T) {
				r := testenv.NewRedis(t)
				f := newStallLimiter(t, c.make(t, r, nil), fallback.Options{Mode: fallback.Degraded, Timeout: 50 * time.Millisecond})
				s := runStall(t, f, r, pause)
				line := s.windows.Check(t, 107) // 1.05 × 100 + 2
				t.Logf("Redis paused %v: %d answers (%d during the pause, %d by the fallback, %d of them admitted, %d errors); admitted per window:%s",
					pause, s.answered, s.during, s.fallback, s.admitted, s.failed, line)
				if s.failed > 0 {
					t.Errorf("%d calls failed: Degraded answers every call", s.failed)
				}
				if s.during == 0 || s.fallback == 0 {
					t.Errorf("%d answers during the pause, %d by the fallback: want some of each", s.during, s.fallback)
				}
				if pause >= time.Second && s.admitted == 0 {
					t.Errorf("a 2 s pause, and the fallback admitted nothing")
				}
			})
		}
	}
}

// TestStallModes: with mode Error the pause returns errors (the store's,
// within the 50 ms bound), and with Allow the fallback admits; neither
// fails after Redis is back.
func TestStallModes(t *testing.T) {
	for _, mode := range []fallback.Mode{fallback.Error, fallback.Allow} {
		t.Run(mode.String(), func(t *testing.T) {
			r := testenv.NewRedis(t)
			f := newStallLimiter(t, goRedis(t, r, nil), fallback.Options{Mode: mode, Timeout: 50 * time.Millisecond})
			s := runStall(t, f, r, 500*time.Millisecond)
			t.Logf("%v: %d answers (%d during the pause, %d by the fallback, %d of them admitted, %d errors); admitted per window:%s",
				mode, s.answered, s.during, s.fallback, s.admitted, s.failed, s.windows.String())
			switch mode {
			case fallback.Error:
				if s.failed == 0 || s.fallback > 0 {
					t.Errorf("Error: %d errors, %d fallback answers; want errors only", s.failed, s.fallback)
				}
			case fallback.Allow:
				if s.failed > 0 || s.admitted == 0 || s.admitted != s.fallback {
					t.Errorf("Allow: %d errors, %d fallback answers, %d admitted; want every fallback answer admitted, no error", s.failed, s.fallback, s.admitted)
				}
			}
			// The store decides again.
			res, err := f.Allow(context.Background(), "after")
			if err != nil || res.Fallback || !res.Allowed {
				t.Fatalf("after the pause: %+v, %v; want the store's admission", res, err)
			}
		})
	}
}
