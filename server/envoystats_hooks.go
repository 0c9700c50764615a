package server

import (
	"context"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"

	"github.com/floodgate-dev/floodgate/ratelimit"
	"github.com/floodgate-dev/floodgate/server/config"
	"github.com/floodgate-dev/floodgate/server/envoystats"
)

// envoyproxy/ratelimit's StatsD statistics (Options.EnvoyStats): the
// core's observer, and the counts of envoy's own front (envoy.go) and of
// the server.

// envoyObserver is the core's observer (decide.go) that counts
// envoyproxy/ratelimit's statistics.
type envoyObserver struct {
	es *envoystats.Stats
	// rules are the counters of the current configuration's limits whose
	// stats key is the same for every request.
	rules atomic.Pointer[map[*config.Limit]*envoystats.Rule]
}

// configSet prepares cfg's counters and counts config_load_success.
func (o *envoyObserver) configSet(cfg *config.Config) {
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

// matched counts, as envoyproxy/ratelimit does before asking the store,
// total_hits of every descriptor with a limit, or domain_not_found of each
// descriptor of an unknown domain, and returns the counters of each
// descriptor (nil where none applies) as the request's tally.
func (o *envoyObserver) matched(req *Request, limits []*config.Limit, known bool) tally {
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

// storeFailed counts a store failure as a redis_error.
func (o *envoyObserver) storeFailed() { o.es.RedisError.Inc() }

// envoyTally is the counters of one request's descriptors (in buf, for a
// request of a few: one allocation).
type envoyTally struct {
	es    *envoystats.Stats
	rules []*envoystats.Rule
	buf   [4]*envoystats.Rule
}

// decided counts descriptor i's decision r (its limit l, its cost n) as
// envoyproxy/ratelimit's fixed window would have: the window's counter
// before and after the hits is worked out from what the limit had left. A
// denial the local cache found counts as envoy's local cache counts it.
func (t *envoyTally) decided(i int, l *config.Limit, n int64, r ratelimit.Result, cached bool) {
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

// envoyServiceError counts a request envoyproxy/ratelimit refuses with
// service_error and returns its error.
func (s *Service) envoyServiceError(msg string) error {
	if es := s.opts.EnvoyStats; es != nil {
		es.ServiceError.Inc()
	}
	return &envoyError{msg}
}

// envoyStatsGlobalShadow counts an answer SHADOW_MODE turned to OK.
func (s *Service) envoyStatsGlobalShadow() {
	if es := s.opts.EnvoyStats; es != nil {
		es.GlobalShadowMode.Inc()
	}
}

// EnvoyConfigLoaded counts a configuration load, successful or not, in
// envoyproxy/ratelimit's config_load_success and config_load_error (the
// server counts its failed loads; SetConfig counts its successes).
func (s *Service) EnvoyConfigLoaded(ok bool) {
	es := s.opts.EnvoyStats
	if es == nil {
		return
	}
	if ok {
		es.ConfigLoadSuccess.Inc()
	} else {
		es.ConfigLoadError.Inc()
	}
}

// envoyStatsUnary is envoyproxy/ratelimit's gRPC server interceptor
// (src/metrics, f2fb157): every unary call (ShouldRateLimit, the health
// service's Check) counts in ratelimit_server.METHOD.total_requests when it
// starts, and its time in ratelimit_server.METHOD.response_time when it
// ends, whatever its outcome. It runs first, so calls refused by the
// interceptors after it count too.
func envoyStatsUnary(es *envoystats.Stats) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		start := time.Now()
		m := es.GRPCMethod(info.FullMethod)
		m.TotalRequests.Inc()
		resp, err := handler(ctx, req)
		m.Done(time.Since(start))
		return resp, err
	}
}
