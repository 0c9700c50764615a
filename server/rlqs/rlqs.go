// Package rlqs serves Envoy's rate limit quota service (RLQS,
// envoy.service.rate_limit_quota.v3) for a decision service: each data
// plane (each stream) reports its usage of buckets and is assigned a token
// bucket per bucket, its share of the limit the bucket's key/value pairs
// match in the configuration. Shares are sized from the demand every data
// plane reports, on every server sharing the store (fleet.go), so that the
// fleet's shares add up to no more than the limit.
//
// The package decides nothing itself: the Core it is given holds the
// configuration and the stores, and runs every store call under the
// store's timeout and circuit breakers.
package rlqs

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rlqsv3 "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/server/config"
	"github.com/floodgate-dev/floodgate/server/decision"
)

// Options configure the quota service; the zero value of each field
// selects its default.
type Options struct {
	// TTL is the assignment_time_to_live of every assignment, rounded up to
	// whole seconds; DefaultTTL when 0. A bucket's assignments last at
	// least one and a half times the interval its data plane reports at (the
	// reports' time_elapsed), rounded up to whole seconds, so that they do not
	// expire between two reports; at most MaxTTL. A data plane that
	// stops reporting gives its share back when its assignment expires.
	TTL time.Duration
	// SweepInterval is how often a stream looks for buckets that stopped
	// reporting, to abandon them; one second when 0.
	SweepInterval time.Duration
	// FailureMode answers a bucket whose share the store could not size
	// (failAction).
	FailureMode decision.FailureMode
	// MaxEntries bounds the key/value pairs of a bucket; DefaultMaxEntries
	// when 0.
	MaxEntries int
	// Metrics, when set, counts streams, reports and actions.
	Metrics *Metrics
}

// DefaultMaxEntries is what a zero Options.MaxEntries means.
const DefaultMaxEntries = 32

// Metrics are where the quota service counts; each must be set.
type Metrics struct {
	// Streams is the number of open streams.
	Streams prometheus.Gauge
	// Actions counts bucket actions by domain and action: assign, abandon,
	// or unsized (the store could not size the share: no action sent).
	Actions *prometheus.CounterVec
	// Report counts one answered report by its code (OK, unavailable,
	// invalid) and how long it took.
	Report func(code string, took time.Duration)
}

// Core is the decision service whose limits the quota service shares out.
type Core interface {
	// Config returns the configuration in force; nil before any is loaded.
	Config() *config.Config
	// Now returns the time of the store (its injected clock, or the real
	// one).
	Now() time.Time
	// Store calls fn with the backend that holds l's state and the key
	// the state of l for entries is counted under, under the store's
	// timeout and circuit breakers, and returns fn's error or the store's
	// failure.
	Store(ctx context.Context, l *config.Limit, entries []config.Entry, fn func(ctx context.Context, b backend.Backend, key string) error) error
	// StoreFailed counts and logs err, a failure of Store for domain, as
	// every store failure is, and reports whether it is to be answered by
	// the failure mode: false when the caller went away, whose call says
	// nothing about the store and needs no answer.
	StoreFailed(ctx context.Context, domain string, err error) bool
	// Authorize returns an error when the caller (its token, in ctx) may
	// not use domain: the stream ends with PERMISSION_DENIED.
	Authorize(ctx context.Context, domain string) error
}

// Bounds of the assignments' time to live.
const (
	DefaultTTL = 10 * time.Second
	MaxTTL     = time.Hour
)

// Service serves envoy.service.rate_limit_quota.v3 for a Core. Register it
// with rlqsv3.RegisterRateLimitQuotaServiceServer of go-control-plane.
type Service struct {
	rlqsv3.UnimplementedRateLimitQuotaServiceServer
	core   Core
	opts   Options
	ttl    time.Duration
	sweep  time.Duration
	policy quotaPolicy
	id     string // this server's part of its streams' member names
	seq    atomic.Uint64

	closing   chan struct{} // closed by Close: streams end
	closeOnce sync.Once
}

// Close ends every stream, now and later, with Unavailable, so that a
// graceful stop of the gRPC server is not held by data planes' streams,
// which never end by themselves; the data planes reconnect to another
// server.
func (q *Service) Close() { q.closeOnce.Do(func() { close(q.closing) }) }

// New returns the quota service of core. A TTL outside [0, MaxTTL] is
// taken as the nearest bound; callers check it first (server.NewService
// refuses it).
func New(core Core, o Options) *Service {
	ttl := o.TTL
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	ttl = min(ceilSecond(ttl), MaxTTL)
	sweep := o.SweepInterval
	if sweep <= 0 {
		sweep = time.Second
	}
	if o.MaxEntries <= 0 {
		o.MaxEntries = DefaultMaxEntries
	}
	var b [6]byte
	rand.Read(b[:])
	return &Service{core: core, opts: o, ttl: ttl, sweep: sweep, policy: defaultQuotaPolicy, id: hex.EncodeToString(b[:]), closing: make(chan struct{})}
}

// maxQuotaBuckets bounds the buckets one stream may hold assignments of.
const maxQuotaBuckets = 10000

// ceilSecond rounds d up to whole seconds.
func ceilSecond(d time.Duration) time.Duration {
	return (d + time.Second - 1) / time.Second * time.Second
}

// quotaStream is one data plane's stream: its domain and the buckets it
// reported.
type quotaStream struct {
	member  string // the stream's name in the buckets' fleets
	domain  string
	buckets map[string]*quotaBucket // by quotaBucketKey
}

// quotaBucket is a bucket a stream reported and was assigned a share of.
type quotaBucket struct {
	id      *rlqsv3.BucketId
	last    time.Time     // of the last report
	ttl     time.Duration // of the last assignment
	expires time.Time     // of the last assignment sent; zero before any
}

// StreamRateLimitQuotas answers each usage report with an action for every
// bucket it reports: an assignment of the data plane's share of the limit
// the bucket's key/value pairs match in the domain (as ShouldRateLimit
// matches a descriptor, the pairs taken in the configuration tree's order),
// or abandon_action when no limit matches. A bucket the data plane stops
// reporting is abandoned when twice its assignment's time to live has
// passed. The same assignment sent again only extends its time to live,
// which is what Envoy does with it.
//
// Errors end the stream: InvalidArgument for a first report without a
// domain, a later report naming another domain, or a bucket without a
// BucketId; NotFound for a domain the configuration lacks; Unavailable
// before any configuration is loaded and at shutdown (Close);
// ResourceExhausted beyond maxQuotaBuckets buckets on one stream. A bucket
// whose share the store could not size (an error, a timeout or an open
// circuit breaker) is answered by the failure mode (failAction).
func (q *Service) StreamRateLimitQuotas(stream grpc.BidiStreamingServer[rlqsv3.RateLimitQuotaUsageReports, rlqsv3.RateLimitQuotaResponse]) error {
	ctx := stream.Context()
	if m := q.opts.Metrics; m != nil {
		m.Streams.Inc()
		defer m.Streams.Dec()
	}
	st := &quotaStream{
		member:  q.id + "-" + strconv.FormatUint(q.seq.Add(1), 36),
		buckets: map[string]*quotaBucket{},
	}
	reports := make(chan *rlqsv3.RateLimitQuotaUsageReports)
	recvErr := make(chan error, 1)
	go func() {
		for {
			msg, err := stream.Recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case reports <- msg:
			case <-ctx.Done():
				return
			}
		}
	}()
	tick := time.NewTicker(q.sweep)
	defer tick.Stop()
	for {
		var resp *rlqsv3.RateLimitQuotaResponse
		select {
		case r := <-reports:
			start := time.Now()
			var err error
			resp, err = q.report(ctx, st, r)
			q.count(st.domain, resp, err, start)
			if err != nil {
				return err
			}
		case err := <-recvErr:
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		case <-tick.C:
			resp = q.abandonQuiet(st)
			q.countAbandoned(st.domain, resp)
		case <-ctx.Done():
			return ctx.Err()
		case <-q.closing:
			return status.Error(codes.Unavailable, "the server is shutting down")
		}
		if resp != nil && len(resp.BucketAction) > 0 {
			if err := stream.Send(resp); err != nil {
				return err
			}
		}
	}
}

// report answers one usage report of st.
func (q *Service) report(ctx context.Context, st *quotaStream, m *rlqsv3.RateLimitQuotaUsageReports) (*rlqsv3.RateLimitQuotaResponse, error) {
	cfg := q.core.Config()
	if err := q.checkDomain(ctx, cfg, st, m.GetDomain()); err != nil {
		return nil, err
	}
	usages := m.GetBucketQuotaUsages()
	for i, u := range usages {
		if err := q.checkBucket(i, u.GetBucketId()); err != nil {
			return nil, err
		}
	}
	d := cfg.Domains[st.domain]
	now := q.core.Now()
	// Match every bucket, then size the matched ones' shares concurrently:
	// one store call each, which the store's client pipelines.
	type sized struct {
		l        *config.Limit
		ordered  []config.Entry
		ttl      time.Duration
		first    bool // the bucket's first report on this stream
		strategy *typev3.RateLimitStrategy
		err      error
	}
	work := make([]sized, len(usages))
	for i, u := range usages {
		id := u.GetBucketId()
		key := quotaBucketKey(id)
		set := make([]config.Entry, 0, len(id.GetBucket()))
		for k, v := range id.GetBucket() {
			set = append(set, config.Entry{Key: k, Value: v})
		}
		w := &work[i]
		w.l, w.ordered = d.MatchSet(set) // nil for a domain a reload removed
		if w.l == nil {
			delete(st.buckets, key)
			continue
		}
		w.ttl = min(max(q.ttl, ceilSecond(reportElapsed(u)*3/2)), MaxTTL)
		b := st.buckets[key]
		if b == nil {
			if len(st.buckets) >= maxQuotaBuckets {
				return nil, status.Errorf(codes.ResourceExhausted, "the stream reports more than %d buckets", maxQuotaBuckets)
			}
			b = &quotaBucket{id: id, ttl: w.ttl}
			st.buckets[key] = b
			w.first = true
		}
		b.last = now // reported, even if its share cannot be sized now
	}
	var wg sync.WaitGroup
	sem := make(chan struct{}, quotaConcurrency)
	for i, u := range usages {
		w := &work[i]
		if w.l == nil {
			continue
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			w.strategy, w.err = q.strategy(ctx, st.member, w.l, w.ordered, u, w.ttl, w.first)
		})
	}
	wg.Wait()
	resp := &rlqsv3.RateLimitQuotaResponse{}
	for i, u := range usages {
		w, id := &work[i], u.GetBucketId()
		switch {
		case w.l == nil:
			resp.BucketAction = append(resp.BucketAction, abandonAction(id))
			continue
		case w.err != nil:
			// Counted and logged as every store failure (the server's
			// floodgate_backend_errors_total, floodgate_failure_mode_total).
			if !q.core.StoreFailed(ctx, st.domain, w.err) {
				continue // the stream is ending: nothing to answer
			}
			w.strategy = q.failAction(st.buckets[quotaBucketKey(id)], now)
			if w.strategy == nil {
				if m := q.opts.Metrics; m != nil {
					m.Actions.WithLabelValues(st.domain, "unsized").Inc()
				}
				continue
			}
		}
		if b := st.buckets[quotaBucketKey(id)]; b != nil {
			b.ttl, b.expires = w.ttl, now.Add(w.ttl)
		}
		resp.BucketAction = append(resp.BucketAction, &rlqsv3.RateLimitQuotaResponse_BucketAction{
			BucketId: id,
			BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
				QuotaAssignmentAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
					AssignmentTimeToLive: durationpb.New(w.ttl),
					RateLimitStrategy:    w.strategy,
				},
			},
		})
	}
	return resp, nil
}

// failAction is the answer, by the failure mode, for bucket b when the
// store could not size its share at now: nil for no action, or the strategy
// of an assignment.
//
//   - While the last assignment b was sent is live, none: Envoy keeps it,
//     token bucket and all, until it expires. That share was sized with the
//     whole fleet and is still counted in the store until then, so the
//     fleet stays within the limit, and a store outage shorter than the
//     time to live changes nothing Envoy enforces. Sending a blanket rule
//     instead would replace every data plane's bucket on a blip (and a
//     token bucket again, full, when the store is back); sending the same
//     assignment again would extend a share past the time the store counts
//     it, and the other data planes could be granted it too.
//   - Once it has expired, or before any (the bucket's first report): under
//     FailOpen, blanket_rule ALLOW_ALL; under FailClosed, DENY_ALL (the
//     unlimited and shadow-mode limits, allowed all, never ask the store);
//     under FailError and FailDegraded, none, so that Envoy's own expired_assignment_behavior and
//     no_assignment_behavior decide, as RLS's FailError leaves the answer to
//     Envoy's failure_mode_deny. A blanket assignment lasts the usual time to
//     live; the first report the store answers again replaces it.
func (q *Service) failAction(b *quotaBucket, now time.Time) *typev3.RateLimitStrategy {
	if b != nil && now.Before(b.expires) {
		return nil
	}
	switch q.opts.FailureMode {
	case decision.FailOpen:
		return blanket(typev3.RateLimitStrategy_ALLOW_ALL)
	case decision.FailClosed:
		return blanket(typev3.RateLimitStrategy_DENY_ALL)
	}
	return nil
}

// reportElapsed is the time_elapsed of u, within [0, MaxTTL].
func reportElapsed(u *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage) time.Duration {
	return min(max(u.GetTimeElapsed().AsDuration(), 0), MaxTTL) // AsDuration saturates
}

// quotaConcurrency bounds the store calls one report has in flight.
const quotaConcurrency = 32

// count counts one report's answer, resp or err, in the metrics.
func (q *Service) count(domain string, resp *rlqsv3.RateLimitQuotaResponse, err error, start time.Time) {
	m := q.opts.Metrics
	if m == nil {
		return
	}
	code := "OK"
	switch status.Code(err) {
	case codes.OK:
	case codes.Unavailable:
		code = "unavailable"
	case codes.PermissionDenied:
		code = "forbidden"
	default:
		code = "invalid"
	}
	m.Report(code, time.Since(start))
	if resp == nil {
		return
	}
	for _, a := range resp.GetBucketAction() {
		if a.GetAbandonAction() != nil {
			m.Actions.WithLabelValues(domain, "abandon").Inc()
		} else {
			m.Actions.WithLabelValues(domain, "assign").Inc()
		}
	}
}

// countAbandoned counts the abandon actions of resp.
func (q *Service) countAbandoned(domain string, resp *rlqsv3.RateLimitQuotaResponse) {
	if m := q.opts.Metrics; m != nil && resp != nil {
		m.Actions.WithLabelValues(domain, "abandon").Add(float64(len(resp.BucketAction)))
	}
}

// checkDomain sets st's domain from its first report and checks the later
// ones.
func (q *Service) checkDomain(ctx context.Context, cfg *config.Config, st *quotaStream, domain string) error {
	switch {
	case st.domain == "" && domain == "":
		return status.Error(codes.InvalidArgument, "RateLimitQuotaUsageReports.domain is empty: the first report of a stream must name the domain")
	case st.domain != "" && domain != "" && domain != st.domain:
		return status.Errorf(codes.InvalidArgument, "RateLimitQuotaUsageReports.domain %q differs from the stream's, %q: open another stream for another domain", domain, st.domain)
	case st.domain != "":
		return nil
	case cfg == nil:
		return status.Error(codes.Unavailable, "no rate limit configuration loaded")
	}
	if err := q.core.Authorize(ctx, domain); err != nil {
		return status.Error(codes.PermissionDenied, err.Error())
	}
	if cfg.Domains[domain] == nil {
		return status.Errorf(codes.NotFound, "RateLimitQuotaUsageReports.domain %q is not configured", domain)
	}
	st.domain = domain
	return nil
}

// checkBucket checks the BucketId of bucket_quota_usages[i].
func (q *Service) checkBucket(i int, id *rlqsv3.BucketId) error {
	if len(id.GetBucket()) == 0 {
		return status.Errorf(codes.InvalidArgument, "bucket_quota_usages[%d].bucket_id is empty: a bucket needs at least one key/value pair", i)
	}
	if n := len(id.GetBucket()); n > q.opts.MaxEntries {
		return status.Errorf(codes.InvalidArgument, "bucket_quota_usages[%d].bucket_id has %d pairs: at most %d are accepted", i, n, q.opts.MaxEntries)
	}
	for k, v := range id.GetBucket() {
		// BucketId's own rules (rlqs.proto): keys and values of at least one character.
		if k == "" {
			return status.Errorf(codes.InvalidArgument, "bucket_quota_usages[%d].bucket_id has an empty key", i)
		}
		if v == "" {
			return status.Errorf(codes.InvalidArgument, "bucket_quota_usages[%d].bucket_id: the value of %q is empty", i, k)
		}
	}
	return nil
}

// quotaBucketKey names a bucket within a stream: its pairs, sorted.
func quotaBucketKey(id *rlqsv3.BucketId) string {
	keys := make([]string, 0, len(id.GetBucket()))
	for k := range id.GetBucket() {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for _, k := range keys {
		b.WriteString(config.EscapePath(k))
		b.WriteByte('=')
		b.WriteString(config.EscapePath(id.GetBucket()[k]))
		b.WriteByte('|')
	}
	return b.String()
}

// strategy records the demand u reports for a bucket matched to l (first:
// the bucket's first report on this stream) and returns the data plane's
// share of l as a token bucket. Unlimited and shadow-mode limits allow
// all; a share of nothing denies all. The store call goes through
// Core.Store; its errors are Store's.
func (q *Service) strategy(ctx context.Context, member string, l *config.Limit, entries []config.Entry, u *rlqsv3.RateLimitQuotaUsageReports_BucketQuotaUsage, ttl time.Duration, first bool) (*typev3.RateLimitStrategy, error) {
	if l.Unlimited || l.ShadowMode {
		return blanket(typev3.RateLimitStrategy_ALLOW_ALL), nil
	}
	if l.RequestsPerUnit == 0 {
		return blanket(typev3.RateLimitStrategy_DENY_ALL), nil
	}
	unit := l.Window() // the limit's period: its unit times its unit_multiplier
	// Demand in thousandths of a request per second. Envoy sends
	// time_elapsed in whole seconds, truncated: a first report, sent as soon
	// as traffic came, and every report of a sub-second interval say 0 s,
	// which counts as one.
	elapsed := reportElapsed(u)
	requests := float64(u.GetNumRequestsAllowed()) + float64(u.GetNumRequestsDenied())
	demand := int64(min(requests*quotaScale/max(elapsed, time.Second).Seconds(), maxQuotaDemand))
	limit := int64(l.RequestsPerUnit) * quotaScale
	var g quotaGrant
	err := q.core.Store(ctx, l, entries, func(ctx context.Context, b backend.Backend, key string) (err error) {
		g, err = quotaShare(ctx, b, key, member, demand, limit, ttl.Microseconds(), unit.Microseconds(), first, q.policy)
		return err
	})
	if err != nil {
		return nil, err
	}
	return tokenBucket(g.grant, g.burst, unit), nil
}

// tokenBucket is the strategy of a share of grant thousandths of a request
// per unit with a bucket of burst thousandths (whole tokens; see burstOf), in
// whole-second fill intervals.
//
// Envoy's filter refills its token bucket continuously, at tokens_per_fill
// per fill_interval, up to max_tokens, and starts a new bucket full. So in
// any window of one unit, a data plane admits at most max_tokens plus one
// unit's fill: that sum, not the fill alone, is what must fit in the share,
// or a fleet of full buckets admits up to twice the limit in a unit. A share
// W of two or more requests per unit is max_tokens B (the burst the fleet's
// sizing chose: a tenth of the fill, ⌈W/11⌉, or less while the fleet has no
// room for more) and a fill of F = ⌊W⌋ + 1 − B whole tokens per unit. The
// window is half-open: its last instant's refill comes too late, so a
// window of one unit holds fewer than B + F tokens, and being whole
// requests, at most B + F − 1 = ⌊W⌋ ≤ W (a whole request that the share's
// fraction could not pay for). A data plane whose requests come in bursts
// up to a tenth of a unit apart is served the whole fill, about 10/11 of
// its share; bursts P apart (P over a tenth of a unit) find B each, B/P a
// unit.
// (A new strategy starts a new bucket, full: the fleet's sizing counts that
// burst against the limit for a unit after the change.)
//
// A share under two requests per unit cannot keep that bound: a bucket
// holds a token at least. It is counted in tokens per 60 units, held one at
// a time (max_tokens 1), so that it keeps two digits and a change of it
// changes tokens_per_fill, which Envoy compares (it does not compare a fill
// interval's seconds); a unit's window may see one request more than the
// share, which the fleet's sizing counts. Under one request per 60 units, or
// when 60 units would be over a century (a unit being a limit's whole
// period, up to ten years), it is one token per as many whole seconds as
// keep it within the share (none at all under one a century).
func tokenBucket(grant, burst int64, unit time.Duration) *typev3.RateLimitStrategy {
	if grant <= 0 {
		return blanket(typev3.RateLimitStrategy_DENY_ALL)
	}
	whole := grant / quotaScale
	var fill time.Duration
	var tokens, held int64
	switch {
	case whole >= 2:
		held = max(burst/quotaScale, 1)
		fill, tokens = unit, whole+1-held
	case grant*60/quotaScale > 0 && unit <= maxFillSeconds*time.Second/60:
		fill, tokens, held = 60*unit, grant*60/quotaScale, 1
	default:
		// 1 token per fill ≤ grant/(quotaScale·unit) ⟺ fill ≥ quotaScale·unit/grant.
		secs := math.Ceil(float64(quotaScale) * unit.Seconds() / float64(grant))
		if secs > maxFillSeconds {
			return blanket(typev3.RateLimitStrategy_DENY_ALL) // under a request a century
		}
		fill, tokens, held = time.Duration(secs)*time.Second, 1, 1
	}
	if tokens <= 0 {
		return blanket(typev3.RateLimitStrategy_DENY_ALL)
	}
	tokens, held = min(tokens, math.MaxUint32), min(held, math.MaxUint32)
	return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_TokenBucket{TokenBucket: &typev3.TokenBucket{
		MaxTokens:     uint32(held),
		TokensPerFill: wrapperspb.UInt32(uint32(tokens)),
		FillInterval:  durationpb.New(fill),
	}}}
}

// maxFillSeconds bounds a fill interval: a century, well within a
// time.Duration.
const maxFillSeconds = 100 * 365 * 24 * 3600

func blanket(r typev3.RateLimitStrategy_BlanketRule) *typev3.RateLimitStrategy {
	return &typev3.RateLimitStrategy{Strategy: &typev3.RateLimitStrategy_BlanketRule_{BlanketRule: r}}
}

func abandonAction(id *rlqsv3.BucketId) *rlqsv3.RateLimitQuotaResponse_BucketAction {
	return &rlqsv3.RateLimitQuotaResponse_BucketAction{
		BucketId: id,
		BucketAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction_{
			AbandonAction: &rlqsv3.RateLimitQuotaResponse_BucketAction_AbandonAction{},
		},
	}
}

// abandonQuiet abandons the buckets of st not reported for twice as long
// as their assignment lasts: their data plane stopped reporting them. (The
// fleet stopped counting their share when the assignment expired; the
// margin keeps a bucket whose first, short assignment expired just before
// its second report from being abandoned under it.)
func (q *Service) abandonQuiet(st *quotaStream) *rlqsv3.RateLimitQuotaResponse {
	now := q.core.Now()
	var resp *rlqsv3.RateLimitQuotaResponse
	for key, b := range st.buckets {
		if now.Sub(b.last) < 2*b.ttl {
			continue
		}
		if resp == nil {
			resp = &rlqsv3.RateLimitQuotaResponse{}
		}
		resp.BucketAction = append(resp.BucketAction, abandonAction(b.id))
		delete(st.buckets, key)
	}
	return resp
}
