package idempotency_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/idempotency"
	"github.com/floodgate-dev/floodgate/internal/testenv"
)

// The crash test: a child process (this test binary re-run with childEnv
// set to "<redis addr> <prefix> <key>") claims a key and blocks in fn; the
// parent kills it with SIGKILL and checks that the key becomes retryable
// when the lease ends, not before.
const childEnv = "FLOODGATE_IDEMPOTENCY_CHILD"

const crashLease = time.Second

func childMain() int {
	f := strings.Fields(os.Getenv(childEnv))
	c := redis.NewClient(&redis.Options{Addr: f[0], ContextTimeoutEnabled: true})
	b, err := backend.NewRedis(c, backend.WithPrefix(f[1]))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	s, err := idempotency.New(b, idempotency.Lease(crashLease))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	_, _, err = s.Do(context.Background(), f[2], func(context.Context) ([]byte, error) {
		fmt.Println("running")
		select {} // until killed
	})
	fmt.Fprintln(os.Stderr, "Do returned:", err)
	return 1
}

func TestCrashedRunnerSubprocess(t *testing.T) {
	addr := testenv.SharedRedis(t).Addr
	prefix := uniquePrefix()
	c := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	defer c.Close()
	b, err := backend.NewRedis(c, backend.WithPrefix(prefix))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+addr+" "+prefix+" payment-7")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "running\n" {
		t.Fatalf("child: %q, %v", line, err)
	}

	ctx := context.Background()
	s := newStore(t, b, idempotency.Lease(crashLease))
	runs := 0
	fn := func(context.Context) ([]byte, error) { runs++; return []byte("parent"), nil }

	// The live child renews its lease: the key stays in flight well past
	// one lease length.
	for i := range 4 {
		if _, _, err := s.Do(ctx, "payment-7", fn); !errors.Is(err, idempotency.ErrInFlight) {
			t.Fatalf("check %d while the child runs: %v, want ErrInFlight", i, err)
		}
		time.Sleep(crashLease / 2)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()

	// Dead now; its key is retryable once the lease runs out.
	waiter := newStore(t, b, idempotency.Lease(crashLease), idempotency.WaitForResult(10*time.Second))
	res, replayed, err := waiter.Do(ctx, "payment-7", fn)
	if err != nil || replayed || string(res) != "parent" || runs != 1 {
		t.Fatalf("after the child died: %q, replayed %v, %v, runs %d", res, replayed, err, runs)
	}
	res, replayed, err = s.Do(ctx, "payment-7", fn)
	if err != nil || !replayed || string(res) != "parent" || runs != 1 {
		t.Fatalf("replay: %q, replayed %v, %v, runs %d", res, replayed, err, runs)
	}
}

// TestCrashedRunnerInProcess simulates a dead runner on every backend: its
// lease is never renewed. Its fn's context is cancelled with ErrLeaseLost,
// another caller takes the key over after the lease, and the late runner's
// result is not stored.
func TestCrashedRunnerInProcess(t *testing.T) {
	for _, bk := range coreBackends() {
		t.Run(bk.Name, func(t *testing.T) {
			t.Parallel()
			b := bk.Make(t, nil)
			ctx := context.Background()
			dead := newStore(t, b, idempotency.Lease(200*ms))
			idempotency.DisableRenewal(dead)
			started, release := make(chan struct{}), make(chan struct{})
			cause := make(chan error, 1)
			type ret struct {
				res string
				err error
			}
			deadDone := make(chan ret, 1)
			go func() {
				res, _, err := dead.Do(ctx, "job", func(ctx context.Context) ([]byte, error) {
					close(started)
					<-ctx.Done()
					cause <- context.Cause(ctx)
					<-release
					return []byte("late"), nil
				})
				deadDone <- ret{string(res), err}
			}()
			<-started

			s := newStore(t, b, idempotency.Lease(200*ms))
			runs := 0
			fn := func(context.Context) ([]byte, error) { runs++; return []byte("fresh"), nil }
			if _, _, err := s.Do(ctx, "job", fn); !errors.Is(err, idempotency.ErrInFlight) {
				t.Fatalf("during the dead runner's lease: %v, want ErrInFlight", err)
			}
			if err := <-cause; !errors.Is(err, idempotency.ErrLeaseLost) {
				t.Errorf("dead runner's fn context cause: %v, want ErrLeaseLost", err)
			}
			waiter := newStore(t, b, idempotency.Lease(200*ms), idempotency.WaitForResult(10*time.Second))
			res, replayed, err := waiter.Do(ctx, "job", fn)
			if err != nil || replayed || string(res) != "fresh" || runs != 1 {
				t.Fatalf("takeover: %q, replayed %v, %v, runs %d", res, replayed, err, runs)
			}
			close(release)
			r := <-deadDone
			if !errors.Is(r.err, idempotency.ErrLeaseLost) || r.res != "late" {
				t.Errorf("dead runner's Do: %q, %v; want its result and ErrLeaseLost", r.res, r.err)
			}
			res, replayed, err = s.Do(ctx, "job", fn)
			if err != nil || !replayed || string(res) != "fresh" {
				t.Errorf("the late result replaced the stored one: %q, replayed %v, %v", res, replayed, err)
			}
		})
	}
}
