package server

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

	rlqs "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate-dev/floodgate/server/config"
)

// QuotaOptions configure the rate limit quota service (RLQS); the zero value
// selects every default.
type QuotaOptions struct {
	// TTL is the assignment_time_to_live of every assignment, rounded up to
	// whole seconds; DefaultQuotaTTL when 0. A bucket's assignments last at
	// least one and a half times the interval its data plane reports at (the
	// reports' time_elapsed), rounded up to whole seconds, so that they do not
	// expire between two reports; at most MaxQuotaTTL. A data plane that
	// stops reporting gives its share back when its assignment expires.
	TTL time.Duration
	// SweepInterval is how often a stream looks for buckets that stopped
	// reporting, to abandon them; one second when 0.
	SweepInterval time.Duration
}

// Bounds of the assignments' time to live.
const (
	DefaultQuotaTTL = 10 * time.Second
	MaxQuotaTTL     = time.Hour
)

// RLQS serves Envoy's rate limit quota service,
// envoy.service.rate_limit_quota.v3, from a Service: each data plane (each
// stream) reports its usage of buckets, and is assigned a token bucket per
// bucket, its share of the bucket's limit. Shares are sized from the demand
// every data plane reports, on every server sharing the store
// (rlqs_fleet.go). Register it with
// rlqs.RegisterRateLimitQuotaServiceServer; Server does.
type RLQS struct {
	rlqs.UnimplementedRateLimitQuotaServiceServer
	s      *Service
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
func (q *RLQS) Close() { q.closeOnce.Do(func() { close(q.closing) }) }

// NewRLQS returns the quota service of s, configured by s's Options.Quota.
func NewRLQS(s *Service) *RLQS {
	o := s.opts.Quota
	ttl := o.TTL
	if ttl <= 0 {
		ttl = DefaultQuotaTTL
	}
	ttl = min(ceilSecond(ttl), MaxQuotaTTL)
	sweep := o.SweepInterval
	if sweep <= 0 {
		sweep = time.Second
	}
	var b [6]byte
	rand.Read(b[:])
	return &RLQS{s: s, ttl: ttl, sweep: sweep, policy: defaultQuotaPolicy, id: hex.EncodeToString(b[:]), closing: make(chan struct{})}
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
	id      *rlqs.BucketId
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
func (q *RLQS) StreamRateLimitQuotas(stream grpc.BidiStreamingServer[rlqs.RateLimitQuotaUsageReports, rlqs.RateLimitQuotaResponse]) error {
	ctx := stream.Context()
	if m := q.s.opts.Metrics; m != nil {
		m.rlqsStreams.Inc()
		defer m.rlqsStreams.Dec()
	}
	st := &quotaStream{
		member:  q.id + "-" + strconv.FormatUint(q.seq.Add(1), 36),
		buckets: map[string]*quotaBucket{},
	}
	reports := make(chan *rlqs.RateLimitQuotaUsageReports)
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
		var resp *rlqs.RateLimitQuotaResponse
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

// now is the service's time: the store's injected clock, or the real one.
func (q *RLQS) now() time.Time {
	if c := q.s.main.b.Clock(); c != nil {
		return c.Now()
	}
	return time.Now()
}

// report answers one usage report of st.
func (q *RLQS) report(ctx context.Context, st *quotaStream, m *rlqs.RateLimitQuotaUsageReports) (*rlqs.RateLimitQuotaResponse, error) {
	rs := q.s.rules.Load()
	if err := q.checkDomain(rs, st, m.GetDomain()); err != nil {
		return nil, err
	}
	usages := m.GetBucketQuotaUsages()
	for i, u := range usages {
		if err := q.checkBucket(i, u.GetBucketId()); err != nil {
			return nil, err
		}
	}
	d := rs.cfg.Domains[st.domain]
	now := q.now()
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
		w.ttl = min(max(q.ttl, ceilSecond(reportElapsed(u)*3/2)), MaxQuotaTTL)
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
	resp := &rlqs.RateLimitQuotaResponse{}
	for i, u := range usages {
		w, id := &work[i], u.GetBucketId()
		switch {
		case w.l == nil:
			resp.BucketAction = append(resp.BucketAction, abandonAction(id))
			continue
		case w.err != nil:
			var gone *callerGoneError
			if errors.As(w.err, &gone) {
				continue // the stream is ending: nothing to answer
			}
			// Counted and logged as every store failure: the store's
			// floodgate_backend_errors_total, floodgate_failure_mode_total.
			q.s.storeFailed(ctx, st.domain, w.err)
			w.strategy = q.failAction(st.buckets[quotaBucketKey(id)], now)
			if w.strategy == nil {
				if m := q.s.opts.Metrics; m != nil {
					m.rlqsActions.WithLabelValues(st.domain, "unsized").Inc()
				}
				continue
			}
		}
		if b := st.buckets[quotaBucketKey(id)]; b != nil {
			b.ttl, b.expires = w.ttl, now.Add(w.ttl)
		}
		resp.BucketAction = append(resp.BucketAction, &rlqs.RateLimitQuotaResponse_BucketAction{
			BucketId: id,
			BucketAction: &rlqs.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction_{
				QuotaAssignmentAction: &rlqs.RateLimitQuotaResponse_BucketAction_QuotaAssignmentAction{
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
//     under FailError, none, so that Envoy's own expired_assignment_behavior and
//     no_assignment_behavior decide, as RLS's FailError leaves the answer to
//     Envoy's failure_mode_deny. A blanket assignment lasts the usual time to
//     live; the first report the store answers again replaces it.
func (q *RLQS) failAction(b *quotaBucket, now time.Time) *typev3.RateLimitStrategy {
	if b != nil && now.Before(b.expires) {
		return nil
	}
	switch q.s.opts.FailureMode {
	case FailOpen:
		return blanket(typev3.RateLimitStrategy_ALLOW_ALL)
	case FailClosed:
		return blanket(typev3.RateLimitStrategy_DENY_ALL)
	}
	return nil
}

// reportElapsed is the time_elapsed of u, within [0, MaxQuotaTTL].
func reportElapsed(u *rlqs.RateLimitQuotaUsageReports_BucketQuotaUsage) time.Duration {
	return min(max(u.GetTimeElapsed().AsDuration(), 0), MaxQuotaTTL) // AsDuration saturates
}

// quotaConcurrency bounds the store calls one report has in flight.
const quotaConcurrency = 32

// count counts one report's answer, resp or err, in the metrics.
func (q *RLQS) count(domain string, resp *rlqs.RateLimitQuotaResponse, err error, start time.Time) {
	m := q.s.opts.Metrics
	if m == nil {
		return
	}
	code := "OK"
	switch status.Code(err) {
	case codes.OK:
	case codes.Unavailable:
		code = "unavailable"
	default:
		code = "invalid"
	}
	m.request("rlqs", code, time.Since(start))
	if resp == nil {
		return
	}
	for _, a := range resp.GetBucketAction() {
		if a.GetAbandonAction() != nil {
			m.rlqsActions.WithLabelValues(domain, "abandon").Inc()
		} else {
			m.rlqsActions.WithLabelValues(domain, "assign").Inc()
		}
	}
}

// countAbandoned counts the abandon actions of resp.
func (q *RLQS) countAbandoned(domain string, resp *rlqs.RateLimitQuotaResponse) {
	if m := q.s.opts.Metrics; m != nil && resp != nil {
		m.rlqsActions.WithLabelValues(domain, "abandon").Add(float64(len(resp.BucketAction)))
	}
}

// checkDomain sets st's domain from its first report and checks the later
// ones.
func (q *RLQS) checkDomain(rs *ruleset, st *quotaStream, domain string) error {
	switch {
	case st.domain == "" && domain == "":
		return status.Error(codes.InvalidArgument, "RateLimitQuotaUsageReports.domain is empty: the first report of a stream must name the domain")
	case st.domain != "" && domain != "" && domain != st.domain:
		return status.Errorf(codes.InvalidArgument, "RateLimitQuotaUsageReports.domain %q differs from the stream's, %q: open another stream for another domain", domain, st.domain)
	case st.domain != "":
		return nil
	case rs == nil:
		return status.Error(codes.Unavailable, "no rate limit configuration loaded")
	case rs.cfg.Domains[domain] == nil:
		return status.Errorf(codes.NotFound, "RateLimitQuotaUsageReports.domain %q is not configured", domain)
	}
	st.domain = domain
	return nil
}

// checkBucket checks the BucketId of bucket_quota_usages[i].
func (q *RLQS) checkBucket(i int, id *rlqs.BucketId) error {
	if len(id.GetBucket()) == 0 {
		return status.Errorf(codes.InvalidArgument, "bucket_quota_usages[%d].bucket_id is empty: a bucket needs at least one key/value pair", i)
	}
	if n := len(id.GetBucket()); n > q.s.opts.MaxEntries {
		return status.Errorf(codes.InvalidArgument, "bucket_quota_usages[%d].bucket_id has %d pairs: at most %d are accepted", i, n, q.s.opts.MaxEntries)
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
func quotaBucketKey(id *rlqs.BucketId) string {
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
// share of l as a token bucket. Unlimited and
// shadow-mode limits allow all; a share of nothing denies all. The store
// call goes through Service.callStore: the store's timeout and circuit
// breakers; its errors are callStore's.
func (q *RLQS) strategy(ctx context.Context, member string, l *config.Limit, entries []config.Entry, u *rlqs.RateLimitQuotaUsageReports_BucketQuotaUsage, ttl time.Duration, first bool) (*typev3.RateLimitStrategy, error) {
	if l.Unlimited || l.ShadowMode {
		return blanket(typev3.RateLimitStrategy_ALLOW_ALL), nil
	}
	if l.RequestsPerUnit == 0 {
		return blanket(typev3.RateLimitStrategy_DENY_ALL), nil
	}
	unit := l.Window()
	// Demand in thousandths of a request per second. Envoy sends
	// time_elapsed in whole seconds, truncated: a first report, sent as soon
	// as traffic came, and every report of a sub-second interval say 0 s,
	// which counts as one.
	elapsed := reportElapsed(u)
	requests := float64(u.GetNumRequestsAllowed()) + float64(u.GetNumRequestsDenied())
	demand := int64(min(requests*quotaScale/max(elapsed, time.Second).Seconds(), maxQuotaDemand))
	limit := int64(l.RequestsPerUnit) * quotaScale
	store, key := q.s.storeOf(l), stateKey(l, entries)
	var g quotaGrant
	err := q.s.callStore(ctx, store, []int{store.breakers.of(key)}, func(ctx context.Context) (err error) {
		g, err = quotaShare(ctx, store.b, key, member, demand, limit, ttl.Microseconds(), first, q.policy)
		return err
	})
	if err != nil {
		return nil, err
	}
	return tokenBucket(g.grant, unit), nil
}

// tokenBucket is the strategy that admits grant thousandths of a request per
// unit at most, in any window of one unit, with whole-second fill intervals.
//
// Envoy's filter refills its token bucket continuously, at tokens_per_fill
// per fill_interval, up to max_tokens, and starts a new bucket full. So in
// any window of one unit, a data plane admits at most max_tokens plus one
// unit's fill: that sum, not the fill alone, is what must fit in the share,
// or a fleet of full buckets admits up to twice the limit in a unit. A share
// of W ≥ 2 whole requests per unit is max_tokens B = ⌈W/100⌉ (1% of it,
// at least one) and tokens_per_fill W − B per unit: B + (W − B) = W. The
// burst a data plane absorbs is B, and its steady rate is 99% of its share.
// (A new strategy starts a new bucket, full: a data plane that had not
// drained its old one may admit up to B more in the unit the change falls
// in.)
//
// A share under two requests per unit cannot keep that bound: a bucket
// holds a token at least. It is counted in tokens per 60 units, held one at
// a time (max_tokens 1), so that it keeps two digits and a change of it
// changes tokens_per_fill, which Envoy compares (it does not compare a fill
// interval's seconds); a unit's window may see one request more than the
// share. Under one request per 60 units, it is one token per as many whole
// seconds as keep it within the share (none at all under one a century).
func tokenBucket(grant int64, unit time.Duration) *typev3.RateLimitStrategy {
	if grant <= 0 {
		return blanket(typev3.RateLimitStrategy_DENY_ALL)
	}
	whole := grant / quotaScale
	var fill time.Duration
	var tokens, held int64
	switch {
	case whole >= 2:
		held = (whole + 99) / 100
		fill, tokens = unit, whole-held
	case grant*60/quotaScale > 0:
		fill, tokens, held = 60*unit, grant*60/quotaScale, 1
	default:
		// 1 token per fill ≤ grant/(quotaScale·unit) ⟺ fill ≥ quotaScale·unit/grant.
		secs := math.Ceil(float64(quotaScale) * unit.Seconds() / float64(grant))
		if secs > maxFillSeconds {
			return blanket(typev3.RateLimitStrategy_DENY_ALL) // under a request a century
		}
		fill, tokens, held = time.Duration(secs)*time.Second, 1, 1
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

func abandonAction(id *rlqs.BucketId) *rlqs.RateLimitQuotaResponse_BucketAction {
	return &rlqs.RateLimitQuotaResponse_BucketAction{
		BucketId: id,
		BucketAction: &rlqs.RateLimitQuotaResponse_BucketAction_AbandonAction_{
			AbandonAction: &rlqs.RateLimitQuotaResponse_BucketAction_AbandonAction{},
		},
	}
}

// abandonQuiet abandons the buckets of st not reported for twice as long
// as their assignment lasts: their data plane stopped reporting them. (The
// fleet stopped counting their share when the assignment expired; the
// margin keeps a bucket whose first, short assignment expired just before
// its second report from being abandoned under it.)
func (q *RLQS) abandonQuiet(st *quotaStream) *rlqs.RateLimitQuotaResponse {
	now := q.now()
	var resp *rlqs.RateLimitQuotaResponse
	for key, b := range st.buckets {
		if now.Sub(b.last) < 2*b.ttl {
			continue
		}
		if resp == nil {
			resp = &rlqs.RateLimitQuotaResponse{}
		}
		resp.BucketAction = append(resp.BucketAction, abandonAction(b.id))
		delete(st.buckets, key)
	}
	return resp
}
