package xds

import (
	"strings"
	"testing"

	rlsconf "github.com/envoyproxy/go-control-plane/ratelimit/config/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/floodgate-dev/floodgate/server/config"
)

// TestRateLimitConfigYAML: every field of a RateLimitConfig reaches the
// parsed configuration.
func TestRateLimitConfigYAML(t *testing.T) {
	md, _ := structpb.NewStruct(map[string]any{"team": "payments", "weight": 2})
	rc := &rlsconf.RateLimitConfig{Name: "r", Domain: "d", Descriptors: []*rlsconf.RateLimitDescriptor{
		{Key: "k", Value: "v", ShadowMode: true, DetailedMetric: true, QuotaMode: true, Metadata: md,
			RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_WEEK, RequestsPerUnit: 7, Name: "weekly"},
			Descriptors: []*rlsconf.RateLimitDescriptor{
				{Key: "sub", RateLimit: &rlsconf.RateLimitPolicy{Unlimited: true}},
				{Key: "other", RateLimit: &rlsconf.RateLimitPolicy{Unit: rlsconf.RateLimitUnit_SECOND, RequestsPerUnit: 1,
					Replaces: []*rlsconf.RateLimitReplace{{Name: "weekly"}}}},
			}},
	}}
	data, err := RateLimitConfigYAML(rc)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.LoadSources([]config.Source{{Name: "xds:r", Data: data}}, config.LoadOptions{})
	if err != nil {
		t.Fatalf("%v\n%s", err, data)
	}
	d := cfg.Domains["d"]
	if d == nil || len(d.Limits()) != 3 {
		t.Fatalf("domain d: %+v\n%s", d, data)
	}
	top := d.Match([]config.Entry{{Key: "k", Value: "v"}})
	if top == nil || top.Unit != config.UnitWeek || top.RequestsPerUnit != 7 || top.Name != "weekly" ||
		!top.ShadowMode || !top.QuotaMode || top.File != "xds:r" {
		t.Fatalf("k=v: %+v\n%s", top, data)
	}
	if sub := d.Match([]config.Entry{{Key: "k", Value: "v"}, {Key: "sub", Value: "x"}}); sub == nil || !sub.Unlimited {
		t.Fatalf("k=v/sub: %+v", sub)
	}
	if o := d.Match([]config.Entry{{Key: "k", Value: "v"}, {Key: "other", Value: "x"}}); o == nil || len(o.Replaces) != 1 {
		t.Fatalf("k=v/other: %+v", o)
	}
	if _, err := config.LoadSources(nil, config.LoadOptions{}); err != nil {
		t.Fatalf("no resources: %v, want a configuration without domains", err)
	}
}

// TestParseHeaders: envoy's "name:value,name:value" form; a value may
// hold ':'; an entry without one or with an empty name is an error.
func TestParseHeaders(t *testing.T) {
	h, err := ParseHeaders("Authorization:Bearer a:b, x-team : payments,")
	if err != nil || len(h) != 2 || h["authorization"] != "Bearer a:b" || h["x-team"] != "payments" {
		t.Fatalf("%v %v", h, err)
	}
	for _, bad := range []string{"authorization", ":v", "a:1,b"} {
		if _, err := ParseHeaders(bad); err == nil || !strings.Contains(err.Error(), "name:value") {
			t.Errorf("%q: %v, want an error", bad, err)
		}
	}
}
