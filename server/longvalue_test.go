package server

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/internal/backendtest"
	"github.com/floodgate-dev/floodgate/internal/longkey"
	"github.com/floodgate-dev/floodgate/server/checkapi"
	"github.com/floodgate-dev/floodgate/server/config"
)

// Long descriptor values (issue 27: a JWT or a URL as a value). The server
// counts a descriptor under stateKey, which replaces a key over maxStateKey
// bytes by the limit's path and a SHA-256 of the whole key; the library's own
// digest of keys over backend.MaxKeyLen (package longkey) never applies to
// it, since stateKey's keys are shorter. These tests hold that a long value
// is limited everywhere a value is, and never shares a count with another.

const longYAML = `domain: long
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: 3}
  - key: jwt
    detailed_metric: true
    rate_limit: {unit: day, requests_per_unit: 3}
  - key: tenant
    descriptors:
      - key: token
        rate_limit: {unit: day, requests_per_unit: 3, algorithm: sliding_log}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: day, requests_per_unit: 1}
`

// longValues returns two values of 5,000 bytes that differ only in their
// last byte.
func longValues() (string, string) {
	v := strings.Repeat("v", 4999)
	return v + "1", v + "2"
}

// TestStateKeyBoundary: stateKey keeps a key of up to maxStateKey bytes
// (the state of every deployed key), and digests a longer one into a key of
// at most maxStateKey bytes, which the library then takes as it is: one
// digest per key, never two.
func TestStateKeyBoundary(t *testing.T) {
	d, err := config.Parse("long.yaml", []byte(longYAML))
	if err != nil {
		t.Fatal(err)
	}
	l := d.Match([]config.Entry{{Key: "user", Value: "x"}})
	base := l.StateKey([]config.Entry{{Key: "user", Value: ""}}) // the path and '|'
	seen := map[string]int{}
	for _, n := range []int{len(base) + 1, maxStateKey - 1, maxStateKey, maxStateKey + 1, backend.MaxKeyLen, backend.MaxKeyLen + 1, 5000} {
		for _, last := range []string{"a", "b"} {
			v := strings.Repeat("v", n-len(base)-1) + last
			k := stateKey(l, []config.Entry{{Key: "user", Value: v}})
			raw := base + v
			if len(raw) != n {
				t.Fatalf("key of %d bytes, want %d", len(raw), n)
			}
			switch {
			case n <= maxStateKey && k != raw:
				t.Errorf("key of %d bytes: changed to %q", n, k)
			case n > maxStateKey && (len(k) > maxStateKey || !strings.HasPrefix(k, l.Path+"#")):
				t.Errorf("key of %d bytes: state key %q", n, k)
			}
			if longkey.Key(k) != k {
				t.Errorf("key of %d bytes: the library digests the state key %q again", n, k)
			}
			if prev, dup := seen[k]; dup {
				t.Errorf("keys of %d and %d bytes share the state key %q", prev, n, k)
			}
			seen[k] = n
		}
	}
}

// TestLongValuesEverywhere: a value of 5,000 bytes is limited on every
// backend, in floodgate's and envoy's modes and with the local over-limit
// cache, for a plain limit, a detailed_metric one, a nested one whose two
// values are long, and a limit the descriptor carries; another value
// sharing its first 4,999 bytes has its own count; a shadow-mode limit
// reports it over.
func TestLongValuesEverywhere(t *testing.T) {
	v1, v2 := longValues()
	over := func(v string) Descriptor {
		d := desc(1, "user", v)
		d.Override = &Override{RequestsPerUnit: 3, Unit: config.UnitDay}
		return d
	}
	descs := map[string]func(v string) Descriptor{
		"plain":           func(v string) Descriptor { return desc(1, "user", v) },
		"detailed_metric": func(v string) Descriptor { return desc(1, "jwt", v) },
		"nested":          func(v string) Descriptor { return desc(1, "tenant", v, "token", v) },
		"override":        over,
	}
	modes := map[string]Options{
		"floodgate":   {},
		"envoy":       {Envoy: EnvoyOptions{Enabled: true}},
		"local cache": {LocalCacheBytes: 1 << 20},
	}
	for _, k := range backendtest.Three() {
		for mode, opts := range modes {
			t.Run(k.Name+"/"+mode, func(t *testing.T) {
				opts.Metrics = NewMetrics()
				s := newService(t, k.Make(t, nil), opts)
				if err := s.SetConfig(mustConfig(t, longYAML), "long"); err != nil {
					t.Fatal(err)
				}
				ask := func(d Descriptor) Status {
					t.Helper()
					r, err := s.Decide(context.Background(), &Request{Domain: "long", Descriptors: []Descriptor{d}})
					if err != nil {
						t.Fatal(err)
					}
					if r.Failed || r.Statuses[0].Limit == nil {
						t.Fatalf("%+v", r)
					}
					return r.Statuses[0]
				}
				for name, d := range descs {
					for i := 1; i <= 5; i++ {
						st := ask(d(v1))
						if (st.Code == CodeOK) != (i <= 3) {
							t.Fatalf("%s: request %d: %v (remaining %d)", name, i, st.Code, st.Remaining)
						}
					}
					if st := ask(d(v2)); st.Code != CodeOK || st.Remaining != 2 {
						t.Errorf("%s: a value sharing 4,999 bytes: %v, remaining %d; want OK, 2", name, st.Code, st.Remaining)
					}
				}
				if st := ask(desc(1, "shadow", v1)); st.Code != CodeOK || st.Shadow {
					t.Errorf("shadow, first: %+v", st)
				}
				if st := ask(desc(1, "shadow", v1)); st.Code != CodeOK || !st.Shadow {
					t.Errorf("shadow, second: %+v", st)
				}
				if st := ask(desc(1, "shadow", v2)); st.Shadow {
					t.Errorf("shadow, another value: %+v", st)
				}
				// detailed_metric names the descriptor by its values, long
				// ones too.
				path := withEntries("long|jwt", []config.Entry{{Key: "jwt", Value: v1}})
				if n := metricValue(t, opts.Metrics, "floodgate_decisions_total", "domain", "long", "descriptor", path, "result", "over_limit"); n != 2 {
					t.Errorf("detailed_metric: over_limit of %.40q...: %v, want 2", path, n)
				}
				if mode == "local cache" {
					// The 5th request of each limit: the 4th was the
					// store's denial, which the cache remembered; v2's
					// requests were asked of the store.
					if hits := localCacheHits(t, opts.Metrics); hits != float64(len(descs)) {
						t.Errorf("local cache: %v hits, want %d", hits, len(descs))
					}
				}
			})
		}
	}
}

// TestLongValuesOverTheWire: a value of 5,000 bytes sent over Envoy's RLS
// (gRPC), POST /json and POST /v1/check is counted under one state, limited,
// and apart from a value sharing its first 4,999 bytes.
func TestLongValuesOverTheWire(t *testing.T) {
	dir := t.TempDir()
	writeConfig(t, filepath.Join(dir, "long.yaml"), longYAML)
	srv := startServer(t, Config{ConfigPath: dir})
	conn, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := rls.NewRateLimitServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	base := "http://" + srv.HTTPAddr()

	grpcOK := func(v string) bool {
		t.Helper()
		resp, err := client.ShouldRateLimit(ctx, &rls.RateLimitRequest{Domain: "long", Descriptors: []*rlscommon.RateLimitDescriptor{
			{Entries: []*rlscommon.RateLimitDescriptor_Entry{{Key: "user", Value: v}}},
		}})
		if err != nil {
			t.Fatal(err)
		}
		if resp.Statuses[0].CurrentLimit == nil {
			t.Fatalf("gRPC: no limit: %v", resp)
		}
		return resp.OverallCode == rls.RateLimitResponse_OK
	}
	httpPost := func(path string, body any) (int, []byte) {
		t.Helper()
		data, err := json.Marshal(body)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.Post(base+path, "application/json", strings.NewReader(string(data)))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out json.RawMessage
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			t.Fatalf("%s: %d: %v", path, resp.StatusCode, err)
		}
		return resp.StatusCode, out
	}
	jsonOK := func(v string) bool {
		t.Helper()
		code, out := httpPost("/json", map[string]any{"domain": "long", "descriptors": []any{
			map[string]any{"entries": []any{map[string]string{"key": "user", "value": v}}},
		}})
		var resp rls.RateLimitResponse
		if err := protojson.Unmarshal(out, &resp); err != nil || resp.Statuses[0].CurrentLimit == nil {
			t.Fatalf("/json: %d %v %v", code, &resp, err)
		}
		return code == 200 && resp.OverallCode == rls.RateLimitResponse_OK
	}
	checkOK := func(v string) bool {
		t.Helper()
		code, out := httpPost("/v1/check", map[string]any{"domain": "long", "descriptors": []any{map[string]string{"user": v}}})
		var resp checkapi.Response
		if err := json.Unmarshal(out, &resp); err != nil || resp.Decisions[0].Limit != 3 {
			t.Fatalf("/v1/check: %d %s %v", code, out, err)
		}
		return code == 200 && resp.Allowed
	}

	v1, v2 := longValues()
	apis := []struct {
		name string
		ok   func(string) bool
	}{{"gRPC", grpcOK}, {"/json", jsonOK}, {"/v1/check", checkOK}}
	// One state for the three: three admitted, whichever API asks.
	for i, api := range apis {
		if !api.ok(v1) {
			t.Errorf("%s: request %d of 3 refused", api.name, i+1)
		}
	}
	for _, api := range apis {
		if api.ok(v1) {
			t.Errorf("%s: a 4th request admitted", api.name)
		}
	}
	for i, api := range apis {
		if !api.ok(v2) {
			t.Errorf("%s: another long value, request %d of 3 refused", api.name, i+1)
		}
	}
	if grpcOK(v2) {
		t.Error("another long value: a 4th request admitted")
	}
}
