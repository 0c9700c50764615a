package server

import (
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// metricValue returns the sum of the samples of name with the labels given
// as "key", "value", ... (0 when there is none).
func metricValue(t *testing.T, m *Metrics, name string, want ...string) float64 {
	t.Helper()
	fams, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
	samples:
		for _, s := range f.GetMetric() {
			l := map[string]string{}
			for _, p := range s.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			for i := 0; i+1 < len(want); i += 2 {
				if l[want[i]] != want[i+1] {
					continue samples
				}
			}
			sum += s.GetGauge().GetValue() + s.GetCounter().GetValue()
		}
	}
	return sum
}

// syncLog is a log a Server writes while the test reads it.
type syncLog struct {
	mu  sync.Mutex
	buf strings.Builder
}

func (l *syncLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *syncLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.String()
}

// TestReloadCountsEachRejectedConfig: two different bad configurations with
// the same error count as two failed reloads; one bad configuration checked
// again and again counts (and is logged) once.
func TestReloadCountsEachRejectedConfig(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "api.yaml")
	writeConfig(t, path, testYAML)
	var log syncLog
	srv := startServer(t, Config{ConfigPath: dir, ReloadInterval: 20 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(&log, nil))})
	m := srv.Metrics()
	failures := func() float64 {
		return metricValue(t, m, "floodgate_config_reloads_total", "result", "failure")
	}
	bad := "domain: api\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 9}\n"
	writeConfig(t, path, bad)
	waitFor(t, func() bool { return failures() == 1 })
	err1 := srv.Reload()
	// Another bad file with the same error (line and message): a comment added.
	writeConfig(t, path, bad+"# still broken\n")
	waitFor(t, func() bool { return failures() == 2 })
	err2 := srv.Reload()
	if err1 == nil || err2 == nil || err1.Error() != err2.Error() {
		t.Fatalf("want the same error twice, got %v and %v", err1, err2)
	}
	time.Sleep(200 * time.Millisecond) // ten periodic checks of the unchanged bad file
	if n := failures(); n != 2 {
		t.Fatalf("%v failed reloads, want 2", n)
	}
	if n := strings.Count(log.String(), "configuration rejected"); n != 2 {
		t.Fatalf("%d rejections logged, want 2:\n%s", n, log.String())
	}
	// Back to the configuration being served, then the first bad file
	// again: a new rejection.
	writeConfig(t, path, testYAML)
	if err := srv.Reload(); err != nil {
		t.Fatal(err)
	}
	writeConfig(t, path, bad)
	waitFor(t, func() bool { return failures() == 3 })
	// Broken in another way.
	writeConfig(t, path, "domain: [\n")
	waitFor(t, func() bool { return failures() == 4 })
	time.Sleep(100 * time.Millisecond)
	if n := failures(); n != 4 {
		t.Fatalf("%v failed reloads, want 4", n)
	}
}
