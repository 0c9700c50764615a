package server

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	rlqs "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"github.com/redis/rueidis"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/backend/rueidisadapter"
	"github.com/floodgate-dev/floodgate/internal/backendtest"
	"github.com/floodgate-dev/floodgate/internal/testenv"
)

// A fleet of data planes, driven in lockstep: each round of one reporting
// interval has a slot per data plane, in which it reports and reads its
// answer, so that no answer is in flight when the fleet's total is checked.
const (
	fleetInterval = time.Second
	// fleetRound is how far apart the rounds start: an interval and a
	// little, so that on a busy machine too a data plane's reports are at
	// least an interval apart, as Envoy's timer makes them (a report less
	// than a unit after the last change of its share could not change it
	// again, and one less than a second after the last would say 0 s).
	fleetRound   = fleetInterval + fleetInterval/20
	fleetSlots   = 10 // slots per round: 8 data planes, a newcomer, a spare
	fleetLimit   = 1000.0
	fleetOffered = 400.0 // requests per second each data plane sees: the fleet wants 3200/s
)

// fleetPlane is one data plane: Envoy's rate_limit_quota filter, as far as
// the server can tell. It counts as admitted what its assignment's rate
// allows, not what Envoy's token bucket would admit request by request:
// TestRLQSFleet checks the assignments (their rates, their sum, how fast
// they move); TestRLQSDemandShapes (envoyPlane) checks the requests admitted.
type fleetPlane struct {
	name    string
	st      quotaClient
	cancel  context.CancelFunc
	last    time.Time // of its last report
	rate    float64   // of its assignment, per second
	expires time.Time // of its assignment, as the data plane sees it
	answer  time.Time // of its last answer
	quiet   bool      // reports no more
}

// report sends what the data plane let through and denied since its last
// report (fleetOffered a second, up to its assignment) and applies the
// answer. Like Envoy, the first report goes at the bucket's first request,
// with one request in no time, and time_elapsed is whole seconds, truncated.
func (p *fleetPlane) report(t *testing.T, now time.Time) {
	t.Helper()
	var elapsed time.Duration
	allowed, offered := 1.0, 1.0
	if !p.last.IsZero() {
		elapsed = now.Sub(p.last)
		offered = fleetOffered * elapsed.Seconds()
		allowed = offered
		if p.expires.After(now) {
			allowed = math.Min(offered, p.rate*elapsed.Seconds())
		}
	}
	domain := ""
	if p.last.IsZero() {
		domain = "quota"
	}
	resp, err := exchange(t, p.st, domain, usage(bucket("tenant", "fleet"), uint64(allowed), uint64(offered-allowed), elapsed.Truncate(time.Second)))
	if err != nil {
		t.Fatalf("%s: %v", p.name, err)
	}
	p.last, p.answer = now, time.Now()
	qa := resp.GetBucketAction()[0].GetQuotaAssignmentAction()
	if qa == nil {
		t.Fatalf("%s: no assignment: %v", p.name, resp)
	}
	p.rate = rate(qa.GetRateLimitStrategy())
	p.expires = p.answer.Add(qa.GetAssignmentTimeToLive().AsDuration())
}

// granted is the total rate of the assignments the planes hold at now.
func granted(planes []*fleetPlane, now time.Time) float64 {
	sum := 0.0
	for _, p := range planes {
		if p != nil && p.expires.After(now) {
			sum += p.rate
		}
	}
	return sum
}

// TestRLQSFleet: 8 data planes, 4 on each of two floodgate servers sharing
// one store, want 3200/s of a 1000/s budget. The total they are granted
// never exceeds the budget; the first ones have a share at once (a crowd of
// newcomers shares what is free by halves), all at steady state, where the total
// fill is 88% to 100% of the budget (10/11 of the shares: the rest is their
// bursts, fleet.go); two that go quiet (one closes its stream, one stops
// reporting) give their shares back within the assignments' time to live,
// the unit they are counted past it, and two reporting intervals; a newcomer gets a share at once, and its fair
// share within a few intervals (each change of a share waits for the room its
// new burst takes).
func TestRLQSFleet(t *testing.T) {
	t.Run("memory", func(t *testing.T) {
		t.Parallel()
		m := backend.NewMemory()
		t.Cleanup(func() { m.Close() })
		runFleet(t, m, m)
	})
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		b1, b2 := twoClients(t, testenv.SharedRedis(t).Addr)
		runFleet(t, b1, b2)
	})
}

// twoClients returns two backends on the Redis at addr, as two floodgate
// servers would hold, one through go-redis and one through rueidis, with
// one new key prefix and opts.
func twoClients(t *testing.T, addr string, opts ...backend.Option) (backend.Backend, backend.Backend) {
	t.Helper()
	opts = append([]backend.Option{backend.WithPrefix(backendtest.UniquePrefix())}, opts...)
	b1 := goRedisBackend(t, addr, opts...)
	rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(rc.Close)
	b2, err := rueidisadapter.New(rc, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return b1, b2
}

func runFleet(t *testing.T, b1, b2 backend.Backend) {
	servers := []rlqs.RateLimitQuotaServiceClient{
		startRLQS(t, newQuotaService(t, b1, time.Second)),
		startRLQS(t, newQuotaService(t, b2, time.Second)),
	}
	planes := make([]*fleetPlane, fleetSlots)
	join := func(i int) {
		st, cancel := openQuota(t, servers[i%2])
		planes[i] = &fleetPlane{name: fmt.Sprintf("plane %d (server %d)", i, i%2+1), st: st, cancel: cancel}
	}
	for i := range 8 {
		join(i)
	}
	start := time.Now()
	maxGranted := 0.0
	// round runs one round: every plane that reports does, in its slot, and
	// the total is checked after each answer.
	round := func(r int) {
		for i, p := range planes {
			if p == nil || p.quiet {
				continue
			}
			at := start.Add(time.Duration(r)*fleetRound + time.Duration(i)*fleetInterval/fleetSlots)
			time.Sleep(time.Until(at))
			p.report(t, at)
			now := time.Now()
			g := granted(planes, now)
			maxGranted = max(maxGranted, g)
			if g > fleetLimit {
				t.Fatalf("round %d, after %s's answer: the fleet holds %.2f/s, over the %v/s limit", r, p.name, g, fleetLimit)
			}
		}
	}
	round(0)
	if planes[0].rate <= 0 || planes[1].rate <= 0 {
		t.Errorf("round 0: the first two first assignments admit %v/s and %v/s, want some", planes[0].rate, planes[1].rate)
	}
	r := 1
	for ; r < 8; r++ {
		round(r)
	}
	steady := granted(planes, time.Now())
	t.Logf("steady state: 8 data planes hold %.0f/s of %v/s (%.1f%%)", steady, fleetLimit, 100*steady/fleetLimit)
	if steady < 0.88*fleetLimit || steady > fleetLimit {
		t.Errorf("steady state: 8 data planes hold %.2f/s, want 88%% to 100%% of %v/s", steady, fleetLimit)
	}
	// Fair, but for one that may stay short of its target by up to its
	// burst (a growth costs its old burst for a unit: fleet.go).
	for _, p := range planes[:8] {
		if fair := steady / 8; math.Abs(p.rate-fair) > fair/10 {
			t.Errorf("steady state: %s holds %.2f/s, not its fair %.2f/s", p.name, p.rate, fair)
		}
	}

	// Two go quiet: one closes its stream, one keeps it open but stops reporting.
	planes[0].cancel()
	planes[0].quiet, planes[1].quiet = true, true
	quietAt := planes[1].answer // the later of their last answers
	ttl := planes[1].expires.Sub(planes[1].answer)
	var giveBack time.Duration
	for ; r < 14 && giveBack == 0; r++ {
		round(r)
		if g := granted(planes[2:], time.Now()); g >= 0.85*fleetLimit {
			giveBack = time.Since(quietAt)
		}
	}
	t.Logf("two quiet data planes' shares given back %v after their last answer (time to live %v, interval %v)", giveBack.Round(time.Millisecond), ttl, fleetInterval)
	if giveBack == 0 || giveBack > ttl+3*fleetInterval+fleetInterval/4 {
		t.Errorf("the six other data planes got 85%% of the budget back after %v, want within %v (time to live) + a unit + two intervals of %v", giveBack, ttl, fleetInterval)
	}
	// The quiet one with an open stream is told to abandon the bucket.
	if resp, err := planes[1].st.Recv(); err != nil || resp.GetBucketAction()[0].GetAbandonAction() == nil {
		t.Errorf("the data plane that stopped reporting: %v %v, want abandon_action", resp, err)
	}

	// A newcomer.
	join(8)
	joinedAt := start.Add(time.Duration(r)*fleetRound + 8*fleetInterval/fleetSlots)
	round(r)
	r++
	first := planes[8].rate
	fair := 0.997 * fleetLimit / 7 * 10 / 11
	// Counted in rounds, not wall time: on a busy machine a slot may start
	// late, which says nothing about the sizing.
	joinRound, fairRounds := r-1, 0
	var fairAfter time.Duration
	for ; r < joinRound+8 && fairAfter == 0; r++ {
		round(r)
		if planes[8].rate >= 0.9*fair {
			fairAfter, fairRounds = planes[8].answer.Sub(joinedAt), r-joinRound
		}
	}
	t.Logf("a newcomer got %.0f/s at once and %.0f/s (fair: %.0f/s) %v (%d rounds) after its first report", first, planes[8].rate, fair, fairAfter.Round(time.Millisecond), fairRounds)
	if first <= 0 {
		t.Errorf("the newcomer's first assignment admits %.2f/s, want some", first)
	}
	if fairAfter == 0 || fairRounds > 6 {
		t.Errorf("the newcomer got 90%% of its fair share after %d rounds (%v), want within 6 rounds (%v each)", fairRounds, fairAfter, fleetRound)
	}
	t.Logf("the most the fleet held at any answer: %.2f/s", maxGranted)
}
