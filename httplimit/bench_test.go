package httplimit_test

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/httplimit"
	"github.com/floodgate-dev/floodgate/ratelimit"
)

// BenchmarkMiddleware measures the middleware's cost per request on the
// memory backend, keyed by IP through a trusted proxy, for 256 clients.
func BenchmarkMiddleware(b *testing.B) {
	mem := backend.NewMemory()
	defer mem.Close()
	l, err := ratelimit.New(mem, ratelimit.GCRA{Rate: 1 << 30, Per: time.Second, Burst: 1 << 30})
	if err != nil {
		b.Fatal(err)
	}
	m, err := httplimit.New(l, httplimit.KeyByIP(httplimit.TrustedProxies("10.0.0.0/8")), httplimit.PolicyWindow(time.Second))
	if err != nil {
		b.Fatal(err)
	}
	h := m.Handler(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	var seq atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = "10.0.0.1:5000"
		w := httptest.NewRecorder()
		for pb.Next() {
			r.Header.Set("X-Forwarded-For", "198.51.100."+strconv.Itoa(int(seq.Add(1)%256))+", 10.0.0.2")
			h.ServeHTTP(w, r)
			if w.Code != http.StatusOK {
				b.Fatalf("status %d", w.Code)
			}
		}
	})
}
