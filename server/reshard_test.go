package server

import (
	"bytes"
	"context"
	"fmt"
	"net"
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
	"github.com/floodgate-dev/floodgate/internal/unwrap"
	"github.com/floodgate-dev/floodgate/ratelimit"
	"github.com/floodgate-dev/floodgate/server/config"
	"github.com/floodgate-dev/floodgate/server/storeurl"
)

const (
	// reshardSlots is how many slots the test moves between masters.
	reshardSlots = 300
	// reshardLimit is the fixed window's limit per key, per day.
	reshardLimit = 5
	// reshardCalls is how many decisions each key gets in its round: more
	// than reshardLimit, so that every key ends exhausted.
	reshardCalls = reshardLimit + 3
	// reshardKeys is how many fresh keys a round uses on each client.
	reshardKeys = 16
	// reshardWorkers is how many goroutines decide on each client.
	reshardWorkers = 4
	// reshardDeadline bounds redis-cli --cluster reshard.
	reshardDeadline = 60 * time.Second
)

const reshardYAML = `domain: api
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: 5}
`

// TestClusterReshardUnderLoad is issue 14's "resharding under load": while
// redis-cli --cluster reshard moves reshardSlots slots from one master to
// another, 4 goroutines decide through a Service on the rueidis store
// (OpenStore) and 4 more through ratelimit on a go-redis ClusterClient with
// default options, in rounds of fresh keys whose slots are among the moved
// ones, until the reshard has finished and once more after it. Both clients
// follow MOVED and ASK by themselves, so every decision must be a real one
// (no error, no failure-mode answer), and every key must admit exactly its
// limit of its calls: a migration that lost a counter would admit more, one
// that duplicated a write, fewer. After the reshard, every key of every
// round is asked once more and must be denied: its state moved with it.
func TestClusterReshardUnderLoad(t *testing.T) {
	cli, err := exec.LookPath("redis-cli")
	if err != nil {
		if testing.Short() {
			t.Skipf("redis-cli is not on PATH (%v): skipped under -short", err)
		}
		t.Fatalf("redis-cli is needed to reshard the Cluster: %v", err)
	}
	c := testenv.NewCluster(t)
	ctx := t.Context()
	waitOutOfDayEdge(t)

	src, dst := c.Nodes[0], c.Nodes[1]
	srcID, dstID := clusterMyID(t, src.Addr), clusterMyID(t, dst.Addr)
	ranges, err := c.Slots(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// redis-cli --cluster reshard takes a source's slots lowest first.
	moved := make(map[int]bool, reshardSlots)
	for _, r := range ranges {
		for sl := r.From; r.Master == src && sl <= r.To && len(moved) < reshardSlots; sl++ {
			moved[sl] = true
		}
	}
	if len(moved) < reshardSlots {
		t.Fatalf("%s owns %d slots, want at least %d: %+v", src.Addr, len(moved), reshardSlots, ranges)
	}

	prefix := backendtest.UniquePrefix()
	b, closer, err := storeurl.Open("redis://"+strings.Join(c.Addrs, ","), prefix, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	rb := b.(*backend.Redis)
	rbs := unwrap.Redis(rb)
	// A generous Timeout and no breaker: this test is about what the store
	// answers during a reshard, not how fast a loaded machine answers it.
	s, err := NewService(b, Options{Timeout: 10 * time.Second, Breaker: BreakerOptions{Failures: -1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetConfig(mustConfig(t, reshardYAML), "v1"); err != nil {
		t.Fatal(err)
	}
	limit := s.rules.Load().cfg.Domains["api"].Match([]config.Entry{{Key: "user", Value: "x"}})
	userSlot := func(u string) int {
		entries := []config.Entry{{Key: "user", Value: u}}
		return rbs.Slot(stateKey(limit, entries))
	}

	gc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs})
	defer gc.Close()
	var redirects redirectCounter
	gc.OnNewNode(func(n *redis.Client) { n.AddHook(&redirects) })
	lim, err := ratelimit.New(backendtest.NewRedis(t, gc, backend.WithPrefix(prefix+"rl")),
		ratelimit.FixedWindow{Limit: reshardLimit, Window: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}

	var (
		decisions, errs, failed atomic.Int64
		errMu                   sync.Mutex
		firstErrs               []string
	)
	fail := func(format string, args ...any) {
		errs.Add(1)
		errMu.Lock()
		defer errMu.Unlock()
		if len(firstErrs) < 5 {
			firstErrs = append(firstErrs, fmt.Sprintf(format, args...))
		}
	}
	decideSvc := func(u string) (admitted bool) {
		decisions.Add(1)
		resp, err := s.Decide(ctx, &Request{Domain: "api", Descriptors: []Descriptor{desc(1, "user", u)}})
		switch {
		case err != nil:
			fail("Decide user %s: %v", u, err)
		case resp.Failed:
			failed.Add(1)
		default:
			return resp.Code == CodeOK
		}
		return false
	}
	decideRL := func(k string) (admitted bool) {
		decisions.Add(1)
		res, err := lim.Allow(ctx, k)
		if err != nil {
			fail("ratelimit Allow %s: %v", k, err)
			return false
		}
		return res.Allowed
	}
	// pick returns reshardKeys fresh names whose slots (by slotOf) move.
	pick := func(round int, kind string, slotOf func(string) int) []string {
		var keys []string
		for i := 0; len(keys) < reshardKeys; i++ {
			k := fmt.Sprintf("%s%d-%d", kind, round, i)
			if moved[slotOf(k)] {
				keys = append(keys, k)
			}
		}
		return keys
	}
	// round gives every key reshardCalls decisions from reshardWorkers
	// goroutines and checks that exactly reshardLimit were admitted.
	round := func(keys []string, decide func(string) bool) {
		admitted := make([]atomic.Int64, len(keys))
		var next atomic.Int64
		var wg sync.WaitGroup
		for range reshardWorkers {
			wg.Go(func() {
				for i := next.Add(1) - 1; i < int64(len(keys)*reshardCalls); i = next.Add(1) - 1 {
					if decide(keys[i%int64(len(keys))]) {
						admitted[i%int64(len(keys))].Add(1)
					}
				}
			})
		}
		wg.Wait()
		for i, k := range keys {
			if got := admitted[i].Load(); got != reshardLimit {
				t.Errorf("key %s: %d of %d calls admitted, want exactly %d", k, got, reshardCalls, reshardLimit)
			}
		}
	}

	reshardOut := make(chan error, 1)
	var out bytes.Buffer
	start := time.Now()
	go func() {
		rctx, cancel := context.WithTimeout(context.Background(), reshardDeadline)
		defer cancel()
		cmd := exec.CommandContext(rctx, cli, "--cluster", "reshard", src.Addr,
			"--cluster-from", srcID, "--cluster-to", dstID,
			"--cluster-slots", strconv.Itoa(reshardSlots), "--cluster-yes")
		cmd.Stdout, cmd.Stderr = &out, &out
		reshardOut <- cmd.Run()
	}()

	var svcKeys, rlKeys []string
	rounds, during := 0, 0
	for finished := false; ; rounds++ {
		sk, rk := pick(rounds, "u", userSlot), pick(rounds, "k", rbs.Slot)
		svcKeys, rlKeys = append(svcKeys, sk...), append(rlKeys, rk...)
		var wg sync.WaitGroup
		wg.Go(func() { round(sk, decideSvc) })
		wg.Go(func() { round(rk, decideRL) })
		wg.Wait()
		if finished {
			break // the round after the reshard
		}
		select {
		case err := <-reshardOut:
			if err != nil {
				t.Fatalf("redis-cli --cluster reshard: %v\n%s", err, out.String())
			}
			finished = true
			during = rounds + 1
		default:
		}
	}
	took := time.Since(start)

	// Every moved slot is dst's now, and every key still holds its count.
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := c.WaitOK(wctx); err != nil {
		t.Fatal(err)
	}
	for sl := range moved {
		if m, err := c.MasterOf(ctx, sl); err != nil || m != dst {
			t.Fatalf("slot %d after the reshard: master %v, %v; want %s", sl, m, err, dst.Addr)
		}
	}
	for _, u := range svcKeys {
		if decideSvc(u) {
			t.Errorf("user %s admitted after the reshard: its count was lost in the migration", u)
		}
	}
	for _, k := range rlKeys {
		if decideRL(k) {
			t.Errorf("key %s admitted after the reshard: its count was lost in the migration", k)
		}
	}
	onDst := 0
	dc := redis.NewClient(&redis.Options{Addr: dst.Addr})
	defer dc.Close()
	for sl := range moved {
		n, err := dc.ClusterCountKeysInSlot(ctx, sl).Result()
		if err != nil {
			t.Fatal(err)
		}
		onDst += int(n)
	}

	t.Logf("moved %d slots %s -> %s in %v; %d rounds during the reshard + 1 after, %d decisions (%d keys, %d keys in the moved slots on the new master); go-redis's node hooks saw %d MOVED; %d errors, %d failure-mode answers",
		reshardSlots, src.Addr, dst.Addr, took.Round(time.Millisecond), during, decisions.Load(),
		len(svcKeys)+len(rlKeys), onDst, redirects.moved.Load(), errs.Load(), failed.Load())
	if n := errs.Load(); n > 0 {
		t.Errorf("%d decisions failed with an error during or after the reshard, first: %q", n, firstErrs)
	}
	if n := failed.Load(); n > 0 {
		t.Errorf("%d decisions were answered by the failure mode during or after the reshard", n)
	}
	if during < 2 {
		t.Logf("the reshard ended within %d round(s): little of it overlapped the decisions", during)
	}
}

// clusterMyID returns the Cluster node id of the node at addr.
func clusterMyID(t *testing.T, addr string) string {
	t.Helper()
	rc := redis.NewClient(&redis.Options{Addr: addr})
	defer rc.Close()
	id, err := rc.ClusterMyID(t.Context()).Result()
	if err != nil {
		t.Fatalf("CLUSTER MYID on %s: %v", addr, err)
	}
	return id
}

// waitOutOfDayEdge sleeps past the next UTC midnight when it is less than a
// minute away, so that the test's fixed windows of a day (epoch-aligned, on
// Redis's clock: this machine's) cannot end while it runs.
func waitOutOfDayEdge(t *testing.T) {
	now := time.Now()
	if left := now.Truncate(24 * time.Hour).Add(24 * time.Hour).Sub(now); left < time.Minute {
		t.Logf("waiting %v for the day's window to turn", left)
		time.Sleep(left + time.Second)
	}
}

// redirectCounter is a go-redis hook, added to every node client of a
// ClusterClient, that counts the MOVED and ASK replies the ClusterClient
// then follows.
type redirectCounter struct{ moved, ask atomic.Int64 }

func (h *redirectCounter) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		return next(ctx, network, addr)
	}
}

func (h *redirectCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.count(cmd)
		return err
	}
}

func (h *redirectCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			h.count(cmd)
		}
		return err
	}
}

func (h *redirectCounter) count(cmd redis.Cmder) {
	if err := cmd.Err(); err != nil {
		switch msg := err.Error(); {
		case strings.HasPrefix(msg, "MOVED "):
			h.moved.Add(1)
		case strings.HasPrefix(msg, "ASK "):
			h.ask.Add(1)
		}
	}
}

// TestClusterMigratingSlotKeepsCount pins the mechanism behind
// TestClusterReshardUnderLoad's over-admissions: a key exhausted on its
// master, whose slot is then marked MIGRATING to another master (before
// redis-cli's MIGRATE of its keys), must stay exhausted.
func TestClusterMigratingSlotKeepsCount(t *testing.T) {
	c := testenv.NewCluster(t)
	ctx := t.Context()
	src, dst := c.Nodes[0], c.Nodes[1]
	srcID, dstID := clusterMyID(t, src.Addr), clusterMyID(t, dst.Addr)
	prefix := backendtest.UniquePrefix()
	b, closer, err := storeurl.Open("redis://"+strings.Join(c.Addrs, ","), prefix, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	rb := b.(*backend.Redis)
	rbs := unwrap.Redis(rb)
	s, err := NewService(b, Options{Timeout: 10 * time.Second, Breaker: BreakerOptions{Failures: -1}})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetConfig(mustConfig(t, reshardYAML), "v1"); err != nil {
		t.Fatal(err)
	}
	limit := s.rules.Load().cfg.Domains["api"].Match([]config.Entry{{Key: "user", Value: "x"}})
	gc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs})
	defer gc.Close()
	lim, err := ratelimit.New(backendtest.NewRedis(t, gc, backend.WithPrefix(prefix+"rl")),
		ratelimit.FixedWindow{Limit: reshardLimit, Window: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	const slot = 7
	var user, key string
	for i := 0; user == "" || key == ""; i++ {
		if u := fmt.Sprint("u", i); user == "" && rbs.Slot(stateKey(limit, []config.Entry{{Key: "user", Value: u}})) == slot {
			user = u
		}
		if k := fmt.Sprint("k", i); key == "" && rbs.Slot(k) == slot {
			key = k
		}
	}
	svc := func() bool {
		resp, err := s.Decide(ctx, &Request{Domain: "api", Descriptors: []Descriptor{desc(1, "user", user)}})
		if err != nil || resp.Failed {
			t.Fatalf("Decide: %+v %v", resp, err)
		}
		return resp.Code == CodeOK
	}
	rl := func() bool {
		res, err := lim.Allow(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return res.Allowed
	}
	for range reshardLimit {
		svc()
		rl()
	}
	if svc() || rl() {
		t.Fatal("admitted past the limit before any migration")
	}
	sc, dc := redis.NewClient(&redis.Options{Addr: src.Addr}), redis.NewClient(&redis.Options{Addr: dst.Addr})
	defer sc.Close()
	defer dc.Close()
	if err := dc.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", srcID).Err(); err != nil {
		t.Fatal(err)
	}
	if err := sc.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", dstID).Err(); err != nil {
		t.Fatal(err)
	}
	gotSvc, gotRL := svc(), rl()
	srcKeys, _ := sc.ClusterCountKeysInSlot(ctx, slot).Result()
	dstKeys, _ := dc.ClusterCountKeysInSlot(ctx, slot).Result()
	t.Logf("slot %d MIGRATING: service admitted %v, ratelimit admitted %v; keys in the slot: %d on the source, %d on the target",
		slot, gotSvc, gotRL, srcKeys, dstKeys)
	if gotSvc || gotRL {
		t.Errorf("an exhausted key was admitted once its slot was MIGRATING (service %v, ratelimit %v)", gotSvc, gotRL)
	}
}
