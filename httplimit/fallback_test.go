package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/httplimit"
	"github.com/floodgate-dev/floodgate/internal/loadtest"
	"github.com/floodgate-dev/floodgate/internal/testenv"
	"github.com/floodgate-dev/floodgate/ratelimit"
	"github.com/floodgate-dev/floodgate/ratelimit/fallback"
)

// TestFallbackStallBound: the middleware with a Degraded fallback (50 ms
// per store call), a fixed window of 100 a second on one key, 20
// closed-loop clients, Redis paused for 2 s: every one-second window
// serves at most 1.05 × 100 + 2 (each admission placed by its window's
// end, from OnDecision's Result), the fallback decides during the pause,
// and no request fails.
func TestFallbackStallBound(t *testing.T) {
	r := testenv.NewRedis(t)
	c := redis.NewClient(&redis.Options{Addr: r.Addr, ContextTimeoutEnabled: true})
	t.Cleanup(func() { c.Close() })
	b, err := backend.NewRedis(c, backend.WithPrefix(uniquePrefix()))
	if err != nil {
		t.Fatal(err)
	}
	lim := newLimiter(t, b, ratelimit.FixedWindow{Limit: 100, Window: time.Second})
	f, err := fallback.New(lim, fallback.Options{Mode: fallback.Degraded, Timeout: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	var (
		mu         sync.Mutex
		windows    loadtest.Windows
		byFallback int
		statuses   = map[int]int{}
	)
	mw, err := httplimit.New(lim, httplimit.Fallback(f), httplimit.KeyFunc(func(*http.Request) (string, error) { return "k", nil }),
		httplimit.OnDecision(func(_ *http.Request, res ratelimit.Result) {
			if res.Allowed {
				windows.Add(time.Now(), res.ResetAfter)
			}
			mu.Lock()
			defer mu.Unlock()
			if res.Fallback {
				byFallback++
			}
		}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := httplimit.New(newLimiter(t, b, ratelimit.FixedWindow{Limit: 1, Window: time.Second}), httplimit.Fallback(f)); err == nil {
		t.Fatal("New accepted a fallback of another Limiter")
	}
	h := mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {}))
	call := func() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", "/", nil))
		mu.Lock()
		defer mu.Unlock()
		statuses[w.Code]++
		if w.Code == http.StatusTooManyRequests && w.Header().Get("Retry-After") == "" {
			t.Error("a 429 without Retry-After")
		}
	}
	loadtest.Run(20, 1500*time.Millisecond, 1500*time.Millisecond, call, func() {
		if err := r.Pause(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * time.Second)
		if err := r.Resume(); err != nil {
			t.Fatal(err)
		}
	})
	line := windows.Check(t, 107) // 1.05 × 100 + 2
	mu.Lock()
	defer mu.Unlock()
	t.Logf("statuses %v, %d decided by the fallback, admitted per window%s", statuses, byFallback, line)
	if byFallback == 0 {
		t.Error("nothing decided by the fallback during a 2 s pause")
	}
	if len(statuses) > 2 || statuses[http.StatusOK] == 0 {
		t.Errorf("statuses %v: want 200 and 429 only", statuses)
	}
}
