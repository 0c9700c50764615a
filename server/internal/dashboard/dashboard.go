// Package dashboard is the server's page at /ui: once a second it turns
// the server's metrics into per-second rates (a Snapshot), keeps two
// minutes of them, and streams them to the page as server-sent events. It
// reads a Prometheus registry, so deciding costs nothing more; only
// over-limit decisions feed its TopKeys sketch.
package dashboard

import (
	"embed"
	"encoding/json"
	"io/fs"
	"math"
	"net/http"
	"sort"
	"sync"
	"time"

	dto "github.com/prometheus/client_model/go"
)

//go:embed ui
var uiFiles embed.FS

// historyLen is how many one-second samples the dashboard keeps.
const historyLen = 120

// Dashboard turns the server's metrics into per-second rates, once a
// second, for the page at /ui.
type Dashboard struct {
	src Source

	mu      sync.Mutex
	prev    map[string]float64 // counter values at the last tick, by series
	prevAt  time.Time
	prevLat []bucketCount
	history []Snapshot // oldest first
	subs    map[chan []byte]struct{}
	stopped bool // no more event streams: the server is shutting down

	// WriteTimeout bounds writing one event of a stream; 0 for none. Set
	// before serving.
	WriteTimeout time.Duration
}

// Source is what the dashboard reads: the server's own metrics (Gather:
// its registry without the Go runtime's and the process's), whether a
// store's circuit breaker is open, the configuration served (its version
// and when it was loaded), and the keys most often over their limits.
type Source struct {
	Gather      func() ([]*dto.MetricFamily, error)
	BreakerOpen func() bool
	Config      func() (version string, loaded time.Time)
	Top         *TopKeys
}

// Snapshot is one second of the dashboard: rates over the last tick.
type Snapshot struct {
	Time            time.Time `json:"time"`
	DecisionsPerSec float64   `json:"decisions_per_sec"`
	OverLimitPerSec float64   `json:"over_limit_per_sec"`
	OverLimitRatio  float64   `json:"over_limit_ratio"`
	RequestsPerSec  float64   `json:"requests_per_sec"`
	BackendErrors   float64   `json:"backend_errors_per_sec"`
	BackendP50MS    float64   `json:"backend_p50_ms"` // -1 when there were no store calls
	BackendP99MS    float64   `json:"backend_p99_ms"`
	BreakerOpen     bool      `json:"breaker_open"`
	// FailureModePerSec is the requests answered without the store, by
	// the failure mode; Degraded is whether some were decided in process
	// (the degraded mode) in this sample.
	FailureModePerSec float64      `json:"failure_mode_per_sec"`
	Degraded          bool         `json:"degraded"`
	Rules             []RuleRate   `json:"rules"`
	TopLimited        []KeyCount   `json:"top_limited"`
	Config            ConfigStatus `json:"config"`
}

// RuleRate is one descriptor path's decisions per second by result.
type RuleRate struct {
	Domain     string  `json:"domain"`
	Descriptor string  `json:"descriptor"`
	Within     float64 `json:"within"`
	Near       float64 `json:"near"`
	Over       float64 `json:"over"`
	Shadow     float64 `json:"shadow"`
}

// ConfigStatus describes the configuration being served.
type ConfigStatus struct {
	Version  string    `json:"version"`
	Loaded   time.Time `json:"loaded"`
	Reloads  float64   `json:"reloads"`
	Rejected float64   `json:"rejected"`
}

// New returns a dashboard of src.
func New(src Source) *Dashboard {
	return &Dashboard{src: src, prev: map[string]float64{}, subs: map[chan []byte]struct{}{}}
}

// Latest returns the last sample and how many are kept (0: none yet, and
// a zero Snapshot).
func (d *Dashboard) Latest() (Snapshot, int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if len(d.history) == 0 {
		return Snapshot{}, 0
	}
	return d.history[len(d.history)-1], len(d.history)
}

// Tick takes a sample now.
func (d *Dashboard) Tick(now time.Time) {
	fams, err := d.src.Gather()
	if err != nil {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	dt := now.Sub(d.prevAt).Seconds()
	first := d.prevAt.IsZero()
	if first || dt <= 0 {
		dt = 1
	}
	cur := map[string]float64{}
	rate := func(key string, v float64) float64 {
		cur[key] = v
		if first {
			return 0
		}
		return math.Max(0, v-d.prev[key]) / dt
	}
	snap := Snapshot{Time: now, BackendP50MS: -1, BackendP99MS: -1, BreakerOpen: d.src.BreakerOpen()}
	rules := map[[2]string]*RuleRate{}
	var lat []bucketCount
	for _, f := range fams {
		switch f.GetName() {
		case "floodgate_decisions_total":
			for _, m := range f.GetMetric() {
				l := labels(m)
				k := [2]string{l["domain"], l["descriptor"]}
				rr := rules[k]
				if rr == nil {
					rr = &RuleRate{Domain: k[0], Descriptor: k[1]}
					rules[k] = rr
				}
				r := rate("d|"+k[0]+"|"+k[1]+"|"+l["result"], m.GetCounter().GetValue())
				switch l["result"] {
				case "within_limit":
					rr.Within = r
				case "near_limit":
					rr.Near = r
				case "over_limit":
					rr.Over = r
				case "shadow_over_limit":
					rr.Shadow = r
				}
				snap.DecisionsPerSec += r
				if l["result"] == "over_limit" {
					snap.OverLimitPerSec += r
				}
			}
		case "floodgate_requests_total":
			for _, m := range f.GetMetric() {
				l := labels(m)
				snap.RequestsPerSec += rate("r|"+l["api"]+"|"+l["code"], m.GetCounter().GetValue())
			}
		case "floodgate_backend_errors_total":
			for _, m := range f.GetMetric() {
				l := labels(m)
				snap.BackendErrors += rate("e|"+l["reason"]+"|"+l["store"], m.GetCounter().GetValue())
			}
		case "floodgate_failure_mode_total":
			for _, m := range f.GetMetric() {
				mode := labels(m)["mode"]
				r := rate("f|"+mode, m.GetCounter().GetValue())
				snap.FailureModePerSec += r
				if mode == "degraded" && r > 0 {
					snap.Degraded = true
				}
			}
		case "floodgate_config_reloads_total":
			for _, m := range f.GetMetric() {
				if labels(m)["result"] == "success" {
					snap.Config.Reloads = m.GetCounter().GetValue()
				} else {
					snap.Config.Rejected = m.GetCounter().GetValue()
				}
			}
		case "floodgate_backend_duration_seconds":
			if ms := f.GetMetric(); len(ms) == 1 {
				for _, b := range ms[0].GetHistogram().GetBucket() {
					lat = append(lat, bucketCount{b.GetUpperBound(), b.GetCumulativeCount()})
				}
			}
		}
	}
	if snap.DecisionsPerSec > 0 {
		snap.OverLimitRatio = snap.OverLimitPerSec / snap.DecisionsPerSec
	}
	if !first && len(lat) == len(d.prevLat) {
		snap.BackendP50MS = quantileMS(lat, d.prevLat, 0.50)
		snap.BackendP99MS = quantileMS(lat, d.prevLat, 0.99)
	}
	for _, rr := range rules {
		snap.Rules = append(snap.Rules, *rr)
	}
	sort.Slice(snap.Rules, func(i, j int) bool {
		a, b := snap.Rules[i], snap.Rules[j]
		if a.Domain != b.Domain {
			return a.Domain < b.Domain
		}
		return a.Descriptor < b.Descriptor
	})
	snap.TopLimited = d.src.Top.List()
	snap.Config.Version, snap.Config.Loaded = d.src.Config()
	d.prev, d.prevAt, d.prevLat = cur, now, lat
	d.history = append(d.history, snap)
	if len(d.history) > historyLen {
		d.history = d.history[len(d.history)-historyLen:]
	}
	if data, err := json.Marshal(snap); err == nil {
		for ch := range d.subs {
			select {
			case ch <- data:
			default: // a slow page misses a sample rather than slowing the others
			}
		}
	}
}

type bucketCount struct {
	le    float64
	count uint64
}

// quantileMS estimates the q quantile of the observations between two
// cumulative histograms, interpolating linearly within a bucket.
func quantileMS(cur, prev []bucketCount, q float64) float64 {
	total := float64(cur[len(cur)-1].count - prev[len(prev)-1].count)
	if total == 0 {
		return -1
	}
	want := q * total
	lo, below := 0.0, 0.0
	for i := range cur {
		n := float64(cur[i].count - prev[i].count)
		if n >= want {
			inBucket := n - below
			if inBucket <= 0 {
				return cur[i].le * 1000
			}
			return (lo + (cur[i].le-lo)*(want-below)/inBucket) * 1000
		}
		lo, below = cur[i].le, n
	}
	return lo * 1000 // beyond the last bucket
}

func labels(m *dto.Metric) map[string]string {
	out := make(map[string]string, len(m.GetLabel()))
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// Run samples every second until stop closes.
func (d *Dashboard) Run(stop <-chan struct{}) {
	d.Tick(time.Now())
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-stop:
			d.mu.Lock()
			d.stopped = true
			for ch := range d.subs {
				close(ch)
				delete(d.subs, ch)
			}
			d.mu.Unlock()
			return
		case now := <-t.C:
			d.Tick(now)
		}
	}
}

// Routes adds the dashboard's paths to mux: /ui/ (the page), /ui/stats (the
// history as JSON) and /ui/events (Server-Sent Events, one Snapshot a second).
func (d *Dashboard) Routes(mux *http.ServeMux, auth func(http.HandlerFunc) http.HandlerFunc) {
	sub, _ := fs.Sub(uiFiles, "ui")
	files := http.StripPrefix("/ui/", http.FileServer(http.FS(sub)))
	mux.HandleFunc("GET /ui", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/ui/", http.StatusMovedPermanently)
	})
	mux.HandleFunc("GET /ui/", auth(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-cache")
		files.ServeHTTP(w, r)
	}))
	mux.HandleFunc("GET /ui/stats", auth(func(w http.ResponseWriter, _ *http.Request) {
		d.mu.Lock()
		data, err := json.Marshal(d.history)
		d.mu.Unlock()
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(data)
	}))
	mux.HandleFunc("GET /ui/events", auth(d.events))
}

func (d *Dashboard) events(w http.ResponseWriter, r *http.Request) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return
	}
	ch := make(chan []byte, 4)
	d.mu.Lock()
	if d.stopped {
		d.mu.Unlock()
		http.Error(w, "shutting down", http.StatusServiceUnavailable)
		return
	}
	d.subs[ch] = struct{}{}
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		delete(d.subs, ch)
		d.mu.Unlock()
	}()
	// The server's read and write deadlines bound a request; a stream lasts
	// as long as the page is open. With the read deadline passed, net/http's
	// read for the client's next bytes would fail and cancel the request,
	// so it is lifted: a closed page still ends the stream through that read.
	// The write deadline is set anew for each event, so that a page that
	// stops reading is still dropped. (ResponseController reports
	// ErrNotSupported where there are no deadlines, as in tests'
	// recorders.)
	rc := http.NewResponseController(w)
	rc.SetReadDeadline(time.Time{})
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	fl.Flush()
	for {
		select {
		case <-r.Context().Done():
			return
		case data, ok := <-ch:
			if !ok {
				return
			}
			if d.WriteTimeout > 0 {
				rc.SetWriteDeadline(time.Now().Add(d.WriteTimeout))
			}
			if _, err := w.Write([]byte("data: ")); err != nil {
				return
			}
			w.Write(data)
			w.Write([]byte("\n\n"))
			fl.Flush()
		}
	}
}

// TopKeys is a Space-Saving sketch of the keys most often over their limit:
// at most cap counters; a new key replaces the smallest, inheriting its count
// as its error bound. Counts are exact for keys that never left the sketch.
type TopKeys struct {
	mu     sync.Mutex
	cap    int
	counts map[string]*KeyCount
}

// KeyCount is a key of the top-limited list.
type KeyCount struct {
	Domain     string `json:"domain"`
	Descriptor string `json:"descriptor"`
	Key        string `json:"key"`
	Count      uint64 `json:"count"`
	Error      uint64 `json:"error"` // the count may overstate by up to this
}

// NewTopKeys returns a sketch of the n keys most often over their limits.
func NewTopKeys(n int) *TopKeys {
	return &TopKeys{cap: n, counts: make(map[string]*KeyCount, n)}
}

// Add counts key, of descriptor in domain, once more over its limit. It is
// safe for concurrent use.
func (t *TopKeys) Add(domain, descriptor, key string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if kc := t.counts[key]; kc != nil {
		kc.Count++
		return
	}
	if len(t.counts) < t.cap {
		t.counts[key] = &KeyCount{Domain: domain, Descriptor: descriptor, Key: key, Count: 1}
		return
	}
	var minKey string
	var minKC *KeyCount
	for k, kc := range t.counts {
		if minKC == nil || kc.Count < minKC.Count {
			minKey, minKC = k, kc
		}
	}
	delete(t.counts, minKey)
	t.counts[key] = &KeyCount{Domain: domain, Descriptor: descriptor, Key: key, Count: minKC.Count + 1, Error: minKC.Count}
}

// List returns the ten keys with the highest counts.
func (t *TopKeys) List() []KeyCount {
	t.mu.Lock()
	out := make([]KeyCount, 0, len(t.counts))
	for _, kc := range t.counts {
		out = append(out, *kc)
	}
	t.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].Count != out[j].Count {
			return out[i].Count > out[j].Count
		}
		return out[i].Key < out[j].Key
	})
	if len(out) > 10 {
		out = out[:10]
	}
	return out
}
