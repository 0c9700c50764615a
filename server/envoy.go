package server

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"time"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/floodgate-dev/floodgate/server/config"
)

// EnvoyOptions select envoyproxy/ratelimit's behaviour where it differs from
// floodgate's (`floodgate serve --compat envoy`). With Enabled false, the
// other fields are ignored and floodgate's own behaviour applies.
//
// With Enabled, as envoyproxy/ratelimit (commit f2fb157) does:
//   - duration_until_reset is in whole seconds: the unit's length less the
//     Unix time modulo it (its utils.CalculateReset), for every descriptor
//     with a limit, over it or not;
//   - the descriptors of a request are decided each on its own: those within
//     their limits are counted even when another is over its limit (unless
//     StopIncrementWhenOverLimit), and a descriptor over its limit spends
//     what its limit had left (its counter goes past the limit), so the
//     window stays over the limit;
//   - an over-limit descriptor (shadow mode included) reports
//     limit_remaining 0;
//   - quota mode (QuotaMode, or a descriptor's quota_mode) and global shadow
//     mode (ShadowMode) decide the overall code as envoy does;
//   - a request with an empty domain or no descriptors, or before any
//     configuration is loaded, is answered with envoy's error texts (gRPC
//     code Unknown; /json 400 "Bad Request").
type EnvoyOptions struct {
	Enabled bool
	// StopIncrementWhenOverLimit is STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT:
	// when one descriptor is over its limit, the others are not counted.
	StopIncrementWhenOverLimit bool
	// ShadowMode is the global SHADOW_MODE: an OVER_LIMIT overall code is
	// answered OK; the statuses keep their codes.
	ShadowMode bool
	// QuotaMode is the global QUOTA_MODE: every descriptor is a quota
	// descriptor, which makes the overall code OVER_LIMIT only when every
	// quota descriptor is over its limit.
	QuotaMode bool
	// ResponseHeaders is LIMIT_RESPONSE_HEADERS_ENABLED: the response carries
	// response_headers_to_add with the limit, remaining and reset (seconds)
	// of the descriptor closest to its limit (the last over-limit one, when
	// any is). The header names are LimitHeader, RemainingHeader and
	// ResetHeader; RateLimit-Limit, RateLimit-Remaining and RateLimit-Reset
	// when empty.
	ResponseHeaders                           bool
	LimitHeader, RemainingHeader, ResetHeader string
	// HealthyWithAtLeastOneConfig is HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED:
	// health checks fail until a configuration with at least one domain is
	// loaded.
	HealthyWithAtLeastOneConfig bool
	// DynamicMetadata is RESPONSE_DYNAMIC_METADATA: the RLS response (gRPC
	// and /json) carries dynamic_metadata as envoyproxy/ratelimit builds it
	// (envoyDynamicMetadata).
	DynamicMetadata bool
	// MergeDomainConfig is MERGE_DOMAIN_CONFIG: configuration files of one
	// domain merge (config.LoadOptions.MergeDomains) rather than being an
	// error.
	MergeDomainConfig bool
	// HealthFollowsStore is REDIS_HEALTH_CHECK_ACTIVE_CONNECTION: health
	// checks also fail while the store does not answer (a probe every
	// HealthProbeInterval, envoy's connection events), and pass again once it
	// does.
	HealthFollowsStore bool
}

// HealthProbeInterval is how often the store is probed under
// EnvoyOptions.HealthFollowsStore.
const HealthProbeInterval = time.Second

// Envoy's error texts, which its clients see.
const (
	envoyNoConfig     = "no rate limit configuration loaded"
	envoyEmptyDomain  = "rate limit domain must not be empty"
	envoyNoDescriptor = "rate limit descriptor list must not be empty"
)

// envoyError is an error envoyproxy/ratelimit answers with its text alone
// (its serviceError and RedisError): gRPC code Unknown, /json 400.
type envoyError struct{ msg string }

func (e *envoyError) Error() string { return e.msg }

// envoyReset is envoyproxy/ratelimit's duration_until_reset for a limit of
// unit u at now: the unit's length less now's Unix seconds modulo it, in
// whole seconds (1 to the unit's length).
func envoyReset(u config.Unit, now time.Time) time.Duration {
	sec := int64(u.Duration() / time.Second)
	if sec <= 0 {
		return 0
	}
	return time.Duration(sec-now.Unix()%sec) * time.Second
}

// envoyPolicy is the core's counting policy under o (decide.go): with
// Enabled, every descriptor counted on its own unless
// StopIncrementWhenOverLimit, a descriptor over its limit spending what
// its limit had left, and descriptors without entries accepted.
func envoyPolicy(o EnvoyOptions) policy {
	if !o.Enabled {
		return policy{}
	}
	return policy{each: !o.StopIncrementWhenOverLimit, spendOverLimit: true, emptyDescriptors: true}
}

// envoyDecide is Decide in envoy compatibility mode: envoyproxy/ratelimit's
// checks, in its order and with its texts, around the core; then its form
// of the answer (envoyFinish), except for answers of the failure mode.
func (s *Service) envoyDecide(ctx context.Context, req *Request) (*Response, error) {
	ctx, endSpan := s.envoyExecutionSpan(ctx)
	defer endSpan()
	if req != nil {
		switch {
		case req.Domain == "":
			return nil, s.envoyServiceError(envoyEmptyDomain)
		case len(req.Descriptors) == 0:
			return nil, s.envoyServiceError(envoyNoDescriptor)
		}
	}
	if err := s.validate(req); err != nil {
		return nil, err
	}
	if s.rules.Load() == nil {
		return nil, s.envoyServiceError(envoyNoConfig)
	}
	resp, err := s.decideValid(ctx, req)
	if err != nil || resp.failureMode {
		return resp, err
	}
	s.envoyFinish(resp, time.Now())
	return resp, nil
}

// envoyFinish makes resp, decided as usual, envoyproxy/ratelimit's answer:
// whole-second resets, remaining 0 when over the limit, the overall code
// under quota and global shadow modes, and the response headers.
func (s *Service) envoyFinish(resp *Response, now time.Time) {
	e := &s.opts.Envoy
	var failedRate, failedQuota, totalQuota int
	var closest *Status
	closestRemaining := int64(math.MaxUint32)
	for i := range resp.Statuses {
		st := &resp.Statuses[i]
		l := st.Limit
		if l == nil || l.Unlimited {
			continue
		}
		st.ResetAfter = envoyReset(l.Unit, now)
		if st.Code == CodeOverLimit || st.Shadow {
			st.Remaining = 0
		}
		if e.ResponseHeaders && st.Remaining < closestRemaining {
			closest, closestRemaining = st, st.Remaining
		}
		quota := e.QuotaMode || l.QuotaMode
		if quota {
			totalQuota++
		}
		if st.Code != CodeOverLimit {
			continue
		}
		if quota {
			failedQuota++
		} else {
			failedRate++
			closest, closestRemaining = st, 0
		}
	}
	resp.Code = CodeOK
	if failedRate > 0 || totalQuota > 0 && totalQuota == failedQuota {
		resp.Code = CodeOverLimit
	}
	if resp.Code == CodeOverLimit && e.ShadowMode {
		resp.Code = CodeOK
		s.envoyStatsGlobalShadow()
	}
	if e.ResponseHeaders && closest != nil {
		resp.Headers = []Header{
			{orString(e.LimitHeader, "RateLimit-Limit"), strconv.FormatUint(uint64(closest.Limit.RequestsPerUnit), 10)},
			{orString(e.RemainingHeader, "RateLimit-Remaining"), strconv.FormatInt(clampRemaining(closest.Remaining), 10)},
			{orString(e.ResetHeader, "RateLimit-Reset"), strconv.FormatInt(int64(envoyReset(closest.Limit.Unit, now)/time.Second), 10)},
		}
	}
}

func clampRemaining(v int64) int64 { return int64(clampUint32(v)) }

func orString(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// envoyHealthy reports whether envoyproxy/ratelimit's health check would
// pass for s: with HealthyWithAtLeastOneConfig, once a configuration with a
// domain is loaded; else always (the caller adds draining).
func (s *Service) envoyHealthy() bool {
	if !s.opts.Envoy.HealthyWithAtLeastOneConfig {
		return true
	}
	rs := s.rules.Load()
	return rs != nil && len(rs.cfg.Domains) > 0
}

// envoyDynamicMetadataOn reports whether RLS responses carry
// dynamic_metadata (EnvoyOptions.DynamicMetadata in envoy mode).
func (s *Service) envoyDynamicMetadataOn() bool {
	return s.opts.Envoy.Enabled && s.opts.Envoy.DynamicMetadata
}

// envoyDynamicMetadata is the dynamic_metadata of resp, the answer to req,
// as envoyproxy/ratelimit (its ratelimitToMetadata) builds it; nil unless
// envoyDynamicMetadataOn, or without req. Its fields:
//   - domain: the request's domain;
//   - descriptors: one struct per descriptor, with entries (a list of
//     "key=value"), limit (the override's protobuf text, when the descriptor
//     has one) and hitsAddend (the descriptor's own, when set);
//   - hitsAddend: the request's hits_addend, when not 0;
//   - metadata: the metadata of the limits of the descriptors that passed
//     (not over their limit, not unlimited), merged in request order: the
//     first value of a key wins, except that two mappings merge.
func (s *Service) envoyDynamicMetadata(req *rls.RateLimitRequest, resp *Response) *structpb.Struct {
	if !s.envoyDynamicMetadataOn() || req == nil || resp == nil {
		return nil
	}
	fields := map[string]*structpb.Value{"domain": structpb.NewStringValue(req.GetDomain())}
	descs := make([]*structpb.Value, 0, len(req.GetDescriptors()))
	for _, d := range req.GetDescriptors() {
		if d == nil {
			continue
		}
		entries := make([]*structpb.Value, 0, len(d.GetEntries()))
		for _, e := range d.GetEntries() {
			entries = append(entries, structpb.NewStringValue(e.GetKey()+"="+e.GetValue()))
		}
		df := map[string]*structpb.Value{"entries": structpb.NewListValue(&structpb.ListValue{Values: entries})}
		if l := d.GetLimit(); l != nil {
			df["limit"] = structpb.NewStringValue(l.String())
		}
		if h := d.GetHitsAddend(); h != nil {
			df["hitsAddend"] = structpb.NewNumberValue(float64(h.GetValue()))
		}
		descs = append(descs, structpb.NewStructValue(&structpb.Struct{Fields: df}))
	}
	fields["descriptors"] = structpb.NewListValue(&structpb.ListValue{Values: descs})
	if h := req.GetHitsAddend(); h != 0 {
		fields["hitsAddend"] = structpb.NewNumberValue(float64(h))
	}
	passed := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for i := range resp.Statuses {
		st := &resp.Statuses[i]
		l := st.Limit
		if l == nil || l.Unlimited || st.Code == CodeOverLimit || l.Metadata == nil {
			continue
		}
		if m, ok := metadataValue(l.Metadata).GetKind().(*structpb.Value_StructValue); ok {
			mergeMetadata(passed, m.StructValue)
		}
	}
	if len(passed.Fields) > 0 {
		fields["metadata"] = structpb.NewStructValue(passed)
	}
	return &structpb.Struct{Fields: fields}
}

// mergeMetadata merges src into dest as envoyproxy/ratelimit does: a key
// dest lacks is added; a key both hold as mappings is merged; otherwise
// dest's value stays.
func mergeMetadata(dest, src *structpb.Struct) {
	for k, v := range src.GetFields() {
		old, ok := dest.Fields[k]
		if !ok {
			dest.Fields[k] = v
			continue
		}
		if ds, ss := old.GetStructValue(), v.GetStructValue(); ds != nil && ss != nil {
			mergeMetadata(ds, ss)
		}
	}
}

// metadataValue converts a limit's metadata, as the configuration decoded
// it, to a google.protobuf.Value: mappings to structs (keys as text),
// sequences to lists, numbers to numbers, and any other scalar to its text.
func metadataValue(v any) *structpb.Value {
	switch v := v.(type) {
	case nil:
		return structpb.NewNullValue()
	case map[string]any:
		f := make(map[string]*structpb.Value, len(v))
		for k, x := range v {
			f[k] = metadataValue(x)
		}
		return structpb.NewStructValue(&structpb.Struct{Fields: f})
	case map[any]any:
		f := make(map[string]*structpb.Value, len(v))
		for k, x := range v {
			f[fmt.Sprint(k)] = metadataValue(x)
		}
		return structpb.NewStructValue(&structpb.Struct{Fields: f})
	case []any:
		l := make([]*structpb.Value, len(v))
		for i, x := range v {
			l[i] = metadataValue(x)
		}
		return structpb.NewListValue(&structpb.ListValue{Values: l})
	case bool:
		return structpb.NewBoolValue(v)
	case string:
		return structpb.NewStringValue(v)
	case int:
		return structpb.NewNumberValue(float64(v))
	case int64:
		return structpb.NewNumberValue(float64(v))
	case uint64:
		return structpb.NewNumberValue(float64(v))
	case float64:
		return structpb.NewNumberValue(v)
	}
	return structpb.NewStringValue(fmt.Sprint(v))
}
