package server

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/internal/testenv"
	"github.com/floodgate-dev/floodgate/server/internal/dashboard"
)

// TestDashboardRates: a tick turns counter deltas into rates per second.
func TestDashboardRates(t *testing.T) {
	m := NewMetrics()
	s := newService(t, backend.NewMemory(), Options{Metrics: m})
	d := newDashboard(s, m)
	t0 := time.Unix(1000, 0)
	d.Tick(t0)
	for range 10 {
		decide(t, s, desc(1, "user", "rate"))
	}
	d.Tick(t0.Add(2 * time.Second))
	snap, _ := d.Latest()
	// 3 within the limit (3/day), 7 over: over 2 seconds.
	if snap.DecisionsPerSec != 5 || snap.OverLimitPerSec != 3.5 || snap.OverLimitRatio != 0.7 {
		t.Fatalf("%+v", snap)
	}
	var user *dashboard.RuleRate
	for i := range snap.Rules {
		if snap.Rules[i].Descriptor == "api|user" {
			user = &snap.Rules[i]
		}
	}
	if user == nil || user.Over != 3.5 || user.Within+user.Near != 1.5 {
		t.Fatalf("rules %+v", snap.Rules)
	}
	if len(snap.TopLimited) != 1 || snap.TopLimited[0].Key != "api|user|rate" || snap.TopLimited[0].Count != 7 {
		t.Fatalf("top %+v", snap.TopLimited)
	}
	if snap.Config.Version != "v1" {
		t.Fatalf("config %+v", snap.Config)
	}
}

// chromium finds the browser for TestDashboardInBrowser: $CHROMIUM, or
// Debian's chromium. The test command installs it when missing.
func chromium(t *testing.T) string {
	t.Helper()
	for _, c := range []string{os.Getenv("CHROMIUM"), "chromium", "chromium-browser", "google-chrome"} {
		if c == "" {
			continue
		}
		if p, err := exec.LookPath(c); err == nil {
			return p
		}
	}
	testenv.NotInstalled(t, "no chromium on PATH for the dashboard's browser test (install it: apt-get install -y chromium; or set $CHROMIUM)")
	return ""
}

// TestDashboardInBrowser drives headless Chromium against a running server
// while traffic flows, and checks that the page shows live numbers. The
// screenshot is kept in the test's temp dir, or in $FLOODGATE_SCREENSHOT_DIR.
func TestDashboardInBrowser(t *testing.T) {
	browser := chromium(t)
	dir := t.TempDir()
	writeConfig(t, filepath.Join(dir, "api.yaml"), testYAML)
	srv := startServer(t, Config{ConfigPath: dir})

	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	for w := range 2 {
		wg.Go(func() {
			for i := 0; ctx.Err() == nil; i++ {
				srv.Service().Decide(ctx, &Request{Domain: "api", Descriptors: []Descriptor{desc(1, "user", fmt.Sprintf("u%d-%d", w, i%5))}})
				time.Sleep(time.Millisecond)
			}
		})
	}
	// Let the dashboard take a few samples with traffic in them.
	waitFor(t, func() bool {
		snap, n := srv.dash.Latest()
		return n >= 2 && snap.DecisionsPerSec > 0
	})

	url := "http://" + srv.HTTPAddr() + "/ui/?poll"
	base := []string{"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage", "--no-first-run",
		"--user-data-dir=" + t.TempDir(), "--virtual-time-budget=3000"}
	run := func(args ...string) []byte {
		cctx, ccancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer ccancel()
		cmd := exec.CommandContext(cctx, browser, append(append([]string{}, base...), args...)...)
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("%s: %v\n%s", browser, err, stderr.String())
		}
		return out
	}
	dom := string(run("--dump-dom", url))

	dps := regexp.MustCompile(`id="dps">([0-9.]+)(k|M)?<`).FindStringSubmatch(dom)
	if dps == nil {
		t.Fatalf("no decisions/s on the page:\n%s", dom)
	}
	if v, _ := strconv.ParseFloat(dps[1], 64); v <= 0 {
		t.Fatalf("decisions/s shows %s with traffic flowing", dps[1])
	}
	if !strings.Contains(dom, `class="pill live"`) {
		t.Fatalf("status is not live:\n%s", dom)
	}
	row := regexp.MustCompile(`<td class="key">api\|user</td><td class="num">([^<]+)</td><td class="num">([^<]+)</td><td class="num">([^<]+)</td>`).FindStringSubmatch(dom)
	if row == nil || row[1] == "0.0" && row[2] == "0.0" && row[3] == "0.0" {
		t.Fatalf("the api|user rule shows no decisions: %v\n%s", row, dom)
	}
	if !strings.Contains(dom, `<td class="key">api|user|u0-`) && !strings.Contains(dom, `<td class="key">api|user|u1-`) {
		t.Fatalf("no limited keys listed:\n%s", dom)
	}

	shotDir := os.Getenv("FLOODGATE_SCREENSHOT_DIR")
	if shotDir == "" {
		shotDir = t.TempDir()
	}
	shot := filepath.Join(shotDir, "dashboard.png")
	run("--hide-scrollbars", "--window-size=1200,900", "--screenshot="+shot, url)
	if fi, err := os.Stat(shot); err != nil || fi.Size() < 10_000 {
		t.Fatalf("screenshot %s: %v", shot, err)
	}
	t.Logf("screenshot: %s", shot)
}
