package server

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/internal/degraded"
	"github.com/floodgate-dev/floodgate/ratelimit"
	"github.com/floodgate-dev/floodgate/server/config"
	"github.com/floodgate-dev/floodgate/server/decision"
	"github.com/floodgate-dev/floodgate/server/envoy"
	"github.com/floodgate-dev/floodgate/server/envoystats"
	"github.com/floodgate-dev/floodgate/server/internal/breaker"
	"github.com/floodgate-dev/floodgate/server/internal/dashboard"
	"github.com/floodgate-dev/floodgate/server/internal/faillog"
	"github.com/floodgate-dev/floodgate/server/internal/localcache"
	"github.com/floodgate-dev/floodgate/server/internal/tracing"
)

// The decision model, package decision's; named here for the server's
// users.
type (
	Code       = decision.Code
	Request    = decision.Request
	Descriptor = decision.Descriptor
	Override   = decision.Override
	Response   = decision.Response
	Header     = decision.Header
	Status     = decision.Status
)

// The codes of Envoy RLS v3.
const (
	CodeUnknown   = decision.CodeUnknown
	CodeOK        = decision.CodeOK
	CodeOverLimit = decision.CodeOverLimit
)

// FailureMode is decision.FailureMode: how the service answers when the
// store cannot decide.
type FailureMode = decision.FailureMode

// The failure modes.
const (
	FailOpen     = decision.FailOpen
	FailClosed   = decision.FailClosed
	FailError    = decision.FailError
	FailDegraded = decision.FailDegraded
)

// ParseFailureMode reads "degraded", "allow", "deny" or "error".
func ParseFailureMode(s string) (FailureMode, error) { return decision.ParseFailureMode(s) }

// Limits on a request, by default.
const (
	DefaultMaxDescriptors = 64
	DefaultMaxEntries     = 32
	DefaultTimeout        = 50 * time.Millisecond
)

// ErrUnavailable is returned by Decide in the FailError mode when the store
// cannot decide (decision.ErrUnavailable).
var ErrUnavailable = decision.ErrUnavailable

// InputError is decision.InputError: a malformed request.
type InputError = decision.InputError

func inputErrorf(format string, args ...any) error {
	return &InputError{Msg: fmt.Sprintf(format, args...)}
}

// BreakerOptions configure the circuit breaker in front of a remote store
// (Options.Breaker): Failures, 5 by default (negative: no breaker), and
// Cooldown, 100 ms by default.
type BreakerOptions = breaker.Options

// Options configure a Service. The zero value of each field selects its
// default.
type Options struct {
	Timeout        time.Duration // per store call; DefaultTimeout
	FailureMode    FailureMode
	MaxDescriptors int // per request; DefaultMaxDescriptors
	MaxEntries     int // per descriptor; DefaultMaxEntries
	Breaker        BreakerOptions
	Metrics        *Metrics // nil: no metrics
	Logger         *slog.Logger
	// NearLimitRatio is the share of a limit above which an admitted request
	// counts as near the limit in metrics (envoyproxy/ratelimit's
	// NEAR_LIMIT_RATIO); 0.8 by default.
	NearLimitRatio float64
	// Envoy selects envoyproxy/ratelimit's behaviour where it differs from
	// floodgate's (see EnvoyOptions); the zero value keeps floodgate's.
	Envoy EnvoyOptions
	// EnvoyStats, when set, counts envoyproxy/ratelimit's StatsD statistics
	// under its names (envoystats_hooks.go); Prometheus metrics are counted
	// as usual either way.
	EnvoyStats *envoystats.Stats
	// LocalCacheBytes, when > 0, is the size of the local over-limit cache
	// (envoyproxy/ratelimit's LOCAL_CACHE_SIZE_IN_BYTES; package
	// server/internal/localcache): descriptors the store denied are answered
	// OVER_LIMIT without a store call until their limit would admit them
	// again. At least 512 KiB is used.
	LocalCacheBytes int
	// Tracing turns on OpenTelemetry spans (tracing.go); off when zero.
	Tracing TracingOptions
	// PerSecondBackend, when set, keeps the state of every limit whose
	// period is one second (unit second, no unit_multiplier:
	// envoyproxy/ratelimit's REDIS_PERSECOND); the other limits stay on the
	// main backend. It has its own timeout and circuit
	// breakers; a request with limits on both is decided per store
	// (stores.go). It must read time as the main backend does (the same
	// injected clock, or none). nil keeps every limit on the main backend.
	PerSecondBackend backend.Backend
	// PerSecondTimeout is the per-call timeout of PerSecondBackend; Timeout
	// when 0.
	PerSecondTimeout time.Duration
	// Servers is how many servers share the store, for the failure mode
	// FailDegraded (each limits its share); 0 lets a Server learn it from
	// the store's heartbeats (a Service alone then counts 1).
	Servers int
	// DegradedMemoBytes bounds the memory of the store results FailDegraded
	// remembers, to start from when the store fails; 8 MiB when 0.
	DegradedMemoBytes int
	// Quota configures Envoy's rate limit quota service (RLQS, package server/rlqs).
	Quota QuotaOptions
	// Leases makes every limit that can lease and says nothing of it (the
	// YAML's lease) decide through quota leases on a remote store
	// (lease.go, docs/server/leases.md); a limit's lease: true or false
	// overrides it. Not in envoy compatibility mode.
	Leases bool
}

// Service decides rate limit requests against a configuration on a backend.
// It is safe for concurrent use; SetConfig swaps the configuration
// atomically while requests are decided.
type Service struct {
	main    *store // every limit's state, or every limit's but per-second ones
	ps      *store // the per-second limits' state (Options.PerSecondBackend); nil for none
	opts    Options
	log     *slog.Logger
	failLog *faillog.Limiter // store failures, at most one line a second per reason and node
	nodes   faillog.Labels   // the store nodes errors have named, bounded
	rules   atomic.Pointer[ruleset]
	top     *dashboard.TopKeys // keys most often over their limit, for the dashboard; nil without metrics

	overrides sync.Map // overrideKey -> *ratelimit.Limiter
	nOverride atomic.Int32

	local     *localcache.Cache  // nil without Options.LocalCacheBytes
	localHits prometheus.Counter // floodgate_local_cache_hits_total; nil without a cache or metrics

	// degraded decides in process while the store cannot (FailDegraded,
	// degrade.go); nil in the other failure modes. servers is how many
	// servers share the store: Options.Servers, or the heartbeats'.
	degraded *degraded.Limits
	servers  atomic.Int64

	// Chosen once by NewService (decide.go): what Decide runs (the core's
	// decide, or an adapter around it), how the core counts, and who
	// observes its decisions (nil: nobody).
	front  func(context.Context, *Request) (*Response, error)
	policy policy
	obs    decision.Observer
	// tracer makes the spans of requests and store calls; nil without
	// Options.Tracing.Provider.
	tracer *tracing.Tracer
}

// maxOverrideLimiters bounds the distinct limit overrides kept.
const maxOverrideLimiters = 4096

type overrideKey struct {
	rpu  uint32
	unit config.Unit
	mult uint32
}

// ruleset is a configuration with a Limiter for each of its limits.
type ruleset struct {
	cfg       *config.Config
	limiters  map[*config.Limit]*ratelimit.Limiter
	stats     map[*config.Limit]*limitStats
	localGens map[*config.Limit]uint64            // the limits' generations in the local cache (its Key)
	leased    map[*config.Limit]*ratelimit.Leased // the limits that lease (lease.go); nil for none
	version   string
	loaded    time.Time
}

// defaultTimeout is what a zero Options.Timeout means: DefaultTimeout,
// except in this package's tests, which run on machines busy with other
// tests and raise it (TestMain); tests about timeouts set their own.
var defaultTimeout = DefaultTimeout

// NewService returns a Service on b. It has no configuration until
// SetConfig: until then every request is answered OK (no limit applies) and
// Ready reports false.
func NewService(b backend.Backend, opts Options) (*Service, error) {
	if b == nil {
		return nil, errors.New("server: backend is nil")
	}
	if opts.Timeout < 0 {
		return nil, fmt.Errorf("server: timeout %v is negative", opts.Timeout)
	}
	if opts.Timeout == 0 {
		opts.Timeout = defaultTimeout
	}
	if opts.PerSecondBackend != nil && opts.PerSecondBackend == b {
		return nil, errors.New("server: the per-second backend is the main backend: leave PerSecondBackend nil to keep every limit on it")
	}
	if opts.PerSecondTimeout < 0 {
		return nil, fmt.Errorf("server: per-second store timeout %v is negative", opts.PerSecondTimeout)
	}
	if opts.Quota.TTL < 0 || opts.Quota.TTL > MaxQuotaTTL {
		return nil, fmt.Errorf("server: Quota.TTL must be between 0 (the default, %v) and %v, got %v", DefaultQuotaTTL, MaxQuotaTTL, opts.Quota.TTL)
	}
	if opts.PerSecondTimeout == 0 {
		opts.PerSecondTimeout = opts.Timeout
	}
	if opts.MaxDescriptors <= 0 {
		opts.MaxDescriptors = DefaultMaxDescriptors
	}
	if opts.MaxEntries <= 0 {
		opts.MaxEntries = DefaultMaxEntries
	}
	if opts.NearLimitRatio <= 0 || opts.NearLimitRatio > 1 {
		opts.NearLimitRatio = 0.8
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Service{opts: opts, log: opts.Logger, policy: envoyPolicy(opts.Envoy)}
	storeSpan := tracing.SpanStore
	s.front = s.decide
	if opts.Envoy.Enabled {
		s.front, storeSpan = s.envoyDecide, tracing.SpanEnvoyStore
	}
	s.tracer = tracing.New(opts.Tracing, storeSpan)
	if opts.EnvoyStats != nil {
		s.obs = envoy.NewObserver(opts.EnvoyStats)
	}
	s.failLog = faillog.New(opts.Logger, time.Second)
	s.main = newStore(storeMain, b, opts.Timeout, s.breakerOptions(storeMain))
	if opts.PerSecondBackend != nil {
		s.ps = newStore(storePerSecond, opts.PerSecondBackend, opts.PerSecondTimeout, s.breakerOptions(storePerSecond))
	}
	if opts.Servers < 0 {
		return nil, fmt.Errorf("server: Servers %d is negative", opts.Servers)
	}
	s.servers.Store(int64(max(opts.Servers, 1)))
	if opts.FailureMode == FailDegraded && (s.main.remote || s.ps != nil && s.ps.remote) {
		// (The memory backend never fails: nothing to keep.)
		cooldown := opts.Breaker.Cooldown
		if cooldown <= 0 {
			cooldown = breaker.DefaultCooldown
		}
		s.degraded = degraded.New(degraded.Options{
			Servers:   func() int { return int(s.servers.Load()) },
			MemoBytes: opts.DegradedMemoBytes,
			Clock:     b.Clock(),
			// Every server has probed the store back by then.
			Grace: max(degraded.DefaultGrace, 2*cooldown+opts.Timeout),
		})
	}
	if opts.Metrics != nil {
		for _, st := range s.stores() {
			opts.Metrics.watchBreaker(st.name, st.breakers)
			if mem, ok := st.b.(*backend.Memory); ok {
				opts.Metrics.watchMemory(mem)
			}
		}
		s.top = dashboard.NewTopKeys(64)
		opts.Metrics.watchLeases(s)
	}
	if opts.LocalCacheBytes > 0 {
		s.local = localcache.New(opts.LocalCacheBytes, b.Clock())
		if opts.Metrics != nil {
			s.localHits = opts.Metrics.watchLocalCache(s.local)
		}
		opts.EnvoyStats.WatchLocalCache(s.local)
	}
	return s, nil
}

// SetConfig makes cfg the configuration of every later decision. version is
// reported by Config and in metrics (for example a hash of the files). State
// is kept across configurations for every limit whose descriptor path and
// rule are unchanged.
func (s *Service) SetConfig(cfg *config.Config, version string) error {
	if cfg == nil {
		return errors.New("server: config is nil")
	}
	rs := &ruleset{
		cfg:      cfg,
		limiters: map[*config.Limit]*ratelimit.Limiter{},
		stats:    map[*config.Limit]*limitStats{},
		version:  version,
		loaded:   time.Now(),
	}
	for _, d := range cfg.Domains {
		for _, l := range d.Limits() {
			if l.Unlimited {
				continue
			}
			lim, err := ratelimit.New(s.storeOf(l).b, l.Rule)
			if err != nil {
				return fmt.Errorf("%s:%d: %w", l.File, l.Line, err)
			}
			rs.limiters[l] = lim
			if s.opts.Metrics != nil {
				rs.stats[l] = s.opts.Metrics.limitStats(d.Name, l)
			}
		}
	}
	leased, err := s.leases(cfg, rs.limiters)
	if err != nil {
		return err
	}
	rs.leased = leased
	if s.obs != nil {
		s.obs.ConfigSet(cfg)
	}
	if s.local != nil {
		rs.localGens = s.local.Generations(maps.Keys(rs.limiters))
	}
	if old := s.rules.Swap(rs); old != nil && len(old.leased) > 0 {
		// Requests deciding on the old configuration may still take leases
		// from it: they end with its Leased's background flushes.
		go closeLeases(old, time.Second)
	}
	if m := s.opts.Metrics; m != nil {
		m.configSet(version, rs.loaded)
	}
	return nil
}

// Close gives back to the store the units the leases hold (Options.Leases),
// within ctx, and releases the in-process state of the failure mode
// FailDegraded. Decisions after it still work, from a fresh state.
func (s *Service) Close(ctx context.Context) error {
	var errs []error
	if rs := s.rules.Load(); rs != nil {
		for _, lz := range rs.leased {
			errs = append(errs, lz.Close(ctx))
		}
	}
	if s.degraded != nil {
		errs = append(errs, s.degraded.Close())
	}
	return errors.Join(errs...)
}

// Config returns the current configuration, its version and when it was
// set; nil before the first SetConfig.
func (s *Service) Config() (cfg *config.Config, version string, loaded time.Time) {
	rs := s.rules.Load()
	if rs == nil {
		return nil, "", time.Time{}
	}
	return rs.cfg, rs.version, rs.loaded
}

// Ready reports whether the service has a configuration and its store is not
// known to be down: on a Redis Cluster, unless the breakers of every slot
// range are open; a partial outage (one master down) leaves it ready, since
// the keys of the other masters are decided as usual (StoreHealth says how
// much is failing). With a per-second store, the service is ready unless
// both stores are down: while one is, the other's limits are decided as
// usual.
func (s *Service) Ready() bool {
	return s.rules.Load() != nil && !s.allStoresDown()
}

// breakerOpen reports whether any circuit breaker of any store is open.
func (s *Service) breakerOpen() bool {
	n, _ := s.StoreHealth()
	return n > 0
}

// StoreHealth returns how many of the stores' circuit breakers are open
// (failing calls fast), of how many: one in all for a standalone or Sentinel
// Redis and for the memory backend, one per range of hash slots on a Redis
// Cluster; with a per-second store, the sum over both (PerSecondStoreHealth
// tells that one's).
func (s *Service) StoreHealth() (open, total int) {
	for _, st := range s.stores() {
		o, t := st.breakers.Open()
		open, total = open+o, total+t
	}
	return open, total
}

// PerSecondStoreHealth is StoreHealth of the per-second store alone; ok is
// false when there is none (Options.PerSecondBackend).
func (s *Service) PerSecondStoreHealth() (open, total int, ok bool) {
	if s.ps == nil {
		return 0, 0, false
	}
	open, total = s.ps.breakers.Open()
	return open, total, true
}

// limiter returns the Limiter of l.
func (s *Service) limiter(rs *ruleset, l *config.Limit) *ratelimit.Limiter {
	if lim := rs.limiters[l]; lim != nil {
		return lim
	}
	k := overrideKey{l.RequestsPerUnit, l.Unit, l.UnitMultiplier}
	if v, ok := s.overrides.Load(k); ok {
		return v.(*ratelimit.Limiter)
	}
	lim, err := ratelimit.New(s.storeOf(l).b, l.Rule)
	if err != nil {
		// Only overrides get here, and every override is a valid FixedWindow.
		panic(fmt.Sprintf("server: limiter for %s: %v", l.Path, err))
	}
	if s.nOverride.Load() < maxOverrideLimiters {
		if v, loaded := s.overrides.LoadOrStore(k, lim); loaded {
			return v.(*ratelimit.Limiter)
		}
		s.nOverride.Add(1)
	}
	return lim
}

// stateKey is the key a descriptor is counted under; keys too long for the
// store are replaced by a digest.
func stateKey(l *config.Limit, entries []config.Entry) string {
	k := l.StateKey(entries) // an override's Path already names its entries
	if len(k) <= maxStateKey {
		return k
	}
	sum := sha256.Sum256([]byte(k))
	return l.Path[:min(len(l.Path), maxStateKey-70)] + "#" + hex.EncodeToString(sum[:])
}

const maxStateKey = 512

// allow runs one AllowAll under the timeout and the circuit breaker.
//
// A store call that is still waiting when the caller's deadline ends counts
// as a store timeout, exactly as when the service's own Timeout ends first:
// callers whose deadline is shorter than Timeout (Envoy's default is 20 ms)
// must not hide a stalled store from the breaker, the metrics and the logs.
// A caller that cancels (goes away) says nothing about the store: its call
// counts neither as a failure nor as a success.
//
// With a per-second store, reqs are decided on the store that holds them;
// reqs on both are decided per store, by allowSplit.
func (s *Service) allow(ctx context.Context, reqs []ratelimit.Request, results []ratelimit.Result) (bool, error) {
	if s.ps == nil {
		return s.allowOn(ctx, s.main, reqs, results, nil)
	}
	nps := 0
	for _, q := range reqs {
		if s.onPerSecond(q) {
			nps++
		}
	}
	switch nps {
	case 0:
		return s.allowOn(ctx, s.main, reqs, results, nil)
	case len(reqs):
		return s.allowOn(ctx, s.ps, reqs, results, nil)
	}
	return s.allowSplit(ctx, reqs, results)
}

// allowOn runs one AllowAll on st, whose backend holds every request of
// reqs; or, when lz is not nil, decides the one request of reqs through
// the lease lz (lease.go).
func (s *Service) allowOn(ctx context.Context, st *store, reqs []ratelimit.Request, results []ratelimit.Result, lz *ratelimit.Leased) (bool, error) {
	if s.tracer != nil {
		return s.allowTraced(ctx, st, reqs, results, lz) // tracing.go: under a store span
	}
	return s.allowStore(ctx, st, reqs, results, lz)
}

func (s *Service) allowStore(ctx context.Context, st *store, reqs []ratelimit.Request, results []ratelimit.Result, lz *ratelimit.Leased) (bool, error) {
	if !st.remote {
		return allowAll(ctx, reqs, results, lz)
	}
	var idxBuf [8]int
	idx := idxBuf[:0]
	for _, q := range reqs {
		if j := st.breakers.Of(q.Key); !slices.Contains(idx, j) {
			idx = append(idx, j)
		}
	}
	var ok bool
	err := s.callStore(ctx, st, idx, func(ctx context.Context) (err error) {
		ok, err = allowAll(ctx, reqs, results, lz)
		return err
	})
	return ok, err
}

// callStore runs call, one call to st touching the keys of the breakers
// idx (st.breakers.Of of each key), under st's timeout and circuit
// breakers, as every store call of the service goes: refused at once with
// errBreakerOpen while a breaker is open; timed in
// floodgate_backend_duration_seconds; its outcome recorded by the
// breakers. A call on a store that is not remote (the memory backend) is
// run as it is.
//
// Errors are st's (storeError, for storeFailed): a deadline, the service's
// or the caller's, is a *storeTimeoutError; a caller that cancels is a
// *callerGoneError and counts neither as a failure nor as a success, nor
// does a Redis Cluster reshaping itself (clusterStateError).
func (s *Service) callStore(ctx context.Context, st *store, idx []int, call func(context.Context) error) error {
	if !st.remote {
		return call(ctx)
	}
	if ctx.Err() != nil {
		return ctx.Err() // over before the store was asked
	}
	if !st.breakers.Allow(idx) {
		return st.wrap(errBreakerOpen)
	}
	start := time.Now()
	dl, hasDL := ctx.Deadline()
	callerFirst := hasDL && dl.Before(start.Add(st.timeout))
	cctx, cancel := context.WithTimeout(ctx, st.timeout)
	err := call(cctx)
	cancel()
	if m := s.opts.Metrics; m != nil {
		m.backendDuration.Observe(time.Since(start).Seconds())
	}
	if err != nil {
		// The client may report a deadline from its own timer a moment
		// before ctx's fires, so whose deadline it was is decided by
		// comparing them, not by ctx.Err().
		switch cerr := ctx.Err(); {
		case cerr != nil && !errors.Is(cerr, context.DeadlineExceeded):
			st.breakers.Release(idx)
			return &callerGoneError{err: cerr}
		case cerr != nil || errors.Is(err, context.DeadlineExceeded):
			err = &storeTimeoutError{waited: time.Since(start), caller: callerFirst}
		}
	}
	if err != nil && clusterStateError(err) {
		// The whole Cluster answers so, at once, during its own failover:
		// it says nothing about this key's node, and counting it would open
		// the breakers of healthy ranges for a cooldown after the Cluster is
		// fine again. The call is still answered by the failure mode.
		st.breakers.Release(idx)
		return st.wrap(err)
	}
	st.breakers.Record(idx, err, start)
	return st.wrap(err)
}

// clusterStateError reports a Redis Cluster's answer while it is reshaping
// (CLUSTERDOWN, TRYAGAIN): quick, and about the Cluster, not one node.
func clusterStateError(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "CLUSTERDOWN") || strings.Contains(msg, "TRYAGAIN")
}

var errBreakerOpen = errors.New("circuit breaker open: the store failed repeatedly")

// storeTimeoutError is a store call that had not answered when a deadline
// ended: the service's Timeout, or the caller's when that came first. It
// matches context.DeadlineExceeded.
type storeTimeoutError struct {
	waited time.Duration
	caller bool // the caller's deadline ended first
}

func (e *storeTimeoutError) Error() string {
	if e.caller {
		return fmt.Sprintf("the store had not answered after %v, when the caller's deadline ended", e.waited.Round(time.Microsecond))
	}
	return fmt.Sprintf("the store had not answered after %v (the timeout)", e.waited.Round(time.Microsecond))
}

func (e *storeTimeoutError) Unwrap() error { return context.DeadlineExceeded }

// callerGoneError is a store call abandoned because the caller cancelled.
type callerGoneError struct{ err error }

func (e *callerGoneError) Error() string { return "the caller went away: " + e.err.Error() }
func (e *callerGoneError) Unwrap() error { return e.err }

// fail answers a request the store could not decide. Every store failure is
// counted in the metrics and logged (at most once a second per reason, with
// the number of failures left unlogged), including timeouts of callers whose
// deadline ended first; those callers then get their context's error.
func (s *Service) fail(ctx context.Context, domain string, resp *Response, err error) (*Response, error) {
	var gone *callerGoneError
	if errors.As(err, &gone) {
		return nil, gone.err
	}
	reason, store := s.storeFailed(ctx, domain, err)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var st *storeTimeoutError
	if errors.As(err, &st) && st.caller {
		return nil, context.DeadlineExceeded // the caller's, about to fire
	}
	if s.opts.FailureMode == FailError {
		// The store's error (in the log above) names internal addresses:
		// callers get the reason only.
		if store == storePerSecond {
			reason += ", per-second store"
		}
		return nil, fmt.Errorf("%w for this request's keys (%s)", ErrUnavailable, strings.ReplaceAll(reason, "_", " "))
	}
	resp.Failed, resp.ByFailureMode = true, true
	resp.Code = CodeOK
	now := s.now()
	for i := range resp.Statuses {
		st := &resp.Statuses[i]
		st.Code = CodeOK
		if st.Limit == nil || st.Limit.Unlimited {
			continue
		}
		// The window the answer is about ends when the limit's would.
		st.ResetAfter = windowLeft(st.Limit.Window(), now)
		if s.opts.FailureMode == FailClosed && !st.Limit.ShadowMode {
			st.Code = CodeOverLimit
			st.Remaining = 0
			st.RetryAfter = st.ResetAfter
			resp.Code = CodeOverLimit
		}
	}
	return resp, nil
}

// now is the service's time: the main store's injected clock, or the real
// one.
func (s *Service) now() time.Time {
	if c := s.main.b.Clock(); c != nil {
		return c.Now()
	}
	return time.Now()
}

// windowLeft is the time from now to the end of the current window of
// length w, windows starting at multiples of w since the Unix epoch (as
// fixed windows do on every backend); 0 for no window.
func windowLeft(w time.Duration, now time.Time) time.Duration {
	if w <= 0 {
		return 0
	}
	return time.Duration(w.Nanoseconds() - now.UnixNano()%w.Nanoseconds())
}

// storeFailed counts a store failure, err, in the metrics and envoy's
// stats and logs it (at most once a second per reason, store and node),
// and returns its reason (error, timeout, breaker_open) and the store's
// name. A failure a caller's own deadline cut short is not counted as
// answered by the failure mode.
func (s *Service) storeFailed(ctx context.Context, domain string, err error) (reason, store string) {
	if s.obs != nil {
		s.obs.StoreFailed()
	}
	reason = "error"
	switch {
	case errors.Is(err, errBreakerOpen):
		reason = "breaker_open"
	case errors.Is(err, context.DeadlineExceeded):
		reason = "timeout"
	}
	store = storeMain
	var se *storeError
	if errors.As(err, &se) {
		store = se.store
	}
	node := ""
	if reason != "breaker_open" {
		node = s.nodes.Label(faillog.Node(err))
	}
	if m := s.opts.Metrics; m != nil {
		m.backendErrors.WithLabelValues(reason, store).Inc()
		if node != "" {
			m.backendNodeErrors.WithLabelValues(node).Inc()
		}
		var st *storeTimeoutError
		if ctx.Err() == nil && !(errors.As(err, &st) && st.caller) {
			m.failureMode.WithLabelValues(s.opts.FailureMode.String()).Inc()
		}
	}
	{
		// One line a second per reason, store and node, with a count of the rest.
		s.failLog.Warn(reason+"|"+store+"|"+node, "rate limit store failed", "domain", domain, "reason", reason, "store", store, "node", node, "error", err, "failure_mode", s.opts.FailureMode.String())
	}
	return reason, store
}

// breakerOptions are Options.Breaker for the store named store, with its
// breakers' openings and closings logged (at most a line a second each
// way, with a count of the rest).
func (s *Service) breakerOptions(store string) BreakerOptions {
	o := s.opts.Breaker
	o.OnChange = func(i int, open bool) {
		if open {
			s.failLog.Warn("breaker|"+store+"|open", "circuit breaker opened: the store's calls fail at once until a probe succeeds", "store", store, "range", i)
		} else {
			s.failLog.Log(slog.LevelInfo, "breaker|"+store+"|closed", "circuit breaker closed: the store answers again", "store", store, "range", i)
		}
	}
	return o
}

// notReadyReason says why Ready is false.
func (s *Service) notReadyReason() string {
	if s.rules.Load() == nil {
		return "no configuration loaded"
	}
	if s.allStoresDown() {
		if s.ps != nil {
			return "both stores are failing (circuit breakers open)"
		}
		return "the store is failing (circuit breaker open)"
	}
	return "ready"
}

// allowAll is ratelimit.AllowAll, through AllowN for a single request: the
// results are the same, and a single Limiter's script is cheaper for Redis
// than the general multi-key one.
func allowAll(ctx context.Context, reqs []ratelimit.Request, results []ratelimit.Result, lz *ratelimit.Leased) (bool, error) {
	if lz != nil {
		return allowLeased(ctx, lz, reqs[0], results)
	}
	if len(reqs) == 1 && reqs[0].Limiter != nil {
		r, err := reqs[0].Limiter.AllowN(ctx, reqs[0].Key, reqs[0].N)
		if err != nil {
			return false, err
		}
		results[0] = r
		return r.Allowed, nil
	}
	return ratelimit.AllowAll(ctx, reqs, results)
}
