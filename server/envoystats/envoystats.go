// Package envoystats emits envoyproxy/ratelimit's statistics over StatsD:
// its names, its arithmetic and its wire format, for `floodgate serve
// --compat envoy`, so that dashboards and alerts built on
// envoyproxy/ratelimit (commit f2fb157) keep working.
//
// It uses github.com/lyft/gostats, the library envoyproxy/ratelimit uses:
// counters are kept in memory and sent as deltas every flush interval (a
// counter that did not move is not sent), over TCP by default (gostats'
// STATSD_PROTOCOL chooses udp), as "name:delta|c" lines. EXTRA_TAGS are
// gostats tags, written into the name as ".__key=value". With DogStatsD
// (USE_DOG_STATSD), lines go over UDP through github.com/DataDog/datadog-go,
// with those tags as DogStatsD tags: "name:delta|c|#key:value".
//
// The names, under ratelimit.service (every one carries EXTRA_TAGS):
//
//	rate_limit.KEY.total_hits        hits of a rule (before the store is asked)
//	rate_limit.KEY.within_limit      hits admitted
//	rate_limit.KEY.near_limit        hits past NEAR_LIMIT_RATIO of the limit, up to the limit
//	rate_limit.KEY.over_limit        hits past the limit
//	rate_limit.KEY.over_limit_with_local_cache  hits denied by the local over-limit cache
//	rate_limit.KEY.shadow_mode       hits past the limit of a shadow_mode rule
//	rate_limit.DOMAIN.domain_not_found  descriptors of an unknown domain
//	config_load_success, config_load_error
//	global_shadow_mode               answers SHADOW_MODE turned from OVER_LIMIT to OK
//	call.should_rate_limit.redis_error    requests failed by the store
//	call.should_rate_limit.service_error  requests refused (empty domain, no descriptors, no configuration)
//
// and, with a local over-limit cache (WatchLocalCache), the gauges
// ratelimit.localcache.hitCount, missCount, lookupCount, entryCount, ...;
// gostats' Go runtime stats under ratelimit.go (alloc, sys, numGoroutine,
// ...); and, under ratelimit_server (with EXTRA_TAGS too), for each unary
// gRPC method called (GRPCMethod):
//
//	METHOD.total_requests   calls (ShouldRateLimit, Check, ...)
//	METHOD.response_time    a timer, each call's time in whole milliseconds
//
// KEY is config.Limit.EnvoyStatKey (or, for a limit carried by the request,
// the domain and its entries), sanitized as envoy does: ':' and '|' become
// '_', and so do the dots of anything that looks like an IPv4 address.
package envoystats

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/DataDog/datadog-go/v5/statsd"
	gostats "github.com/lyft/gostats"

	"github.com/floodgate-dev/floodgate/server/config"
)

// Defaults, envoyproxy/ratelimit's.
const (
	DefaultHost          = "localhost"
	DefaultPort          = 8125
	DefaultFlushInterval = 10 * time.Second
	DefaultNearLimit     = 0.8
)

// Options configure Stats. The zero value of a field selects its default.
type Options struct {
	// Disabled is DISABLE_STATS: counters are kept, nothing is sent.
	Disabled bool
	// DogStatsD is USE_DOG_STATSD: DogStatsD over UDP, with tags.
	DogStatsD bool
	// Host and Port are STATSD_HOST and STATSD_PORT.
	Host string
	Port int
	// Protocol is gostats' STATSD_PROTOCOL for plain StatsD: tcp (the
	// default) or udp.
	Protocol string
	// FlushInterval is STATS_FLUSH_INTERVAL.
	FlushInterval time.Duration
	// ExtraTags is EXTRA_TAGS.
	ExtraTags map[string]string
	// NearLimitRatio is NEAR_LIMIT_RATIO, in (0, 1].
	NearLimitRatio float64
	// Logger gets the sink's connection errors, at most one line a minute.
	Logger *slog.Logger
}

// Stats is envoyproxy/ratelimit's statistics. Its methods are safe for
// concurrent use; a nil *Stats records nothing.
type Stats struct {
	store gostats.Store
	scope gostats.Scope // ratelimit, with EXTRA_TAGS
	rl    gostats.Scope
	srv   gostats.Scope // ratelimit_server, with EXTRA_TAGS
	near  float32

	methods sync.Map // full gRPC method name → *Method

	ConfigLoadSuccess, ConfigLoadError, GlobalShadowMode gostats.Counter
	RedisError, ServiceError                             gostats.Counter

	stop   context.CancelFunc
	done   chan struct{}
	close  func()
	closed sync.Once
}

// New returns Stats that send to the sink opts select, every flush
// interval, until Close.
func New(opts Options) (*Stats, error) {
	if opts.Host == "" {
		opts.Host = DefaultHost
	}
	if opts.Port == 0 {
		opts.Port = DefaultPort
	}
	if opts.Port < 0 || opts.Port > 65535 {
		return nil, fmt.Errorf("envoystats: port %d", opts.Port)
	}
	if opts.FlushInterval <= 0 {
		opts.FlushInterval = DefaultFlushInterval
	}
	if opts.NearLimitRatio <= 0 || opts.NearLimitRatio > 1 {
		opts.NearLimitRatio = DefaultNearLimit
	}
	switch opts.Protocol {
	case "":
		opts.Protocol = "tcp"
	case "tcp", "tcp4", "tcp6", "udp", "udp4", "udp6":
	default:
		return nil, fmt.Errorf("envoystats: protocol %q: want tcp or udp", opts.Protocol)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	var sink gostats.Sink
	closeSink := func() {}
	switch {
	case opts.Disabled:
		sink = gostats.NewNullSink()
	case opts.DogStatsD:
		ds, err := newDogSink(net.JoinHostPort(opts.Host, strconv.Itoa(opts.Port)))
		if err != nil {
			return nil, err
		}
		sink, closeSink = ds, ds.close
	default:
		ns, err := newNetSink(opts)
		if err != nil {
			return nil, err
		}
		sink = ns
	}
	s := newStats(gostats.NewStore(sink, false), opts)
	ctx, stop := context.WithCancel(context.Background())
	s.stop, s.done, s.close = stop, make(chan struct{}), closeSink
	go func() {
		defer close(s.done)
		t := time.NewTicker(opts.FlushInterval)
		defer t.Stop()
		s.store.StartContext(ctx, t) // flushes once more when ctx ends
	}()
	return s, nil
}

func newStats(store gostats.Store, opts Options) *Stats {
	scope := store.ScopeWithTags("ratelimit", opts.ExtraTags)
	svc := scope.Scope("service")
	call := svc.Scope("call.should_rate_limit")
	store.AddStatGenerator(gostats.NewRuntimeStats(scope.Scope("go")))
	return &Stats{
		store:             store,
		scope:             scope,
		rl:                svc.Scope("rate_limit"),
		srv:               store.ScopeWithTags("ratelimit_server", opts.ExtraTags),
		near:              float32(opts.NearLimitRatio),
		ConfigLoadSuccess: svc.NewCounter("config_load_success"),
		ConfigLoadError:   svc.NewCounter("config_load_error"),
		GlobalShadowMode:  svc.NewCounter("global_shadow_mode"),
		RedisError:        call.NewCounter("redis_error"),
		ServiceError:      call.NewCounter("service_error"),
	}
}

// Flush sends the counters' changes since the last flush now.
func (s *Stats) Flush() {
	if s != nil {
		s.store.Flush()
	}
}

// Close stops the flushing, after a last flush (waiting for it at most a
// second: a StatsD that cannot be reached does not hold up a shutdown).
func (s *Stats) Close() error {
	if s == nil {
		return nil
	}
	s.closed.Do(func() {
		s.stop()
		select {
		case <-s.done:
		case <-time.After(time.Second):
		}
		s.close()
	})
	return nil
}

// LocalCacheCounts is what a local over-limit cache reports: freecache's
// counters, with lookups and hits as envoyproxy/ratelimit counts them (a
// hit is a descriptor the cache answered OVER_LIMIT).
type LocalCacheCounts interface {
	EvacuateCount() int64
	ExpiredCount() int64
	EntryCount() int64
	AverageAccessTime() int64
	HitCount() int64
	MissCount() int64
	LookupCount() int64
	OverwriteCount() int64
}

// WatchLocalCache sends c's counts, every flush, as envoyproxy/ratelimit's
// gauges ratelimit.localcache.{evacuateCount, expiredCount, entryCount,
// averageAccessTime, hitCount, missCount, lookupCount, overwriteCount}
// (with EXTRA_TAGS). Call it once.
func (s *Stats) WatchLocalCache(c LocalCacheCounts) {
	if s == nil || c == nil {
		return
	}
	sc := s.scope.Scope("localcache")
	g := localCacheGauges{c: c}
	for i, name := range localCacheGaugeNames {
		g.gauges[i] = sc.NewGauge(name)
	}
	s.store.AddStatGenerator(g)
}

var localCacheGaugeNames = [...]string{"evacuateCount", "expiredCount", "entryCount", "averageAccessTime",
	"hitCount", "missCount", "lookupCount", "overwriteCount"}

type localCacheGauges struct {
	c      LocalCacheCounts
	gauges [len(localCacheGaugeNames)]gostats.Gauge
}

// GenerateStats is gostats' StatGenerator: it runs before every flush.
func (g localCacheGauges) GenerateStats() {
	for i, v := range [...]int64{g.c.EvacuateCount(), g.c.ExpiredCount(), g.c.EntryCount(), g.c.AverageAccessTime(),
		g.c.HitCount(), g.c.MissCount(), g.c.LookupCount(), g.c.OverwriteCount()} {
		g.gauges[i].Set(uint64(max(v, 0)))
	}
}

// Rule is the counters of one stats key.
type Rule struct {
	TotalHits, WithinLimit, NearLimit, OverLimit, OverLimitWithLocalCache, ShadowMode gostats.Counter
}

// Rule returns the counters of key (sanitized here). Every call with the
// same key returns counters that count together.
func (s *Stats) Rule(key string) *Rule {
	if s == nil {
		return nil
	}
	key = Sanitize(key)
	return &Rule{
		TotalHits:               s.rl.NewCounter(key + ".total_hits"),
		WithinLimit:             s.rl.NewCounter(key + ".within_limit"),
		NearLimit:               s.rl.NewCounter(key + ".near_limit"),
		OverLimit:               s.rl.NewCounter(key + ".over_limit"),
		OverLimitWithLocalCache: s.rl.NewCounter(key + ".over_limit_with_local_cache"),
		ShadowMode:              s.rl.NewCounter(key + ".shadow_mode"),
	}
}

// Method is the stats envoyproxy/ratelimit's gRPC server keeps of one
// method (src/metrics/metrics.go, f2fb157).
type Method struct {
	// TotalRequests counts calls, when they start.
	TotalRequests gostats.Counter
	// ResponseTime gets each call's time in whole milliseconds, sent at
	// once as a StatsD timer ("|ms").
	ResponseTime gostats.Timer
}

// Done records a call of m that took d, in whole milliseconds as envoy
// records it (a call under a millisecond is 0).
func (m *Method) Done(d time.Duration) {
	if m != nil {
		m.ResponseTime.AddValue(float64(d.Milliseconds()))
	}
}

// GRPCMethod returns the stats of the unary gRPC method fullMethod
// ("/package.Service/Method"): ratelimit_server.Method.total_requests and
// .response_time, named by the part after the service ("unknown" when
// fullMethod has no service), as envoy's interceptor names them. Every
// call with the same fullMethod returns the same *Method; nil for a nil
// Stats.
func (s *Stats) GRPCMethod(fullMethod string) *Method {
	if s == nil {
		return nil
	}
	if m, ok := s.methods.Load(fullMethod); ok {
		return m.(*Method)
	}
	name := "unknown"
	if _, method, ok := strings.Cut(strings.TrimPrefix(fullMethod, "/"), "/"); ok {
		name = method
	}
	m := &Method{
		TotalRequests: s.srv.NewCounter(name + ".total_requests"),
		ResponseTime:  s.srv.NewTimer(name + ".response_time"),
	}
	v, _ := s.methods.LoadOrStore(fullMethod, m)
	return v.(*Method)
}

// DomainNotFound counts n descriptors of a domain the configuration does not
// have.
func (s *Stats) DomainNotFound(domain string, n int) {
	if s == nil || n <= 0 {
		return
	}
	s.rl.NewCounter(Sanitize(domain) + ".domain_not_found").Add(uint64(n))
}

// OverrideKey is the stats key of a limit carried by a request descriptor:
// the domain and each entry's "key_value" ("key" when the value is empty),
// joined with '.'.
func OverrideKey(domain string, entries []config.Entry) string {
	var b strings.Builder
	b.WriteString(domain)
	for _, e := range entries {
		b.WriteByte('.')
		b.WriteString(e.Key)
		if e.Value != "" {
			b.WriteByte('_')
			b.WriteString(e.Value)
		}
	}
	return b.String()
}

// Decided records one descriptor's decision as envoyproxy/ratelimit's
// fixed-window cache does (limiter.BaseRateLimiter, f2fb157): the counter of
// the window went from before to after with hits, against limit. total_hits
// is not counted here (it is counted before the store is asked). localCache
// says the local over-limit cache denied it without asking the store.
//
// Within the limit, every hit is within_limit, and those past the near-limit
// threshold, floor(limit × NEAR_LIMIT_RATIO) in float32 as envoy computes
// it, are near_limit too. Past the limit, the hits past it are over_limit
// (all of them when the counter was already at the limit), those between the
// threshold and the limit near_limit, and, for a shadow_mode rule, the
// over_limit ones shadow_mode too.
func (s *Stats) Decided(r *Rule, limit uint32, before, after, hits uint64, shadow, localCache bool) {
	if s == nil || r == nil {
		return
	}
	if localCache {
		r.OverLimit.Add(hits)
		r.OverLimitWithLocalCache.Add(hits)
		if shadow {
			r.ShadowMode.Add(hits)
		}
		return
	}
	over := uint64(limit)
	near := uint64(math.Floor(float64(float32(over) * s.near)))
	if after > over {
		if before >= over {
			r.OverLimit.Add(hits)
		} else {
			r.OverLimit.Add(after - over)
			r.NearLimit.Add(over - max(near, before))
		}
		if shadow {
			if before >= over {
				r.ShadowMode.Add(hits)
			} else {
				r.ShadowMode.Add(after - over)
			}
		}
		return
	}
	if after > near {
		if before >= near {
			r.NearLimit.Add(hits)
		} else {
			r.NearLimit.Add(after - near)
		}
	}
	r.WithinLimit.Add(hits)
}

var ipv4 = regexp.MustCompile(`\d{1,3}\.\d{1,3}\.\d{1,3}\.\d{1,3}`)

// Sanitize is envoy's utils.SanitizeStatName: ':' and '|' become '_', and
// so do the dots of anything that looks like an IPv4 address.
func Sanitize(s string) string {
	s = strings.NewReplacer(":", "_", "|", "_").Replace(s)
	if !strings.Contains(s, ".") {
		return s
	}
	return ipv4.ReplaceAllStringFunc(s, func(ip string) string { return strings.ReplaceAll(ip, ".", "_") })
}

// newNetSink is gostats' StatsD sink (TCP or UDP). gostats reads its
// settings from the environment first and panics on a malformed one; that
// panic is an error here.
func newNetSink(opts Options) (sink gostats.FlushableSink, err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("envoystats: %v", r)
		}
	}()
	return gostats.NewNetSink(
		gostats.WithStatsdHost(opts.Host),
		gostats.WithStatsdPort(opts.Port),
		gostats.WithStatsdProtocol(opts.Protocol),
		gostats.WithLogger(&sinkLogger{log: opts.Logger}),
	), nil
}

// sinkLogger passes gostats' errors (a StatsD that cannot be reached is
// retried every few seconds) to a slog.Logger, at most one line a minute.
type sinkLogger struct {
	log     *slog.Logger
	mu      sync.Mutex
	last    time.Time
	dropped int
}

func (l *sinkLogger) Errorf(msg string, args ...any) { l.put(msg, args) }
func (l *sinkLogger) Warnf(msg string, args ...any)  { l.put(msg, args) }

func (l *sinkLogger) put(msg string, args []any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if now := time.Now(); now.Sub(l.last) >= time.Minute {
		l.log.Warn("envoy stats: StatsD: "+fmt.Sprintf(msg, args...), "unlogged", l.dropped)
		l.last, l.dropped = now, 0
		return
	}
	l.dropped++
}

// dogSink sends gostats' stats as DogStatsD, as envoyproxy/ratelimit's
// godogstats does: the tags gostats writes into a name (".__key=value") become
// DogStatsD tags ("key:value").
type dogSink struct{ c *statsd.Client }

func newDogSink(addr string) (*dogSink, error) {
	c, err := statsd.New(addr, statsd.WithoutClientSideAggregation())
	if err != nil {
		return nil, fmt.Errorf("envoystats: DogStatsD: %w", err)
	}
	return &dogSink{c: c}, nil
}

// splitTags separates gostats' serialized tags from a name.
func splitTags(name string) (string, []string) {
	short, rest, ok := strings.Cut(name, ".__")
	if !ok {
		return name, nil
	}
	var tags []string
	for _, kv := range strings.Split(rest, ".__") {
		if k, v, ok := strings.Cut(kv, "="); ok {
			tags = append(tags, k+":"+v)
		}
	}
	return short, tags
}

func (d *dogSink) FlushCounter(name string, value uint64) {
	name, tags := splitTags(name)
	_ = d.c.Count(name, int64(value), tags, 1)
}

func (d *dogSink) FlushGauge(name string, value uint64) {
	name, tags := splitTags(name)
	_ = d.c.Gauge(name, float64(value), tags, 1)
}

func (d *dogSink) FlushTimer(name string, ms float64) {
	name, tags := splitTags(name)
	_ = d.c.Timing(name, time.Duration(ms*float64(time.Millisecond)), tags, 1)
}

func (d *dogSink) Flush() { _ = d.c.Flush() }

func (d *dogSink) close() { _ = d.c.Close() }

// ParseExtraTags reads EXTRA_TAGS as envoyproxy/ratelimit does (envconfig's
// map): "k1:v1,k2:v2".
func ParseExtraTags(s string) (map[string]string, error) {
	if s == "" {
		return nil, nil
	}
	tags := map[string]string{}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(kv, ":")
		if !ok {
			return nil, fmt.Errorf("%q is not key:value", kv)
		}
		tags[k] = v
	}
	return tags, nil
}
