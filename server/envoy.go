package server

import (
	"context"
	"time"

	"github.com/floodgate-dev/floodgate/server/envoy"
)

// Envoy compatibility (Options.Envoy, package envoy), put around the core
// once by NewService: the counting policy, the front, and the hooks the
// server and the transports call.

// EnvoyOptions are envoy.Options, named here for the server's users.
type EnvoyOptions = envoy.Options

// HealthProbeInterval is how often the store is probed under
// EnvoyOptions.HealthFollowsStore.
const HealthProbeInterval = time.Second

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
// of the answer (envoy.Finish), except for answers of the failure mode.
func (s *Service) envoyDecide(ctx context.Context, req *Request) (*Response, error) {
	ctx, endSpan := s.tracer.EnvoyExecution(ctx)
	defer endSpan()
	if req != nil {
		switch {
		case req.Domain == "":
			return nil, s.envoyServiceError(envoy.TextEmptyDomain)
		case len(req.Descriptors) == 0:
			return nil, s.envoyServiceError(envoy.TextNoDescriptor)
		}
	}
	if err := s.validate(req); err != nil {
		return nil, err
	}
	if s.rules.Load() == nil {
		return nil, s.envoyServiceError(envoy.TextNoConfig)
	}
	resp, err := s.decideValid(ctx, req)
	if err != nil || resp.ByFailureMode {
		return resp, err
	}
	envoy.Finish(resp, time.Now(), s.opts.Envoy, s.opts.EnvoyStats)
	return resp, nil
}

// envoyServiceError counts a request envoyproxy/ratelimit refuses with
// service_error and returns its error.
func (s *Service) envoyServiceError(msg string) error {
	if es := s.opts.EnvoyStats; es != nil {
		es.ServiceError.Inc()
	}
	return &envoy.Error{Msg: msg}
}

// envoyConfigRejected counts a configuration load that failed (files or
// xDS) in envoyproxy/ratelimit's config_load_error; the observer counts the
// successes, in config_load_success, as SetConfig makes them current.
func (s *Service) envoyConfigRejected() {
	if es := s.opts.EnvoyStats; es != nil {
		es.ConfigLoadError.Inc()
	}
}

// envoyHealthy reports whether envoyproxy/ratelimit's health check would
// pass for s (envoy.Healthy); the caller adds draining.
func (s *Service) envoyHealthy() bool {
	cfg, _, _ := s.Config()
	return envoy.Healthy(s.opts.Envoy, cfg)
}

// envoyDynamicMetadataOn reports whether RLS responses carry
// dynamic_metadata (EnvoyOptions.DynamicMetadata in envoy mode).
func (s *Service) envoyDynamicMetadataOn() bool {
	return s.opts.Envoy.Enabled && s.opts.Envoy.DynamicMetadata
}
