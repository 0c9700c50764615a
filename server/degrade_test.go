package server

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/internal/backendtest"
	"github.com/floodgate-dev/floodgate/internal/testenv"
	"github.com/floodgate-dev/floodgate/server/storeurl"
)

const degradedYAML = `domain: api
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 100}
`

// awayFromHourEnd waits, if need be, until the current hour has more than
// a minute left, so that a test's hourly window does not roll over.
func awayFromHourEnd() {
	now := time.Now()
	if end := now.Truncate(time.Hour).Add(time.Hour); end.Sub(now) < time.Minute {
		time.Sleep(end.Sub(now) + time.Second)
	}
}

// TestDegradedThroughPause: with Redis paused, FailDegraded keeps limiting
// in process, from what the store last said: a limit of 100 an hour with 60
// spent admits the 40 left (with 2 servers, this server's half of them),
// and when Redis is back the store counts them, so the hour never admits
// more than its limit, whatever decided.
func TestDegradedThroughPause(t *testing.T) {
	for _, servers := range []int{1, 2} {
		t.Run(fmt.Sprintf("servers=%d", servers), func(t *testing.T) {
			awayFromHourEnd()
			r := testenv.NewRedis(t)
			b, c, err := storeurl.Open("redis://"+r.Addr, backendtest.UniquePrefix(), time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			m := NewMetrics()
			var logs lockedBuffer
			s := newService(t, b, Options{
				Logger:      slog.New(slog.NewTextHandler(&logs, nil)),
				FailureMode: FailDegraded,
				Servers:     servers,
				Timeout:     100 * time.Millisecond,
				Breaker:     BreakerOptions{Failures: 3, Cooldown: 200 * time.Millisecond},
				Metrics:     m,
			})
			if err := s.SetConfig(mustConfig(t, degradedYAML), "v1"); err != nil {
				t.Fatal(err)
			}
			admitted := func(n int, wantDegraded bool) int {
				t.Helper()
				ok := 0
				for i := range n {
					got, err := s.Decide(context.Background(), &Request{Domain: "api", Descriptors: []Descriptor{desc(1, "user", "u1")}})
					if err != nil {
						t.Fatalf("request %d: %v", i, err)
					}
					if got.Degraded != wantDegraded || got.Degraded && (!got.Failed || !got.ByFailureMode) {
						t.Fatalf("request %d: %+v, want Degraded %v", i, got, wantDegraded)
					}
					if got.Code == CodeOK {
						ok++
					}
					if got.Statuses[0].ResetAfter <= 0 {
						t.Fatalf("request %d: no reset time: %+v", i, got.Statuses[0])
					}
				}
				return ok
			}
			if got := admitted(60, false); got != 60 {
				t.Fatalf("healthy: the store admitted %d of 60", got)
			}
			dash := newDashboard(s, m)
			dash.Tick(time.Now())
			if err := r.Pause(); err != nil {
				t.Fatal(err)
			}
			resumed := false
			defer func() {
				if !resumed {
					r.Resume()
				}
			}()
			want := 40 / servers
			if got := admitted(60, true); got != want {
				t.Fatalf("Redis paused: %d admitted in process, want %d (40 left, %d servers)", got, want, servers)
			}
			// The dashboard shows the degraded period.
			dash.Tick(time.Now().Add(time.Second))
			if snap, _ := dash.Latest(); !snap.Degraded || snap.FailureModePerSec <= 0 {
				t.Errorf("dashboard during the pause: degraded %v, %v answers a second without the store; want the degraded period shown", snap.Degraded, snap.FailureModePerSec)
			}
			if err := r.Resume(); err != nil {
				t.Fatal(err)
			}
			resumed = true
			// Until the store decides again (the breaker probes), then more.
			waitStoreDecides(t, s)
			// For the grace period after the outage, what the store admits
			// must also pass this server's share, which the outage spent.
			if !s.degraded.InGrace() {
				t.Fatal("no grace period after the outage")
			}
			if got := admitted(10, false); got != 0 {
				t.Fatalf("in the grace period: %d admitted past this server's share", got)
			}
			for s.degraded.InGrace() {
				time.Sleep(50 * time.Millisecond)
			}
			// Calls that timed out while Redis was paused reach it when it
			// resumes, with the debts they carried: the store counts them
			// although they were answered in process (or the debt was paid
			// again), and admits that many fewer, never more. The grace
			// period's refusals were counted by the store too.
			timedOut := int(counterValue(t, m.backendErrors.WithLabelValues("timeout", storeMain)))
			after := admitted(60, false)
			if most := max(40-want-10, 0); after > most {
				t.Fatalf("Redis back: the store admitted %d more, want at most %d (the hour's 100 less the 60, the %d admitted in process and the 10 of the grace period)",
					after, most, want)
			}
			t.Logf("the hour: 60 by the store, %d in process, %d by the store again (%d calls timed out)", want, after, timedOut)
			if got := counterValue(t, m.failureMode.WithLabelValues("degraded")); got < 1 {
				t.Fatalf("floodgate_failure_mode_total{mode=degraded} = %v, want the answers given in process", got)
			}
			// Seen: the breaker's opening and closing, and the calls it
			// refused, are in the log.
			for _, want := range []string{"circuit breaker opened", "reason=breaker_open", "circuit breaker closed", "failure_mode=degraded"} {
				if !strings.Contains(logs.String(), want) {
					t.Errorf("the log has no %q:\n%s", want, logs.String())
				}
			}
		})
	}
}

// TestDegradedSlowStore: a store that answers, but slowly (every reply
// delayed by the fault proxy), with and without leases. Replies later than
// the timeout are answered in process although the store counted them, so
// the hour may admit less than its limit, never more; replies within the
// timeout are the store's own decisions, exact to the unit. Once the store
// is fast again, it decides again.
func TestDegradedSlowStore(t *testing.T) {
	for _, run := range []struct {
		name   string
		delay  time.Duration
		leases bool
	}{
		{"slower-than-timeout", 80 * time.Millisecond, false},
		{"slower-than-timeout-leases", 80 * time.Millisecond, true},
		{"within-timeout", 20 * time.Millisecond, false},
		{"within-timeout-leases", 20 * time.Millisecond, true},
	} {
		t.Run(run.name, func(t *testing.T) {
			awayFromHourEnd()
			r := testenv.NewRedis(t)
			p := testenv.NewProxy(t, r.Addr)
			b, c, err := storeurl.Open("redis://"+p.Addr(), backendtest.UniquePrefix(), time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			timeout := 50 * time.Millisecond
			if run.delay < timeout {
				// Within the timeout on a busy machine too: the test is
				// about a slow store, not about this machine's load.
				timeout = time.Second
			}
			s := newService(t, b, Options{
				FailureMode: FailDegraded,
				Servers:     1,
				Timeout:     timeout,
				Breaker:     BreakerOptions{Failures: 3, Cooldown: 200 * time.Millisecond},
				Leases:      run.leases,
			})
			if err := s.SetConfig(mustConfig(t, degradedYAML), "v1"); err != nil {
				t.Fatal(err)
			}
			defer s.Close(context.Background())
			var mu sync.Mutex
			admitted, inProcess := 0, 0
			decideN := func(n int) {
				for range n {
					got, err := s.Decide(context.Background(), &Request{Domain: "api", Descriptors: []Descriptor{desc(1, "user", "u1")}})
					if err != nil {
						t.Error(err)
						return
					}
					mu.Lock()
					if got.Code == CodeOK {
						admitted++
					}
					if got.Degraded {
						inProcess++
					}
					mu.Unlock()
				}
			}
			decideN(20)
			p.SetDelay(run.delay)
			var wg sync.WaitGroup
			for range 8 {
				wg.Go(func() { decideN(25) })
			}
			wg.Wait()
			p.SetDelay(0)
			slow := inProcess
			if run.delay > timeout && slow == 0 {
				t.Errorf("no answer in process while every reply came %v late (timeout %v)", run.delay, timeout)
			}
			if run.delay < timeout && slow > 0 {
				t.Errorf("%d answers in process while every reply came within the timeout", slow)
			}
			// Until the store decides again, then to the end of the budget.
			waitStoreDecides(t, s)
			for s.degraded.InGrace() {
				time.Sleep(50 * time.Millisecond)
			}
			decideN(150)
			if admitted > 100 {
				t.Fatalf("the hour admitted %d, past its limit of 100 (%d answered in process)", admitted, slow)
			}
			if run.delay < timeout && admitted != 100 {
				t.Fatalf("the store decided every request, and the hour admitted %d of its 100", admitted)
			}
			t.Logf("replies %v late, timeout %v: %d answered in process; the hour admitted %d of 100", run.delay, timeout, slow, admitted)
		})
	}
}

// waitStoreDecides asks s for api's user u1 (cost 0: it spends nothing)
// until the store, not the degraded mode, answers; at most 10 s.
func waitStoreDecides(t *testing.T, s *Service) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		got, err := s.Decide(context.Background(), &Request{Domain: "api", Descriptors: []Descriptor{desc(0, "user", "u1")}})
		if err == nil && !got.Degraded {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the store did not decide again within 10 s: %+v %v", got, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
