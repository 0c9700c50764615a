package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/internal/backendtest"
	"github.com/floodgate-dev/floodgate/internal/redisstore"
	"github.com/floodgate-dev/floodgate/internal/testenv"
	"github.com/floodgate-dev/floodgate/internal/unwrap"
	"github.com/floodgate-dev/floodgate/server/config"
	"github.com/floodgate-dev/floodgate/server/internal/breaker"
	"github.com/floodgate-dev/floodgate/server/storeurl"
)

// TestClusterPartialOutage is issue 14's "one failed shard is not an
// outage": with one of three Cluster masters hung (SIGSTOP), the keys on
// that master are answered by the failure mode, fast once their slot
// ranges' breakers open, while keys on the healthy masters keep their real
// answers; /readyz stays 200 and says the store is partly failing; callers
// in the error mode see no internal address.
func TestClusterPartialOutage(t *testing.T) {
	c := testenv.NewCluster(t)
	b, closer, err := storeurl.Open("redis://"+strings.Join(c.Addrs, ","), backendtest.UniquePrefix(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	rb := b.(*backend.Redis)
	rbs := unwrap.Redis(rb)
	if !rbs.Cluster() {
		t.Fatal("the rueidis backend on a Cluster does not say it is one")
	}
	m := NewMetrics()
	s := newService(t, b, Options{
		FailureMode: FailClosed,
		Timeout:     50 * time.Millisecond,
		Breaker:     BreakerOptions{Failures: 3, Cooldown: time.Minute},
		Metrics:     m,
	})
	errMode := newService(t, b, Options{FailureMode: FailError, Timeout: 50 * time.Millisecond, Breaker: BreakerOptions{Failures: -1}})

	// redis-cli --cluster create gives the first node slots 0-5460: pick
	// users whose state keys hash there, within whole slot ranges, and users
	// on the other two masters.
	rs := s.rules.Load()
	slotOf := func(user string) int {
		entries := []config.Entry{{Key: "user", Value: user}}
		return rbs.Slot(stateKey(rs.cfg.Domains["api"].Match(entries), entries))
	}
	var dead, healthy []string
	for i := 0; len(dead) < 6 || len(healthy) < 12; i++ {
		u := fmt.Sprint("u", i)
		switch sl := slotOf(u); {
		case sl < 21*redisstore.Slots/breaker.SlotRanges && len(dead) < 6:
			dead = append(dead, u)
		case sl > 5600 && len(healthy) < 12:
			healthy = append(healthy, u)
		}
	}
	decideUser := func(s *Service, u string) (*Response, error) {
		return s.Decide(context.Background(), &Request{Domain: "api", Descriptors: []Descriptor{desc(1, "user", u)}})
	}

	if err := c.Nodes[0].Pause(); err != nil {
		t.Fatal(err)
	}
	defer c.Nodes[0].Resume()
	for _, u := range dead {
		for range 4 { // past the breaker's 3 failures
			if got, err := decideUser(s, u); err != nil || !got.Failed || got.Code != CodeOverLimit {
				t.Fatalf("user %s on the hung master: %+v %v, want the deny failure mode", u, got, err)
			}
		}
	}
	for _, u := range healthy {
		got, err := decideUser(s, u)
		if err != nil || got.Failed || got.Code != CodeOK || got.Statuses[0].Remaining != 2 {
			t.Fatalf("user %s on a healthy master: %+v %v, want its real answer (OK, 2 left)", u, got, err)
		}
	}
	open, total := s.StoreHealth()
	if open == 0 || open >= total || !s.Ready() {
		t.Fatalf("%d of %d breakers open, ready %v: want some open and the service still ready", open, total, s.Ready())
	}
	for _, u := range dead {
		start := time.Now()
		if got, err := decideUser(s, u); err != nil || !got.Failed {
			t.Fatalf("user %s with its range's breaker open: %+v %v", u, got, err)
		}
		if took := time.Since(start); took > 40*time.Millisecond {
			t.Logf("user %s answered in %v with its breaker open (the machine is slow?)", u, took)
		}
	}
	rec := httptest.NewRecorder()
	NewHTTPHandler(s, HTTPOptions{}).ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), "partly failing") {
		t.Fatalf("/readyz during a partial outage: %d %q", rec.Code, rec.Body)
	}
	if share := gaugeValue(t, m.breakerOpen); share <= 0 || share >= 1 {
		t.Fatalf("floodgate_breaker_open = %v, want the share of open slot ranges", share)
	}

	_, err = decideUser(errMode, dead[0])
	if !errors.Is(err, ErrUnavailable) || strings.Contains(err.Error(), "127.0.0.1") {
		t.Fatalf("error mode on the hung master: %v; want ErrUnavailable without an address", err)
	}
}

// gaugeValue reads a Prometheus gauge.
func gaugeValue(t *testing.T, g interface{ Write(*dto.Metric) error }) float64 {
	t.Helper()
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetGauge().GetValue()
}
