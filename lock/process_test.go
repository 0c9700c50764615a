package lock_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/internal/backendtest"
	"github.com/floodgate-dev/floodgate/internal/testenv"
	"github.com/floodgate-dev/floodgate/lock"
)

// The two-process test: this process and a child (this test binary re-run
// with childEnv set) each run 8 goroutines that take the same Redis lock and
// do a read-modify-write of a plain Redis counter inside it. Without mutual
// exclusion across processes, increments would be lost.
const childEnv = "FLOODGATE_LOCK_CHILD"

func critical(ctx context.Context, c *redis.Client, mu lock.Locker, n int) error {
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range n {
				lease, err := mu.Lock(ctx)
				if err != nil {
					errs <- err
					return
				}
				v, _ := c.Get(ctx, "counter").Int()
				time.Sleep(200 * time.Microsecond)
				c.Set(ctx, "counter", v+1, 0)
				if err := lease.Unlock(ctx); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	return <-errs
}

func childMain() int {
	f := strings.Fields(os.Getenv(childEnv))
	c := redis.NewClient(&redis.Options{Addr: f[0], PoolSize: 16})
	defer c.Close()
	b, err := backend.NewRedis(c)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	mu, _ := lock.NewMutex(b, f[1], lock.TTL(10*time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := critical(ctx, c, mu, 25); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

func TestMutualExclusionTwoProcesses(t *testing.T) {
	srv := testenv.NewRedis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 16})
	defer c.Close()
	mu, _ := lock.NewMutex(backendtest.NewRedis(t, c), "shared", lock.TTL(10*time.Second))
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+srv.Addr+" shared")
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := critical(ctx, c, mu, 25); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v", err)
	}
	if v, _ := c.Get(ctx, "counter").Int(); v != 400 {
		t.Fatalf("counter = %d after 400 locked increments: mutual exclusion failed", v)
	}
}
