package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/server/config"
	"github.com/floodgate-dev/floodgate/server/internal/rlswire"
)

func wireEntry(k, v string) *rlscommon.RateLimitDescriptor_Entry {
	return &rlscommon.RateLimitDescriptor_Entry{Key: k, Value: v}
}

// wireDesc is a descriptor of the entries kv (key, value, key, value...).
func wireDesc(kv ...string) *rlscommon.RateLimitDescriptor {
	d := &rlscommon.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, wireEntry(kv[i], kv[i+1]))
	}
	return d
}

func withHits(d *rlscommon.RateLimitDescriptor, h uint64) *rlscommon.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(h)
	return d
}

func withLimit(d *rlscommon.RateLimitDescriptor, rpu uint32, unit typev3.RateLimitUnit, mult *wrapperspb.UInt32Value) *rlscommon.RateLimitDescriptor {
	d.Limit = &rlscommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: rpu, Unit: unit, UnitMultiplier: mult}
	return d
}

func mustMarshal(t testing.TB, m proto.Message) []byte {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// wireRequestCases are RateLimitRequests as wire bytes: what proto.Marshal
// makes, and what it never makes (unknown fields, repeated and merged
// fields, other wire types, malformed messages).
func wireRequestCases(t testing.TB) []struct {
	name string
	wire []byte
} {
	type tc = struct {
		name string
		wire []byte
	}
	var cases []tc
	msg := func(name string, req *rls.RateLimitRequest) {
		cases = append(cases, tc{name, mustMarshal(t, req)})
	}
	raw := func(name string, b []byte) { cases = append(cases, tc{name, b}) }
	tag := func(b []byte, num protowire.Number, typ protowire.Type) []byte {
		return protowire.AppendTag(b, num, typ)
	}
	bytesField := func(b []byte, num protowire.Number, v []byte) []byte {
		return protowire.AppendBytes(tag(b, num, protowire.BytesType), v)
	}
	varintField := func(b []byte, num protowire.Number, v uint64) []byte {
		return protowire.AppendVarint(tag(b, num, protowire.VarintType), v)
	}
	entryBytes := func(k, v string) []byte { return mustMarshal(t, wireEntry(k, v)) }
	// unknown is one field of every wire type, a group with a nested group
	// among them, under numbers none of these messages uses.
	var unknown []byte
	unknown = varintField(unknown, 100, 1<<40)
	unknown = protowire.AppendFixed32(tag(unknown, 101, protowire.Fixed32Type), 7)
	unknown = protowire.AppendFixed64(tag(unknown, 102, protowire.Fixed64Type), 8)
	unknown = bytesField(unknown, 103, []byte("\xff not UTF-8 and not read"))
	unknown = tag(unknown, 104, protowire.StartGroupType)
	unknown = varintField(unknown, 1, 5)
	unknown = tag(unknown, 105, protowire.StartGroupType)
	unknown = tag(unknown, 105, protowire.EndGroupType)
	unknown = tag(unknown, 104, protowire.EndGroupType)

	msg("empty", &rls.RateLimitRequest{})
	msg("domain only", &rls.RateLimitRequest{Domain: "api"})
	msg("typical", &rls.RateLimitRequest{Domain: "api", Descriptors: []*rlscommon.RateLimitDescriptor{
		wireDesc("remote_address", "10.0.0.1", "path", "/upload"), wireDesc("user", "gil")}})
	msg("empty descriptor, entry and strings", &rls.RateLimitRequest{Domain: "api", Descriptors: []*rlscommon.RateLimitDescriptor{
		{}, {Entries: []*rlscommon.RateLimitDescriptor_Entry{{}}}, wireDesc("", "v"), wireDesc("k", "")}})
	msg("empty override and hits_addend messages", &rls.RateLimitRequest{Domain: "api", Descriptors: []*rlscommon.RateLimitDescriptor{
		{Entries: []*rlscommon.RateLimitDescriptor_Entry{wireEntry("k", "v")}, HitsAddend: &wrapperspb.UInt64Value{},
			Limit: &rlscommon.RateLimitDescriptor_RateLimitOverride{UnitMultiplier: &wrapperspb.UInt32Value{}}}}})
	msg("unicode and NUL", &rls.RateLimitRequest{Domain: "ドメイン", Descriptors: []*rlscommon.RateLimitDescriptor{
		wireDesc("🔑", "välue\x00with NUL", "k\u2028", "\U0010FFFF")}})
	msg("request hits_addend", &rls.RateLimitRequest{Domain: "api", HitsAddend: 5, Descriptors: []*rlscommon.RateLimitDescriptor{wireDesc("k", "v")}})
	msg("request hits_addend max", &rls.RateLimitRequest{Domain: "api", HitsAddend: math.MaxUint32, Descriptors: []*rlscommon.RateLimitDescriptor{wireDesc("k", "v")}})
	msg("descriptor hits_addend at both levels", &rls.RateLimitRequest{Domain: "api", HitsAddend: 5, Descriptors: []*rlscommon.RateLimitDescriptor{
		withHits(wireDesc("k", "v"), 0), withHits(wireDesc("k", "v"), 7), wireDesc("k", "v"), withHits(wireDesc("k", "v"), math.MaxInt64/2)}})
	msg("descriptor hits_addend too large", &rls.RateLimitRequest{Domain: "api", Descriptors: []*rlscommon.RateLimitDescriptor{
		wireDesc("k", "v"), withHits(wireDesc("k", "v"), math.MaxInt64/2+1)}})
	msg("descriptor hits_addend max", &rls.RateLimitRequest{Domain: "api", Descriptors: []*rlscommon.RateLimitDescriptor{withHits(wireDesc("k", "v"), math.MaxUint64)}})
	msg("is_negative_hits", &rls.RateLimitRequest{Domain: "api", HitsAddend: 3, Descriptors: []*rlscommon.RateLimitDescriptor{
		{Entries: []*rlscommon.RateLimitDescriptor_Entry{wireEntry("k", "v")}, IsNegativeHits: true},
		{Entries: []*rlscommon.RateLimitDescriptor_Entry{wireEntry("k", "v")}, IsNegativeHits: true, HitsAddend: wrapperspb.UInt64(4)}}})
	msg("overrides", &rls.RateLimitRequest{Domain: "api", Descriptors: []*rlscommon.RateLimitDescriptor{
		withLimit(wireDesc("k", "v"), 10, typev3.RateLimitUnit_HOUR, nil),
		withLimit(wireDesc("k", "v"), math.MaxUint32, 7, wrapperspb.UInt32(1)),
		withLimit(wireDesc("k", "v"), 1, typev3.RateLimitUnit_UNKNOWN, wrapperspb.UInt32(0)),
		withLimit(wireDesc("k", "v"), 1, 99, nil),
		withLimit(wireDesc("k", "v"), 1, -3, nil)}})
	msg("unit_multiplier", &rls.RateLimitRequest{Domain: "api", Descriptors: []*rlscommon.RateLimitDescriptor{
		withLimit(wireDesc("k", "v"), 10, typev3.RateLimitUnit_SECOND, wrapperspb.UInt32(2)),
		withLimit(wireDesc("k", "v"), 1000, typev3.RateLimitUnit_SECOND, wrapperspb.UInt32(10)),
		withLimit(wireDesc("k", "v"), 1, typev3.RateLimitUnit_YEAR, wrapperspb.UInt32(11)), // past MaxPeriod: Decide refuses it
		withLimit(wireDesc("k", "v"), 1, typev3.RateLimitUnit_DAY, wrapperspb.UInt32(math.MaxUint32)),
		withLimit(wireDesc("k", "v"), 1, typev3.RateLimitUnit_UNKNOWN, wrapperspb.UInt32(5))}})
	msg("unit_multiplier 0", &rls.RateLimitRequest{Domain: "api", Descriptors: []*rlscommon.RateLimitDescriptor{
		withLimit(wireDesc("k", "v"), 10, typev3.RateLimitUnit_SECOND, wrapperspb.UInt32(0))}})
	msg("first error wins", &rls.RateLimitRequest{Domain: "api", Descriptors: []*rlscommon.RateLimitDescriptor{
		wireDesc("k", "v"), withLimit(wireDesc("k", "v"), 1, 1, wrapperspb.UInt32(5)), withHits(wireDesc("k", "v"), math.MaxUint64)}})
	many := &rls.RateLimitRequest{Domain: "api"}
	for i := range 9 {
		d := wireDesc()
		for j := range i + 5 {
			d.Entries = append(d.Entries, wireEntry(fmt.Sprint("k", j), fmt.Sprint("v", i)))
		}
		many.Descriptors = append(many.Descriptors, d)
	}
	msg("more descriptors and entries than rlswire.Incoming holds", many)

	typical := mustMarshal(t, &rls.RateLimitRequest{Domain: "api", HitsAddend: 2, Descriptors: []*rlscommon.RateLimitDescriptor{
		withLimit(withHits(wireDesc("user", "gil", "path", "/x"), 3), 5, typev3.RateLimitUnit_MINUTE, wrapperspb.UInt32(1))}})
	raw("unknown fields at every level", func() []byte {
		e := append(append([]byte{}, unknown...), entryBytes("k", "v")...)
		e = append(e, unknown...)
		hits := append(append([]byte{}, unknown...), mustMarshal(t, wrapperspb.UInt64(4))...)
		lim := append(append([]byte{}, unknown...), mustMarshal(t, &rlscommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 3, Unit: 2})...)
		mult := append(append([]byte{}, unknown...), mustMarshal(t, wrapperspb.UInt32(1))...)
		lim = bytesField(lim, 3, append(mult, unknown...))
		var d []byte
		d = append(d, unknown...)
		d = bytesField(d, 1, e)
		d = bytesField(d, 3, append(hits, unknown...))
		d = bytesField(d, 2, append(lim, unknown...))
		d = append(d, unknown...)
		b := append([]byte{}, unknown...)
		b = bytesField(b, 1, []byte("api"))
		b = append(b, unknown...)
		b = bytesField(b, 2, d)
		return append(b, unknown...)
	}())
	raw("known fields with other wire types are unknown", func() []byte {
		b := varintField(nil, 1, 7)                                                  // domain as a varint
		b = protowire.AppendFixed32(tag(b, 2, protowire.Fixed32Type), 1)             // descriptors as fixed32
		b = bytesField(b, 3, []byte{0x08, 0x05})                                     // hits_addend as bytes
		d := varintField(nil, 1, 1)                                                  // entries as a varint
		d = bytesField(d, 1, append(varintField(nil, 1, 5), entryBytes("", "v")...)) // key as a varint
		d = protowire.AppendFixed64(tag(d, 2, protowire.Fixed64Type), 1)             // limit as fixed64
		d = varintField(d, 3, 9)                                                     // hits_addend as a varint
		d = bytesField(d, 4, []byte{1})                                              // is_negative_hits as bytes
		d = bytesField(d, 2, bytesField(varintField(nil, 3, 9), 1, nil))             // unit_multiplier as a varint; requests_per_unit as bytes
		d = bytesField(d, 3, protowire.AppendFixed32(tag(nil, 1, protowire.Fixed32Type), 9))
		d = tag(d, 1, protowire.StartGroupType) // entries as a group
		d = tag(d, 1, protowire.EndGroupType)
		return bytesField(b, 2, d)
	}())
	raw("last scalar wins", func() []byte {
		b := bytesField(nil, 1, []byte("first"))
		b = varintField(b, 3, 9)
		b = bytesField(b, 2, varintField(bytesField(varintField(nil, 4, 1), 1, entryBytes("k", "v")), 4, 0)) // is_negative_hits true, then false
		b = bytesField(b, 1, []byte("api"))
		b = bytesField(b, 2, bytesField(nil, 1, append(entryBytes("k", "1"), entryBytes("", "2")...))) // value "1", then "2"
		return varintField(b, 3, 2)
	}())
	raw("embedded messages merge", func() []byte {
		d := bytesField(nil, 1, entryBytes("k", "v"))
		d = bytesField(d, 2, varintField(nil, 1, 10))                           // limit: requests_per_unit
		d = bytesField(d, 3, varintField(nil, 1, 6))                            // hits_addend 6
		d = bytesField(d, 2, varintField(nil, 2, 3))                            // limit: unit, merged
		d = bytesField(d, 3, nil)                                               // hits_addend again, without a value: still 6
		d = bytesField(d, 2, bytesField(nil, 3, varintField(nil, 1, 7)))        // unit_multiplier 7 ...
		d = bytesField(d, 2, bytesField(nil, 3, nil))                           // ... kept by an empty one ...
		d = bytesField(d, 2, bytesField(nil, 3, varintField(nil, 1, 1<<32+10))) // ... replaced by 1<<32+10, which is 10 as a uint32
		return bytesField(bytesField(nil, 1, []byte("api")), 2, d)
	}())
	raw("unit_multiplier 1<<32 is 0 as a uint32", func() []byte {
		d := bytesField(nil, 1, entryBytes("k", "v"))
		d = bytesField(d, 2, varintField(bytesField(nil, 3, varintField(nil, 1, 1<<32)), 2, 1))
		return bytesField(bytesField(nil, 1, []byte("api")), 2, d)
	}())
	raw("unit_multiplier given empty is 0", func() []byte {
		d := bytesField(nil, 1, entryBytes("k", "v"))
		d = bytesField(d, 2, varintField(bytesField(nil, 3, nil), 2, 1))
		return bytesField(bytesField(nil, 1, []byte("api")), 2, d)
	}())
	// overlong is the varint of v < 128 in n bytes, as no encoder writes it.
	overlong := func(v byte, n int) []byte {
		b := []byte{v | 0x80}
		for range n - 2 {
			b = append(b, 0x80)
		}
		return append(b, 0)
	}
	raw("varints: overlong, truncated to 32 bits, negative enum, bools", func() []byte {
		b := bytesField(nil, 1, []byte("api"))
		b = append(tag(b, 3, protowire.VarintType), overlong(5, 5)...)
		entriesTag := overlong(1<<3|byte(protowire.BytesType), 3)
		d := append(entriesTag, protowire.AppendBytes(nil, entryBytes("k", "v"))...)
		d = varintField(d, 4, 2)            // is_negative_hits: 2 is true
		lim := varintField(nil, 1, 1<<32+7) // requests_per_unit 7
		lim = varintField(lim, 2, 1<<33+4)  // unit DAY
		d = bytesField(d, 2, lim)
		d2 := bytesField(nil, 1, entryBytes("k", "v"))
		d2 = bytesField(d2, 2, varintField(nil, 2, math.MaxUint64)) // unit -1
		d2 = bytesField(d2, 3, append(tag(nil, 1, protowire.VarintType), overlong(9, 10)...))
		b = bytesField(b, 2, d)
		b = bytesField(b, 2, d2)
		return varintField(b, 3, 1<<32+3) // hits_addend 3
	}())

	// Malformed messages: proto.Unmarshal refuses them all.
	raw("invalid UTF-8 in domain", bytesField(nil, 1, []byte("ap\xffi")))
	raw("invalid UTF-8 in key", bytesField(nil, 2, bytesField(nil, 1, bytesField(nil, 1, []byte("\xc3")))))
	raw("invalid UTF-8 in value", bytesField(nil, 2, bytesField(nil, 1, bytesField(nil, 2, []byte("\xed\xa0\x80")))))
	raw("field number 0", varintField(nil, 0, 1))
	raw("field number too large", append(protowire.AppendVarint(nil, uint64(protowire.MaxValidNumber+1)<<3), 0))
	raw("field number beyond 32 bits", append(protowire.AppendVarint(nil, 1<<40), 0))
	raw("end group at the top", tag(nil, 5, protowire.EndGroupType))
	raw("end group in a descriptor", bytesField(nil, 2, tag(nil, 5, protowire.EndGroupType)))
	raw("group never ended", tag(nil, 5, protowire.StartGroupType))
	raw("group ended by another number", tag(tag(nil, 5, protowire.StartGroupType), 6, protowire.EndGroupType))
	raw("reserved wire type 6", []byte{0x0e, 0})
	raw("reserved wire type 7 in an entry", bytesField(nil, 2, bytesField(nil, 1, []byte{0x0f})))
	raw("varint of 11 bytes", append(tag(nil, 3, protowire.VarintType), 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01))
	raw("varint overflowing 64 bits", append(tag(nil, 3, protowire.VarintType), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02))
	raw("length past the end", []byte{0x0a, 0x05, 'a'})
	raw("length past the descriptor", bytesField(nil, 2, []byte{0x0a, 0x05, 0x0a, 0x01, 'k'}))
	raw("huge length", append(tag(nil, 1, protowire.BytesType), 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01))
	for n := range len(typical) {
		raw(fmt.Sprintf("typical cut at %d", n), typical[:n])
	}
	return cases
}

// checkWireDecode fails t unless the hand-written decoder reads wire as
// proto.Unmarshal and fromProto do: the same Request, the same InputError,
// or an InputError where proto.Unmarshal fails.
func checkWireDecode(t *testing.T, wire []byte) {
	t.Helper()
	var w rlswire.Incoming
	w.Decode(wire)
	var ie *InputError
	if w.Err != nil && !errors.As(w.Err, &ie) {
		t.Fatalf("%x: not an InputError: %v", wire, w.Err)
	}
	var req rls.RateLimitRequest
	if err := proto.Unmarshal(wire, &req); err != nil {
		if w.Err == nil {
			t.Fatalf("%x: proto.Unmarshal: %v; hand-written: %+v", wire, err, w.Req)
		}
		return
	}
	want, err := rlswire.FromProto(&req)
	switch {
	case err != nil && (w.Err == nil || w.Err.Error() != err.Error()):
		t.Fatalf("%x: fromProto: %v; hand-written: %+v, %v", wire, err, w.Req, w.Err)
	case err != nil:
	case w.Err != nil:
		t.Fatalf("%x: %v; fromProto: %+v", wire, w.Err, want)
	case !reflect.DeepEqual(&w.Req, want):
		t.Fatalf("%x:\nhand-written %s\nfromProto    %s", wire, formatRequest(&w.Req), formatRequest(want))
	}
}

func formatRequest(r *Request) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%q:", r.Domain)
	if r.Descriptors == nil {
		b.WriteString(" nil")
	}
	for _, d := range r.Descriptors {
		fmt.Fprintf(&b, " {%q nil=%v cost=%d", d.Entries, d.Entries == nil, d.Cost)
		if d.Override != nil {
			fmt.Fprintf(&b, " override=%+v", *d.Override)
		}
		b.WriteString("}")
	}
	return b.String()
}

// TestRLSWireDecode: the hand-written decoder reads every case as
// proto.Unmarshal and fromProto do, and its errors name the field at fault.
func TestRLSWireDecode(t *testing.T) {
	for _, c := range wireRequestCases(t) {
		t.Run(c.name, func(t *testing.T) { checkWireDecode(t, c.wire) })
	}
	// Spot checks of what the cases above only compare.
	var w rlswire.Incoming
	w.Decode(wireRequestCases(t)[2].wire)
	if w.Err != nil || w.Req.Domain != "api" || len(w.Req.Descriptors) != 2 || w.Req.Descriptors[0].Entries[1] != (config.Entry{Key: "path", Value: "/upload"}) {
		t.Fatalf("typical: %+v %v", w.Req, w.Err)
	}
	w = rlswire.Incoming{}
	w.Decode(mustMarshal(t, &rls.RateLimitRequest{Domain: "api", Descriptors: []*rlscommon.RateLimitDescriptor{
		withLimit(wireDesc("k", "v"), 1000, typev3.RateLimitUnit_SECOND, wrapperspb.UInt32(10)), withLimit(wireDesc("k", "v"), 5, typev3.RateLimitUnit_MINUTE, nil)}}))
	if o := w.Req.Descriptors[0].Override; w.Err != nil || *o != (Override{RequestsPerUnit: 1000, Unit: config.UnitSecond, UnitMultiplier: 10}) || o.Window() != 10*time.Second {
		t.Fatalf("unit_multiplier 10: %+v %v", w.Req, w.Err)
	}
	if o := w.Req.Descriptors[1].Override; *o != (Override{RequestsPerUnit: 5, Unit: config.UnitMinute, UnitMultiplier: 1}) || o.Window() != time.Minute {
		t.Fatalf("no unit_multiplier: %+v", o)
	}
	for _, c := range []struct {
		wire []byte
		want string
	}{
		{protowire.AppendBytes([]byte{0x12}, protowire.AppendBytes([]byte{0x0a}, []byte{0x0a, 0x01, 0xff})),
			"malformed RateLimitRequest: descriptors[0].entries[0].key: invalid UTF-8"},
		{[]byte{0x12, 0x03, 0x12, 0x01, 0x80}, "malformed RateLimitRequest: descriptors[0].limit: field tag: unexpected EOF"},
		{[]byte{0x12, 0x03, 0x12, 0x01, 0x08}, "malformed RateLimitRequest: descriptors[0].limit.requests_per_unit: unexpected EOF"},
		{[]byte{0x0a, 0x05, 'a'}, "malformed RateLimitRequest: domain: unexpected EOF"},
		{[]byte{0x12, 0x02, 0x2d, 0x01}, "malformed RateLimitRequest: descriptors[0].field 5: unexpected EOF"},
		{[]byte{0x00}, "malformed RateLimitRequest: invalid field number 0"},
		{[]byte{0x12, 0x04, 0x12, 0x02, 0x1a, 0x00}, "descriptors[0].limit.unit_multiplier must be at least 1, got 0"},
	} {
		var w rlswire.Incoming
		w.Decode(c.wire)
		if w.Err == nil || w.Err.Error() != c.want {
			t.Errorf("%x: %v, want %s", c.wire, w.Err, c.want)
		}
	}
}

// FuzzRLSWire: for any bytes, the hand-written decoder agrees with
// proto.Unmarshal and fromProto (checkWireDecode), and never panics.
func FuzzRLSWire(f *testing.F) {
	for _, c := range wireRequestCases(f) {
		f.Add(c.wire)
	}
	f.Fuzz(checkWireDecode)
}

// TestRLSWireEncode: the hand-written encoder writes the bytes of a
// deterministic proto.Marshal of toProto's message, for chosen and random
// responses, and refuses what proto.Marshal refuses.
func TestRLSWireEncode(t *testing.T) {
	named := &config.Limit{Name: "uploads", Unit: config.Unit(4), RequestsPerUnit: 2}
	responses := []*Response{
		{},
		{Code: CodeOK, Statuses: []Status{{}}},
		{Code: CodeOK, Statuses: []Status{{Code: CodeOK}, {Code: CodeOK, Limit: &config.Limit{Unlimited: true}, Remaining: math.MaxUint32}}},
		{Code: CodeOverLimit, Statuses: []Status{
			{Code: CodeOverLimit, Limit: named, Remaining: 0, ResetAfter: 1500 * time.Millisecond, RetryAfter: time.Second},
			{Code: CodeOK, Limit: &config.Limit{Unit: 1, RequestsPerUnit: math.MaxUint32}, Remaining: 1 << 40, ResetAfter: time.Nanosecond},
			{Code: CodeOK, Limit: &config.Limit{Name: "ünïcode ✓"}, Remaining: -5, ResetAfter: -time.Second},
			{Code: CodeOK, Limit: named, Remaining: 1, ResetAfter: 3 * time.Second},
			{Code: CodeOK, Limit: named, Remaining: 1, ResetAfter: math.MaxInt64},
			{Code: CodeOK, Limit: &config.Limit{Unit: 1, UnitMultiplier: 10, RequestsPerUnit: 1000}, Remaining: 999, ResetAfter: 7 * time.Second},
			{Code: CodeOK, Limit: &config.Limit{Name: "m", Unit: 2, UnitMultiplier: 1, RequestsPerUnit: 3}, Remaining: 2},
			{Code: CodeOK, Limit: &config.Limit{Unit: 4, UnitMultiplier: math.MaxUint32, RequestsPerUnit: 3}, Remaining: 2},
		}},
		{Code: -1, Statuses: []Status{{Code: 7, Limit: &config.Limit{Unit: -2, RequestsPerUnit: 1}}}},
	}
	big := &Response{Code: CodeOK}
	for i := range 100 {
		big.Statuses = append(big.Statuses, Status{Code: CodeOK, Limit: &config.Limit{Name: strings.Repeat("n", i), Unit: 2, RequestsPerUnit: uint32(i)}, Remaining: int64(i), ResetAfter: time.Duration(i) * time.Second})
	}
	responses = append(responses, big) // above the buffer pooling threshold
	rng := rand.New(rand.NewPCG(1, 2))
	for range 500 {
		r := &Response{Code: Code(rng.IntN(4) - 1)}
		for range rng.IntN(5) {
			st := Status{Code: Code(rng.IntN(3)), Remaining: rng.Int64N(1<<34) - 1<<33, ResetAfter: time.Duration(rng.Int64N(1<<40) - 1<<38)}
			switch rng.IntN(3) {
			case 1:
				st.Limit = &config.Limit{Unlimited: true}
			case 2:
				st.Limit = &config.Limit{Name: strings.Repeat("x", rng.IntN(3)), Unit: config.Unit(rng.IntN(9)), RequestsPerUnit: rng.Uint32() >> rng.IntN(32),
					UnitMultiplier: rng.Uint32() >> rng.IntN(33)}
			}
			r.Statuses = append(r.Statuses, st)
		}
		responses = append(responses, r)
	}

	responses = append(responses, &Response{Code: CodeOverLimit, Statuses: []Status{{Code: CodeOverLimit, Limit: named}},
		Headers: []Header{{Key: "RateLimit-Limit", Value: "2"}, {Key: "RateLimit-Remaining", Value: "0"}}})
	meta, err := structpb.NewStruct(map[string]any{"domain": "api", "descriptors": []any{map[string]any{"entries": []any{"user=gil"}}}, "hitsAddend": 2})
	if err != nil {
		t.Fatal(err)
	}
	metaWire, err := proto.MarshalOptions{Deterministic: true}.Marshal(meta)
	if err != nil {
		t.Fatal(err)
	}
	withMeta := len(responses)
	responses = append(responses, responses[len(responses)-1], responses[3])

	c := rlswire.NewCodec()
	for i, r := range responses {
		pm := rlswire.ToProto(r)
		w := &rlswire.Outgoing{Response: r}
		if i >= withMeta {
			pm.DynamicMetadata, w.Metadata = meta, metaWire
		}
		want, err := proto.MarshalOptions{Deterministic: true}.Marshal(pm)
		if err != nil {
			t.Fatal(err)
		}
		data, err := c.Marshal(w)
		if err != nil {
			t.Fatal(err)
		}
		if got := data.Materialize(); string(got) != string(want) {
			t.Fatalf("response %d:\nhand-written %x\nproto        %x", i, got, want)
		}
		data.Free()
	}

	// A name proto.Marshal refuses is refused.
	bad := &Response{Statuses: []Status{{Limit: &config.Limit{Name: "\xff"}}}}
	if _, err := proto.Marshal(rlswire.ToProto(bad)); err == nil {
		t.Fatal("proto.Marshal took invalid UTF-8")
	}
	if _, err := c.Marshal(&rlswire.Outgoing{Response: bad}); err == nil {
		t.Fatal("invalid UTF-8 encoded")
	}
}

// TestRLSCodecDelegates: messages other than rlswire.Incoming and wireResponse
// go through the proto codec.
func TestRLSCodecDelegates(t *testing.T) {
	c := rlswire.NewCodec()
	if c.Name() != "proto" {
		t.Fatalf("name %q", c.Name())
	}
	in := &healthpb.HealthCheckRequest{Service: "envoy.service.ratelimit.v3.RateLimitService"}
	data, err := c.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var out healthpb.HealthCheckRequest
	if err := c.Unmarshal(data, &out); err != nil || !proto.Equal(in, &out) {
		t.Fatalf("%v %v", &out, err)
	}
	data.Free()
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer{0x0a, 0x05}}, &out); err == nil {
		t.Fatal("malformed health request decoded")
	}
	// A request in several buffers, as gRPC hands over a large one.
	wire := mustMarshal(t, &rls.RateLimitRequest{Domain: "api", Descriptors: []*rlscommon.RateLimitDescriptor{wireDesc("user", "gil")}})
	var w rlswire.Incoming
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(wire[:3]), mem.SliceBuffer(wire[3:])}, &w); err != nil || w.Err != nil ||
		w.Req.Domain != "api" || w.Req.Descriptors[0].Entries[0].Value != "gil" {
		t.Fatalf("%+v %v %v", w.Req, w.Err, err)
	}
}

// rawCodec is a client codec that sends []byte as it is and receives into
// *[]byte: a client that can send any bytes.
type rawCodec struct{}

func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	return mem.BufferSlice{mem.SliceBuffer(v.([]byte))}, nil
}

func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	*v.(*[]byte) = data.Materialize()
	return nil
}

func (rawCodec) Name() string { return "proto" }

var _ encoding.CodecV2 = rawCodec{}

// TestRLSWireServer: the server, on the hand-written path, answers as a
// server of the generated one does; the token is still required; a
// malformed request is InvalidArgument; the health service still works.
func TestRLSWireServer(t *testing.T) {
	dir := t.TempDir()
	writeConfig(t, filepath.Join(dir, "api.yaml"), testYAML)
	srv := startServer(t, Config{ConfigPath: dir, Token: "tok"})

	// The reference: RLS as library users register it, on its own memory.
	refSrv := grpc.NewServer()
	rls.RegisterRateLimitServiceServer(refSrv, NewRLS(newService(t, backend.NewMemory(), Options{})))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go refSrv.Serve(ln)
	t.Cleanup(refSrv.Stop)

	dial := func(addr string) *grpc.ClientConn {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		return conn
	}
	conn, refConn := dial(srv.GRPCAddr()), dial(ln.Addr().String())
	client, ref := rls.NewRateLimitServiceClient(conn), rls.NewRateLimitServiceClient(refConn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	actx := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer tok")

	reqs := []*rls.RateLimitRequest{
		{Domain: "api", Descriptors: []*rlscommon.RateLimitDescriptor{wireDesc("user", "gil"), wireDesc("user", "vip"), wireDesc("path", "/upload", "user", "gil")}},
		{Domain: "api", HitsAddend: 2, Descriptors: []*rlscommon.RateLimitDescriptor{wireDesc("user", "hal"), withHits(wireDesc("user", "ann"), 0)}},
		{Domain: "api", Descriptors: []*rlscommon.RateLimitDescriptor{wireDesc("shadow", "s"), wireDesc("tenant", "t"), wireDesc("tenant_override", "t")}},
		{Domain: "api", Descriptors: []*rlscommon.RateLimitDescriptor{
			withLimit(wireDesc("k", "v"), 2, typev3.RateLimitUnit_DAY, nil), {Entries: []*rlscommon.RateLimitDescriptor_Entry{wireEntry("user", "neg")}, IsNegativeHits: true}}},
		{Domain: "unknown", Descriptors: []*rlscommon.RateLimitDescriptor{wireDesc("user", "gil")}},
		{Domain: "api"},
		{Descriptors: []*rlscommon.RateLimitDescriptor{wireDesc("user", "gil")}},
		{Domain: "api", Descriptors: []*rlscommon.RateLimitDescriptor{wireDesc("", "x")}},
		{Domain: "api", Descriptors: []*rlscommon.RateLimitDescriptor{withHits(wireDesc("user", "gil"), math.MaxUint64)}},
		{Domain: "api", Descriptors: []*rlscommon.RateLimitDescriptor{withLimit(wireDesc("k", "v"), 1, typev3.RateLimitUnit_UNKNOWN, nil)}},
		{Domain: "api", Descriptors: []*rlscommon.RateLimitDescriptor{withLimit(wireDesc("k", "v"), 1, typev3.RateLimitUnit_SECOND, wrapperspb.UInt32(3))}},
		{Domain: "api", Descriptors: []*rlscommon.RateLimitDescriptor{withLimit(wireDesc("k", "w"), 2, typev3.RateLimitUnit_HOUR, wrapperspb.UInt32(24)), wireDesc("user", "ivy")}},
		{Domain: "api", Descriptors: []*rlscommon.RateLimitDescriptor{withLimit(wireDesc("k", "v"), 1, typev3.RateLimitUnit_SECOND, wrapperspb.UInt32(0))}},
		{Domain: "api", Descriptors: []*rlscommon.RateLimitDescriptor{withLimit(wireDesc("k", "v"), 1, typev3.RateLimitUnit_YEAR, wrapperspb.UInt32(11))}},
	}
	for round := range 4 {
		for i, req := range reqs {
			got, err := client.ShouldRateLimit(actx, req)
			want, wantErr := ref.ShouldRateLimit(ctx, req)
			if status.Code(err) != status.Code(wantErr) || status.Convert(err).Message() != status.Convert(wantErr).Message() {
				t.Fatalf("round %d, request %d: %v, want %v", round, i, err, wantErr)
			}
			if err != nil {
				continue
			}
			// Both servers count to a reset of their own, a few
			// microseconds apart.
			for j, st := range got.Statuses {
				if w := want.Statuses[j]; (st.DurationUntilReset == nil) != (w.DurationUntilReset == nil) ||
					st.DurationUntilReset != nil && (st.DurationUntilReset.AsDuration()-w.DurationUntilReset.AsDuration()).Abs() > time.Second {
					t.Fatalf("round %d, request %d: %v, want %v", round, i, got, want)
				}
				st.DurationUntilReset, want.Statuses[j].DurationUntilReset = nil, nil
			}
			if !proto.Equal(got, want) {
				t.Fatalf("round %d, request %d: %v, want %v", round, i, got, want)
			}
		}
	}
	// The answer to an override of several units says so in its
	// current_limit, on both paths (compared above).
	got, err := client.ShouldRateLimit(actx, reqs[len(reqs)-3])
	if err != nil || got.Statuses[0].CurrentLimit.GetUnitMultiplier().GetValue() != 24 || got.Statuses[0].GetCode() != rls.RateLimitResponse_OVER_LIMIT ||
		got.Statuses[1].CurrentLimit.GetUnitMultiplier() != nil {
		t.Fatalf("unit_multiplier 24: %v %v", got, err)
	}

	if _, err := client.ShouldRateLimit(ctx, reqs[0]); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("without a token: %v", err)
	}
	invoke := func(ctx context.Context, conn *grpc.ClientConn, wire []byte) error {
		var out []byte
		return conn.Invoke(ctx, rls.RateLimitService_ShouldRateLimit_FullMethodName, wire, &out, grpc.ForceCodecV2(rawCodec{}))
	}
	badKey := protowire.AppendBytes([]byte{0x12}, protowire.AppendBytes([]byte{0x0a}, []byte{0x0a, 0x01, 0xff}))
	if err := invoke(ctx, conn, badKey); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("malformed, without a token: %v", err)
	}
	for _, wire := range [][]byte{badKey, {0x0a, 0x05, 'a'}, {0xff}} {
		if err := invoke(actx, conn, wire); status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), "malformed RateLimitRequest") {
			t.Fatalf("malformed %x: %v", wire, err)
		}
		// The generated path cannot tell: gRPC's codec fails before its
		// handler, with Internal.
		if err := invoke(ctx, refConn, wire); status.Code(err) != codes.Internal {
			t.Fatalf("malformed %x, generated path: %v", wire, err)
		}
	}
	if err := invoke(actx, conn, badKey); !strings.Contains(status.Convert(err).Message(), "descriptors[0].entries[0].key: invalid UTF-8") {
		t.Fatalf("the message does not name the field: %v", err)
	}

	h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "envoy.service.ratelimit.v3.RateLimitService"})
	if err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v", h, err)
	}
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "nope"}); status.Code(err) != codes.NotFound {
		t.Fatalf("health of an unknown service: %v", err)
	}

	mreq, _ := http.NewRequest("GET", "http://"+srv.HTTPAddr()+"/metrics", nil)
	mreq.Header.Set("Authorization", "Bearer tok")
	resp, err := http.DefaultClient.Do(mreq)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, want := range []string{
		`floodgate_requests_total{api="grpc",code="invalid"} 32`, // 7 invalid requests × 4 rounds, 4 malformed
		`floodgate_requests_total{api="grpc",code="unauthorized"} 2`,
	} {
		if !strings.Contains(string(body), want) {
			t.Errorf("no %s in\n%s", want, grepLines(string(body), "requests_total"))
		}
	}
}

// benchRequest is a request as Envoy sends it for a route with two actions.
func benchRequest(b *testing.B) []byte {
	return mustMarshal(b, &rls.RateLimitRequest{Domain: "api", Descriptors: []*rlscommon.RateLimitDescriptor{
		wireDesc("remote_address", "10.1.2.3", "path", "/upload"), wireDesc("user", "gil")}})
}

// BenchmarkRLSDecode: a request through the server's codec into a Request,
// by hand and by proto.Unmarshal and fromProto.
func BenchmarkRLSDecode(b *testing.B) {
	wire := benchRequest(b)
	data := mem.BufferSlice{mem.SliceBuffer(wire)}
	c := rlswire.NewCodec()
	b.Run("hand", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			w := new(rlswire.Incoming)
			if err := c.Unmarshal(data, w); err != nil || w.Err != nil {
				b.Fatal(err, w.Err)
			}
		}
	})
	b.Run("proto", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			req := new(rls.RateLimitRequest)
			if err := c.Unmarshal(data, req); err != nil {
				b.Fatal(err)
			}
			if _, err := rlswire.FromProto(req); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkRLSEncode: a Response through the server's codec, by hand and
// by toProto and proto.Marshal.
func BenchmarkRLSEncode(b *testing.B) {
	l := &config.Limit{Name: "uploads", Unit: 4, RequestsPerUnit: 100}
	r := &Response{Code: CodeOK, Statuses: []Status{
		{Code: CodeOK, Limit: l, Remaining: 42, ResetAfter: 3*time.Hour + 7*time.Millisecond},
		{Code: CodeOK, Limit: &config.Limit{Unlimited: true}, Remaining: math.MaxUint32},
	}}
	c := rlswire.NewCodec()
	b.Run("hand", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			data, err := c.Marshal(&rlswire.Outgoing{Response: r})
			if err != nil {
				b.Fatal(err)
			}
			data.Free()
		}
	})
	b.Run("proto", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			data, err := c.Marshal(rlswire.ToProto(r))
			if err != nil {
				b.Fatal(err)
			}
			data.Free()
		}
	})
}
