package server

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate-dev/floodgate/backend"
)

// envoyMetadataYAML holds the limits of envoyproxy/ratelimit's
// TestMetadataReturnedForPassedDescriptors, ...ForAllPassedDescriptors and
// TestOverlappingMetadataReturnsTheFirstValue (test/service/ratelimit_test.go)
// and the metadata of its test/config/metadata.yaml.
const envoyMetadataYAML = `domain: quota-domain
descriptors:
  - key: regular
    rate_limit: {unit: minute, requests_per_unit: 10}
    metadata: {name: service_1}
  - key: quota
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
    metadata: {name: service_2}
  - key: other
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 5}
    metadata: {some_other_name: service_2}
  - key: nested_a
    rate_limit: {unit: minute, requests_per_unit: 5}
    metadata: {service_with_quota: {name: service_2}, list: [1, two]}
  - key: nested_b
    rate_limit: {unit: minute, requests_per_unit: 5}
    metadata: {service_with_quota: {name: other, extra: yes}, list: [3]}
  - key: unlimited
    rate_limit: {unlimited: true}
    metadata: {name: never}
`

func envoyMetadataOptions() Options {
	return Options{Envoy: EnvoyOptions{Enabled: true, QuotaMode: true, DynamicMetadata: true}}
}

func rlsDesc(kv ...string) *rlscommon.RateLimitDescriptor {
	d := &rlscommon.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlscommon.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// TestEnvoyDynamicMetadata: with RESPONSE_DYNAMIC_METADATA, the response's
// dynamic_metadata is envoyproxy/ratelimit's: the request's domain,
// descriptors and hits_addend, and the merged metadata of the limits that
// passed, with the expected values of its service tests.
func TestEnvoyDynamicMetadata(t *testing.T) {
	s, err := NewService(backend.NewMemory(), envoyMetadataOptions())
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetConfig(mustConfig(t, envoyMetadataYAML), "v1"); err != nil {
		t.Fatal(err)
	}
	r := NewRLS(s)
	ctx := context.Background()
	call := func(req *rls.RateLimitRequest) *rls.RateLimitResponse {
		t.Helper()
		resp, err := r.ShouldRateLimit(ctx, req)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	passed := func(resp *rls.RateLimitResponse) map[string]any {
		t.Helper()
		m := resp.GetDynamicMetadata().GetFields()["metadata"]
		if m == nil {
			return nil
		}
		return m.GetStructValue().AsMap()
	}
	// TestMetadataReturnedForPassedDescriptors: the quota descriptor is over
	// its limit, so only the regular one's metadata is returned.
	call(&rls.RateLimitRequest{Domain: "quota-domain", Descriptors: []*rlscommon.RateLimitDescriptor{rlsDesc("quota", "limit")}})
	resp := call(&rls.RateLimitRequest{Domain: "quota-domain", HitsAddend: 1,
		Descriptors: []*rlscommon.RateLimitDescriptor{rlsDesc("regular", "limit"), rlsDesc("quota", "limit")}})
	if resp.GetOverallCode() != rls.RateLimitResponse_OK || resp.GetStatuses()[1].GetCode() != rls.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("passed descriptors: %v", resp)
	}
	if got := passed(resp); len(got) != 1 || got["name"] != "service_1" {
		t.Errorf("passed descriptors: metadata %v, want {name: service_1}", got)
	}
	want, _ := structpb.NewStruct(map[string]any{
		"domain": "quota-domain",
		"descriptors": []any{
			map[string]any{"entries": []any{"regular=limit"}},
			map[string]any{"entries": []any{"quota=limit"}},
		},
		"hitsAddend": 1,
		"metadata":   map[string]any{"name": "service_1"},
	})
	if !proto.Equal(resp.GetDynamicMetadata(), want) {
		t.Errorf("dynamic_metadata %v, want %v", resp.GetDynamicMetadata(), want)
	}

	// TestMetadataReturnedForAllPassedDescriptors: both passed, both merged.
	resp = call(&rls.RateLimitRequest{Domain: "quota-domain",
		Descriptors: []*rlscommon.RateLimitDescriptor{rlsDesc("regular", "all"), rlsDesc("other", "all")}})
	if got := passed(resp); len(got) != 2 || got["name"] != "service_1" || got["some_other_name"] != "service_2" {
		t.Errorf("all passed: metadata %v", got)
	}
	if _, ok := resp.GetDynamicMetadata().GetFields()["hitsAddend"]; ok {
		t.Errorf("hitsAddend 0 given: %v", resp.GetDynamicMetadata())
	}

	// TestOverlappingMetadataReturnsTheFirstValue; mappings merge, the first
	// value of any other key wins; an unlimited descriptor's metadata is not
	// taken.
	resp = call(&rls.RateLimitRequest{Domain: "quota-domain",
		Descriptors: []*rlscommon.RateLimitDescriptor{rlsDesc("unlimited", "x"), rlsDesc("regular", "o"), rlsDesc("quota", "o2"), rlsDesc("nested_a", "n"), rlsDesc("nested_b", "n")}})
	wantMeta := map[string]any{
		"name":               "service_1",
		"service_with_quota": map[string]any{"name": "service_2", "extra": "yes"},
		"list":               []any{1.0, "two"},
	}
	gotMeta, _ := structpb.NewStruct(passed(resp))
	wantStruct, _ := structpb.NewStruct(wantMeta)
	if !proto.Equal(gotMeta, wantStruct) {
		t.Errorf("overlapping: metadata %v, want %v", gotMeta, wantStruct)
	}

	// A descriptor's own limit and hits_addend, as envoy writes them.
	d := rlsDesc("regular", "own")
	d.Limit = &rlscommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 42, Unit: typev3.RateLimitUnit_HOUR}
	d.HitsAddend = wrapperspb.UInt64(3)
	resp = call(&rls.RateLimitRequest{Domain: "quota-domain", Descriptors: []*rlscommon.RateLimitDescriptor{d}})
	df := resp.GetDynamicMetadata().GetFields()["descriptors"].GetListValue().GetValues()[0].GetStructValue().GetFields()
	if df["hitsAddend"].GetNumberValue() != 3 || df["limit"].GetStringValue() != d.Limit.String() {
		t.Errorf("descriptor with its own limit: %v", df)
	}

	// Off: no dynamic_metadata.
	off, _ := NewService(backend.NewMemory(), Options{Envoy: EnvoyOptions{Enabled: true}})
	off.SetConfig(mustConfig(t, envoyMetadataYAML), "v1")
	resp, err = NewRLS(off).ShouldRateLimit(ctx, &rls.RateLimitRequest{Domain: "quota-domain", Descriptors: []*rlscommon.RateLimitDescriptor{rlsDesc("regular", "x")}})
	if err != nil || resp.GetDynamicMetadata() != nil {
		t.Errorf("without RESPONSE_DYNAMIC_METADATA: %v %v", resp, err)
	}
}

// TestEnvoyDynamicMetadataEncoders: the server's hand-written encoder and
// POST /json give the dynamic_metadata of the generated path.
func TestEnvoyDynamicMetadataEncoders(t *testing.T) {
	dir := t.TempDir()
	writeConfig(t, filepath.Join(dir, "quota.yaml"), envoyMetadataYAML)
	srv := startServer(t, Config{ConfigPath: dir, Service: envoyMetadataOptions()})
	ref, err := NewService(backend.NewMemory(), envoyMetadataOptions())
	if err != nil {
		t.Fatal(err)
	}
	ref.SetConfig(mustConfig(t, envoyMetadataYAML), "v1")
	refRLS := NewRLS(ref)

	conn, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := rls.NewRateLimitServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	d := rlsDesc("nested_a", "w")
	d.Limit = &rlscommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 7, Unit: typev3.RateLimitUnit_DAY}
	req := &rls.RateLimitRequest{Domain: "quota-domain", HitsAddend: 1,
		Descriptors: []*rlscommon.RateLimitDescriptor{rlsDesc("regular", "w"), rlsDesc("nested_b", "w"), d}}
	got, err := client.ShouldRateLimit(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	want, err := refRLS.ShouldRateLimit(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if got.GetDynamicMetadata() == nil || !proto.Equal(got.GetDynamicMetadata(), want.GetDynamicMetadata()) {
		t.Fatalf("hand-written encoder: %v\nwant %v", got.GetDynamicMetadata(), want.GetDynamicMetadata())
	}

	body, _ := protojson.Marshal(req)
	hr, err := http.Post("http://"+srv.HTTPAddr()+"/json", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	data, _ := io.ReadAll(hr.Body)
	hr.Body.Close()
	var js rls.RateLimitResponse
	if err := protojson.Unmarshal(data, &js); err != nil {
		t.Fatalf("/json: %v: %s", err, data)
	}
	if !proto.Equal(js.GetDynamicMetadata(), want.GetDynamicMetadata()) {
		t.Fatalf("/json: %v\nwant %v", js.GetDynamicMetadata(), want.GetDynamicMetadata())
	}
}
