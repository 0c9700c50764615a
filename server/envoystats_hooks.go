package server

import (
	"context"
	"time"

	"google.golang.org/grpc"

	"github.com/floodgate-dev/floodgate/ratelimit"
	"github.com/floodgate-dev/floodgate/server/config"
	"github.com/floodgate-dev/floodgate/server/envoystats"
)

// envoyproxy/ratelimit's StatsD statistics (Options.EnvoyStats): the hooks
// Decide, SetConfig and fail call. With no EnvoyStats, each does nothing.

// envoyStatsRules prepares rs's counters of every limit whose stats key is
// the same for every request.
func (s *Service) envoyStatsRules(rs *ruleset) {
	es := s.opts.EnvoyStats
	if es == nil {
		return
	}
	rs.envoyRules = map[*config.Limit]*envoystats.Rule{}
	for name, d := range rs.cfg.Domains {
		for _, l := range d.Limits() {
			if !l.Unlimited && !l.EnvoyStatKeyVaries() {
				rs.envoyRules[l] = es.Rule(l.EnvoyStatKey(name, nil))
			}
		}
	}
}

// envoyStatsMatched counts, as envoyproxy/ratelimit does before asking the
// store, total_hits of every descriptor with a limit, or domain_not_found of
// each descriptor of an unknown domain; it returns the counters of each
// descriptor (nil where none applies), or nil without EnvoyStats.
func (s *Service) envoyStatsMatched(rs *ruleset, req *Request, limits []*config.Limit) []*envoystats.Rule {
	es := s.opts.EnvoyStats
	if es == nil {
		return nil
	}
	if rs.cfg.Domains[req.Domain] == nil {
		es.DomainNotFound(req.Domain, len(req.Descriptors))
		return nil
	}
	rules := make([]*envoystats.Rule, len(limits))
	for i, l := range limits {
		if l == nil || l.Unlimited {
			continue
		}
		d := &req.Descriptors[i]
		var r *envoystats.Rule
		switch {
		case d.Override != nil:
			r = es.Rule(envoystats.OverrideKey(req.Domain, d.Entries))
		case rs.envoyRules[l] != nil:
			r = rs.envoyRules[l]
		default:
			r = es.Rule(l.EnvoyStatKey(req.Domain, d.Entries))
		}
		r.TotalHits.Add(uint64(d.Cost))
		rules[i] = r
	}
	return rules
}

// envoyStatsDecided counts descriptor i's decision r (its limit l, its cost n)
// as envoyproxy/ratelimit's fixed window would have: the window's counter
// before and after the hits is worked out from what the limit had left.
func (s *Service) envoyStatsDecided(rules []*envoystats.Rule, i int, l *config.Limit, n int64, r ratelimit.Result) {
	if rules == nil || rules[i] == nil {
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
	s.opts.EnvoyStats.Decided(rules[i], l.RequestsPerUnit, uint64(before), uint64(after), uint64(n), l.ShadowMode, false)
}

// envoyServiceError counts a request envoyproxy/ratelimit refuses with
// service_error and returns its error.
func (s *Service) envoyServiceError(msg string) error {
	if es := s.opts.EnvoyStats; es != nil {
		es.ServiceError.Inc()
	}
	return &envoyError{msg}
}

// envoyStatsStoreFailed counts a store failure as a redis_error.
func (s *Service) envoyStatsStoreFailed() {
	if es := s.opts.EnvoyStats; es != nil {
		es.RedisError.Inc()
	}
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
