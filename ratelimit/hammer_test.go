package ratelimit_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/internal/backendtest"
	"github.com/floodgate-dev/floodgate/internal/testenv"
	"github.com/floodgate-dev/floodgate/ratelimit"
)

// The hammer test runs 32 goroutines here and 32 more in a second OS process
// (this test binary re-executed with hammerEnv set) against one key on a real
// Redis, with the server's clock. Every rule must admit exactly its limit.
const hammerEnv = "FLOODGATE_HAMMER"

// hammerRules admit exactly 50 units over any test run shorter than ten minutes.
func hammerRules() map[string]ratelimit.Rule {
	return map[string]ratelimit.Rule{
		// A window edge passes during a run with odds of about 1 in 10^6.
		"fixed_window":   ratelimit.FixedWindow{Limit: 50, Window: 1000 * time.Hour},
		"sliding_window": ratelimit.SlidingWindow{Limit: 50, Window: time.Hour, Buckets: 60},
		"sliding_log":    ratelimit.SlidingLog{Limit: 50, Window: time.Hour},
		"token_bucket":   ratelimit.TokenBucket{Capacity: 50, Refill: 1, Every: time.Hour},
		"leaky_bucket":   ratelimit.LeakyBucket{Rate: 1, Per: time.Hour, Burst: 49, Delay: ratelimit.NoDelay},
		"gcra":           ratelimit.GCRA{Rate: 1, Per: time.Hour, Burst: 50},
	}
}

// allower is a Limiter or a Leased.
type allower interface {
	Allow(ctx context.Context, key string) (ratelimit.Result, error)
}

// hammer calls Allow on key from 32 goroutines until 400 calls were made and
// returns how many were admitted.
func hammer(lim allower, key string) (int64, error) {
	var admitted, calls atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for calls.Add(1) <= 400 {
				r, err := lim.Allow(context.Background(), key)
				if err != nil {
					errs <- err
					return
				}
				if r.Allowed {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return admitted.Load(), <-errs
}

// hammerMain is the second process: FLOODGATE_HAMMER="addr prefix rule key
// [leased]".
func hammerMain() int {
	f := strings.Fields(os.Getenv(hammerEnv))
	c := redis.NewClient(&redis.Options{Addr: f[0], PoolSize: 32})
	defer c.Close()
	b, err := backend.NewRedis(c, backend.WithPrefix(f[1]))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	l, err := ratelimit.New(b, hammerRules()[f[2]])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var lim allower = l
	if len(f) > 4 {
		leased, err := hammerLeased(l)
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 2
		}
		defer leased.Close(context.Background())
		lim = leased
	}
	fmt.Fprintln(os.Stdout, "ready")
	// Start together with the parent: wait for its go-ahead on stdin.
	var goAhead string
	fmt.Scanln(&goAhead)
	n, err := hammer(lim, f[3])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	fmt.Println(n)
	return 0
}

func TestHammerTwoProcesses(t *testing.T) {
	for name, rule := range hammerRules() {
		t.Run(name, func(t *testing.T) {
			prefix := uniquePrefix(t)
			c := redis.NewClient(&redis.Options{Addr: sharedRedisAddr(t), PoolSize: 32})
			defer c.Close()
			lim, err := ratelimit.New(backendtest.NewRedis(t, c, backend.WithPrefix(prefix)), rule)
			if err != nil {
				t.Fatal(err)
			}
			mine, theirs := hammerBeside(t, lim, sharedRedisAddr(t), prefix, name, "hot")
			if mine+theirs != 50 {
				t.Errorf("admitted %d here + %d in the other process = %d, want exactly 50", mine, theirs, mine+theirs)
			}
			if theirs == 0 || mine == 0 {
				t.Logf("one process got nothing (here %d, there %d): the processes did not overlap much", mine, theirs)
			}
		})
	}
}

func sharedRedisAddr(t testing.TB) string { return testenv.SharedRedis(t).Addr }

func TestHammerGoroutinesMemory(t *testing.T) {
	for name, rule := range hammerRules() {
		t.Run(name, func(t *testing.T) {
			m := backend.NewMemory()
			defer m.Close()
			lim, err := ratelimit.New(m, rule)
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			n, err := hammer(lim, "hot")
			if err != nil {
				t.Fatal(err)
			}
			if n != 50 || time.Since(start) > 10*time.Minute {
				t.Errorf("admitted %d, want exactly 50", n)
			}
		})
	}
}

// hammerLeaseK is the largest lease of TestHammerTwoProcessesLeased.
const hammerLeaseK = 5

// hammerBeside starts this test binary as the other process, with fields
// (address, prefix, rule, key and an optional "leased") in hammerEnv, and
// hammers "hot" through lim while the child does the same; it returns what
// each process admitted.
func hammerBeside(t *testing.T, lim allower, fields ...string) (mine, theirs int64) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), hammerEnv+"="+strings.Join(fields, " "))
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var ready string
	if _, err := fmt.Fscanln(stdout, &ready); err != nil || ready != "ready" {
		t.Fatalf("child did not start: %q %v", ready, err)
	}
	fmt.Fprintln(stdin, "go")
	mine, err := hammer(lim, "hot")
	if err != nil {
		t.Fatal(err)
	}
	var line string
	if _, err := fmt.Fscanln(stdout, &line); err != nil {
		t.Fatalf("child: %v", err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v", err)
	}
	theirs, err = strconv.ParseInt(line, 10, 64)
	if err != nil {
		t.Fatalf("child said %q", line)
	}
	return mine, theirs
}

func hammerLeased(lim *ratelimit.Limiter) (*ratelimit.Leased, error) {
	return ratelimit.NewLeased(lim, ratelimit.LeaseSize(1, hammerLeaseK), ratelimit.LeaseFraction(1))
}

// TestHammerTwoProcessesLeased is TestHammerTwoProcesses with a Leased in
// each process: together they admit at most the 50 units, and at least 50
// less the units two leases can hold (and one unit that the pad of a bucket
// can take part of).
func TestHammerTwoProcessesLeased(t *testing.T) {
	for name, rule := range hammerRules() {
		if name == "sliding_log" {
			continue // cannot lease
		}
		t.Run(name, func(t *testing.T) {
			prefix := uniquePrefix(t)
			c := redis.NewClient(&redis.Options{Addr: sharedRedisAddr(t), PoolSize: 32})
			defer c.Close()
			l, err := ratelimit.New(backendtest.NewRedis(t, c, backend.WithPrefix(prefix)), rule)
			if err != nil {
				t.Fatal(err)
			}
			lim, err := hammerLeased(l)
			if err != nil {
				t.Fatal(err)
			}
			mine, theirs := hammerBeside(t, lim, sharedRedisAddr(t), prefix, name, "hot", "leased")
			total := mine + theirs
			if total > 50 || total < 50-2*hammerLeaseK-1 {
				t.Errorf("admitted %d here + %d in the other process = %d, want between %d and 50", mine, theirs, total, 50-2*hammerLeaseK-1)
			}
			t.Logf("admitted %d + %d = %d; %+v", mine, theirs, total, lim.Stats())
		})
	}
}
