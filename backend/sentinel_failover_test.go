package backend_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/internal/backendtest"
	"github.com/floodgate-dev/floodgate/internal/testenv"
	"github.com/floodgate-dev/floodgate/lock"
	"github.com/floodgate-dev/floodgate/ratelimit"
)

// sentinelRecovery bounds the time from the Sentinel's switch (as
// SENTINEL GET-MASTER-ADDR-BY-NAME reports it) to the last failed decision.
// The testenv Sentinel has down-after-milliseconds 1000 and failover-timeout
// 5000; the bound is loose for a loaded 2-core machine.
const sentinelRecovery = 5 * time.Second

// TestSentinelFailoverGoRedisDefaults is issue 14's "a failover is not an
// outage" on a go-redis FailoverClient with default settings (only the
// master name, the Sentinel addresses and ContextTimeoutEnabled): rate limit
// decisions run in a loop while the master is SIGKILLed and the Sentinel
// promotes its replica. Decisions must succeed again within sentinelRecovery
// of the switch, and an AutoRenew lock whose lease reached the replica before
// the kill must not be lost, and must unlock after the failover.
func TestSentinelFailoverGoRedisDefaults(t *testing.T) {
	s := testenv.NewSentinel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	fc := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:            s.MasterName,
		SentinelAddrs:         s.SentinelAddrs,
		ContextTimeoutEnabled: true,
	})
	defer fc.Close()
	b := backendtest.NewRedis(t, fc, backend.WithPrefix(backendtest.UniquePrefix()))
	lim, err := ratelimit.New(b, ratelimit.GCRA{Rate: 1_000_000, Per: time.Second, Burst: 1_000_000})
	if err != nil {
		t.Fatal(err)
	}
	keys := make([]string, 16)
	for i := range keys {
		keys[i] = fmt.Sprint("sfo", i)
	}

	var (
		mu   sync.Mutex
		recs []decision
		stop = make(chan struct{})
		wg   sync.WaitGroup
	)
	for w := range 4 {
		wg.Go(func() {
			for i := w; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := i % len(keys)
				cctx, ccancel := context.WithTimeout(ctx, failoverCallTimeout)
				start := time.Now()
				_, err := lim.Allow(cctx, keys[k])
				end := time.Now()
				ccancel()
				mu.Lock()
				recs = append(recs, decision{key: k, start: start, end: end, err: err})
				mu.Unlock()
				time.Sleep(2 * time.Millisecond)
			}
		})
	}
	stopped := false
	halt := func() {
		if !stopped {
			stopped = true
			close(stop)
			wg.Wait()
		}
	}
	defer halt()

	mx, err := lock.NewMutex(b, "sfo-lock", lock.TTL(failoverLockTTL), lock.AutoRenew())
	if err != nil {
		t.Fatal(err)
	}
	lease, err := mx.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	locked := time.Now()
	if err := testenv.WaitReplicated(ctx, s.Master); err != nil {
		t.Fatal(err)
	}
	// Kill 2 s into the lease, so that its first renewal (at TTL/3, 3.3 s)
	// falls in the failover and must be retried.
	time.Sleep(time.Until(locked.Add(2 * time.Second)))
	mu.Lock()
	warm := slices.Clone(recs)
	mu.Unlock()
	for _, d := range warm {
		if d.err != nil {
			t.Fatalf("key %s failed before the kill: %v", keys[d.key], d.err)
		}
	}
	if len(warm) == 0 {
		t.Fatal("no decision before the kill")
	}

	if err := s.Master.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	if err := s.WaitSwitchedTo(ctx, s.Replica); err != nil {
		t.Fatal(err)
	}
	switched := time.Now()
	select {
	case <-time.After(time.Until(switched.Add(failoverAfter))):
	case <-ctx.Done():
	}
	halt()
	t.Logf("Sentinel switched to %s %v after SIGKILL of %s (down-after-milliseconds 1000)",
		s.Replica.Addr, switched.Sub(killed).Round(time.Millisecond), s.Master.Addr)

	var lastFail, firstFail time.Time
	var failed, okAfterKill int
	for _, d := range recs {
		if d.end.Before(killed) {
			continue
		}
		if d.err == nil {
			okAfterKill++
			continue
		}
		failed++
		if firstFail.IsZero() || d.end.Before(firstFail) {
			firstFail = d.end
		}
		if d.end.After(lastFail) {
			lastFail = d.end
		}
	}
	okAfter := 0
	var firstOK time.Time
	for _, d := range recs {
		if d.err == nil && d.start.After(lastFail) && d.start.After(killed) {
			okAfter++
			if firstOK.IsZero() || d.end.Before(firstOK) {
				firstOK = d.end
			}
		}
	}
	if failed == 0 {
		t.Logf("no decision ending after the kill failed (%d succeeded)", okAfterKill)
	} else {
		t.Logf("%d decisions ending after the kill failed, from %v to %v after SIGKILL; last failure %v after the switch; %d decided after it, the first %v after the switch",
			failed, firstFail.Sub(killed).Round(time.Millisecond), lastFail.Sub(killed).Round(time.Millisecond),
			lastFail.Sub(switched).Round(time.Millisecond), okAfter, firstOK.Sub(switched).Round(time.Millisecond))
	}
	if recovery := lastFail.Sub(switched); recovery > sentinelRecovery {
		t.Errorf("decisions failed until %v after the switch, want within %v", recovery, sentinelRecovery)
	}
	if okAfter < 10 {
		t.Errorf("only %d decisions after the last failure", okAfter)
	}

	select {
	case <-lease.Lost():
		t.Fatalf("lease lost in the failover (deadline %v after SIGKILL)", lease.Deadline().Sub(killed))
	default:
	}
	if dl := lease.Deadline(); !dl.After(killed.Add(failoverLockTTL)) {
		t.Errorf("lease deadline %v after SIGKILL: no renewal started after the kill was confirmed", dl.Sub(killed))
	}
	if err := lease.Unlock(ctx); err != nil {
		t.Fatalf("Unlock after the failover: %v", err)
	}
	t.Logf("lease held through the failover (TTL %v, renewed every %v) and unlocked", failoverLockTTL, failoverLockTTL/3)
}
