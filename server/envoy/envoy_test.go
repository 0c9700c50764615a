package envoy

import (
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/server/config"
	"github.com/floodgate-dev/floodgate/server/decision"
)

// TestReset: whole seconds to the end of the period's current window on the
// Unix clock, as envoyproxy/ratelimit's CalculateReset, for periods of one
// unit and of several (unit_multiplier).
func TestReset(t *testing.T) {
	at := time.Date(2026, 12, 2, 12, 0, 15, 500_000_000, time.UTC)
	for _, tc := range []struct {
		u    config.Unit
		m    uint32
		now  time.Time
		want time.Duration
	}{
		{config.UnitSecond, 0, at, time.Second},
		{config.UnitMinute, 1, at, 45 * time.Second},
		{config.UnitHour, 0, at, 59*time.Minute + 45*time.Second},
		{config.UnitHour, 0, time.Date(2026, 12, 2, 12, 59, 59, 0, time.UTC), time.Second},
		{config.UnitSecond, 10, at, 5 * time.Second},                           // windows [12:00:10, 12:00:20)
		{config.UnitMinute, 5, at, 4*time.Minute + 45*time.Second},             // [12:00, 12:05)
		{config.UnitSecond, 7, at, time.Duration(7-at.Unix()%7) * time.Second}, // multiples of 7 s since the epoch
	} {
		l := &config.Limit{Unit: tc.u, UnitMultiplier: tc.m}
		if got := Reset(l.Window(), tc.now); got != tc.want {
			t.Errorf("Reset(%v × %d, %v) = %v, want %v", tc.u, tc.m, tc.now, got, tc.want)
		}
	}
}

// TestFinish: the answer's form under envoy's settings, on a response the
// core decided.
func TestFinish(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 15, 0, time.UTC)
	perMinute := &config.Limit{Unit: config.UnitMinute, RequestsPerUnit: 10}
	quota := &config.Limit{Unit: config.UnitMinute, RequestsPerUnit: 5, QuotaMode: true}
	resp := func(codes ...decision.Code) *decision.Response {
		r := &decision.Response{Code: decision.CodeOK}
		for i, c := range codes {
			l := perMinute
			if i > 0 {
				l = quota
			}
			r.Statuses = append(r.Statuses, decision.Status{Code: c, Limit: l, Remaining: 3, ResetAfter: 1234 * time.Millisecond})
			if c == decision.CodeOverLimit {
				r.Code = decision.CodeOverLimit
			}
		}
		return r
	}

	r := resp(decision.CodeOverLimit, decision.CodeOK)
	Finish(r, now, Options{Enabled: true, ResponseHeaders: true}, nil)
	if r.Code != decision.CodeOverLimit || r.Statuses[0].Remaining != 0 || r.Statuses[0].ResetAfter != 45*time.Second || r.Statuses[1].Remaining != 3 {
		t.Errorf("over a rate limit: %+v", r)
	}
	want := []decision.Header{{Key: "RateLimit-Limit", Value: "10"}, {Key: "RateLimit-Remaining", Value: "0"}, {Key: "RateLimit-Reset", Value: "45"}}
	if len(r.Headers) != 3 || r.Headers[0] != want[0] || r.Headers[1] != want[1] || r.Headers[2] != want[2] {
		t.Errorf("headers %v, want %v", r.Headers, want)
	}

	// A period of several units (unit_multiplier) resets, and says so in
	// the headers, at the end of the whole period: 10 s windows since the
	// epoch, the current one [12:00:10, 12:00:20).
	tenSeconds := &config.Limit{Unit: config.UnitSecond, UnitMultiplier: 10, RequestsPerUnit: 1000}
	r = &decision.Response{Code: decision.CodeOK, Statuses: []decision.Status{{Code: decision.CodeOK, Limit: tenSeconds, Remaining: 7, ResetAfter: time.Second}}}
	Finish(r, now, Options{Enabled: true, ResponseHeaders: true}, nil)
	if r.Statuses[0].ResetAfter != 5*time.Second || len(r.Headers) != 3 || r.Headers[0].Value != "1000" || r.Headers[2].Value != "5" {
		t.Errorf("1000 per 10 s: %+v, want a reset in 5 s", r)
	}

	r = resp(decision.CodeOverLimit)
	Finish(r, now, Options{Enabled: true, ShadowMode: true}, nil)
	if r.Code != decision.CodeOK || r.Statuses[0].Code != decision.CodeOverLimit || r.Headers != nil {
		t.Errorf("global shadow mode: %+v, want OK overall, the status kept", r)
	}

	// Quota descriptors make the answer OVER_LIMIT only when every one of
	// them is over.
	r = resp(decision.CodeOK, decision.CodeOverLimit, decision.CodeOK)
	Finish(r, now, Options{Enabled: true}, nil)
	if r.Code != decision.CodeOK {
		t.Errorf("one quota descriptor of two over: %v, want OK", r.Code)
	}
	r = resp(decision.CodeOK, decision.CodeOverLimit, decision.CodeOverLimit)
	Finish(r, now, Options{Enabled: true}, nil)
	if r.Code != decision.CodeOverLimit {
		t.Errorf("every quota descriptor over: %v, want OVER_LIMIT", r.Code)
	}
}

// TestHealthy: HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED waits for a domain.
func TestHealthy(t *testing.T) {
	on := Options{Enabled: true, HealthyWithAtLeastOneConfig: true}
	one := &config.Config{Domains: map[string]*config.Domain{"d": {}}}
	for _, tc := range []struct {
		o    Options
		cfg  *config.Config
		want bool
	}{
		{Options{Enabled: true}, nil, true},
		{on, nil, false},
		{on, &config.Config{}, false},
		{on, one, true},
	} {
		if got := Healthy(tc.o, tc.cfg); got != tc.want {
			t.Errorf("Healthy(%+v, %v) = %v, want %v", tc.o, tc.cfg, got, tc.want)
		}
	}
}

// TestDynamicMetadataNil: no request or no answer, no metadata.
func TestDynamicMetadataNil(t *testing.T) {
	if m := DynamicMetadata(nil, &decision.Response{}); m != nil {
		t.Errorf("without a request: %v", m)
	}
}
