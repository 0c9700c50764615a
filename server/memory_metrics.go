package server

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/floodgate-dev/floodgate/backend"
)

// memoryCollector exports the state of the embedded memory backend: its
// size against the bound and what eviction forgot. It reads
// backend.Memory.Stats once per scrape (a brief lock of each shard), so it
// is registered for /metrics only, not for the dashboard's sampling.
type memoryCollector struct {
	m                                   *backend.Memory
	entries, bytes, max, evicted, swept *prometheus.Desc
}

func newMemoryCollector(m *backend.Memory) *memoryCollector {
	return &memoryCollector{
		m:       m,
		entries: prometheus.NewDesc("floodgate_memory_entries", "Keys held by the embedded memory backend, expired or not.", nil, nil),
		bytes:   prometheus.NewDesc("floodgate_memory_bytes", "Estimated bytes of the memory backend's state, by kind: evictable (rate limit state) or pinned (never evicted).", []string{"kind"}, nil),
		max:     prometheus.NewDesc("floodgate_memory_max_bytes", "The bound on floodgate_memory_bytes (--memory-max-bytes); -1 when unbounded.", nil, nil),
		evicted: prometheus.NewDesc("floodgate_memory_evictions_total", "Rate limit states forgotten to stay within the bound, by reason: expired (cost nothing) or lru (that key started afresh).", []string{"reason"}, nil),
		swept:   prometheus.NewDesc("floodgate_memory_swept_total", "Entries the janitor removed after they expired.", nil, nil),
	}
}

func (c *memoryCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.entries
	ch <- c.bytes
	ch <- c.max
	ch <- c.evicted
	ch <- c.swept
}

func (c *memoryCollector) Collect(ch chan<- prometheus.Metric) {
	st := c.m.Stats()
	ch <- prometheus.MustNewConstMetric(c.entries, prometheus.GaugeValue, float64(st.Entries))
	ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.GaugeValue, float64(st.Bytes-st.PinnedBytes), "evictable")
	ch <- prometheus.MustNewConstMetric(c.bytes, prometheus.GaugeValue, float64(st.PinnedBytes), "pinned")
	ch <- prometheus.MustNewConstMetric(c.max, prometheus.GaugeValue, float64(st.MaxBytes))
	ch <- prometheus.MustNewConstMetric(c.evicted, prometheus.CounterValue, float64(st.EvictedExpired), "expired")
	ch <- prometheus.MustNewConstMetric(c.evicted, prometheus.CounterValue, float64(st.EvictedLRU), "lru")
	ch <- prometheus.MustNewConstMetric(c.swept, prometheus.CounterValue, float64(st.Swept))
}

// watchMemory exports m's state on /metrics.
func (m *Metrics) watchMemory(mem *backend.Memory) {
	if m.memory {
		return
	}
	m.memory = true
	m.Registry.MustRegister(newMemoryCollector(mem))
}
