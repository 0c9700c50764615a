package server

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"maps"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/internal/backendtest"
	"github.com/floodgate-dev/floodgate/server/checkapi"
	"github.com/floodgate-dev/floodgate/server/config"
)

// Limits whose period is several units (rate_limit's unit_multiplier, and a
// request override's): "1000 per 10 s" for every algorithm, through the
// server, on every backend, on a fake clock.

const tenSecondYAML = `domain: ten
descriptors:
  - {key: algo, value: fixed_window, rate_limit: {unit: second, unit_multiplier: 10, requests_per_unit: 1000}}
  - {key: algo, value: sliding_window, rate_limit: {unit: second, unit_multiplier: 10, requests_per_unit: 1000, algorithm: sliding_window}}
  - {key: algo, value: sliding_log, rate_limit: {unit: second, unit_multiplier: 10, requests_per_unit: 1000, algorithm: sliding_log}}
  - {key: algo, value: token_bucket, rate_limit: {unit: second, unit_multiplier: 10, requests_per_unit: 1000, algorithm: token_bucket}}
  - {key: algo, value: leaky_bucket, rate_limit: {unit: second, unit_multiplier: 10, requests_per_unit: 1000, algorithm: leaky_bucket, burst: 999, delay: nodelay}}
  - {key: algo, value: gcra, rate_limit: {unit: second, unit_multiplier: 10, requests_per_unit: 1000, algorithm: gcra}}
`

// tenSecondStart is 3 s into a 10 s window: windows of 10 s start at
// multiples of 10 s since the Unix epoch, so this one began at 12:00:00 and
// ends at 12:00:10.
var tenSecondStart = time.Date(2026, 1, 1, 12, 0, 3, 0, time.UTC)

// TestTenSecondPeriod: 1,000 per 10 s admits 1,000 and then waits for the
// period, not for one second, with every algorithm on every backend: each
// step's remaining, retry-after and reset-after are exact. The fixed window
// ends at the next multiple of 10 s since the epoch (7 s after the start);
// the sliding window's 1 s buckets hold a unit until the end of the bucket
// 10 s after it (11 s); the log, the buckets and GCRA give back the budget
// 10 s after it was spent.
func TestTenSecondPeriod(t *testing.T) {
	type step struct {
		at         time.Duration // since tenSecondStart
		cost       int64
		ok         bool
		remaining  int64
		retryAfter time.Duration
		resetAfter time.Duration
	}
	const s = time.Second
	ms := time.Millisecond
	cases := map[string][]step{
		"fixed_window": {
			{0, 1000, true, 0, 0, 7 * s},
			{0, 1, false, 0, 7 * s, 7 * s},
			{s, 1, false, 0, 6 * s, 6 * s}, // a 1 s period would admit here
			{6*s + 999*ms, 1, false, 0, ms, ms},
			{7 * s, 1000, true, 0, 0, 10 * s}, // the window [12:00:10, 12:00:20)
			{17 * s, 0, true, 1000, 0, 0},
		},
		"sliding_window": {
			{0, 1000, true, 0, 0, 11 * s},
			{0, 1, false, 0, 11 * s, 11 * s},
			{s, 1, false, 0, 10 * s, 10 * s},
			{11 * s, 1000, true, 0, 0, 11 * s},
		},
		"sliding_log": {
			{0, 1000, true, 0, 0, 10 * s},
			{0, 1, false, 0, 10 * s, 10 * s},
			{s, 1, false, 0, 9 * s, 9 * s},
			{10 * s, 1000, true, 0, 0, 10 * s},
		},
		"token_bucket": {
			{0, 1000, true, 0, 0, 10 * s},
			{0, 2, false, 0, 20 * ms, 10 * s}, // one token per 10 ms
			{s, 1000, false, 100, 9 * s, 9 * s},
			{10 * s, 1000, true, 0, 0, 10 * s},
		},
		"leaky_bucket": {
			{0, 1000, true, 0, 0, 10 * s},
			{0, 2, false, 0, 20 * ms, 10 * s},
			{s, 1000, false, 100, 9 * s, 9 * s},
			{10 * s, 1000, true, 0, 0, 10 * s},
		},
		"gcra": {
			{0, 1000, true, 0, 0, 10 * s},
			{0, 2, false, 0, 20 * ms, 10 * s},
			{s, 1000, false, 100, 9 * s, 9 * s},
			{10 * s, 1000, true, 0, 0, 10 * s},
		},
	}
	for _, k := range backendtest.All() {
		t.Run(k.Name, func(t *testing.T) {
			fake := clock.NewFake(tenSecondStart)
			svc, err := NewService(k.Make(t, fake), Options{})
			if err != nil {
				t.Fatal(err)
			}
			if err := svc.SetConfig(mustConfig(t, tenSecondYAML), "v1"); err != nil {
				t.Fatal(err)
			}
			// Each algorithm starts 100 s after the one before, 3 s into a
			// window as well: time never goes back for a backend.
			for j, algo := range slices.Sorted(maps.Keys(cases)) {
				start := tenSecondStart.Add(time.Duration(j) * 100 * s)
				for i, st := range cases[algo] {
					fake.Set(start.Add(st.at))
					r, err := svc.Decide(context.Background(), &Request{Domain: "ten", Descriptors: []Descriptor{desc(st.cost, "algo", algo)}})
					if err != nil {
						t.Fatal(err)
					}
					got := r.Statuses[0]
					if l := got.Limit; l == nil || l.Algorithm != algo || l.UnitMultiplier != 10 || l.Window() != 10*s {
						t.Fatalf("%s: limit %+v", algo, l)
					}
					if got.Code == CodeOK != st.ok || got.Remaining != st.remaining || got.RetryAfter != st.retryAfter || got.ResetAfter != st.resetAfter {
						t.Errorf("%s step %d (t=+%v, cost %d):\n got ok=%v remaining=%d retry=%v reset=%v\nwant ok=%v remaining=%d retry=%v reset=%v",
							algo, i+1, st.at, st.cost, got.Code == CodeOK, got.Remaining, got.RetryAfter, got.ResetAfter,
							st.ok, st.remaining, st.retryAfter, st.resetAfter)
					}
				}
			}
		})
	}
}

// TestOverrideMultiplier: a request's limit override with unit_multiplier
// is a fixed window of the whole period, aligned to the Unix epoch, on
// every backend; the period must be at most ten years; and 0 or 1 is one
// unit, sharing nothing with a period of several.
func TestOverrideMultiplier(t *testing.T) {
	for _, k := range backendtest.All() {
		t.Run(k.Name, func(t *testing.T) {
			fake := clock.NewFake(tenSecondStart)
			s := newService(t, k.Make(t, fake), Options{})
			over := func(cost int64, m uint32) Descriptor {
				d := desc(cost, "k", "v")
				d.Override = &Override{RequestsPerUnit: 1000, Unit: config.UnitSecond, UnitMultiplier: m}
				return d
			}
			r := decide(t, s, over(1000, 10))
			if st := r.Statuses[0]; r.Code != CodeOK || st.Limit.UnitMultiplier != 10 || st.Limit.Window() != 10*time.Second || st.ResetAfter != 7*time.Second {
				t.Fatalf("first: %+v", st)
			}
			// A period of one second keeps its own count.
			for _, m := range []uint32{0, 1} {
				if r := decide(t, s, over(1000, m)); r.Code != CodeOK || r.Statuses[0].ResetAfter != time.Second || r.Statuses[0].Limit.UnitMultiplier != 1 {
					t.Fatalf("multiplier %d: %+v", m, r.Statuses[0])
				}
				fake.Advance(time.Second)
			}
			// 12:00:05: over the limit until 12:00:10.
			if r := decide(t, s, over(1, 10)); r.Code != CodeOverLimit || r.Statuses[0].RetryAfter != 5*time.Second {
				t.Fatalf("at +2 s: %+v", r.Statuses[0])
			}
			fake.Set(tenSecondStart.Add(7 * time.Second))
			if r := decide(t, s, over(1, 10)); r.Code != CodeOK || r.Statuses[0].Remaining != 999 || r.Statuses[0].ResetAfter != 10*time.Second {
				t.Fatalf("in the next window: %+v", r.Statuses[0])
			}

			for _, c := range []struct {
				o    Override
				want string
			}{
				{Override{RequestsPerUnit: 1, Unit: config.UnitYear, UnitMultiplier: 11}, "descriptors[0].limit: a period of 11 × YEAR is longer than 87600h0m0s (ten years)"},
				{Override{RequestsPerUnit: 1, Unit: config.UnitDay, UnitMultiplier: 1 << 31}, "descriptors[0].limit: a period of 2147483648 × DAY is longer than"},
			} {
				d := desc(1, "k", "v")
				d.Override = &c.o
				_, err := s.Decide(context.Background(), &Request{Domain: "api", Descriptors: []Descriptor{d}})
				var ie *InputError
				if err == nil || !errors.As(err, &ie) || !strings.Contains(err.Error(), c.want) {
					t.Errorf("%+v: %v, want an InputError %q", c.o, err, c.want)
				}
			}
			d := desc(1, "k", "v")
			d.Override = &Override{RequestsPerUnit: 1, Unit: config.UnitYear, UnitMultiplier: 10}
			if r := decide(t, s, d); r.Code != CodeOK || r.Statuses[0].Limit.Window() != 10*365*24*time.Hour {
				t.Fatalf("ten years: %+v", r.Statuses[0])
			}
		})
	}
}

// TestMultiplierOverTheWire: an override of 1,000 per 10 s over gRPC (the
// hand-written codec) and over HTTP /json, and a configured one over
// /v1/check, on the memory backend and a fake clock: the answers carry the
// multiplier (current_limit.unit_multiplier, /v1/check's unit_multiplier)
// and reset at the end of the 10 s window.
func TestMultiplierOverTheWire(t *testing.T) {
	fake := clock.NewFake(tenSecondStart)
	dir := t.TempDir()
	writeConfig(t, filepath.Join(dir, "api.yaml"), testYAML+`  - key: ten
    rate_limit: {unit: second, unit_multiplier: 10, requests_per_unit: 1000, algorithm: gcra}
`)
	srv := startServer(t, Config{ConfigPath: dir, Backend: backend.NewMemory(backend.WithClock(fake))})

	conn, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	client := rls.NewRateLimitServiceClient(conn)
	override := func(hits uint64, m *wrapperspb.UInt32Value) *rls.RateLimitRequest {
		return &rls.RateLimitRequest{Domain: "api", Descriptors: []*rlscommon.RateLimitDescriptor{withHits(withLimit(wireDesc("grpc", "x"), 1000, typev3.RateLimitUnit_SECOND, m), hits)}}
	}
	ctx := t.Context()
	resp, err := client.ShouldRateLimit(ctx, override(1000, wrapperspb.UInt32(10)))
	if err != nil {
		t.Fatal(err)
	}
	st := resp.Statuses[0]
	if resp.OverallCode != rls.RateLimitResponse_OK || st.CurrentLimit.GetUnitMultiplier().GetValue() != 10 || st.CurrentLimit.GetRequestsPerUnit() != 1000 ||
		st.CurrentLimit.GetUnit() != rls.RateLimitResponse_RateLimit_SECOND || st.DurationUntilReset.AsDuration() != 7*time.Second {
		t.Fatalf("gRPC: %v", resp)
	}
	fake.Advance(6 * time.Second)
	if resp, err = client.ShouldRateLimit(ctx, override(1, wrapperspb.UInt32(10))); err != nil || resp.OverallCode != rls.RateLimitResponse_OVER_LIMIT ||
		resp.Statuses[0].DurationUntilReset.AsDuration() != time.Second {
		t.Fatalf("gRPC at +6 s: %v %v", resp, err)
	}
	// unit_multiplier 1 is one unit, and the answer does not repeat it.
	if resp, err = client.ShouldRateLimit(ctx, override(1, wrapperspb.UInt32(1))); err != nil || resp.OverallCode != rls.RateLimitResponse_OK ||
		resp.Statuses[0].CurrentLimit.UnitMultiplier != nil {
		t.Fatalf("gRPC, unit_multiplier 1: %v %v", resp, err)
	}
	fake.Advance(time.Second) // 12:00:10: a new window
	if resp, err = client.ShouldRateLimit(ctx, override(1000, wrapperspb.UInt32(10))); err != nil || resp.OverallCode != rls.RateLimitResponse_OK {
		t.Fatalf("gRPC in the next window: %v %v", resp, err)
	}

	httpPost := func(path, body string) (int, []byte) {
		t.Helper()
		r, err := http.Post("http://"+srv.HTTPAddr()+path, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		var buf strings.Builder
		if _, err := io.Copy(&buf, r.Body); err != nil {
			t.Fatal(err)
		}
		return r.StatusCode, []byte(buf.String())
	}
	body := `{"domain":"api","descriptors":[{"entries":[{"key":"json","value":"x"}],"limit":{"requests_per_unit":3,"unit":"MINUTE","unit_multiplier":5},"hits_addend":"3"}]}`
	code, data := httpPost("/json", body)
	var jr rls.RateLimitResponse
	if err := protojson.Unmarshal(data, &jr); err != nil || code != http.StatusOK {
		t.Fatalf("/json: %d %s %v", code, data, err)
	}
	if l := jr.Statuses[0].CurrentLimit; l.GetUnitMultiplier().GetValue() != 5 || jr.Statuses[0].DurationUntilReset.AsDuration() != 5*time.Minute-10*time.Second {
		t.Fatalf("/json: %s", data)
	}
	if !strings.Contains(string(data), `"unitMultiplier":5`) {
		t.Errorf("/json answer without unitMultiplier: %s", data)
	}
	if code, data = httpPost("/json", strings.Replace(body, `"unit_multiplier":5`, `"unit_multiplier":0`, 1)); code != http.StatusBadRequest ||
		!strings.Contains(string(data), "unit_multiplier must be at least 1") {
		t.Errorf("/json, unit_multiplier 0: %d %s", code, data)
	}

	code, data = httpPost("/v1/check", `{"domain":"api","descriptors":[{"ten":"x"}],"cost":1000}`)
	var cr checkapi.Response
	if err := json.Unmarshal(data, &cr); err != nil || code != http.StatusOK {
		t.Fatalf("/v1/check: %d %s %v", code, data, err)
	}
	if d := cr.Decisions[0]; d.Limit != 1000 || d.Unit != "SECOND" || d.UnitMultiplier != 10 || d.ResetAfterMS != 10_000 {
		t.Fatalf("/v1/check: %s", data)
	}
	code, data = httpPost("/v1/check", `{"domain":"api","descriptors":[{"user":"x"}]}`)
	if code != http.StatusOK || strings.Contains(string(data), "unit_multiplier") {
		t.Errorf("/v1/check of a one-unit limit: %d %s", code, data)
	}
}
