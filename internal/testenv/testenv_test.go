package testenv_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

func ctxTimeout(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func client(t *testing.T, r *testenv.Redis) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: r.Addr, ContextTimeoutEnabled: true, MaxRetries: -1})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func TestStandaloneSetGet(t *testing.T) {
	r := testenv.SharedRedis(t)
	if r.Port == 6379 || !strings.HasPrefix(r.Addr, "127.0.0.1:") {
		t.Fatalf("shared Redis at %s, want a private 127.0.0.1 port", r.Addr)
	}
	if again := testenv.SharedRedis(t); again != r {
		t.Fatalf("SharedRedis returned a second server %s after %s", again.Addr, r.Addr)
	}
	ctx := ctxTimeout(t, 5*time.Second)
	c := client(t, r)
	// The server answering is our own child process, not some other Redis.
	info, err := c.Info(ctx, "server").Result()
	if err != nil {
		t.Fatal(err)
	}
	if want := "process_id:" + strconv.Itoa(r.Pid()); !strings.Contains(info, want) {
		t.Fatalf("INFO server lacks %q", want)
	}
	if err := c.Set(ctx, "standalone:k", "v1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	got, err := c.Get(ctx, "standalone:k").Result()
	if err != nil || got != "v1" {
		t.Fatalf("GET = %q, %v; want v1", got, err)
	}
	// No persistence by default.
	v, err := r.Do(ctx, "CONFIG", "GET", "appendonly")
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(v) != "[appendonly no]" {
		t.Fatalf("CONFIG GET appendonly = %v", v)
	}
	if v, err := r.Do(ctx, "CONFIG", "GET", "save"); err != nil || fmt.Sprint(v) != "[save ]" {
		t.Fatalf("CONFIG GET save = %v, %v; want no snapshots", v, err)
	}
}

func TestPauseResume(t *testing.T) {
	r := testenv.NewRedis(t)
	c := client(t, r)
	if err := c.Set(ctxTimeout(t, 5*time.Second), "k", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := r.Pause(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	start := time.Now()
	_, err := c.Get(ctx, "k").Result()
	cancel()
	if err == nil {
		t.Fatal("GET on a paused server succeeded")
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("GET on a paused server took %v, want about 200ms", el)
	}
	if !errors.Is(err, context.DeadlineExceeded) && !strings.Contains(err.Error(), "timeout") {
		t.Fatalf("GET on a paused server: %v, want a timeout", err)
	}
	if err := r.Resume(); err != nil {
		t.Fatal(err)
	}
	got, err := c.Get(ctxTimeout(t, 5*time.Second), "k").Result()
	if err != nil || got != "v" {
		t.Fatalf("GET after Resume = %q, %v; want v", got, err)
	}
	// A paused server still stops promptly.
	if err := r.Pause(); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > 5*time.Second || r.Running() {
		t.Fatalf("Stop of a paused server took %v, running %v", el, r.Running())
	}
	if err := r.Resume(); !errors.Is(err, testenv.ErrNotRunning) {
		t.Fatalf("Resume after Stop: %v, want ErrNotRunning", err)
	}
}

func TestRestartWithAOFKeepsData(t *testing.T) {
	r := testenv.NewRedis(t, testenv.WithAOF())
	c := client(t, r)
	ctx := ctxTimeout(t, 20*time.Second)
	if err := c.Set(ctx, "durable", "yes", 0).Err(); err != nil {
		t.Fatal(err)
	}
	addr, pid := r.Addr, r.Pid()
	if err := r.Restart(); err != nil {
		t.Fatal(err)
	}
	if r.Addr != addr || r.Pid() == pid || r.Pid() == 0 {
		t.Fatalf("after Restart: addr %s pid %d, before: addr %s pid %d", r.Addr, r.Pid(), addr, pid)
	}
	if got, err := c.Get(ctx, "durable").Result(); err != nil || got != "yes" {
		t.Fatalf("GET after Restart = %q, %v; want yes", got, err)
	}
	// A crash loses nothing acknowledged either (appendfsync always).
	if err := c.Set(ctx, "crash", "survives", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := r.Kill(); err != nil {
		t.Fatal(err)
	}
	if r.Running() {
		t.Fatal("Running after Kill")
	}
	if err := c.Ping(ctx).Err(); err == nil {
		t.Fatal("PING succeeded after Kill")
	}
	if err := r.Kill(); !errors.Is(err, testenv.ErrNotRunning) {
		t.Fatalf("second Kill: %v, want ErrNotRunning", err)
	}
	if err := r.Restart(); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"durable", "crash"} {
		if n, err := c.Exists(ctx, k).Result(); err != nil || n != 1 {
			t.Fatalf("EXISTS %s after crash and Restart = %d, %v; want 1", k, n, err)
		}
	}
}

func TestRestartWithoutAOFLosesData(t *testing.T) {
	r := testenv.NewRedis(t)
	c := client(t, r)
	ctx := ctxTimeout(t, 20*time.Second)
	if err := c.Set(ctx, "volatile", "x", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := r.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if err := r.Restart(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(ctx, "volatile").Result(); !errors.Is(err, redis.Nil) {
		t.Fatalf("GET after Restart without AOF: %v, want redis.Nil", err)
	}
	if err := c.Set(ctx, "volatile", "y", 0).Err(); err != nil {
		t.Fatalf("SET after Restart: %v", err)
	}
}

func TestUnixSocket(t *testing.T) {
	r := testenv.NewRedis(t, testenv.WithUnixSocket())
	if r.Socket == "" {
		t.Fatal("no Socket with WithUnixSocket")
	}
	c := redis.NewClient(&redis.Options{Network: "unix", Addr: r.Socket})
	defer c.Close()
	ctx := ctxTimeout(t, 5*time.Second)
	if err := c.Set(ctx, "via", "unix", 0).Err(); err != nil {
		t.Fatal(err)
	}
	// Same server over TCP.
	if got, err := client(t, r).Get(ctx, "via").Result(); err != nil || got != "unix" {
		t.Fatalf("GET over TCP = %q, %v; want unix", got, err)
	}
}

func TestCloseRemovesEverything(t *testing.T) {
	r := testenv.NewRedis(t) // its cleanup closes it again, which is harmless
	if _, err := os.Stat(r.Dir); err != nil {
		t.Fatalf("server dir: %v", err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(r.Dir); !os.IsNotExist(err) {
		t.Fatalf("dir %s still there after Close: %v", r.Dir, err)
	}
	if err := r.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := r.Restart(); !errors.Is(err, testenv.ErrClosed) {
		t.Fatalf("Restart after Close: %v, want ErrClosed", err)
	}
	if err := r.Pause(); !errors.Is(err, testenv.ErrNotRunning) {
		t.Fatalf("Pause after Close: %v, want ErrNotRunning", err)
	}
	if _, err := r.Do(ctxTimeout(t, time.Second), "PING"); err == nil {
		t.Fatal("PING answered after Close")
	}
}

func TestMissingBinary(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := testenv.StartRedis()
	if !errors.Is(err, testenv.ErrNotInstalled) || !strings.Contains(err.Error(), "redis-server not found") {
		t.Fatalf("StartRedis without redis-server on PATH: %v", err)
	}
	if _, err := testenv.StartCluster(); !errors.Is(err, testenv.ErrNotInstalled) || !strings.Contains(err.Error(), "redis-cli not found") {
		t.Fatalf("StartCluster without redis-cli on PATH: %v", err)
	}
}

// ender records how a test ended: a testing.TB whose Skipf and Fatalf note
// the message and end the goroutine, as the real ones do.
type ender struct {
	testing.TB
	how, msg string
}

func (e *ender) Helper() {}
func (e *ender) Skipf(format string, args ...any) {
	e.how, e.msg = "skip", fmt.Sprintf(format, args...)
	runtime.Goexit()
}
func (e *ender) Fatalf(format string, args ...any) {
	e.how, e.msg = "fail", fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// NotInstalled skips under -short and fails otherwise, naming what is
// missing either way.
func TestNotInstalled(t *testing.T) {
	short := flag.Lookup("test.short").Value.String()
	t.Cleanup(func() { _ = flag.Set("test.short", short) })
	for _, tc := range []struct{ short, how, hint string }{
		{"true", "skip", "skipped under -short"},
		{"false", "fail", "run ./scripts/test.sh"},
	} {
		if err := flag.Set("test.short", tc.short); err != nil {
			t.Fatal(err)
		}
		e := &ender{TB: t}
		done := make(chan struct{})
		go func() {
			defer close(done)
			testenv.NotInstalled(e, "chromium not found on PATH")
		}()
		<-done
		if e.how != tc.how || !strings.HasPrefix(e.msg, "chromium not found on PATH") || !strings.Contains(e.msg, tc.hint) {
			t.Errorf("-short=%s: %s %q, want %s naming chromium and %q", tc.short, e.how, e.msg, tc.how, tc.hint)
		}
	}
}

func TestCluster(t *testing.T) {
	cl := testenv.SharedCluster(t)
	if len(cl.Addrs) != 3 || len(cl.Nodes) != 3 {
		t.Fatalf("cluster has %d addrs and %d nodes, want 3", len(cl.Addrs), len(cl.Nodes))
	}
	ctx := ctxTimeout(t, 20*time.Second)
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs})
	defer cc.Close()
	slots := map[int64]bool{}
	for i := range 100 {
		k := fmt.Sprintf("cluster:key:%d", i)
		if err := cc.Set(ctx, k, i, 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", k, err)
		}
		slot, err := cc.ClusterKeySlot(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		slots[slot] = true
	}
	if len(slots) < 50 {
		t.Fatalf("100 keys fell in only %d slots", len(slots))
	}
	for i := range 100 {
		k := fmt.Sprintf("cluster:key:%d", i)
		got, err := cc.Get(ctx, k).Int()
		if err != nil || got != i {
			t.Fatalf("GET %s = %d, %v; want %d", k, got, err, i)
		}
	}
	// Every master holds some of the keys, and they add up.
	total := 0
	for _, addr := range cl.Addrs {
		c := redis.NewClient(&redis.Options{Addr: addr})
		n, err := c.DBSize(ctx).Result()
		if err != nil {
			c.Close()
			t.Fatal(err)
		}
		if n == 0 {
			t.Errorf("node %s holds no keys", addr)
		}
		total += int(n)
		state, err := c.ClusterInfo(ctx).Result()
		c.Close()
		if err != nil || !strings.Contains(state, "cluster_state:ok") || !strings.Contains(state, "cluster_slots_ok:16384") {
			t.Fatalf("CLUSTER INFO on %s: %v\n%s", addr, err, state)
		}
	}
	if total != 100 {
		t.Fatalf("nodes hold %d keys in all, want 100", total)
	}
}

func TestSharedSentinelTopology(t *testing.T) {
	s := testenv.SharedSentinel(t)
	ctx := ctxTimeout(t, 10*time.Second)
	sc := redis.NewSentinelClient(&redis.Options{Addr: s.SentinelAddrs[0]})
	defer sc.Close()
	hp, err := sc.GetMasterAddrByName(ctx, s.MasterName).Result()
	if err != nil {
		t.Fatal(err)
	}
	if got := hp[0] + ":" + hp[1]; got != s.Master.Addr {
		t.Fatalf("sentinel reports master %s, want %s", got, s.Master.Addr)
	}
	role, err := client(t, s.Replica).Do(ctx, "ROLE").Slice()
	if err != nil || role[0] != "slave" || fmt.Sprint(role[2]) != strconv.Itoa(s.Master.Port) {
		t.Fatalf("replica ROLE = %v, %v; want a replica of port %d", role, err, s.Master.Port)
	}
}

func TestSentinelFailover(t *testing.T) {
	s := testenv.NewSentinel(t)
	if s.MasterName != "fgmaster" {
		t.Fatalf("MasterName = %q", s.MasterName)
	}
	ctx := ctxTimeout(t, 45*time.Second)
	fc := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:    s.MasterName,
		SentinelAddrs: s.SentinelAddrs,
		DialTimeout:   time.Second,
		ReadTimeout:   time.Second,
		WriteTimeout:  time.Second,
	})
	defer fc.Close()
	if err := fc.Set(ctx, "before", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	n, err := fc.Do(ctx, "WAIT", 1, 1000).Int()
	if err != nil || n < 1 {
		t.Fatalf("WAIT 1 1000 = %d, %v; want the write on 1 replica", n, err)
	}

	newAddr, err := s.Failover(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if newAddr != s.Replica.Addr {
		t.Fatalf("Failover promoted %s, want the replica %s", newAddr, s.Replica.Addr)
	}
	if m, r, err := s.Roles(ctx); err != nil || m != s.Replica || r != s.Master {
		t.Fatalf("Roles after Failover = %v, %v, %v; want swapped", m, r, err)
	}
	direct := client(t, s.Replica)
	if role, err := direct.Do(ctx, "ROLE").Slice(); err != nil || role[0] != "master" {
		t.Fatalf("new master ROLE = %v, %v", role, err)
	}

	// The same failover client switches over: retry until a write through
	// it lands on the new master.
	deadline := time.Now().Add(15 * time.Second)
	for attempt := 0; ; attempt++ {
		val := strconv.Itoa(attempt)
		err := fc.Set(ctx, "after", val, 0).Err()
		if err == nil {
			got, gerr := direct.Get(ctx, "after").Result()
			if gerr == nil && got == val {
				break
			}
			err = fmt.Errorf("new master has after=%q (%v), want %q", got, gerr, val)
		}
		if time.Now().After(deadline) {
			t.Fatalf("failover client never wrote to the new master: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got, err := fc.Get(ctx, "before").Result(); err != nil || got != "1" {
		t.Fatalf("GET before via failover client = %q, %v; want 1", got, err)
	}
	// The old master now replicates from the new one.
	if role, err := client(t, s.Master).Do(ctx, "ROLE").Slice(); err != nil || role[0] != "slave" {
		t.Fatalf("old master ROLE = %v, %v; want slave", role, err)
	}

	// The group is healthy again: a second failover brings the original
	// master back, with the data once it has reached the replica.
	if n, err := direct.Do(ctx, "WAIT", 1, 5000).Int(); err != nil || n < 1 {
		t.Fatalf("WAIT 1 5000 on the new master = %d, %v", n, err)
	}
	back, err := s.Failover(ctx)
	if err != nil {
		t.Fatalf("second Failover: %v", err)
	}
	if back != s.Master.Addr {
		t.Fatalf("second Failover promoted %s, want %s", back, s.Master.Addr)
	}
	for _, k := range []string{"before", "after"} {
		if n, err := client(t, s.Master).Exists(ctx, k).Result(); err != nil || n != 1 {
			t.Fatalf("EXISTS %s on the original master after failing back = %d, %v", k, n, err)
		}
	}
}
