package server

import (
	"fmt"
	"testing"
	"time"

	rlqs "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/protobuf/proto"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/internal/testenv"
)

// The admission simulation: simulated time in ticks of admitTick; at every
// tick each data plane receives one request (admitOffered a second).
const (
	admitTick     = 2500 * time.Microsecond
	admitOffered  = int(time.Second / admitTick) // 400/s per data plane: the fleet wants 3200/s
	admitPlanes   = 8
	admitInterval = time.Second      // Envoy's reporting_interval
	admitRun      = 30 * time.Second // simulated
	admitSettle   = 10 * time.Second // the steady state is measured from this ...
	admitJoin     = 20 * time.Second // ... to this, when a ninth data plane joins
	admitLimit    = 1000             // quotaYAML's tenant limit: 1000 per second
)

// envoyPlane is one data plane's rate_limit_quota filter, for one bucket,
// deciding requests as Envoy does:
//
//   - before its first assignment, and once an assignment has expired,
//     requests are decided by no_assignment_behavior, which this simulation
//     fixes at blanket_rule DENY_ALL (Envoy's default is ALLOW_ALL; deny
//     makes every admitted request one the server assigned, so that
//     over-admission is the server's and checkable);
//   - a blanket rule allows or denies every request;
//   - a token bucket (envoy.type.v3.TokenBucket) starts full, at
//     max_tokens, when an assignment with a new strategy arrives; it refills
//     continuously at tokens_per_fill per fill_interval, up to max_tokens
//     (Envoy's token bucket), and a request takes one token or is denied.
//     An assignment whose strategy equals the one held only extends its
//     time to live: the bucket and its tokens are kept;
//   - abandon_action forgets the assignment.
//
// Tokens are kept in integers, scaled by the fill interval in microseconds,
// so that the simulation is exact.
type envoyPlane struct {
	name string
	st   quotaClient

	strategy *typev3.RateLimitStrategy // nil: no assignment
	expires  time.Duration             // of the assignment, simulated

	max, perFill, fillUS int64 // the token bucket's
	level                int64 // tokens × fillUS
	at                   time.Duration

	started    bool
	lastReport time.Duration
	allowed    uint64 // since the last report
	denied     uint64
}

// decide decides one request at now.
func (p *envoyPlane) decide(now time.Duration) bool {
	ok := p.admit(now)
	if ok {
		p.allowed++
	} else {
		p.denied++
	}
	return ok
}

func (p *envoyPlane) admit(now time.Duration) bool {
	if p.strategy == nil || now >= p.expires {
		return false // no_assignment_behavior, and expired_assignment_behavior: DENY_ALL
	}
	if p.strategy.GetTokenBucket() == nil {
		return p.strategy.GetBlanketRule() == typev3.RateLimitStrategy_ALLOW_ALL
	}
	p.level = min(p.max*p.fillUS, p.level+(now-p.at).Microseconds()*p.perFill)
	p.at = now
	if p.level < p.fillUS {
		return false
	}
	p.level -= p.fillUS
	return true
}

// report sends the usage since the last report, as Envoy does (time_elapsed
// in whole seconds, truncated; the domain in the stream's first report), and
// applies the answer at now.
func (p *envoyPlane) report(t *testing.T, now time.Duration) {
	t.Helper()
	domain := ""
	if now == p.lastReport {
		domain = "quota" // the first: at the bucket's first request
	}
	resp, err := exchange(t, p.st, domain, usage(bucket("tenant", "fleet"), p.allowed, p.denied, (now-p.lastReport).Truncate(time.Second)))
	if err != nil {
		t.Fatalf("%s at %v: %v", p.name, now, err)
	}
	p.allowed, p.denied, p.lastReport = 0, 0, now
	if len(resp.GetBucketAction()) != 1 {
		t.Fatalf("%s at %v: %d actions, want 1: %v", p.name, now, len(resp.GetBucketAction()), resp)
	}
	a := resp.GetBucketAction()[0]
	if a.GetAbandonAction() != nil {
		p.strategy = nil
		return
	}
	qa := a.GetQuotaAssignmentAction()
	p.expires = now + qa.GetAssignmentTimeToLive().AsDuration()
	s := qa.GetRateLimitStrategy()
	if proto.Equal(s, p.strategy) {
		return // the same: only the time to live is extended
	}
	p.strategy = s
	if tb := s.GetTokenBucket(); tb != nil {
		p.max, p.perFill, p.fillUS = int64(tb.GetMaxTokens()), int64(tb.GetTokensPerFill().GetValue()), tb.GetFillInterval().AsDuration().Microseconds()
		p.level, p.at = p.max*p.fillUS, now // a new bucket, full
	}
}

// TestRLQSFleetAdmits: 8 simulated Envoys (envoyPlane), 4 on each of two
// floodgate servers sharing one private Redis, each offered 400 requests a
// second of a bucket limited to 1000/s over the fleet, decide every request
// against their assignments, in simulated time (the store's injected
// clock), and report what they admitted and denied every second.
//
// Measured by requests admitted, not by rates assigned:
//
//   - at steady state (from 10 s to 20 s), the fleet admits 95% to 100% of
//     1000/s in every second;
//   - over-admission is zero: in every window of one second, at any
//     alignment, from the first request on and through a ninth data plane
//     joining at 20 s (all shares move, every bucket starts anew, full),
//     the fleet admits at most 1000 requests. The rule is a fixed window of 1000 per second, and no
//     window of one second at any alignment may hold more, so this is the
//     strictest reading of it. A token bucket of max_tokens B and a fill of
//     F per second admits up to B + F in one second, so this holds only
//     because the server sizes B + F within the share (tokenBucket).
//
// Requests arrive at every tick, reports go at the tick's start, before its
// requests, and a data plane's first report goes at its first request
// (which no_assignment_behavior denies), data plane i's at i × 100 ms.
func TestRLQSFleetAdmits(t *testing.T) {
	r := testenv.NewRedis(t)
	clk := clock.NewFake(time.Unix(1_800_000_000, 0))
	start := clk.Now()
	b1, b2 := twoClients(t, r.Addr, backend.WithClock(clk))
	servers := []rlqs.RateLimitQuotaServiceClient{
		startRLQS(t, newQuotaService(t, b1, time.Second)),
		startRLQS(t, newQuotaService(t, b2, time.Second)),
	}
	planes := make([]*envoyPlane, admitPlanes+1)
	for i := range planes {
		st, _ := openQuota(t, servers[i%2])
		planes[i] = &envoyPlane{name: fmt.Sprintf("plane %d (server %d)", i, i%2+1), st: st}
	}

	ticks := int(admitRun / admitTick)
	admitted := make([]int, ticks) // the fleet's, per tick
	perPlane := make([]int, len(planes))
	settle, join := int(admitSettle/admitTick), int(admitJoin/admitTick)
	for k := range ticks {
		now := time.Duration(k) * admitTick
		clk.Set(start.Add(now))
		for i, p := range planes {
			joins := time.Duration(i) * admitInterval / 10
			if i == admitPlanes {
				joins = admitJoin + admitInterval/2
			}
			switch {
			case now < joins:
				continue
			case !p.started:
				p.started, p.lastReport = true, now
				p.decide(now) // the bucket's first request: no assignment yet
				p.report(t, now)
				continue
			case now-p.lastReport >= admitInterval:
				p.report(t, now)
			}
			if p.decide(now) {
				admitted[k]++
				if k >= settle && k < join {
					perPlane[i]++
				}
			}
		}
	}

	// Every window of one second: admitOffered consecutive ticks; the one
	// ending at tick k is window[k].
	window := make([]int, ticks)
	sum, maxWindow, maxAt := 0, 0, time.Duration(0)
	for k := range ticks {
		sum += admitted[k]
		if k >= admitOffered {
			sum -= admitted[k-admitOffered]
		}
		window[k] = sum
		if sum > maxWindow {
			maxWindow, maxAt = sum, time.Duration(k+1-admitOffered)*admitTick
		}
	}
	steady, minSteady := 0, admitLimit
	for k := settle; k < join; k++ {
		steady += admitted[k]
		if k >= settle+admitOffered-1 {
			minSteady = min(minSteady, window[k])
		}
	}
	perSecond := float64(steady) / (admitJoin - admitSettle).Seconds()
	t.Logf("steady state (%v to %v): the fleet admitted %.1f/s of %d/s (%.1f%%), at least %d in any second; per data plane %v over %v",
		admitSettle, admitJoin, perSecond, admitLimit, 100*perSecond/admitLimit, minSteady, perPlane[:admitPlanes], admitJoin-admitSettle)
	t.Logf("the most admitted in any one-second window: %d (from %v); after the ninth joined, %.1f/s (%v to %v)",
		maxWindow, maxAt, float64(window[ticks-1]), admitRun-time.Second, admitRun)
	if minSteady < 0.95*admitLimit || perSecond > admitLimit {
		t.Errorf("steady state: the fleet admitted %.2f/s, and %d in its leanest second, want 95%% to 100%% of %d/s", perSecond, minSteady, admitLimit)
	}
	if maxWindow > admitLimit {
		t.Errorf("over-admission: %d requests admitted in the second from %v, over the limit of %d", maxWindow, maxAt, admitLimit)
	}
}
