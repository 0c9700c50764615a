package server

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/internal/backendtest"
	"github.com/floodgate-dev/floodgate/internal/redisstore"
	"github.com/floodgate-dev/floodgate/internal/testenv"
	"github.com/floodgate-dev/floodgate/internal/unwrap"
	"github.com/floodgate-dev/floodgate/server/config"
	"github.com/floodgate-dev/floodgate/server/internal/breaker"
	"github.com/floodgate-dev/floodgate/server/storeurl"
)

const failoverYAML = `domain: api
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 1000000}
`

// Failover test settings. cluster-node-timeout 1s makes a promotion take
// about 2-3 s. The store timeout is above the server's 50 ms default so that
// a loaded 2-core machine under -race does not time out healthy calls.
const (
	failoverNodeTimeout  = time.Second
	failoverStoreTimeout = 250 * time.Millisecond
	failoverRecovery     = 5 * time.Second // promotion to the dead keys' last failure
	failoverAfter        = 6 * time.Second // how long decisions run after promotion
	failoverPerWorker    = 4000            // decisions per worker at most
)

// failoverDecision is the outcome of one Decide in the failover test.
type failoverDecision struct {
	user       int // index into the users
	start, end time.Time
	failed     bool // the failure mode answered (or Decide returned an error)
}

// TestClusterFailover is issue 14's "a failover is not an outage" for the
// server: a Service (rueidis store, failure mode deny, default breaker) on a
// three-master, three-replica Cluster decides users spread over all 64
// slot ranges while the master of a known slot is SIGKILLed. Users on the
// dead master get real answers again within failoverRecovery of its
// replica's promotion. Users on the healthy masters keep real answers:
//
//   - with Redis's default cluster-require-full-coverage yes, except while
//     every node refuses every key (CLUSTERDOWN, from when the dead master
//     is marked failed until its replica is promoted) and for at most one
//     breaker cooldown after;
//   - with cluster-require-full-coverage no, throughout.
func TestClusterFailover(t *testing.T) {
	t.Run("full coverage", func(t *testing.T) { testClusterFailover(t, true) })
	t.Run("partial coverage", func(t *testing.T) { testClusterFailover(t, false) })
}

func testClusterFailover(t *testing.T, fullCoverage bool) {
	opts := []testenv.ClusterOption{testenv.WithReplicas(1), testenv.WithNodeTimeout(failoverNodeTimeout)}
	if !fullCoverage {
		opts = append(opts, testenv.WithNodeArgs("--cluster-require-full-coverage", "no"))
	}
	c := testenv.NewClusterWith(t, opts...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	b, closer, err := storeurl.Open("redis://"+strings.Join(c.Addrs, ","), backendtest.UniquePrefix(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	rb := b.(*backend.Redis)
	s, err := NewService(b, Options{FailureMode: FailClosed, Timeout: failoverStoreTimeout})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetConfig(mustConfig(t, failoverYAML), "v1"); err != nil {
		t.Fatal(err)
	}

	// One user in each slot range (so no breaker sees both a dead and a
	// healthy user); the victim is the master of the first user's slot.
	rs := s.rules.Load()
	slotOf := func(user string) int {
		entries := []config.Entry{{Key: "user", Value: user}}
		return unwrap.Redis(rb).Slot(stateKey(rs.cfg.Domains["api"].Match(entries), entries))
	}
	users := make([]string, breaker.SlotRanges)
	for i, found := 0, 0; found < breaker.SlotRanges; i++ {
		u := fmt.Sprint("u", i)
		if r := slotOf(u) * breaker.SlotRanges / redisstore.Slots; users[r] == "" {
			users[r] = u
			found++
		}
	}
	slots, err := c.Slots(ctx)
	if err != nil {
		t.Fatal(err)
	}
	masterOf := func(slot int) *testenv.Redis {
		for _, r := range slots {
			if r.From <= slot && slot <= r.To {
				return r.Master
			}
		}
		t.Fatalf("slot %d is not in the slot map", slot)
		return nil
	}
	victim := masterOf(slotOf(users[0]))
	onVictim := make([]bool, len(users))
	for i, u := range users {
		onVictim[i] = masterOf(slotOf(u)) == victim
	}

	var (
		mu   sync.Mutex
		recs []failoverDecision
		stop = make(chan struct{})
		wg   sync.WaitGroup
	)
	for w := range 4 {
		wg.Go(func() {
			for i := w; i < w+failoverPerWorker; i++ {
				select {
				case <-stop:
					return
				default:
				}
				u := i % len(users)
				start := time.Now()
				resp, err := s.Decide(ctx, &Request{Domain: "api", Descriptors: []Descriptor{desc(1, "user", users[u])}})
				d := failoverDecision{user: u, start: start, end: time.Now(), failed: err != nil || resp.Failed}
				if err == nil && !resp.Failed && resp.Code != CodeOK {
					t.Errorf("user %s: %v, want OK (the limit is never reached)", users[u], resp.Code)
				}
				mu.Lock()
				recs = append(recs, d)
				mu.Unlock()
				time.Sleep(2 * time.Millisecond)
			}
		})
	}
	// Redis's own CLUSTERDOWN window, as a healthy master reports it.
	var probe *testenv.Redis
	for _, r := range slots {
		if r.Master != victim {
			probe = r.Master
			break
		}
	}
	var downFrom, downTo time.Time
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			v, err := probe.Do(ctx, "CLUSTER", "INFO")
			txt, _ := v.(string)
			down := err != nil || !strings.Contains(txt, "cluster_state:ok")
			now := time.Now()
			mu.Lock()
			if down && downFrom.IsZero() {
				downFrom = now
			}
			if !down && !downFrom.IsZero() && downTo.IsZero() {
				downTo = now
			}
			mu.Unlock()
		}
	})
	stopped := false
	halt := func() {
		if !stopped {
			stopped = true
			close(stop)
			wg.Wait()
		}
	}
	defer halt()

	time.Sleep(500 * time.Millisecond)
	mu.Lock()
	warm := slices.Clone(recs)
	mu.Unlock()
	for _, d := range warm {
		if d.failed {
			t.Fatalf("user %s failed before the kill", users[d.user])
		}
	}
	if err := victim.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	if err := c.WaitPromoted(ctx, victim); err != nil {
		t.Fatal(err)
	}
	promoted := time.Now()
	select {
	case <-time.After(time.Until(promoted.Add(failoverAfter))):
	case <-ctx.Done():
	}
	halt()
	open, total := s.StoreHealth()
	t.Logf("replica of %s promoted %v after SIGKILL (cluster-node-timeout %v); %d of %d breakers open at the end",
		victim.Addr, promoted.Sub(killed).Round(time.Millisecond), failoverNodeTimeout, open, total)

	var deadLastFail, healthyFirst, healthyLast time.Time
	var deadFail, deadOK, healthyFail, healthyOK int
	for _, d := range recs {
		if d.start.Before(killed) {
			continue
		}
		switch {
		case onVictim[d.user] && d.failed:
			deadFail++
			if d.end.After(deadLastFail) {
				deadLastFail = d.end
			}
		case onVictim[d.user]:
			deadOK++
		case d.failed:
			healthyFail++
			if healthyFirst.IsZero() || d.start.Before(healthyFirst) {
				healthyFirst = d.start
			}
			if d.end.After(healthyLast) {
				healthyLast = d.end
			}
		default:
			healthyOK++
		}
	}
	if deadFail == 0 {
		t.Fatalf("no decision on the dead master's users failed: was %s killed?", victim.Addr)
	}
	okAfter := 0
	for _, d := range recs {
		if onVictim[d.user] && !d.failed && d.start.After(deadLastFail) {
			okAfter++
		}
	}
	recovery := deadLastFail.Sub(promoted)
	t.Logf("dead master's users: %d failure-mode answers, %d real after the kill; last failure %v after SIGKILL, %v after the promotion; %d real answers after it",
		deadFail, deadOK, deadLastFail.Sub(killed).Round(time.Millisecond), recovery.Round(time.Millisecond), okAfter)
	if recovery > failoverRecovery {
		t.Errorf("the dead master's users failed until %v after the promotion, want within %v", recovery, failoverRecovery)
	}
	if okAfter < 10 {
		t.Errorf("only %d real answers for the dead master's users after their last failure", okAfter)
	}

	healthyTotal := healthyFail + healthyOK
	if !fullCoverage {
		if !downFrom.IsZero() {
			t.Errorf("healthy master %s reported the cluster down %v after SIGKILL despite cluster-require-full-coverage no", probe.Addr, downFrom.Sub(killed))
		}
		if healthyFail > 0 {
			t.Errorf("healthy users: %d of %d decisions after the kill failed, from %v to %v after SIGKILL; want none with cluster-require-full-coverage no",
				healthyFail, healthyTotal, healthyFirst.Sub(killed).Round(time.Millisecond), healthyLast.Sub(killed).Round(time.Millisecond))
		} else {
			t.Logf("healthy users: none of %d decisions after the kill failed", healthyTotal)
		}
		return
	}
	if downFrom.IsZero() || downTo.IsZero() {
		t.Fatalf("healthy master %s never reported the cluster down and up again (from %v to %v)", probe.Addr, downFrom, downTo)
	}
	t.Logf("Redis's CLUSTERDOWN window on healthy master %s: %v to %v after SIGKILL (%v)", probe.Addr,
		downFrom.Sub(killed).Round(time.Millisecond), downTo.Sub(killed).Round(time.Millisecond), downTo.Sub(downFrom).Round(time.Millisecond))
	if healthyFail == 0 {
		t.Logf("healthy users: none of %d decisions failed", healthyTotal)
		return
	}
	t.Logf("healthy users: %d of %d decisions after the kill failed (%.1f%%), from %v to %v after SIGKILL (%v after the promotion)",
		healthyFail, healthyTotal, 100*float64(healthyFail)/float64(healthyTotal),
		healthyFirst.Sub(killed).Round(time.Millisecond), healthyLast.Sub(killed).Round(time.Millisecond),
		healthyLast.Sub(promoted).Round(time.Millisecond))
	// Healthy users fail only while Redis refuses every key (CLUSTERDOWN,
	// polled every 10 ms) and, after it, for at most one breaker cooldown
	// (1s: a range's breaker opened by CLUSTERDOWN errors) plus one call.
	if early := downFrom.Add(-50 * time.Millisecond); healthyFirst.Before(early) {
		t.Errorf("a healthy user failed %v after SIGKILL, before Redis reported the cluster down (%v): the dead master's failures spilled over",
			healthyFirst.Sub(killed).Round(time.Millisecond), downFrom.Sub(killed).Round(time.Millisecond))
	}
	if limit := downTo.Add(time.Second + failoverStoreTimeout); healthyLast.After(limit) {
		t.Errorf("a healthy user failed until %v after Redis reported the cluster ok again, want at most one breaker cooldown (1s) and one call",
			healthyLast.Sub(downTo).Round(time.Millisecond))
	}
	if limit := promoted.Add(time.Second + failoverStoreTimeout); healthyLast.After(limit) {
		t.Errorf("a healthy user failed until %v after the promotion", healthyLast.Sub(promoted).Round(time.Millisecond))
	}
}
