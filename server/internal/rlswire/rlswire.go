// Package rlswire reads Envoy's RateLimitRequest and writes its
// RateLimitResponse by hand, with protowire, rather than through the
// generated structs: proto.Unmarshal into them, conversion to a
// decision.Request, conversion back and proto.Marshal cost more CPU and
// allocations than a decision on the memory backend. Codec is the gRPC
// server's "proto" codec for Incoming and Outgoing; FromProto and ToProto
// are the generated path, kept for the server's library users and /json,
// and the reference the tests hold the hand-written one to.
package rlswire

import (
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate-dev/floodgate/server/config"
	"github.com/floodgate-dev/floodgate/server/decision"
)

// inputErrorf is a decision.InputError.
func inputErrorf(format string, args ...any) error {
	return &decision.InputError{Msg: fmt.Sprintf(format, args...)}
}

// Codec is the gRPC server's codec, named "proto": it reads Incoming
// and writes Outgoing by hand, and hands every other message (the health
// service's, the generated ones) to the proto codec it wraps. It is safe for
// concurrent use.
type Codec struct{ base encoding.CodecV2 }

// NewCodec returns an Codec around the registered "proto" codec.
func NewCodec() Codec { return Codec{base: encoding.GetCodecV2(grpcproto.Name)} }

// Name returns "proto".
func (c Codec) Name() string { return grpcproto.Name }

// Marshal encodes v. The only error of a *Outgoing is a rate limit name
// that is not valid UTF-8, which proto.Marshal rejects too.
func (c Codec) Marshal(v any) (mem.BufferSlice, error) {
	r, ok := v.(*Outgoing)
	if !ok {
		return c.base.Marshal(v)
	}
	size, err := r.size()
	if err != nil {
		return nil, err
	}
	// As grpc's proto codec does: small messages in a buffer of their own,
	// larger ones in a pooled one that gRPC frees once written.
	if mem.IsBelowBufferPoolingThreshold(size) {
		return mem.BufferSlice{mem.SliceBuffer(r.appendTo(make([]byte, 0, size)))}, nil
	}
	pool := mem.DefaultBufferPool()
	buf := pool.Get(size)
	*buf = r.appendTo((*buf)[:0])
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}

// Unmarshal decodes data into v. A *Incoming never fails: a malformed
// request is kept in it, to be answered InvalidArgument by the handler rather
// than Internal by gRPC. data is not kept.
func (c Codec) Unmarshal(data mem.BufferSlice, v any) error {
	w, ok := v.(*Incoming)
	if !ok {
		return c.base.Unmarshal(data, v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	w.Decode(buf.ReadOnlyData())
	if w.KeepRaw && w.Err == nil {
		raw := new(rls.RateLimitRequest)
		if proto.Unmarshal(buf.ReadOnlyData(), raw) == nil {
			w.Raw = raw
		}
	}
	return nil
}

// Incoming is an envoy.service.ratelimit.v3.RateLimitRequest read by
// hand: the decision.Request FromProto returns for it, or the InputError that
// proto.Unmarshal or FromProto gives. Its arrays back the descriptors and
// entries of a typical request, so that decoding one allocates the
// Incoming, the domain and one copy of the message for the entries'
// strings (and one decision.Override per limit override).
type Incoming struct {
	Req   decision.Request
	Err   error
	descs [4]decision.Descriptor
	ents  [8]config.Entry
	// keepRaw asks Unmarshal for raw, the request as proto.Unmarshal reads
	// it, which dynamic_metadata is built from (EnvoyOptions.DynamicMetadata).
	KeepRaw bool
	Raw     *rls.RateLimitRequest
	Resp    Outgoing // the answer, kept here to spare an allocation
}

// Decode sets w from msg, the wire bytes of a RateLimitRequest: w.Req to
// what FromProto returns once proto.Unmarshal has read msg, or w.Err to an
// InputError when either fails. w must be zero; msg is not kept.
//
// It reads msg as proto.Unmarshal does in proto3: unknown fields are skipped,
// and so is a known field with another wire type than its own; the last
// value of a scalar wins; an embedded message given twice is merged; strings
// must be valid UTF-8; a truncated or otherwise malformed message is an error.
func (w *Incoming) Decode(msg []byte) {
	d := wireDecoder{msg: msg, ents: w.ents[:0]}
	var descBuf [len(w.descs)]wireDescriptor
	descs := descBuf[:0]
	var hits uint32
	for pos, end := 0, len(msg); pos < end; {
		num, typ, p, err := d.tag(pos, end)
		if err != nil {
			w.Err = wireInputError(err)
			return
		}
		switch {
		case num == 1 && typ == protowire.BytesType: // domain
			lo, hi, err := d.str(p, end)
			if err != nil {
				w.Err = wireInputError(within("domain", err))
				return
			}
			w.Req.Domain, pos = string(msg[lo:hi]), hi // its own copy: metrics labels keep it
		case num == 2 && typ == protowire.BytesType: // descriptors
			i := len(descs)
			lo, hi, err := d.bytes(p, end)
			if err == nil {
				descs = append(descs, wireDescriptor{first: len(d.ents)})
				err = d.descriptor(lo, hi, &descs[i])
			}
			if err != nil {
				w.Err = wireInputError(within(fmt.Sprintf("descriptors[%d]", i), err))
				return
			}
			descs[i].end, pos = len(d.ents), hi
		case num == 3 && typ == protowire.VarintType: // hits_addend
			v, next, err := d.varint(p, end)
			if err != nil {
				w.Err = wireInputError(within("hits_addend", err))
				return
			}
			hits, pos = uint32(v), next
		default:
			if pos, err = d.skip(num, typ, p, end); err != nil {
				w.Err = wireInputError(err)
				return
			}
		}
	}

	cost := requestCost(hits)
	if len(descs) <= len(w.descs) {
		w.Req.Descriptors = w.descs[:len(descs):len(descs)]
	} else {
		w.Req.Descriptors = make([]decision.Descriptor, len(descs))
	}
	for i := range descs {
		f, dd := &descs[i], &w.Req.Descriptors[i]
		dd.Entries = d.ents[f.first:f.end:f.end]
		if err := f.apply(i, cost, dd); err != nil {
			w.Req, w.Err = decision.Request{}, err
			return
		}
	}
}

// wireDescriptor is a descriptor as decode reads it: its fields, and its
// entries, wireDecoder.ents[first:end].
type wireDescriptor struct {
	rlsDescriptor
	first, end int
}

// wireDecoder reads the fields of one message, msg. Its methods read
// msg[pos:end], end being the end of the (embedded) message being read, and
// return the position after what they read. Their errors are *wireError.
type wireDecoder struct {
	msg  []byte
	text string         // a copy of msg, made for the first non-empty entry string
	ents []config.Entry // the entries of every descriptor, in order
}

// descriptor reads an envoy.extensions.common.ratelimit.v3.RateLimitDescriptor
// into f, appending its entries to d.ents.
func (d *wireDecoder) descriptor(pos, end int, f *wireDescriptor) error {
	for pos < end {
		num, typ, p, err := d.tag(pos, end)
		if err != nil {
			return err
		}
		var name string // of the field read, for errors
		switch {
		case num == 1 && typ == protowire.BytesType: // entries
			j := len(d.ents) - f.first
			var lo, hi int
			if lo, hi, err = d.bytes(p, end); err == nil {
				err = d.entry(lo, hi)
				pos = hi
			}
			if err != nil {
				return within(fmt.Sprintf("entries[%d]", j), err)
			}
		case num == 2 && typ == protowire.BytesType: // limit
			name = "limit"
			var lo, hi int
			if lo, hi, err = d.bytes(p, end); err == nil {
				f.hasLimit = true
				err = d.override(lo, hi, &f.rlsDescriptor)
				pos = hi
			}
		case num == 3 && typ == protowire.BytesType: // hits_addend, a google.protobuf.UInt64Value
			name = "hits_addend"
			var lo, hi int
			if lo, hi, err = d.bytes(p, end); err == nil {
				f.hasHitsAddend = true
				err = d.wrapper(lo, hi, &f.hitsAddend)
				pos = hi
			}
		case num == 4 && typ == protowire.VarintType: // is_negative_hits
			name = "is_negative_hits"
			var v uint64
			if v, pos, err = d.varint(p, end); err == nil {
				f.negativeHits = protowire.DecodeBool(v)
			}
		default:
			pos, err = d.skip(num, typ, p, end)
		}
		if err != nil {
			return within(name, err)
		}
	}
	return nil
}

// entry reads a RateLimitDescriptor.Entry and appends it to d.ents.
func (d *wireDecoder) entry(pos, end int) error {
	var e config.Entry
	for pos < end {
		num, typ, p, err := d.tag(pos, end)
		if err != nil {
			return err
		}
		switch {
		case num == 1 && typ == protowire.BytesType: // key
			var lo, hi int
			if lo, hi, err = d.str(p, end); err != nil {
				return within("key", err)
			}
			e.Key, pos = d.substr(lo, hi), hi
		case num == 2 && typ == protowire.BytesType: // value
			var lo, hi int
			if lo, hi, err = d.str(p, end); err != nil {
				return within("value", err)
			}
			e.Value, pos = d.substr(lo, hi), hi
		default:
			if pos, err = d.skip(num, typ, p, end); err != nil {
				return err
			}
		}
	}
	d.ents = append(d.ents, e)
	return nil
}

// override reads a RateLimitDescriptor.RateLimitOverride into f, over what
// an earlier one set.
func (d *wireDecoder) override(pos, end int, f *rlsDescriptor) error {
	for pos < end {
		num, typ, p, err := d.tag(pos, end)
		if err != nil {
			return err
		}
		var name string
		switch {
		case num == 1 && typ == protowire.VarintType: // requests_per_unit
			name = "requests_per_unit"
			var v uint64
			if v, pos, err = d.varint(p, end); err == nil {
				f.requestsPerUnit = uint32(v)
			}
		case num == 2 && typ == protowire.VarintType: // unit, an open enum
			name = "unit"
			var v uint64
			if v, pos, err = d.varint(p, end); err == nil {
				f.unit = int32(v)
			}
		case num == 3 && typ == protowire.BytesType: // unit_multiplier, a google.protobuf.UInt32Value
			name = "unit_multiplier"
			var lo, hi int
			if lo, hi, err = d.bytes(p, end); err == nil {
				v := uint64(f.unitMultiplier)
				err = d.wrapper(lo, hi, &v)
				f.hasUnitMultiplier = true
				f.unitMultiplier, pos = uint32(v), hi
			}
		default:
			pos, err = d.skip(num, typ, p, end)
		}
		if err != nil {
			return within(name, err)
		}
	}
	return nil
}

// wrapper reads a google.protobuf.UInt64Value or UInt32Value: its value
// field, when present, replaces *v (the caller truncates a UInt32Value's).
func (d *wireDecoder) wrapper(pos, end int, v *uint64) error {
	for pos < end {
		num, typ, p, err := d.tag(pos, end)
		if err != nil {
			return err
		}
		if num == 1 && typ == protowire.VarintType {
			if *v, pos, err = d.varint(p, end); err != nil {
				return within("value", err)
			}
			continue
		}
		if pos, err = d.skip(num, typ, p, end); err != nil {
			return err
		}
	}
	return nil
}

// tag reads a field's tag as proto.Unmarshal does: a varint of at most 10
// bytes, a field number from 1 to protowire.MaxValidNumber, and no end-group
// wire type, since none of these messages is read as a group.
func (d *wireDecoder) tag(pos, end int) (protowire.Number, protowire.Type, int, error) {
	v, n := protowire.ConsumeVarint(d.msg[pos:end])
	if n < 0 {
		return 0, 0, 0, &wireError{problem: "field tag: " + parseProblem(n)}
	}
	num, typ := v>>3, protowire.Type(v&7)
	if num < uint64(protowire.MinValidNumber) || num > uint64(protowire.MaxValidNumber) {
		return 0, 0, 0, &wireError{problem: fmt.Sprintf("invalid field number %d", num)}
	}
	if typ == protowire.EndGroupType {
		return 0, 0, 0, &wireError{problem: fmt.Sprintf("end-group tag of field %d outside a group", num)}
	}
	return protowire.Number(num), typ, pos + n, nil
}

// varint reads a varint value.
func (d *wireDecoder) varint(pos, end int) (uint64, int, error) {
	v, n := protowire.ConsumeVarint(d.msg[pos:end])
	if n < 0 {
		return 0, 0, &wireError{problem: parseProblem(n)}
	}
	return v, pos + n, nil
}

// bytes reads a length-delimited value: it is msg[lo:hi].
func (d *wireDecoder) bytes(pos, end int) (lo, hi int, err error) {
	v, n := protowire.ConsumeBytes(d.msg[pos:end])
	if n < 0 {
		return 0, 0, &wireError{problem: parseProblem(n)}
	}
	return pos + n - len(v), pos + n, nil
}

// str reads a string value, which proto3 requires to be valid UTF-8: it is
// msg[lo:hi].
func (d *wireDecoder) str(pos, end int) (lo, hi int, err error) {
	if lo, hi, err = d.bytes(pos, end); err == nil && !utf8.Valid(d.msg[lo:hi]) {
		err = &wireError{problem: "invalid UTF-8"}
	}
	return lo, hi, err
}

// substr returns msg[lo:hi] as a substring of d.text, which it makes on
// first use: one allocation for all the strings of a request. A string kept
// beyond the request keeps the whole message's bytes alive; Decide keeps
// none of the entries' (the keys it stores are built from them).
func (d *wireDecoder) substr(lo, hi int) string {
	if lo == hi {
		return ""
	}
	if d.text == "" {
		d.text = string(d.msg)
	}
	return d.text[lo:hi]
}

// skip passes over the value of a field of wire type typ that is not read:
// an unknown one, or a known one with another wire type than its own, which
// proto.Unmarshal keeps as unknown too. An unknown group must be well formed.
func (d *wireDecoder) skip(num protowire.Number, typ protowire.Type, pos, end int) (int, error) {
	n := protowire.ConsumeFieldValue(num, typ, d.msg[pos:end])
	if n < 0 {
		return 0, &wireError{field: fmt.Sprint("field ", num), problem: parseProblem(n)}
	}
	return pos + n, nil
}

// parseProblem says what the negative length n of a protowire Consume
// function means ("unexpected EOF").
func parseProblem(n int) string {
	return strings.TrimPrefix(protowire.ParseError(n).Error(), "proto: ")
}

// wireError is a malformed part of a RateLimitRequest: field is its path from
// the message down ("descriptors[0].entries[1].key"), "" for the message
// itself.
type wireError struct{ field, problem string }

func (e *wireError) Error() string { return e.field + ": " + e.problem }

// within returns err, a *wireError of a field of the message named name, with
// its path from the enclosing message; a name of "" leaves it as it is.
func within(name string, err error) error {
	e := err.(*wireError)
	switch {
	case name == "":
	case e.field == "":
		e.field = name
	default:
		e.field = name + "." + e.field
	}
	return e
}

// wireInputError is the InputError of err, a *wireError of a RateLimitRequest.
func wireInputError(err error) error {
	e := err.(*wireError)
	if e.field == "" {
		return inputErrorf("malformed RateLimitRequest: %s", e.problem)
	}
	return inputErrorf("malformed RateLimitRequest: %s: %s", e.field, e.problem)
}

// Outgoing is a decision.Response that Codec writes as an
// envoy.service.ratelimit.v3.RateLimitResponse by hand: the message ToProto
// returns, fields in number order, so its bytes are those of a deterministic
// proto.Marshal. metadata, when not nil, is the encoding of its
// dynamic_metadata (a google.protobuf.Struct).
type Outgoing struct {
	*decision.Response
	Metadata []byte
}

// Field numbers of the response's messages.
const (
	respOverallCode = 1 // RateLimitResponse
	respStatuses    = 2
	respHeaders     = 3 // response_headers_to_add
	respMetadata    = 6 // dynamic_metadata

	headerKey   = 1 // envoy.config.core.v3.HeaderValue
	headerValue = 2

	statusCode               = 1 // DescriptorStatus
	statusCurrentLimit       = 2
	statusLimitRemaining     = 3
	statusDurationUntilReset = 4

	limitRequestsPerUnit = 1 // RateLimitResponse.RateLimit
	limitUnit            = 2
	limitName            = 3
	limitUnitMultiplier  = 4 // a google.protobuf.UInt32Value

	wrapperValue = 1 // google.protobuf.UInt32Value

	durationSeconds = 1 // google.protobuf.Duration
	durationNanos   = 2
)

// size returns the length of r's encoding. Its error is a rate limit name
// that is not valid UTF-8, which proto.Marshal refuses.
func (r *Outgoing) size() (int, error) {
	n := sizeVarintField(respOverallCode, enumValue(int32(r.Code)))
	for i := range r.Statuses {
		st := &r.Statuses[i]
		if l := st.Limit; l != nil && !l.Unlimited && !utf8.ValidString(l.Name) {
			return 0, fmt.Errorf("server: rate limit name %q is not valid UTF-8", l.Name)
		}
		n += sizeMessageField(respStatuses, statusSize(st))
	}
	for _, h := range r.Headers {
		if !utf8.ValidString(h.Key) || !utf8.ValidString(h.Value) {
			return 0, fmt.Errorf("server: response header %q is not valid UTF-8", h.Key)
		}
		n += sizeMessageField(respHeaders, headerSize(h))
	}
	if r.Metadata != nil {
		n += sizeMessageField(respMetadata, len(r.Metadata))
	}
	return n, nil
}

// appendTo appends r's encoding to b; r.size must have returned no error.
func (r *Outgoing) appendTo(b []byte) []byte {
	b = appendVarintField(b, respOverallCode, enumValue(int32(r.Code)))
	for i := range r.Statuses {
		st := &r.Statuses[i]
		b = protowire.AppendTag(b, respStatuses, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(statusSize(st)))
		b = appendStatus(b, st)
	}
	for _, h := range r.Headers {
		b = protowire.AppendTag(b, respHeaders, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(headerSize(h)))
		b = appendStringField(b, headerKey, h.Key)
		b = appendStringField(b, headerValue, h.Value)
	}
	if r.Metadata != nil {
		b = protowire.AppendTag(b, respMetadata, protowire.BytesType)
		b = protowire.AppendBytes(b, r.Metadata)
	}
	return b
}

// headerSize is the length of the HeaderValue of h.
func headerSize(h decision.Header) int {
	return sizeStringField(headerKey, h.Key) + sizeStringField(headerValue, h.Value)
}

// sizeStringField is the length of a string field; proto3 omits "".
func sizeStringField(num protowire.Number, v string) int {
	if v == "" {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeBytes(len(v))
}

// appendStringField appends a string field, unless v is "".
func appendStringField(b []byte, num protowire.Number, v string) []byte {
	if v == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, v)
}

// statusSize is the length of the DescriptorStatus of st.
func statusSize(st *decision.Status) int {
	l, remaining, reset := statusFields(st)
	n := sizeVarintField(statusCode, enumValue(int32(st.Code)))
	if l != nil {
		n += sizeMessageField(statusCurrentLimit, limitSize(l))
	}
	n += sizeVarintField(statusLimitRemaining, uint64(remaining))
	if reset > 0 {
		n += sizeMessageField(statusDurationUntilReset, durationSize(reset))
	}
	return n
}

// appendStatus appends the DescriptorStatus of st, whose size is statusSize.
func appendStatus(b []byte, st *decision.Status) []byte {
	l, remaining, reset := statusFields(st)
	b = appendVarintField(b, statusCode, enumValue(int32(st.Code)))
	if l != nil {
		b = protowire.AppendTag(b, statusCurrentLimit, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(limitSize(l)))
		b = appendVarintField(b, limitRequestsPerUnit, uint64(l.RequestsPerUnit))
		b = appendVarintField(b, limitUnit, enumValue(int32(l.Unit)))
		if l.Name != "" {
			b = protowire.AppendTag(b, limitName, protowire.BytesType)
			b = protowire.AppendString(b, l.Name)
		}
		if m := l.UnitMultiplier; m > 1 {
			b = protowire.AppendTag(b, limitUnitMultiplier, protowire.BytesType)
			b = protowire.AppendVarint(b, uint64(sizeVarintField(wrapperValue, uint64(m))))
			b = appendVarintField(b, wrapperValue, uint64(m))
		}
	}
	b = appendVarintField(b, statusLimitRemaining, uint64(remaining))
	if reset > 0 {
		secs, nanos := durationParts(reset)
		b = protowire.AppendTag(b, statusDurationUntilReset, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(durationSize(reset)))
		b = appendVarintField(b, durationSeconds, uint64(secs))
		b = appendVarintField(b, durationNanos, enumValue(nanos))
	}
	return b
}

// limitSize is the length of the RateLimitResponse.RateLimit of l. Its
// unit_multiplier is written when above 1: 0 and 1 both mean one unit.
func limitSize(l *config.Limit) int {
	n := sizeVarintField(limitRequestsPerUnit, uint64(l.RequestsPerUnit))
	n += sizeVarintField(limitUnit, enumValue(int32(l.Unit)))
	if l.Name != "" {
		n += protowire.SizeTag(limitName) + protowire.SizeBytes(len(l.Name))
	}
	if m := l.UnitMultiplier; m > 1 {
		n += sizeMessageField(limitUnitMultiplier, sizeVarintField(wrapperValue, uint64(m)))
	}
	return n
}

// durationSize is the length of the google.protobuf.Duration of d.
func durationSize(d time.Duration) int {
	secs, nanos := durationParts(d)
	return sizeVarintField(durationSeconds, uint64(secs)) + sizeVarintField(durationNanos, enumValue(nanos))
}

// durationParts splits d as durationpb.New does.
func durationParts(d time.Duration) (secs int64, nanos int32) {
	return int64(d / time.Second), int32(d % time.Second)
}

// enumValue is the varint of an int32 field or enum: negative values are
// sign-extended to 64 bits.
func enumValue(v int32) uint64 { return uint64(int64(v)) }

// sizeVarintField is the length of a varint field of value v; proto3 omits a
// zero value.
func sizeVarintField(num protowire.Number, v uint64) int {
	if v == 0 {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeVarint(v)
}

// appendVarintField appends a varint field, unless v is zero.
func appendVarintField(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

// sizeMessageField is the length of an embedded message field of length n.
func sizeMessageField(num protowire.Number, n int) int {
	return protowire.SizeTag(num) + protowire.SizeBytes(n)
}

// FromProto converts an Envoy request. The request's hits_addend applies to
// every descriptor without its own; 0 means 1, as in envoyproxy/ratelimit. A
// descriptor's own hits_addend is taken as given, so 0 peeks. Negative hits
// (is_negative_hits) are not supported: such a descriptor peeks. A limit
// override's unit_multiplier makes its period that many units (absent: one);
// 0, which Envoy's API forbids, is an InputError.
func FromProto(req *rls.RateLimitRequest) (*decision.Request, error) {
	if req == nil {
		return nil, inputErrorf("request is empty")
	}
	cost := requestCost(req.GetHitsAddend())
	out := &decision.Request{Domain: req.GetDomain(), Descriptors: make([]decision.Descriptor, len(req.GetDescriptors()))}
	for i, d := range req.GetDescriptors() {
		if d == nil {
			return nil, inputErrorf("descriptors[%d] is null", i)
		}
		dd := &out.Descriptors[i]
		dd.Entries = make([]config.Entry, len(d.GetEntries()))
		for j, e := range d.GetEntries() {
			dd.Entries[j] = config.Entry{Key: e.GetKey(), Value: e.GetValue()}
		}
		f := rlsDescriptor{negativeHits: d.GetIsNegativeHits()}
		if h := d.GetHitsAddend(); h != nil {
			f.hasHitsAddend, f.hitsAddend = true, h.GetValue()
		}
		if o := d.GetLimit(); o != nil {
			f.hasLimit, f.requestsPerUnit, f.unit = true, o.GetRequestsPerUnit(), int32(o.GetUnit())
			if m := o.GetUnitMultiplier(); m != nil {
				f.hasUnitMultiplier, f.unitMultiplier = true, m.GetValue()
			}
		}
		if err := f.apply(i, cost, dd); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// requestCost is the cost of a descriptor without a hits_addend of its own in
// a request whose hits_addend is h.
func requestCost(h uint32) int64 {
	if h == 0 {
		return 1
	}
	return int64(h)
}

// rlsDescriptor is what an Envoy RateLimitDescriptor says besides its
// entries, as FromProto and the hand-written decoder read it; its zero value
// is a descriptor that sets none of these fields.
type rlsDescriptor struct {
	hitsAddend        uint64 // its own hits_addend, when hasHitsAddend
	hasHitsAddend     bool
	negativeHits      bool
	hasLimit          bool // the fields below are its limit override's
	requestsPerUnit   uint32
	unit              int32 // envoy.type.v3.RateLimitUnit
	hasUnitMultiplier bool  // the unit_multiplier wrapper is present
	unitMultiplier    uint32
}

// apply sets the Cost and decision.Override of d, the i-th descriptor of a request
// whose cost is cost (requestCost). The error is an InputError naming
// descriptors[i].
func (f *rlsDescriptor) apply(i int, cost int64, d *decision.Descriptor) error {
	d.Cost = cost
	if f.hasHitsAddend {
		if f.hitsAddend > math.MaxInt64/2 {
			return inputErrorf("descriptors[%d].hits_addend %d is too large", i, f.hitsAddend)
		}
		d.Cost = int64(f.hitsAddend)
	}
	if f.negativeHits {
		d.Cost = 0
	}
	if f.hasLimit {
		// Envoy's API requires unit_multiplier > 0 when it is given; absent
		// is 1.
		if f.hasUnitMultiplier && f.unitMultiplier == 0 {
			return inputErrorf("descriptors[%d].limit.unit_multiplier must be at least 1, got 0", i)
		}
		d.Override = &decision.Override{RequestsPerUnit: f.requestsPerUnit, Unit: overrideUnit(f.unit), UnitMultiplier: max(f.unitMultiplier, 1)}
	}
	return nil
}

// overrideUnit maps envoy.type.v3.RateLimitUnit (UNKNOWN, SECOND, MINUTE,
// HOUR, DAY, MONTH, YEAR, WEEK) to a config.Unit; the two enums agree.
func overrideUnit(u int32) config.Unit { return config.Unit(u) }

// ToProto converts a decision.Response.
func ToProto(r *decision.Response) *rls.RateLimitResponse {
	out := &rls.RateLimitResponse{
		OverallCode: rls.RateLimitResponse_Code(r.Code),
		Statuses:    make([]*rls.RateLimitResponse_DescriptorStatus, len(r.Statuses)),
	}
	for i := range r.Statuses {
		st := &r.Statuses[i]
		ps := &rls.RateLimitResponse_DescriptorStatus{Code: rls.RateLimitResponse_Code(st.Code)}
		l, remaining, reset := statusFields(st)
		if l != nil {
			ps.CurrentLimit = &rls.RateLimitResponse_RateLimit{
				Name:            l.Name,
				RequestsPerUnit: l.RequestsPerUnit,
				Unit:            rls.RateLimitResponse_RateLimit_Unit(l.Unit),
			}
			if l.UnitMultiplier > 1 {
				ps.CurrentLimit.UnitMultiplier = wrapperspb.UInt32(l.UnitMultiplier)
			}
		}
		ps.LimitRemaining = remaining
		if reset > 0 {
			ps.DurationUntilReset = durationpb.New(reset)
		}
		out.Statuses[i] = ps
	}
	for _, h := range r.Headers {
		out.ResponseHeadersToAdd = append(out.ResponseHeadersToAdd, &corev3.HeaderValue{Key: h.Key, Value: h.Value})
	}
	return out
}

// statusFields returns what the DescriptorStatus of st says besides its code:
// the limit of current_limit (nil for none: no limit, or an unlimited one),
// limit_remaining, and duration_until_reset (0 for none). ToProto and the
// hand-written encoder both answer from it.
func statusFields(st *decision.Status) (current *config.Limit, remaining uint32, reset time.Duration) {
	l := st.Limit
	switch {
	case l == nil:
		return nil, 0, 0
	case l.Unlimited:
		return nil, math.MaxUint32, 0
	}
	return l, clampUint32(st.Remaining), max(st.ResetAfter, 0)
}

func clampUint32(v int64) uint32 {
	switch {
	case v < 0:
		return 0
	case v > math.MaxUint32:
		return math.MaxUint32
	}
	return uint32(v)
}
