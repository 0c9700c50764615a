// Package envoy is envoyproxy/ratelimit's behaviour where it differs from
// floodgate's (floodgate serve --compat envoy), as pieces the server puts
// around its core once at start-up: Options (its settings), Finish (the
// form of its answer), its error texts, DynamicMetadata, Healthy, an
// Observer counting its StatsD statistics, and StatsInterceptor. What the
// core counts differently (each descriptor on its own, spending past the
// limit) is in Options' documentation; the server reads it from there.
package envoy

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"sync/atomic"
	"time"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/floodgate-dev/floodgate/ratelimit"
	"github.com/floodgate-dev/floodgate/server/config"
	"github.com/floodgate-dev/floodgate/server/decision"
	"github.com/floodgate-dev/floodgate/server/envoystats"
)

// Options select envoyproxy/ratelimit's behaviour where it differs from
// floodgate's (`floodgate serve --compat envoy`). With Enabled false, the
// other fields are ignored and floodgate's own behaviour applies.
//
// With Enabled, as envoyproxy/ratelimit (commit f2fb157) does:
//   - duration_until_reset is in whole seconds: the limit's period (its
//     unit's length, times its unit_multiplier) less the Unix time modulo
//     it (its utils.CalculateReset), for every descriptor with a limit,
//     over it or not;
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
type Options struct {
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
	// (DynamicMetadata).
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
	TextNoConfig     = "no rate limit configuration loaded"
	TextEmptyDomain  = "rate limit domain must not be empty"
	TextNoDescriptor = "rate limit descriptor list must not be empty"
)

// Error is an error envoyproxy/ratelimit answers with its text alone (its
// serviceError and RedisError): the server's transports send it with gRPC
// code Unknown, and /json with 400.
type Error struct{ Msg string }

func (e *Error) Error() string { return e.Msg }

// Reset is envoyproxy/ratelimit's duration_until_reset for a limit whose
// period is period (config.Limit.Window: its unit's length, times its
// unit_multiplier) at now: the period less now's Unix seconds modulo it, in
// whole seconds (1 to the period's length). It is 0 for a period under a
// second.
func Reset(period time.Duration, now time.Time) time.Duration {
	sec := int64(period / time.Second)
	if sec <= 0 {
		return 0
	}
	return time.Duration(sec-now.Unix()%sec) * time.Second
}

// Finish makes resp, decided by floodgate's core, envoyproxy/ratelimit's
// answer under o at now: whole-second resets, remaining 0 when over the
// limit, the overall code under quota and global shadow modes, and the
// response headers. An answer the global shadow mode turned to OK is
// counted in es (nil: not counted).
func Finish(resp *decision.Response, now time.Time, o Options, es *envoystats.Stats) {
	e := &o
	var failedRate, failedQuota, totalQuota int
	var closest *decision.Status
	closestRemaining := int64(math.MaxUint32)
	for i := range resp.Statuses {
		st := &resp.Statuses[i]
		l := st.Limit
		if l == nil || l.Unlimited {
			continue
		}
		st.ResetAfter = Reset(l.Window(), now)
		if st.Code == decision.CodeOverLimit || st.Shadow {
			st.Remaining = 0
		}
		if e.ResponseHeaders && st.Remaining < closestRemaining {
			closest, closestRemaining = st, st.Remaining
		}
		quota := e.QuotaMode || l.QuotaMode
		if quota {
			totalQuota++
		}
		if st.Code != decision.CodeOverLimit {
			continue
		}
		if quota {
			failedQuota++
		} else {
			failedRate++
			closest, closestRemaining = st, 0
		}
	}
	resp.Code = decision.CodeOK
	if failedRate > 0 || totalQuota > 0 && totalQuota == failedQuota {
		resp.Code = decision.CodeOverLimit
	}
	if resp.Code == decision.CodeOverLimit && e.ShadowMode {
		resp.Code = decision.CodeOK
		if es != nil {
			es.GlobalShadowMode.Inc()
		}
	}
	if e.ResponseHeaders && closest != nil {
		resp.Headers = []decision.Header{
			{Key: orString(e.LimitHeader, "RateLimit-Limit"), Value: strconv.FormatUint(uint64(closest.Limit.RequestsPerUnit), 10)},
			{Key: orString(e.RemainingHeader, "RateLimit-Remaining"), Value: strconv.FormatInt(clampRemaining(closest.Remaining), 10)},
			{Key: orString(e.ResetHeader, "RateLimit-Reset"), Value: strconv.FormatInt(int64(Reset(closest.Limit.Window(), now)/time.Second), 10)},
		}
	}
}

func clampRemaining(v int64) int64 { return min(max(v, 0), math.MaxUint32) }

func orString(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// Healthy reports whether envoyproxy/ratelimit's health check would pass
// under o with cfg loaded (nil: none): with HealthyWithAtLeastOneConfig,
// once a configuration with a domain is loaded; else always (the server
// adds draining and the store).
func Healthy(o Options, cfg *config.Config) bool {
	return !o.HealthyWithAtLeastOneConfig || cfg != nil && len(cfg.Domains) > 0
}

// DynamicMetadata is the dynamic_metadata of resp, the answer to req, as
// envoyproxy/ratelimit (its ratelimitToMetadata) builds it under
// RESPONSE_DYNAMIC_METADATA (Options.DynamicMetadata); nil without req or
// resp. Its fields:
//   - domain: the request's domain;
//   - descriptors: one struct per descriptor, with entries (a list of
//     "key=value"), limit (the override's protobuf text, when the descriptor
//     has one) and hitsAddend (the descriptor's own, when set);
//   - hitsAddend: the request's hits_addend, when not 0;
//   - metadata: the metadata of the limits of the descriptors that passed
//     (not over their limit, not unlimited), merged in request order: the
//     first value of a key wins, except that two mappings merge.
func DynamicMetadata(req *rls.RateLimitRequest, resp *decision.Response) *structpb.Struct {
	if req == nil || resp == nil {
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
		if l == nil || l.Unlimited || st.Code == decision.CodeOverLimit || l.Metadata == nil {
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

// Observer is a decision.Observer that counts envoyproxy/ratelimit's
// statistics in es. It is safe for concurrent use.
type Observer struct {
	es *envoystats.Stats
	// rules are the counters of the current configuration's limits whose
	// stats key is the same for every request.
	rules atomic.Pointer[map[*config.Limit]*envoystats.Rule]
}

// ConfigSet prepares cfg's counters and counts config_load_success.
func (o *Observer) ConfigSet(cfg *config.Config) {
	rules := map[*config.Limit]*envoystats.Rule{}
	for name, d := range cfg.Domains {
		for _, l := range d.Limits() {
			if !l.Unlimited && !l.EnvoyStatKeyVaries() {
				rules[l] = o.es.Rule(l.EnvoyStatKey(name, nil))
			}
		}
	}
	o.rules.Store(&rules)
	o.es.ConfigLoadSuccess.Inc()
}

// Matched counts, as envoyproxy/ratelimit does before asking the store,
// total_hits of every descriptor with a limit, or domain_not_found of each
// descriptor of an unknown domain, and returns the counters of each
// descriptor (nil where none applies) as the request's tally.
func (o *Observer) Matched(req *decision.Request, limits []*config.Limit, known bool) decision.Tally {
	if !known {
		o.es.DomainNotFound(req.Domain, len(req.Descriptors))
		return nil
	}
	var fixed map[*config.Limit]*envoystats.Rule
	if p := o.rules.Load(); p != nil {
		fixed = *p
	}
	t := &envoyTally{es: o.es}
	if len(limits) <= len(t.buf) {
		t.rules = t.buf[:len(limits)]
	} else {
		t.rules = make([]*envoystats.Rule, len(limits))
	}
	for i, l := range limits {
		if l == nil || l.Unlimited {
			continue
		}
		d := &req.Descriptors[i]
		r := fixed[l]
		switch {
		case d.Override != nil:
			r = o.es.Rule(envoystats.OverrideKey(req.Domain, d.Entries))
		case r == nil:
			r = o.es.Rule(l.EnvoyStatKey(req.Domain, d.Entries))
		}
		r.TotalHits.Add(uint64(d.Cost))
		t.rules[i] = r
	}
	return t
}

// StoreFailed counts a store failure as a redis_error.
func (o *Observer) StoreFailed() { o.es.RedisError.Inc() }

// envoyTally is the counters of one request's descriptors (in buf, for a
// request of a few: one allocation).
type envoyTally struct {
	es    *envoystats.Stats
	rules []*envoystats.Rule
	buf   [4]*envoystats.Rule
}

// Decided counts descriptor i's decision r (its limit l, its cost n) as
// envoyproxy/ratelimit's fixed window would have: the window's counter
// before and after the hits is worked out from what the limit had left. A
// denial the local cache found counts as envoy's local cache counts it.
func (t *envoyTally) Decided(i int, l *config.Limit, n int64, r ratelimit.Result, cached bool) {
	if t.rules[i] == nil {
		return
	}
	if cached {
		t.es.Decided(t.rules[i], l.RequestsPerUnit, 0, 0, uint64(n), l.ShadowMode, true)
		return
	}
	limit := int64(l.RequestsPerUnit)
	rem := min(max(r.Remaining, 0), limit)
	var before, after int64
	if r.RetryAfter == 0 {
		after = limit - rem
		before = max(after-n, 0)
	} else {
		before = limit - rem
		after = before + n
	}
	t.es.Decided(t.rules[i], l.RequestsPerUnit, uint64(before), uint64(after), uint64(n), l.ShadowMode, false)
}

// NewObserver returns an Observer counting in es.
func NewObserver(es *envoystats.Stats) *Observer { return &Observer{es: es} }

// StatsInterceptor is envoyproxy/ratelimit's gRPC server interceptor
// (src/metrics, f2fb157): every unary call (ShouldRateLimit, the health
// service's Check) counts in ratelimit_server.METHOD.total_requests when it
// starts, and its time in ratelimit_server.METHOD.response_time when it
// ends, whatever its outcome. It runs first, so calls refused by the
// interceptors after it count too.
func StatsInterceptor(es *envoystats.Stats) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		m := es.GRPCMethod(info.FullMethod)
		m.TotalRequests.Inc()
		resp, err := handler(ctx, req)
		m.Done(time.Since(start))
		return resp, err
	}
}
