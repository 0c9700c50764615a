package delayqueue_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/delayqueue"
	"github.com/floodgate-dev/floodgate/internal/testenv"
)

// consumerEnv makes the test binary a consumer process (see consumerMain):
// "<redis addr> <key prefix> <queue name>".
const consumerEnv = "FLOODGATE_DELAYQUEUE_CONSUMER"

// consumerMain consumes a queue with a 1s Visibility; its handler prints
// "got <id> <attempt>" and then hangs, until the parent kills the process.
func consumerMain() int {
	f := strings.Fields(os.Getenv(consumerEnv))
	c := redis.NewClient(&redis.Options{Addr: f[0], ContextTimeoutEnabled: true})
	defer c.Close()
	b, err := backend.NewRedis(c, backend.WithPrefix(f[1]))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	q, err := delayqueue.New(b, f[2], delayqueue.Visibility(time.Second))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	err = q.Run(ctx, func(ctx context.Context, j *delayqueue.Job) error {
		fmt.Printf("got %s %d\n", j.ID, j.Attempt)
		<-ctx.Done()
		return ctx.Err()
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// TestAtLeastOnceAcrossSIGKILL: a consumer process is killed with SIGKILL
// while its handler runs; the job is not lost: once the dead consumer's lease
// ends (Visibility after its last extension, by the Redis clock), another
// consumer gets it with Attempt 2.
func TestAtLeastOnceAcrossSIGKILL(t *testing.T) {
	addr := testenv.SharedRedis(t).Addr
	prefix := uniquePrefix()
	q, err := delayqueue.New(newRedisAt(t, addr, []backend.Option{backend.WithPrefix(prefix)}), "jobs",
		delayqueue.Visibility(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := q.Enqueue(ctx, []byte("important"), delayqueue.ID("job-1")); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), consumerEnv+"="+addr+" "+prefix+" jobs")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("reading the consumer's output: %v", err)
	}
	started := time.Now()
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err == nil {
		t.Fatal("the consumer exited cleanly; want killed")
	}
	if line != "got job-1 1\n" {
		t.Fatalf("the consumer printed %q, want the first delivery of job-1", line)
	}
	if s, err := q.Stats(ctx); err != nil || s != (delayqueue.Stats{InFlight: 1}) {
		t.Fatalf("after the kill: Stats %+v %v, want the job in flight", s, err)
	}

	got := make(chan *delayqueue.Job, 1)
	rctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- q.Run(rctx, func(_ context.Context, j *delayqueue.Job) error {
			j.DueAt = j.DueAt.Round(0)
			select {
			case got <- j:
			default:
			}
			if time.Now().Before(j.DueAt) {
				return fmt.Errorf("delivered before due")
			}
			return nil
		})
	}()
	var j *delayqueue.Job
	select {
	case j = <-got:
	case <-ctx.Done():
		t.Fatal("the job was not delivered again after the consumer died")
	}
	delivered := time.Now()
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if j.ID != "job-1" || string(j.Payload) != "important" || j.Attempt != 2 {
		t.Fatalf("redelivered %q %q attempt %d, want job-1 \"important\" attempt 2", j.ID, j.Payload, j.Attempt)
	}
	// DueAt is the dead lease's deadline: at least a Visibility after the
	// claim, which came before the child printed.
	if !j.DueAt.After(started.Add(-time.Second)) || delivered.Before(j.DueAt) {
		t.Errorf("DueAt %v: want the dead lease's deadline, after %v and not after the delivery at %v", j.DueAt, started.Add(-time.Second), delivered)
	}
	if s, err := q.Stats(ctx); err != nil || s != (delayqueue.Stats{}) {
		t.Errorf("after the ack: Stats %+v %v, want an empty queue", s, err)
	}
}
