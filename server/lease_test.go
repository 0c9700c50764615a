package server

import (
	"context"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/internal/backendtest"
	"github.com/floodgate-dev/floodgate/internal/testenv"
	"github.com/floodgate-dev/floodgate/ratelimit"
	"github.com/floodgate-dev/floodgate/server/config"
	"github.com/floodgate-dev/floodgate/server/storeurl"
)

const leaseYAML = `domain: api
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 1000}
  - key: plain
    rate_limit: {unit: hour, requests_per_unit: 1000, lease: false}
  - key: log
    rate_limit: {unit: hour, requests_per_unit: 1000, algorithm: sliding_log}
  - key: route
    rate_limit: {unit: hour, requests_per_unit: 100000}
`

// leaseService returns a Service with Options.Leases on a private Redis,
// configured with leaseYAML.
func leaseService(t *testing.T, opts Options) (*Service, *testenv.Redis) {
	t.Helper()
	r := testenv.NewRedis(t)
	b, c, err := storeurl.Open("redis://"+r.Addr, backendtest.UniquePrefix(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	opts.Leases = true
	s := newService(t, b, opts)
	if err := s.SetConfig(mustConfig(t, leaseYAML), "v1"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s, r
}

// TestLeasesHotKey: with Options.Leases, a hot key's decisions stop being
// a store call each, while every answer stays exact for one server: the
// Remaining of the i-th admission is the limit less i, and the hour admits
// its limit and not one more. Limits that say lease: false, and those that
// cannot lease (sliding_log), still make a store call per decision; a
// request with two descriptors is decided by the store in one step, on the
// budget the lease shares.
func TestLeasesHotKey(t *testing.T) {
	awayFromHourEnd()
	m := NewMetrics()
	s, r := leaseService(t, Options{Metrics: m})
	// Not leased: a call each.
	for _, key := range []string{"plain", "log"} {
		decide(t, s, desc(1, key, "x")) // loads the script: EVALSHA, then EVAL
		before := scriptCalls(t, r)
		for range 49 {
			if got := decide(t, s, desc(1, key, "x")); got.Code != CodeOK {
				t.Fatalf("%s: %+v", key, got)
			}
		}
		if calls := scriptCalls(t, r) - before; calls != 49 {
			t.Errorf("49 decisions of %s made %d script calls, want 49 (it does not lease)", key, calls)
		}
	}

	before := scriptCalls(t, r)
	for i := range 600 {
		got := decide(t, s, desc(1, "user", "u1"))
		if got.Code != CodeOK {
			t.Fatalf("decision %d: %+v", i, got)
		}
		if want := int64(1000 - i - 1); got.Statuses[0].Remaining != want {
			t.Fatalf("decision %d: Remaining %d, want %d", i, got.Statuses[0].Remaining, want)
		}
	}
	calls := scriptCalls(t, r) - before
	if calls > 600/4 {
		t.Errorf("600 decisions of a hot key made %d script calls; want the leases to take most of them", calls)
	}
	t.Logf("600 decisions of one key: %d script calls", calls)
	// Seen on /metrics: the decisions from leases and those by the store.
	fromLease := metricValue(t, m, "floodgate_lease_decisions_total", "source", "lease")
	byStore := metricValue(t, m, "floodgate_lease_decisions_total", "source", "store")
	if fromLease+byStore != 600 || byStore > float64(calls) || fromLease < 600-float64(calls) {
		t.Errorf("floodgate_lease_decisions_total: lease %v, store %v; want 600 in all, at most the %d script calls by the store", fromLease, byStore, calls)
	}
	if g := metricValue(t, m, "floodgate_lease_grants_total"); g < 1 || g > float64(calls) {
		t.Errorf("floodgate_lease_grants_total = %v, want between 1 and the %d script calls", g, calls)
	}

	// Two descriptors: the store decides them together, on the same budget.
	admitted := 600
	if got := decide(t, s, desc(1, "user", "u1"), desc(1, "route", "r")); got.Code != CodeOK {
		t.Fatalf("two descriptors: %+v", got)
	} else if got.Statuses[0].Remaining > 1000-601 {
		t.Fatalf("two descriptors: Remaining %d, more than the %d the store can have left", got.Statuses[0].Remaining, 1000-601)
	}
	admitted++
	for {
		got := decide(t, s, desc(1, "user", "u1"))
		if got.Code != CodeOK {
			if got.Statuses[0].RetryAfter <= 0 {
				t.Fatalf("a denial without RetryAfter: %+v", got.Statuses[0])
			}
			break
		}
		if admitted++; admitted > 1000 {
			t.Fatal("the hour admitted more than its limit of 1000")
		}
	}
	// What a lease still held when the two-descriptor request came is
	// given back or spent: at most one lease (5% of the limit) is lost.
	if admitted < 1000-50 {
		t.Errorf("the hour admitted %d of its 1000", admitted)
	}
	if st := decide(t, s, desc(1, "user", "u1")); st.Code != CodeOverLimit {
		t.Errorf("after the limit: %+v", st)
	}
}

// TestLeasesThroughPause: a server holding a lease keeps deciding from it,
// exactly and at once, while Redis is paused; then the degraded mode
// decides from what the store last said, without the lease's units (they
// were counted by the store already). Across the pause, the hour admits
// exactly its limit, and once Redis is back the store refuses what the
// outage spent.
func TestLeasesThroughPause(t *testing.T) {
	awayFromHourEnd()
	s, r := leaseService(t, Options{
		FailureMode: FailDegraded,
		Servers:     1,
		Timeout:     100 * time.Millisecond,
		Breaker:     BreakerOptions{Failures: 3, Cooldown: 200 * time.Millisecond},
	})
	// 200 decisions, then more until the lease holds units (it may have
	// been spent by the last one).
	rs := s.rules.Load()
	var lz *ratelimit.Leased
	for _, l := range rs.leased {
		if l.Limiter() == rs.limiters[rs.cfg.Domains["api"].Match([]config.Entry{{Key: "user", Value: "u1"}})] {
			lz = l
		}
	}
	if lz == nil {
		t.Fatal("the user limit does not lease")
	}
	key := stateKey(rs.cfg.Domains["api"].Match([]config.Entry{{Key: "user", Value: "u1"}}), []config.Entry{{Key: "user", Value: "u1"}})
	admitted := 0
	for admitted < 200 || lz.Held(key) == 0 {
		// On a busy machine a call can pass the timeout: the degraded
		// mode answers it, and the store counts it at the next call.
		if got := decide(t, s, desc(1, "user", "u1")); got.Code != CodeOK {
			t.Fatalf("healthy decision %d: %+v", admitted, got)
		}
		admitted++
	}
	last := time.Now()
	if err := r.Pause(); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			r.Resume()
		}
	}()
	fromLease, degraded := 0, 0
	var firstAfter time.Duration
	for i := range 900 {
		got := decide(t, s, desc(1, "user", "u1"))
		if i == 0 {
			firstAfter = time.Since(last)
		}
		switch {
		case got.Code != CodeOK:
		case got.Degraded:
			degraded++
			admitted++
		default:
			if degraded > 0 {
				t.Fatalf("decision %d: from a lease after the degraded mode began: %+v", i, got)
			}
			fromLease++
			admitted++
		}
	}
	// A lease lives 100 ms (twice LeaseTarget): a busy machine that
	// descheduled the test that long between the two decisions ended it.
	if fromLease == 0 && firstAfter < 50*time.Millisecond {
		t.Error("no decision came from the lease while Redis was paused")
	}
	if admitted != 1000 {
		t.Errorf("the hour admitted %d (%d from the lease, %d degraded during the pause); want exactly its limit, 1000", admitted, fromLease, degraded)
	}
	t.Logf("during the pause: %d from the lease, %d by the degraded mode", fromLease, degraded)
	if err := r.Resume(); err != nil {
		t.Fatal(err)
	}
	resumed = true
	deadline := time.Now().Add(10 * time.Second)
	for {
		got := decide(t, s, desc(1, "user", "u1"))
		if !got.Failed {
			if got.Code != CodeOverLimit {
				t.Fatalf("after the pause the store admitted past the limit: %+v", got)
			}
			break
		}
		if got.Code == CodeOK {
			t.Fatalf("after the pause, still degraded, admitted past the limit: %+v", got)
		}
		if time.Now().After(deadline) {
			t.Fatal("the store did not decide again within 10 s of Redis resuming")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// leasedUser returns the Leased of leaseYAML's user limit in s and the
// state key of user u1.
func leasedUser(t *testing.T, s *Service) (*ratelimit.Leased, string) {
	t.Helper()
	rs := s.rules.Load()
	entries := []config.Entry{{Key: "user", Value: "u1"}}
	l := rs.cfg.Domains["api"].Match(entries)
	for _, lz := range rs.leased {
		if lz.Limiter() == rs.limiters[l] {
			return lz, stateKey(l, entries)
		}
	}
	t.Fatal("the user limit does not lease")
	return nil, ""
}

// TestLeasesFleetThroughPause: two servers lease the same key, its
// requests spread over both, and Redis is paused when most of the hour is
// spent. Each server last heard from the store at its last lease, since
// when the other's leases went on spending: each keeps deciding from what
// its lease holds, and the degraded mode then counts on what the store
// had left less what the other server's leases may have spent since.
// Across the pause the hour admits at most its limit.
func TestLeasesFleetThroughPause(t *testing.T) {
	awayFromHourEnd()
	r := testenv.NewRedis(t)
	prefix := backendtest.UniquePrefix()
	opts := Options{
		FailureMode: FailDegraded,
		Servers:     2,
		Leases:      true,
		Timeout:     100 * time.Millisecond,
		Breaker:     BreakerOptions{Failures: 3, Cooldown: 200 * time.Millisecond},
	}
	var fleet [2]*Service
	for i := range fleet {
		b, c, err := storeurl.Open("redis://"+r.Addr, prefix, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		s := newService(t, b, opts)
		if err := s.SetConfig(mustConfig(t, leaseYAML), "v1"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close(context.Background()) })
		fleet[i] = s
	}
	lz, key := leasedUser(t, fleet[0])
	admitted := 0
	for i := 0; admitted < 800 || lz.Held(key) == 0; i++ {
		// A call past the timeout on a busy machine is answered by the
		// degraded mode, and counted by the store at the next call.
		if got := decide(t, fleet[i%2], desc(1, "user", "u1")); got.Code != CodeOK {
			t.Fatalf("healthy decision %d: %+v", admitted, got)
		}
		admitted++
	}
	if err := r.Pause(); err != nil {
		t.Fatal(err)
	}
	defer r.Resume()
	byServer := [2]int{}
	for i := range 1200 {
		if got := decide(t, fleet[i%2], desc(1, "user", "u1")); got.Code == CodeOK {
			byServer[i%2]++
		}
	}
	during := byServer[0] + byServer[1]
	t.Logf("before the pause: %d; during it: %d by one server, %d by the other", admitted, byServer[0], byServer[1])
	if admitted+during > 1000 {
		t.Errorf("the hour admitted %d before the pause and %d during it: %d, more than its limit of 1000", admitted, during, admitted+during)
	}
	if during == 0 {
		t.Error("nothing was admitted during the pause: the leases' units were lost")
	}
}
