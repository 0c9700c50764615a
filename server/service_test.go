package server

import (
	"context"
	"errors"
	"math"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/internal/backendtest"
	"github.com/floodgate-dev/floodgate/internal/testenv"
	"github.com/floodgate-dev/floodgate/server/config"
	"github.com/floodgate-dev/floodgate/server/envoystats"
)

func TestMain(m *testing.M) {
	// A store call of a test may take longer than the production default
	// on a busy machine; then the failure mode would decide, not the store.
	defaultTimeout = 5 * time.Second
	os.Exit(testenv.Main(m))
}

const testYAML = `domain: api
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: 3}
  - key: user
    value: vip
    rate_limit: {unlimited: true}
  - key: path
    value: /upload
    descriptors:
      - key: user
        rate_limit: {name: uploads, unit: day, requests_per_unit: 2, algorithm: sliding_window}
  - key: path
    value: /search/*
    rate_limit: {unit: second, requests_per_unit: 2, algorithm: gcra, burst: 2}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: day, requests_per_unit: 1}
  - key: tenant
    rate_limit: {name: tenant, unit: day, requests_per_unit: 100}
  - key: tenant_override
    rate_limit: {unit: day, requests_per_unit: 1, replaces: [{name: tenant}]}
`

func mustConfig(t testing.TB, yaml string) *config.Config {
	t.Helper()
	d, err := config.Parse("test.yaml", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	return &config.Config{Domains: map[string]*config.Domain{d.Name: d}}
}

func newService(t testing.TB, b backend.Backend, opts Options) *Service {
	t.Helper()
	s, err := NewService(b, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetConfig(mustConfig(t, testYAML), "v1"); err != nil {
		t.Fatal(err)
	}
	return s
}

// warmStore makes one decision on b through a service of its own with a
// generous timeout, so that the connection is open and the scripts loaded
// before a test's service, with a store timeout of tens of milliseconds,
// makes its first call: on a loaded machine under -race that first call
// (dial, NOSCRIPT, load) can take longer than such a timeout.
func warmStore(t testing.TB, b backend.Backend) {
	t.Helper()
	s := newService(t, b, Options{Timeout: 10 * time.Second, FailureMode: FailError, Breaker: BreakerOptions{Failures: -1}})
	decide(t, s, desc(1, "user", "warm-up"))
}

func desc(cost int64, kv ...string) Descriptor {
	d := Descriptor{Cost: cost}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, config.Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

func decide(t testing.TB, s *Service, ds ...Descriptor) *Response {
	t.Helper()
	r, err := s.Decide(context.Background(), &Request{Domain: "api", Descriptors: ds})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// TestSemantics runs the envoyproxy/ratelimit semantics on every backend.
func TestSemantics(t *testing.T) {
	for _, k := range backendtest.All() {
		t.Run(k.Name, func(t *testing.T) {
			fake := clock.NewFake(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
			s := newService(t, k.Make(t, fake), Options{})

			t.Run("order and remaining", func(t *testing.T) {
				for i := int64(1); i <= 3; i++ {
					r := decide(t, s, desc(1, "nomatch", "x"), desc(1, "user", "alice"))
					if r.Code != CodeOK {
						t.Fatalf("request %d: %v", i, r.Code)
					}
					if st := r.Statuses[0]; st.Code != CodeOK || st.Limit != nil {
						t.Fatalf("no match: %+v", st)
					}
					st := r.Statuses[1]
					if st.Code != CodeOK || st.Limit == nil || st.Limit.RequestsPerUnit != 3 || st.Remaining != 3-i {
						t.Fatalf("request %d: %+v", i, st)
					}
					if want := 12 * time.Hour; st.ResetAfter != want {
						t.Fatalf("reset after %v, want %v", st.ResetAfter, want)
					}
				}
				r := decide(t, s, desc(1, "user", "alice"))
				if r.Code != CodeOverLimit || r.Statuses[0].Code != CodeOverLimit || r.Statuses[0].Remaining != 0 {
					t.Fatalf("4th: %+v", r)
				}
				if r.Statuses[0].RetryAfter != 12*time.Hour {
					t.Fatalf("retry after %v", r.Statuses[0].RetryAfter)
				}
				// Another value of the default has its own counter.
				if r := decide(t, s, desc(1, "user", "bob")); r.Code != CodeOK || r.Statuses[0].Remaining != 2 {
					t.Fatalf("bob: %+v", r.Statuses[0])
				}
			})

			t.Run("unlimited", func(t *testing.T) {
				for range 10 {
					r := decide(t, s, desc(1, "user", "vip"))
					if r.Code != CodeOK || r.Statuses[0].Remaining != math.MaxUint32 || !r.Statuses[0].Limit.Unlimited {
						t.Fatalf("%+v", r.Statuses[0])
					}
				}
			})

			t.Run("over limit consumes nothing", func(t *testing.T) {
				// carol's upload budget is 2; a request with her user limit
				// (3/day) and an over-limit upload must leave the user limit alone.
				decide(t, s, desc(2, "path", "/upload", "user", "carol"))
				r := decide(t, s, desc(1, "user", "carol"), desc(1, "path", "/upload", "user", "carol"))
				if r.Code != CodeOverLimit || r.Statuses[0].Code != CodeOK || r.Statuses[1].Code != CodeOverLimit {
					t.Fatalf("%+v", r.Statuses)
				}
				if r.Statuses[0].RetryAfter != 0 {
					t.Fatalf("the admissible descriptor reports RetryAfter %v", r.Statuses[0].RetryAfter)
				}
				peek := decide(t, s, desc(0, "user", "carol"))
				if peek.Statuses[0].Remaining != 3 {
					t.Fatalf("user limit consumed by a denied request: remaining %d", peek.Statuses[0].Remaining)
				}
			})

			t.Run("cost and peek", func(t *testing.T) {
				r := decide(t, s, desc(3, "user", "dave"))
				if r.Code != CodeOK || r.Statuses[0].Remaining != 0 {
					t.Fatalf("%+v", r.Statuses[0])
				}
				r = decide(t, s, desc(0, "user", "dave"))
				if r.Code != CodeOK || r.Statuses[0].Remaining != 0 {
					t.Fatalf("peek: %+v", r.Statuses[0])
				}
				r = decide(t, s, desc(5, "user", "erin"))
				if r.Code != CodeOverLimit || r.Statuses[0].RetryAfter >= 0 {
					t.Fatalf("cost over the limit: %+v", r.Statuses[0])
				}
			})

			t.Run("shadow mode", func(t *testing.T) {
				for i := range 3 {
					r := decide(t, s, desc(1, "shadow", "s1"))
					st := r.Statuses[0]
					if r.Code != CodeOK || st.Code != CodeOK || st.Shadow != (i > 0) {
						t.Fatalf("request %d: %+v", i, st)
					}
				}
			})

			t.Run("wildcard and gcra", func(t *testing.T) {
				for i := range 2 {
					if r := decide(t, s, desc(1, "path", "/search/books")); r.Code != CodeOK {
						t.Fatalf("request %d: %+v", i, r.Statuses[0])
					}
				}
				r := decide(t, s, desc(1, "path", "/search/books"))
				if r.Code != CodeOverLimit || r.Statuses[0].RetryAfter != 500*time.Millisecond {
					t.Fatalf("third in a burst of 2: %+v", r.Statuses[0])
				}
				// Without share_threshold, every value matching the pattern has its own budget.
				if r := decide(t, s, desc(1, "path", "/search/films")); r.Code != CodeOK {
					t.Fatalf("another value: %+v", r.Statuses[0])
				}
				fake.Advance(500 * time.Millisecond)
				if r := decide(t, s, desc(1, "path", "/search/books")); r.Code != CodeOK {
					t.Fatalf("after the emission interval: %+v", r.Statuses[0])
				}
			})

			t.Run("replaces", func(t *testing.T) {
				r := decide(t, s, desc(1, "tenant", "t1"), desc(1, "tenant_override", "t1"))
				if r.Statuses[0].Limit != nil || r.Statuses[1].Limit == nil {
					t.Fatalf("tenant not replaced: %+v", r.Statuses)
				}
				r = decide(t, s, desc(1, "tenant", "t1"), desc(1, "tenant_override", "t1"))
				if r.Code != CodeOverLimit || r.Statuses[0].Code != CodeOK {
					t.Fatalf("%+v", r.Statuses)
				}
			})

			t.Run("override", func(t *testing.T) {
				d := desc(1, "anything", "x")
				d.Override = &Override{RequestsPerUnit: 1, Unit: config.UnitHour}
				if r := decide(t, s, d); r.Code != CodeOK || r.Statuses[0].Limit.RequestsPerUnit != 1 {
					t.Fatalf("%+v", r.Statuses[0])
				}
				if r := decide(t, s, d); r.Code != CodeOverLimit {
					t.Fatalf("second: %+v", r.Statuses[0])
				}
			})

			t.Run("unknown domain", func(t *testing.T) {
				r, err := s.Decide(context.Background(), &Request{Domain: "nope", Descriptors: []Descriptor{desc(1, "user", "x")}})
				if err != nil || r.Code != CodeOK || r.Statuses[0].Limit != nil {
					t.Fatalf("%+v %v", r, err)
				}
			})

			t.Run("same descriptor twice", func(t *testing.T) {
				r := decide(t, s, desc(2, "user", "frank"), desc(2, "user", "frank"))
				if r.Code != CodeOverLimit {
					t.Fatalf("4 units against a limit of 3 admitted: %+v", r.Statuses)
				}
				if p := decide(t, s, desc(0, "user", "frank")); p.Statuses[0].Remaining != 3 {
					t.Fatalf("consumed: %+v", p.Statuses[0])
				}
			})
		})
	}
}

func TestBadRequests(t *testing.T) {
	s := newService(t, backend.NewMemory(), Options{MaxDescriptors: 2, MaxEntries: 2})
	long := Descriptor{Cost: 1, Entries: []config.Entry{{Key: "a", Value: "1"}, {Key: "b", Value: "2"}, {Key: "c", Value: "3"}}}
	cases := []struct {
		name string
		req  *Request
		want string
	}{
		{"nil", nil, "empty"},
		{"no domain", &Request{Descriptors: []Descriptor{desc(1, "user", "x")}}, "domain is empty"},
		{"no descriptors", &Request{Domain: "api"}, "must not be empty"},
		{"too many", &Request{Domain: "api", Descriptors: []Descriptor{desc(1, "a", "1"), desc(1, "a", "1"), desc(1, "a", "1")}}, "at most 2"},
		{"no entries", &Request{Domain: "api", Descriptors: []Descriptor{{Cost: 1}}}, "descriptors[0] has no entries"},
		{"too many entries", &Request{Domain: "api", Descriptors: []Descriptor{long}}, "3 entries"},
		{"empty key", &Request{Domain: "api", Descriptors: []Descriptor{desc(1, "", "x")}}, "key is empty"},
		{"negative cost", &Request{Domain: "api", Descriptors: []Descriptor{desc(-1, "user", "x")}}, "negative"},
		{"bad override unit", &Request{Domain: "api", Descriptors: []Descriptor{{Cost: 1, Entries: []config.Entry{{Key: "a", Value: "b"}}, Override: &Override{RequestsPerUnit: 1}}}}, "not a rate limit unit"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := s.Decide(context.Background(), c.req)
			var ie *InputError
			if !errors.As(err, &ie) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v, want an InputError containing %q", err, c.want)
			}
		})
	}
}

// TestLongValues: a value too long for a store key is counted under a digest.
func TestLongValues(t *testing.T) {
	for _, k := range backendtest.Three() {
		t.Run(k.Name, func(t *testing.T) {
			s := newService(t, k.Make(t, nil), Options{})
			v := strings.Repeat("x", 5000)
			for i := int64(1); i <= 4; i++ {
				r := decide(t, s, desc(1, "user", v))
				if (r.Code == CodeOK) != (i <= 3) {
					t.Fatalf("request %d: %v", i, r.Code)
				}
			}
			// A value differing only at its end has its own counter.
			if r := decide(t, s, desc(1, "user", v+"y")); r.Code != CodeOK {
				t.Fatalf("distinct long value shares a counter")
			}
		})
	}
}

// TestNoConfig: before SetConfig every request is OK and the service is not
// ready.
func TestNoConfig(t *testing.T) {
	s, err := NewService(backend.NewMemory(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Ready() {
		t.Fatal("ready without a configuration")
	}
	r := decide(t, s, desc(1, "user", "x"))
	if r.Code != CodeOK {
		t.Fatal(r.Code)
	}
}

// TestSetConfigKeepsState: a reload with an unchanged limit keeps its counts.
func TestSetConfigKeepsState(t *testing.T) {
	s := newService(t, backend.NewMemory(), Options{})
	decide(t, s, desc(2, "user", "x"))
	if err := s.SetConfig(mustConfig(t, testYAML+"  - key: extra\n    rate_limit: {unit: day, requests_per_unit: 1}\n"), "v2"); err != nil {
		t.Fatal(err)
	}
	if r := decide(t, s, desc(0, "user", "x")); r.Statuses[0].Remaining != 1 {
		t.Fatalf("remaining %d after reload, want 1", r.Statuses[0].Remaining)
	}
	if _, v, _ := s.Config(); v != "v2" {
		t.Fatalf("version %q", v)
	}
}

// BenchmarkDecide measures the core on the memory backend, with and
// without envoy's mode (its counting, stats and answer's form): one
// descriptor under a limit, and three (a limit, a shadow-mode limit, none).
func BenchmarkDecide(b *testing.B) {
	for _, mode := range []struct {
		name string
		opts Options
	}{
		{"floodgate", Options{}},
		{"envoy", Options{Envoy: EnvoyOptions{Enabled: true}}},
	} {
		for _, c := range []struct {
			name string
			ds   []Descriptor
		}{
			{"one", []Descriptor{desc(1, "tenant", "t")}},
			{"three", []Descriptor{desc(1, "tenant", "t"), desc(1, "shadow", "s"), desc(1, "none", "x")}},
		} {
			b.Run(mode.name+"/"+c.name, func(b *testing.B) {
				opts := mode.opts
				if opts.Envoy.Enabled {
					es, err := envoystats.New(envoystats.Options{Disabled: true})
					if err != nil {
						b.Fatal(err)
					}
					b.Cleanup(func() { es.Close() })
					opts.EnvoyStats = es
				}
				s := newService(b, backend.NewMemory(), opts)
				req := &Request{Domain: "api", Descriptors: c.ds}
				ctx := context.Background()
				b.ReportAllocs()
				for b.Loop() {
					if _, err := s.Decide(ctx, req); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
