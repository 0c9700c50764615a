package server

import (
	"context"
	"errors"
	"testing"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/ratelimit"
	"github.com/floodgate-dev/floodgate/server/checkapi"
	"github.com/floodgate-dev/floodgate/server/internal/rlswire"
)

// FuzzCheckRequest: any body gives a request or an InputError, never a
// panic, and a decoded request decides without a panic.
func FuzzCheckRequest(f *testing.F) {
	for _, s := range []string{
		`{"domain":"api","descriptors":[{"user":"x","path":"/upload"}],"cost":2}`,
		`{"domain":"api","descriptors":[{"user":1,"ok":true}]}`,
		`{"domain":"api","descriptors":[{}],"cost":0}`,
		`{"domain":"","descriptors":[]}`,
		`{"descriptors":[{"a":"b"}],"hits_addend":99999999999999999999}`,
		`[`, `{"domain":"api","descriptors":[{"a":"b"}]}{`,
	} {
		f.Add([]byte(s))
	}
	s := newService(f, backend.NewMemory(), Options{})
	f.Fuzz(func(t *testing.T, data []byte) {
		cr, err := checkapi.Parse(data)
		if err != nil {
			var ie *InputError
			if !errors.As(err, &ie) {
				t.Fatalf("not an InputError: %v", err)
			}
			return
		}
		in := &Request{Domain: cr.Domain}
		for _, es := range cr.Descriptors {
			cost := int64(1)
			if cr.Cost != nil {
				cost = *cr.Cost
			}
			in.Descriptors = append(in.Descriptors, Descriptor{Entries: es, Cost: cost})
		}
		checkDecide(t, s, in)
	})
}

// FuzzRLSRequest: any RateLimitRequest, as protobuf wire bytes or protojson,
// is decided or rejected with an InputError, never a panic.
func FuzzRLSRequest(f *testing.F) {
	for _, s := range []string{
		`{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"x"}],"hits_addend":"3"}]}`,
		`{"domain":"api","hitsAddend":5,"descriptors":[{"entries":[{"key":"path","value":"/upload"},{"key":"user","value":"x"}]}]}`,
		`{"domain":"api","descriptors":[{"entries":[{"key":"k","value":"v"}],"limit":{"requests_per_unit":1,"unit":"HOUR"}}]}`,
		`{"domain":"api","descriptors":[{"entries":[{"key":"k"}],"limit":{"requests_per_unit":1,"unit":"UNKNOWN"}}]}`,
		`{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"x"}],"is_negative_hits":true}]}`,
		`{"domain":"api","descriptors":[{"entries":[{"key":"k","value":"v"}],"limit":{"requests_per_unit":1000,"unit":"SECOND","unit_multiplier":10}}]}`,
		`{"domain":"api","descriptors":[{"entries":[{"key":"k","value":"v"}],"limit":{"requests_per_unit":1,"unit":"YEAR","unit_multiplier":4294967295}}]}`,
		`{"domain":"api","descriptors":[{"entries":[{"key":"k","value":"v"}],"limit":{"requests_per_unit":1,"unit":"DAY","unit_multiplier":0}}]}`,
	} {
		var req rls.RateLimitRequest
		if err := protojson.Unmarshal([]byte(s), &req); err != nil {
			f.Fatal(err)
		}
		wire, _ := proto.Marshal(&req)
		f.Add(wire)
	}
	s := newService(f, backend.NewMemory(), Options{})
	f.Fuzz(func(t *testing.T, data []byte) {
		var req rls.RateLimitRequest
		if proto.Unmarshal(data, &req) != nil {
			return
		}
		in, err := rlswire.FromProto(&req)
		if err != nil {
			var ie *InputError
			if !errors.As(err, &ie) {
				t.Fatalf("not an InputError: %v", err)
			}
			return
		}
		checkDecide(t, s, in)
	})
}

func checkDecide(t *testing.T, s *Service, in *Request) {
	resp, err := s.Decide(context.Background(), in)
	if err != nil {
		var ie *InputError
		if !errors.As(err, &ie) {
			t.Fatalf("not an InputError: %v", err)
		}
		return
	}
	if len(resp.Statuses) != len(in.Descriptors) {
		t.Fatalf("%d statuses for %d descriptors", len(resp.Statuses), len(in.Descriptors))
	}
	over := false
	for _, st := range resp.Statuses {
		over = over || st.Code == CodeOverLimit
	}
	if over != (resp.Code == CodeOverLimit) {
		t.Fatalf("overall %v does not follow the statuses %+v", resp.Code, resp.Statuses)
	}
	for _, st := range resp.Statuses {
		if l := st.Limit; l != nil && !l.Unlimited && (l.Window() <= 0 || l.Window() > ratelimit.MaxPeriod) {
			t.Fatalf("decided under a limit whose period is %v: %+v", l.Window(), l)
		}
	}
	rlswire.ToProto(resp)
	checkapi.FromDecision(resp)
}
