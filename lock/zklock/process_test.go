package zklock_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/floodgate-dev/floodgate/internal/testenv"
	"github.com/floodgate-dev/floodgate/lock"
	"github.com/floodgate-dev/floodgate/lock/zklock"
)

// The two-process test: this process and a child (this test binary re-run
// with childEnv set), each with its own ZooKeeper session, run 8 goroutines
// that take the same lock and do a read-modify-write of a counter node
// inside it, writing without a version check. Without mutual exclusion
// across processes, increments would be lost.
const childEnv = "FLOODGATE_ZKLOCK_CHILD"

// critical runs n locked increments of the counter node in each of 8
// goroutines.
func critical(ctx context.Context, conn *zk.Conn, mu lock.Locker, counter string, n int) error {
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range n {
				if err := increment(ctx, conn, mu, counter); err != nil {
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

func increment(ctx context.Context, conn *zk.Conn, mu lock.Locker, counter string) error {
	lease, err := mu.Lock(ctx)
	if err != nil {
		return err
	}
	data, _, err := conn.Get(counter)
	if err != nil {
		return err
	}
	v, err := strconv.Atoi(string(data))
	if err != nil {
		return err
	}
	time.Sleep(200 * time.Microsecond)
	if _, err := conn.Set(counter, []byte(strconv.Itoa(v+1)), -1); err != nil {
		return err
	}
	return lease.Unlock(ctx)
}

// childMain runs the child's half: its arguments are in childEnv as
// "<addr> <lock path> <counter node> <n>".
func childMain() int {
	f := strings.Fields(os.Getenv(childEnv))
	if len(f) != 4 {
		fmt.Fprintf(os.Stderr, "child: bad %s %q\n", childEnv, os.Getenv(childEnv))
		return 2
	}
	n, _ := strconv.Atoi(f[3])
	conn, events, err := zk.Connect([]string{f[0]}, sessionTimeout, zk.WithLogger(nopLogger{}))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	defer conn.Close()
	for ev := range events {
		if ev.State == zk.StateHasSession {
			break
		}
	}
	mu, err := zklock.New(conn, f[1], lock.TTL(10*time.Second))
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := critical(ctx, conn, mu, f[2], n); err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	return 0
}

func TestMutualExclusionTwoProcesses(t *testing.T) {
	addr := testenv.SharedZooKeeper(t).Addr
	conn := connect(t, addr, nil)
	p := uniquePath(t)
	counter := p + "-counter"
	for _, q := range []string{root, counter} {
		data := []byte("0")
		if q == root {
			data = nil
		}
		if _, err := conn.Create(q, data, 0, zk.WorldACL(zk.PermAll)); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			t.Fatal(err)
		}
	}
	const n = 25
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s %s %s %d", childEnv, addr, p, counter, n))
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	errParent := critical(ctx, conn, mustNew(t, conn, p, lock.TTL(10*time.Second)), counter, n)
	errChild := cmd.Wait()
	if errParent != nil {
		t.Fatal(errParent)
	}
	if errChild != nil {
		t.Fatalf("child: %v", errChild)
	}
	data, _, err := conn.Get(counter)
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := strconv.Atoi(string(data)); v != 2*8*n {
		t.Fatalf("counter = %s after %d locked increments in two processes: mutual exclusion failed", data, 2*8*n)
	}
}
