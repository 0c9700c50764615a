package server

import (
	"context"
	"errors"
	"time"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/server/config"
	"github.com/floodgate-dev/floodgate/server/rlqs"
)

// QuotaOptions configure the rate limit quota service (RLQS, package
// server/rlqs); the zero value selects every default.
type QuotaOptions struct {
	// TTL is the assignment_time_to_live of every assignment, rounded up to
	// whole seconds; DefaultQuotaTTL when 0, at most MaxQuotaTTL. A bucket's
	// assignments last at least one and a half times the interval its data
	// plane reports at (rlqs.Options.TTL).
	TTL time.Duration
	// SweepInterval is how often a stream looks for buckets that stopped
	// reporting, to abandon them; one second when 0.
	SweepInterval time.Duration
}

// Bounds of the assignments' time to live.
const (
	DefaultQuotaTTL = rlqs.DefaultTTL
	MaxQuotaTTL     = rlqs.MaxTTL
)

// RLQS is Envoy's rate limit quota service, package rlqs's: each data plane
// is assigned its share of the limits of a Service, sized from the demand
// of every data plane on every server sharing the store. Server registers
// it.
type RLQS = rlqs.Service

// NewRLQS returns the quota service of s, configured by s's Options.Quota,
// with s's failure mode and entry limit; its store calls go through s's
// stores, timeouts and circuit breakers, and count in s's metrics.
func NewRLQS(s *Service) *RLQS {
	o := rlqs.Options{
		TTL:           s.opts.Quota.TTL,
		SweepInterval: s.opts.Quota.SweepInterval,
		FailureMode:   s.opts.FailureMode,
		MaxEntries:    s.opts.MaxEntries,
	}
	if m := s.opts.Metrics; m != nil {
		o.Metrics = &rlqs.Metrics{
			Streams: m.rlqsStreams,
			Actions: m.rlqsActions,
			Report:  func(code string, took time.Duration) { m.request("rlqs", code, took) },
		}
	}
	return rlqs.New(quotaCore{s}, o)
}

// quotaCore is a Service as the quota service's rlqs.Core.
type quotaCore struct{ s *Service }

func (c quotaCore) Config() *config.Config {
	cfg, _, _ := c.s.Config()
	return cfg
}

func (c quotaCore) Now() time.Time { return c.s.now() }

func (c quotaCore) Store(ctx context.Context, l *config.Limit, entries []config.Entry, fn func(context.Context, backend.Backend, string) error) error {
	st, key := c.s.storeOf(l), stateKey(l, entries)
	return c.s.callStore(ctx, st, []int{st.breakers.Of(key)}, func(ctx context.Context) error {
		return fn(ctx, st.b, key)
	})
}

func (c quotaCore) StoreFailed(ctx context.Context, domain string, err error) bool {
	var gone *callerGoneError
	if errors.As(err, &gone) {
		return false
	}
	c.s.storeFailed(ctx, domain, err)
	return true
}

func (c quotaCore) Authorize(ctx context.Context, domain string) error {
	return c.s.authorize(ctx, domain)
}
