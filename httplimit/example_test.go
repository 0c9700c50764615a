package httplimit_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/httplimit"
	"github.com/floodgate-dev/floodgate/ratelimit"
)

// hello is the handler of the examples.
var hello = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "hello") })

// exampleBackend returns a memory backend on a fake clock that stands on a
// minute boundary, so the examples print the same on every run.
func exampleBackend() *backend.Memory {
	return backend.NewMemory(backend.WithClock(clock.NewFake(time.Unix(1_699_999_980, 0))))
}

// request sends GET / from remoteAddr through h and prints the status, the
// IETF rate-limit fields and Retry-After.
func request(h http.Handler, remoteAddr string) {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = remoteAddr
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	fmt.Print(w.Code, " ", w.Header().Get("RateLimit-Policy"), " ", w.Header().Get("RateLimit"))
	if ra := w.Header().Get("Retry-After"); ra != "" {
		fmt.Print(" Retry-After: ", ra)
	}
	fmt.Println()
}

func ExampleNew() {
	mem := exampleBackend()
	defer mem.Close()
	rule := ratelimit.FixedWindow{Limit: 2, Window: time.Minute}
	lim, err := ratelimit.New(mem, ratelimit.Named("permin", rule))
	if err != nil {
		fmt.Println(err)
		return
	}
	mw, err := httplimit.New(lim, httplimit.PolicyWindow(httplimit.WindowOf(rule)))
	if err != nil {
		fmt.Println(err)
		return
	}
	h := mw.Handler(hello)
	request(h, "192.0.2.1:1234")
	request(h, "192.0.2.1:1234")
	request(h, "192.0.2.1:1234")
	request(h, "192.0.2.2:1234") // another client
	// Output:
	// 200 "permin";q=2;w=60 "permin";r=1;t=60
	// 200 "permin";q=2;w=60 "permin";r=0;t=60
	// 429 "permin";q=2;w=60 "permin";r=0;t=60 Retry-After: 60
	// 200 "permin";q=2;w=60 "permin";r=1;t=60
}

func ExampleLimit() {
	mem := exampleBackend()
	defer mem.Close()
	lim, err := ratelimit.New(mem, ratelimit.GCRA{Rate: 1, Per: time.Second, Burst: 1})
	if err != nil {
		fmt.Println(err)
		return
	}
	// Limit suits handler chains; a bad option would answer every request
	// with 500 rather than panic.
	h := httplimit.Limit(lim, httplimit.HeaderStyle(httplimit.XRateLimit))(hello)
	for range 2 {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Printf("%d remaining %s, reset %s, Retry-After %q\n", w.Code,
			w.Header().Get("X-RateLimit-Remaining"), w.Header().Get("X-RateLimit-Reset"), w.Header().Get("Retry-After"))
	}
	// Output:
	// 200 remaining 0, reset 1, Retry-After ""
	// 429 remaining 0, reset 1, Retry-After "1"
}

func ExampleNewConcurrency() {
	mem := exampleBackend()
	defer mem.Close()
	conc, err := ratelimit.NewConcurrency(mem, ratelimit.Concurrency{Limit: 1, Lease: time.Minute})
	if err != nil {
		fmt.Println(err)
		return
	}
	mw, err := httplimit.NewConcurrency(conc)
	if err != nil {
		fmt.Println(err)
		return
	}
	var h http.Handler
	h = mw.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/outer" {
			// While this request holds the client's only slot, another one
			// from the same client is refused.
			request(h, r.RemoteAddr)
		}
	}))
	r := httptest.NewRequest(http.MethodGet, "/outer", nil)
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	fmt.Println(w.Code, w.Header().Get("RateLimit-Policy"), w.Header().Get("RateLimit"))
	// The slot was given back when the handler returned.
	request(h, r.RemoteAddr)
	// Output:
	// 429 "default";q=1;qu="concurrent-requests" "default";r=0
	// 200 "default";q=1;qu="concurrent-requests" "default";r=0
	// 200 "default";q=1;qu="concurrent-requests" "default";r=0
}

func ExampleKeyByIP() {
	mem := exampleBackend()
	defer mem.Close()
	lim, err := ratelimit.New(mem, ratelimit.FixedWindow{Limit: 1, Window: time.Minute})
	if err != nil {
		fmt.Println(err)
		return
	}
	mw, err := httplimit.New(lim, httplimit.KeyByIP(httplimit.TrustedProxies("10.0.0.0/8")))
	if err != nil {
		fmt.Println(err)
		return
	}
	h := mw.Handler(hello)
	send := func(remoteAddr, xff string) {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = remoteAddr
		r.Header.Set("X-Forwarded-For", xff)
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		fmt.Println(remoteAddr, xff, w.Code)
	}
	send("10.0.0.1:5000", "198.51.100.1")
	send("10.0.0.1:5000", "198.51.100.2")
	send("10.0.0.2:5000", "198.51.100.1") // the same client through another proxy
	send("192.0.2.9:5000", "198.51.100.3")
	send("192.0.2.9:5000", "198.51.100.4") // not a proxy: its header is ignored
	// Output:
	// 10.0.0.1:5000 198.51.100.1 200
	// 10.0.0.1:5000 198.51.100.2 200
	// 10.0.0.2:5000 198.51.100.1 429
	// 192.0.2.9:5000 198.51.100.3 200
	// 192.0.2.9:5000 198.51.100.4 429
}

func ExampleClientIP() {
	r := httptest.NewRequest(http.MethodGet, "/", nil)
	r.RemoteAddr = "10.0.0.1:5000"
	r.Header.Set("Forwarded", `for=203.0.113.7, for="[2001:db8:cafe::17]:4711", for=10.0.0.9`)
	ip, err := httplimit.ClientIP(r,
		httplimit.TrustedProxies("10.0.0.0/8"),
		httplimit.ForwardedHeader("Forwarded"))
	fmt.Println(ip, err)
	ip, err = httplimit.ClientIP(r) // no trusted proxies: the TCP peer
	fmt.Println(ip, err)
	// Output:
	// 2001:db8:cafe::17 <nil>
	// 10.0.0.1 <nil>
}

func ExampleDryRun() {
	mem := exampleBackend()
	defer mem.Close()
	lim, err := ratelimit.New(mem, ratelimit.FixedWindow{Limit: 1, Window: time.Minute})
	if err != nil {
		fmt.Println(err)
		return
	}
	mw, err := httplimit.New(lim, httplimit.DryRun(),
		httplimit.OnDecision(func(r *http.Request, res ratelimit.Result) {
			if !res.Allowed {
				fmt.Println("would refuse", r.RemoteAddr)
			}
		}))
	if err != nil {
		fmt.Println(err)
		return
	}
	h := mw.Handler(hello)
	request(h, "192.0.2.1:1234")
	request(h, "192.0.2.1:1234")
	// Output:
	// 200 "default";q=1 "default";r=0;t=60
	// would refuse 192.0.2.1:1234
	// 200 "default";q=1 "default";r=0;t=60
}

func ExampleProblemJSON() {
	mem := exampleBackend()
	defer mem.Close()
	lim, err := ratelimit.New(mem, ratelimit.Named("daily", ratelimit.FixedWindow{Limit: 0, Window: 24 * time.Hour}))
	if err != nil {
		fmt.Println(err)
		return
	}
	mw, err := httplimit.New(lim, httplimit.ProblemJSON())
	if err != nil {
		fmt.Println(err)
		return
	}
	w := httptest.NewRecorder()
	mw.Handler(hello).ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil))
	fmt.Println(w.Code, w.Header().Get("Content-Type"))
	fmt.Print(w.Body)
	// Output:
	// 429 application/problem+json
	// {"type":"https://iana.org/assignments/http-problem-types#quota-exceeded","title":"Request cannot be satisfied as assigned quota has been exceeded","status":429,"violated-policies":["daily"]}
}
