package server

import (
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/floodgate-dev/floodgate/server/config"
	"github.com/floodgate-dev/floodgate/server/internal/breaker"
)

// Metrics are the server's Prometheus metrics. Label values are bounded by
// the configuration: a descriptor is named by its path in the configuration
// ("domain|key_value|key"), never by the values of a request, unless its
// limit sets detailed_metric (then the request's values are appended, as
// envoyproxy/ratelimit does).
//
//	floodgate_decisions_total{domain,descriptor,result}   result: within_limit, near_limit, over_limit, shadow_over_limit
//	floodgate_hits_total{domain,descriptor}                units asked for (hits_addend)
//	floodgate_requests_total{api,code}                     api: grpc, json, check, rlqs (usage reports); code: OK, OVER_LIMIT, invalid, unavailable, unauthorized
//	floodgate_request_duration_seconds{api}                decision latency as the server saw it
//	floodgate_backend_duration_seconds                     store call latency (remote stores)
//	floodgate_backend_errors_total{reason,store}           reason: error, timeout, breaker_open; store: main, persecond
//	floodgate_backend_node_errors_total{node}              failed store calls by the node the error names (unknown: a timeout)
//	floodgate_failure_mode_total{mode}                     requests answered by the failure mode
//	floodgate_breaker_open{store}                          share of a store's circuit breakers failing calls fast (0 to 1; per slot range on a Cluster)
//	floodgate_config_reloads_total{result}                 success, failure
//	floodgate_config_info{version}                         1 for the configuration being served
//	floodgate_config_loaded_timestamp_seconds              when it was loaded
//	floodgate_connections_open{listener}                   connections open on the HTTP and gRPC listeners
//	floodgate_connections_limit                            the cap on them (--max-conns); 0 for none
//	floodgate_connections_shed_total{listener,reason}      closed to stay under the cap: idle, refused, descriptors
//	floodgate_memory_entries                               keys held by the embedded memory backend
//	floodgate_memory_bytes{kind}                           its estimated state: evictable (rate limits), pinned
//	floodgate_memory_max_bytes                             the bound (--memory-max-bytes); -1 for none
//	floodgate_memory_evictions_total{reason}               rate limit states forgotten: expired, lru
//	floodgate_memory_swept_total                           expired entries the janitor removed
//	floodgate_local_cache_hits_total                       descriptors answered OVER_LIMIT by the local over-limit cache (--local-cache-bytes)
//	floodgate_local_cache_entries                          descriptors it holds
//	floodgate_rlqs_streams                                 open streams of Envoy's quota service (one per data plane and domain)
//	floodgate_rlqs_actions_total{domain,action}            bucket actions: assign, abandon, or unsized (the store failed: no action)
type Metrics struct {
	Registry *prometheus.Registry

	// own holds floodgate's metrics alone (they are in Registry too): the
	// dashboard samples it every second, without the Go runtime and process
	// collectors, which cost most of a Gather.
	own *prometheus.Registry

	decisions         *prometheus.CounterVec
	hits              *prometheus.CounterVec
	requests          *prometheus.CounterVec
	requestDuration   *prometheus.HistogramVec
	backendDuration   prometheus.Histogram
	backendErrors     *prometheus.CounterVec
	backendNodeErrors *prometheus.CounterVec
	failureMode       *prometheus.CounterVec
	reloads           *prometheus.CounterVec
	configInfo        *prometheus.GaugeVec
	configLoaded      prometheus.Gauge
	breakerOpen       prometheus.GaugeFunc // the main store's
	breakerOpenPS     prometheus.GaugeFunc // the per-second store's
	memory            bool                 // the memory backend's collector is registered
	leases            bool                 // the lease collector is registered (lease.go)
	localCacheHits    prometheus.Counter
	rlqsStreams       prometheus.Gauge
	rlqsActions       *prometheus.CounterVec
	charged           *prometheus.CounterVec // charge.go
	chargedOver       *prometheus.CounterVec
}

// NewMetrics returns the metrics in a registry of their own, with the Go
// runtime and process collectors.
func NewMetrics() *Metrics {
	r := prometheus.NewRegistry()
	r.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	buckets := []float64{.00005, .0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, 1}
	m := &Metrics{
		Registry: r,
		own:      prometheus.NewRegistry(),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_decisions_total", Help: "Descriptor decisions by domain, descriptor path and result.",
		}, []string{"domain", "descriptor", "result"}),
		hits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_hits_total", Help: "Units asked for (hits_addend) by domain and descriptor path.",
		}, []string{"domain", "descriptor"}),
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_requests_total", Help: "Requests by API and answer.",
		}, []string{"api", "code"}),
		requestDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "floodgate_request_duration_seconds", Help: "Time to decide a request, by API.", Buckets: buckets,
		}, []string{"api"}),
		backendDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "floodgate_backend_duration_seconds", Help: "Time of each call to a remote store.", Buckets: buckets,
		}),
		backendErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_backend_errors_total", Help: "Store calls that failed, by reason and store (main, or persecond: the store of the limits whose period is one second).",
		}, []string{"reason", "store"}),
		backendNodeErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_backend_node_errors_total", Help: "Store calls that failed, by the store node the error names (unknown for timeouts), for at most 64 nodes (then other).",
		}, []string{"node"}),
		failureMode: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_failure_mode_total", Help: "Requests answered by the failure mode.",
		}, []string{"mode"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_config_reloads_total", Help: "Configuration loads by result.",
		}, []string{"result"}),
		configInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "floodgate_config_info", Help: "1 for the version of the configuration being served.",
		}, []string{"version"}),
		configLoaded: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "floodgate_config_loaded_timestamp_seconds", Help: "When the configuration being served was loaded.",
		}),
		rlqsStreams: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "floodgate_rlqs_streams", Help: "Open streams of Envoy's rate limit quota service (RLQS).",
		}),
		rlqsActions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_rlqs_actions_total", Help: "RLQS bucket actions by domain and action: assign, abandon, or unsized (the store could not size the share; no action sent).",
		}, []string{"domain", "action"}),
		charged: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_charged_units_total", Help: "Usage recorded by limits with charge: always (the cost of requests, whatever the answer), by domain and descriptor path.",
		}, []string{"domain", "descriptor"}),
		chargedOver: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "floodgate_charged_over_units_total", Help: "Of floodgate_charged_units_total, the units recorded past the limit (debt), by domain and descriptor path.",
		}, []string{"domain", "descriptor"}),
	}
	for _, reg := range []*prometheus.Registry{r, m.own} {
		reg.MustRegister(m.decisions, m.hits, m.requests, m.requestDuration, m.backendDuration,
			m.backendErrors, m.backendNodeErrors, m.failureMode, m.reloads, m.configInfo, m.configLoaded,
			m.rlqsStreams, m.rlqsActions, m.charged, m.chargedOver)
	}
	for _, reason := range []string{"error", "timeout", "breaker_open"} {
		m.backendErrors.WithLabelValues(reason, storeMain)
	}
	for _, res := range []string{"success", "failure"} {
		m.reloads.WithLabelValues(res)
	}
	return m
}

// Handler serves the metrics in the Prometheus exposition format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{})
}

// watchBreaker exports the share of the breakers of bs, those of the store
// named store, that are open.
func (m *Metrics) watchBreaker(store string, bs *breaker.Set) {
	g := &m.breakerOpen
	if store == storePerSecond {
		g = &m.breakerOpenPS
		for _, reason := range []string{"error", "timeout", "breaker_open"} {
			m.backendErrors.WithLabelValues(reason, store)
		}
	}
	if *g != nil {
		return
	}
	*g = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name:        "floodgate_breaker_open",
		Help:        "Share of a store's circuit breakers failing calls fast: 1 while a standalone or Sentinel store is failing; on a Redis Cluster, the share of hash-slot ranges. store: main, or persecond (the store of the limits whose period is one second).",
		ConstLabels: prometheus.Labels{"store": store},
	}, func() float64 {
		open, total := bs.Open()
		return float64(open) / float64(total)
	})
	m.Registry.MustRegister(*g)
	m.own.MustRegister(*g)
}

// configLoaded records a successful load of version.
func (m *Metrics) configSet(version string, at time.Time) {
	m.configInfo.Reset()
	m.configInfo.WithLabelValues(version).Set(1)
	m.configLoaded.Set(float64(at.UnixNano()) / 1e9)
}

// reload counts a configuration load.
func (m *Metrics) reload(ok bool) {
	if ok {
		m.reloads.WithLabelValues("success").Inc()
	} else {
		m.reloads.WithLabelValues("failure").Inc()
	}
}

// limitStats are the counters of one limit, resolved once per configuration.
type limitStats struct {
	within, near, over, shadow, hits prometheus.Counter
}

func (m *Metrics) limitStats(domain string, l *config.Limit) *limitStats {
	return &limitStats{
		within: m.decisions.WithLabelValues(domain, l.Path, "within_limit"),
		near:   m.decisions.WithLabelValues(domain, l.Path, "near_limit"),
		over:   m.decisions.WithLabelValues(domain, l.Path, "over_limit"),
		shadow: m.decisions.WithLabelValues(domain, l.Path, "shadow_over_limit"),
		hits:   m.hits.WithLabelValues(domain, l.Path),
	}
}

// request counts one answered request of api.
func (m *Metrics) request(api, code string, d time.Duration) {
	m.requests.WithLabelValues(api, code).Inc()
	m.requestDuration.WithLabelValues(api).Observe(d.Seconds())
}

// record counts the decisions of a request.
func (s *Service) record(rs *ruleset, req *Request, resp *Response) {
	m := s.opts.Metrics
	if m == nil {
		return
	}
	for i := range resp.Statuses {
		st := &resp.Statuses[i]
		l := st.Limit
		if l == nil || l.Unlimited {
			continue
		}
		cost := req.Descriptors[i].Cost
		var ls *limitStats
		if l.DetailedMetric {
			ls = m.limitStats(req.Domain, &config.Limit{Path: withEntries(l.Path, req.Descriptors[i].Entries)})
		} else if ls = rs.stats[l]; ls == nil {
			ls = m.limitStats(req.Domain, &config.Limit{Path: "override"})
		}
		ls.hits.Add(float64(cost))
		switch {
		case st.Shadow:
			ls.shadow.Inc()
		case st.Code == CodeOverLimit:
			ls.over.Inc()
		case cost > 0 && l.RequestsPerUnit > 0 && float64(st.Remaining) < (1-s.opts.NearLimitRatio)*float64(l.RequestsPerUnit):
			ls.near.Inc()
		default:
			ls.within.Inc()
		}
	}
}
