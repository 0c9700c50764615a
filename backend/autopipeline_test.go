package backend_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/internal/backendtest"
	"github.com/floodgate-dev/floodgate/internal/redisstore"
	"github.com/floodgate-dev/floodgate/internal/testenv"
	"github.com/floodgate-dev/floodgate/internal/unwrap"
)

// scriptCounter is a go-redis hook that counts how script commands (EVALSHA,
// EVAL) reach the server: alone (ProcessHook: a plain call, or a pipeline of
// one) or in pipelines (ProcessPipelineHook), and the MOVED and ASK replies
// among them.
type scriptCounter struct {
	alone, batches, inBatches, maxBatch atomic.Int64
	evals, noscript, moved, ask         atomic.Int64
}

func (h *scriptCounter) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		return next(ctx, network, addr)
	}
}

func (h *scriptCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		if h.count(cmd) {
			h.alone.Add(1)
		}
		return err
	}
}

func (h *scriptCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		n := int64(0)
		for _, cmd := range cmds {
			if h.count(cmd) {
				n++
			}
		}
		if n > 0 {
			h.batches.Add(1)
			h.inBatches.Add(n)
			for m := h.maxBatch.Load(); n > m && !h.maxBatch.CompareAndSwap(m, n); m = h.maxBatch.Load() {
			}
		}
		return err
	}
}

// count records cmd and reports whether it is a script command.
func (h *scriptCounter) count(cmd redis.Cmder) bool {
	name := cmd.Name()
	if name != "evalsha" && name != "eval" {
		return false
	}
	if name == "eval" {
		h.evals.Add(1)
	}
	if err := cmd.Err(); err != nil {
		switch msg := err.Error(); {
		case strings.HasPrefix(msg, "NOSCRIPT"):
			h.noscript.Add(1)
		case strings.HasPrefix(msg, "MOVED "):
			h.moved.Add(1)
		case strings.HasPrefix(msg, "ASK "):
			h.ask.Add(1)
		}
	}
	return true
}

// dispatches is the number of round trips that carried script commands.
func (h *scriptCounter) dispatches() int64 { return h.alone.Load() + h.batches.Load() }

// concurrently runs f(g, i) for g in [0, goroutines) and i in [0, calls).
func concurrently(goroutines, calls int, f func(g, i int)) {
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			for i := range calls {
				f(g, i)
			}
		})
	}
	wg.Wait()
}

// autoPipeScript returns per-key counts, the argument doubled, a nil and a
// string, so that replies of every kind are compared.
var autoPipeScript = redisstore.NewScript(`
local n = redis.call('INCR', KEYS[1])
redis.call('PEXPIRE', KEYS[1], 60000)
return {n, tonumber(ARGV[1]) * 2, redis.call('GET', KEYS[1] .. ':none'), KEYS[1]}`)

// TestAutoPipelineSameResults: 64 goroutines making calls one after another
// on a *redis.Client get the same replies through NewRedis's default
// (autopipelined) as with WithoutAutoPipeline, and with the default the calls
// shared round trips: fewer pipelines than calls, some of more than one.
func TestAutoPipelineSameResults(t *testing.T) {
	srv := testenv.SharedRedis(t)
	const goroutines, calls = 64, 150
	run := func(opts ...backend.Option) ([][]string, *scriptCounter) {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
		defer c.Close()
		h := &scriptCounter{}
		c.AddHook(h)
		prefix := backendtest.UniquePrefix()
		r := backendtest.NewRedis(t, c, append(opts, backend.WithPrefix(prefix))...)
		rs := unwrap.Redis(r)
		got := make([][]string, goroutines)
		ctx := context.Background()
		concurrently(goroutines, calls, func(g, i int) {
			key := rs.Key(fmt.Sprint("g", g), "n")
			var reply any
			var err error
			if i%2 == 0 {
				reply, err = rs.Run(ctx, autoPipeScript, []string{key}, []string{fmt.Sprint(i)})
			} else {
				reply, err = rs.RunArgs(ctx, autoPipeScript, []string{key}, []any{i})
			}
			if err != nil {
				t.Errorf("goroutine %d call %d: %v", g, i, err)
				return
			}
			// The key differs by prefix only: keep its user part.
			arr := reply.([]any)
			arr[3] = strings.TrimPrefix(arr[3].(string), prefix)
			got[g] = append(got[g], fmt.Sprintf("%#v", arr))
		})
		return got, h
	}
	plain, hp := run(backend.WithoutAutoPipeline())
	piped, h := run()
	if t.Failed() {
		t.FailNow()
	}
	for g := range goroutines {
		if len(plain[g]) != calls || len(piped[g]) != calls {
			t.Fatalf("goroutine %d: %d plain and %d pipelined replies, want %d", g, len(plain[g]), len(piped[g]), calls)
		}
		for i := range calls {
			if plain[g][i] != piped[g][i] {
				t.Fatalf("goroutine %d call %d: pipelined %s, plain %s", g, i, piped[g][i], plain[g][i])
			}
		}
	}
	if want := fmt.Sprintf("%#v", []any{int64(1), int64(0), nil, ":{g0}:n"}); plain[0][0] != want {
		t.Errorf("first reply %s, want %s", plain[0][0], want)
	}
	total := int64(goroutines * calls)
	t.Logf("plain: %d round trips; pipelined: %d round trips (%d alone, %d pipelines carrying %d, the largest %d) for %d calls",
		hp.dispatches(), h.dispatches(), h.alone.Load(), h.batches.Load(), h.inBatches.Load(), h.maxBatch.Load(), total)
	// (The first calls of the plain run also answer NOSCRIPT and run EVAL.)
	if hp.batches.Load() != 0 || hp.alone.Load() < total {
		t.Errorf("WithoutAutoPipeline: %d pipelines and %d calls alone, want every call alone", hp.batches.Load(), hp.alone.Load())
	}
	if h.alone.Load()+h.inBatches.Load() < total {
		t.Errorf("pipelined: %d commands seen, want %d", h.alone.Load()+h.inBatches.Load(), total)
	}
	if h.dispatches() >= total || h.maxBatch.Load() < 2 {
		t.Errorf("no pipelining: %d round trips for %d calls, largest pipeline %d", h.dispatches(), total, h.maxBatch.Load())
	}
}

// TestAutoPipelineContext: while the server's traffic is stalled, pipelined
// calls return as soon as their context ends, with its error, on a client
// without ContextTimeoutEnabled (whose plain calls need a helper goroutine
// for that); once traffic flows again, calls succeed.
func TestAutoPipelineContext(t *testing.T) {
	srv := testenv.SharedRedis(t)
	p := testenv.NewProxy(t, srv.Addr)
	c := redis.NewClient(&redis.Options{Addr: p.Addr(), ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second})
	defer c.Close()
	defer p.Resume() // before Close, which lets the stalled batch finish
	r := backendtest.NewRedis(t, c, backend.WithPrefix(backendtest.UniquePrefix()))
	rs := unwrap.Redis(r)
	s := redisstore.NewScript("return redis.call('INCR', KEYS[1])")
	key := rs.Key("ctx", "n")
	if _, err := rs.Run(context.Background(), s, []string{key}, nil); err != nil {
		t.Fatal(err)
	}

	p.Stall()
	const goroutines = 16
	var wg sync.WaitGroup
	errs := make([]error, goroutines)
	took := make([]time.Duration, goroutines)
	for g := range goroutines {
		wg.Go(func() {
			var ctx context.Context
			var cancel context.CancelFunc
			if g%2 == 0 {
				ctx, cancel = context.WithTimeout(context.Background(), 100*time.Millisecond)
			} else {
				ctx, cancel = context.WithCancel(context.Background())
				time.AfterFunc(100*time.Millisecond, cancel)
			}
			defer cancel()
			start := time.Now()
			_, errs[g] = rs.Run(ctx, s, []string{key}, nil)
			took[g] = time.Since(start)
		})
	}
	wg.Wait()
	for g := range goroutines {
		want := context.DeadlineExceeded
		if g%2 == 1 {
			want = context.Canceled
		}
		if !errors.Is(errs[g], want) {
			t.Errorf("call %d on a stalled server: %v, want %v", g, errs[g], want)
		}
		if took[g] > time.Second {
			t.Errorf("call %d returned %v after it started, its context ended after 100ms", g, took[g])
		}
	}
	// A context that has already ended: nothing is sent.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := rs.Run(ctx, s, []string{key}, nil); !errors.Is(err, context.Canceled) {
		t.Errorf("call with an ended context: %v", err)
	}

	p.Resume()
	ctx, cancel = context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := rs.Run(ctx, s, []string{key}, nil); err != nil {
		t.Fatalf("after Resume: %v", err)
	}
}

// TestAutoPipelineNoScript: SCRIPT FLUSH while 32 goroutines make pipelined
// calls: the EVALSHAs that answer NOSCRIPT are followed by EVALs, through the
// pipeline too, and every call succeeds.
func TestAutoPipelineNoScript(t *testing.T) {
	srv := testenv.SharedRedis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	defer c.Close()
	h := &scriptCounter{}
	c.AddHook(h)
	prefix := backendtest.UniquePrefix()
	r := backendtest.NewRedis(t, c, backend.WithPrefix(prefix))
	// A script of its own, so that no other test has it cached.
	s := redisstore.NewScript("-- " + prefix + "\nreturn tonumber(ARGV[1]) + 1")
	ctx := context.Background()
	stop := make(chan struct{})
	var flushes atomic.Int64
	var fwg sync.WaitGroup
	fwg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
			if err := c.ScriptFlush(ctx).Err(); err != nil {
				t.Error(err)
				return
			}
			flushes.Add(1)
		}
	})
	concurrently(32, 100, func(g, i int) {
		reply, err := unwrap.Redis(r).RunArgs(ctx, s, nil, []any{g*1000 + i})
		if err != nil {
			t.Errorf("goroutine %d call %d: %v", g, i, err)
		} else if reply != int64(g*1000+i+1) {
			t.Errorf("goroutine %d call %d: %v", g, i, reply)
		}
	})
	close(stop)
	fwg.Wait()
	t.Logf("%d SCRIPT FLUSHes, %d NOSCRIPT replies, %d EVALs; %d pipelines carrying %d commands", flushes.Load(), h.noscript.Load(), h.evals.Load(), h.batches.Load(), h.inBatches.Load())
	if h.noscript.Load() == 0 || h.evals.Load() == 0 {
		t.Errorf("no NOSCRIPT recovery was exercised (%d NOSCRIPT, %d EVAL)", h.noscript.Load(), h.evals.Load())
	}
	if h.batches.Load() == 0 {
		t.Error("no pipelining")
	}
}

// TestAutoPipelineErrorsPerCall: a script error in some concurrent calls
// fails those calls only, not the others of their pipelines.
func TestAutoPipelineErrorsPerCall(t *testing.T) {
	srv := testenv.SharedRedis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	defer c.Close()
	h := &scriptCounter{}
	c.AddHook(h)
	r := backendtest.NewRedis(t, c, backend.WithPrefix(backendtest.UniquePrefix()))
	s := redisstore.NewScript(`
if ARGV[1] == 'boom' then return redis.error_reply('boom') end
if ARGV[1] == 'crash' then return redis.call('NOSUCHCOMMAND') end
if ARGV[1] == 'nil' then return nil end
return ARGV[1]`)
	ctx := context.Background()
	var failed atomic.Int64
	concurrently(64, 60, func(g, i int) {
		arg := fmt.Sprint(g, ":", i)
		switch (g + i) % 7 {
		case 0:
			arg = "boom"
		case 3:
			arg = "crash"
		case 5:
			arg = "nil"
		}
		reply, err := unwrap.Redis(r).Run(ctx, s, nil, []string{arg})
		switch arg {
		case "boom", "crash":
			failed.Add(1)
			if err == nil || !strings.Contains(strings.ToLower(err.Error()), strings.ToLower(map[string]string{"boom": "boom", "crash": "unknown"}[arg])) {
				t.Errorf("goroutine %d call %d (%s): %v %v", g, i, arg, reply, err)
			}
		case "nil":
			if err != nil || reply != nil {
				t.Errorf("goroutine %d call %d (nil): %v %v", g, i, reply, err)
			}
		default:
			if err != nil || reply != arg {
				t.Errorf("goroutine %d call %d: %v %v, want %s", g, i, reply, err, arg)
			}
		}
	})
	t.Logf("%d failing calls among %d; %d pipelines carrying %d commands, the largest %d", failed.Load(), 64*60, h.batches.Load(), h.inBatches.Load(), h.maxBatch.Load())
	if h.maxBatch.Load() < 2 {
		t.Error("no pipelining")
	}
}

// TestAutoPipelineCluster: on a ClusterClient, pipelined calls on keys of
// every master succeed, and go on succeeding while a slot migrates (ASK) and
// after it has moved (MOVED), with per-key counts intact.
func TestAutoPipelineCluster(t *testing.T) {
	cl := testenv.NewCluster(t)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs, ContextTimeoutEnabled: true})
	defer cc.Close()
	h := &scriptCounter{}
	cc.OnNewNode(func(n *redis.Client) { n.AddHook(h) })
	r := backendtest.NewRedis(t, cc, backend.WithPrefix(backendtest.UniquePrefix()))
	rs := unwrap.Redis(r)
	s := redisstore.NewScript("return redis.call('INCR', KEYS[1])")

	// 48 tags over every master; the slot of the first, t0, will move.
	src, err := cl.MasterOf(ctx, rs.Slot("t0"))
	if err != nil {
		t.Fatal(err)
	}
	slot := rs.Slot("t0")
	tags := []string{"t0"}
	masters := map[string]bool{}
	for i := 1; len(tags) < 48; i++ {
		tag := fmt.Sprint("t", i)
		m, err := cl.MasterOf(ctx, rs.Slot(tag))
		if err != nil {
			t.Fatal(err)
		}
		masters[m.Addr] = true
		tags = append(tags, tag)
	}
	// Fresh keys in the moving slot, for the ASK phase: absent on the source.
	var fresh []string
	for i := 0; len(fresh) < 4; i++ {
		if tag := fmt.Sprint("f", i); rs.Slot(tag) == slot {
			fresh = append(fresh, tag)
		}
	}
	if len(masters) != 3 {
		t.Fatalf("tags on %d masters, want 3", len(masters))
	}
	var dst *testenv.Redis
	for _, n := range cl.Nodes {
		if n != src {
			dst = n
			break
		}
	}

	counts := map[string]int64{}
	var mu sync.Mutex
	round := func(phase string, tags []string) {
		t.Helper()
		concurrently(16, 3*len(tags), func(g, i int) {
			tag := tags[(g+i)%len(tags)]
			reply, err := rs.Run(ctx, s, []string{rs.Key(tag, "n")}, nil)
			if err != nil {
				t.Errorf("%s: %s: %v", phase, tag, err)
				return
			}
			mu.Lock()
			if n := reply.(int64); n > counts[tag] {
				counts[tag] = n
			}
			mu.Unlock()
		})
	}
	calls := map[string]int64{}
	note := func(tags []string) {
		for g := range 16 {
			for i := range 3 * len(tags) {
				calls[tags[(g+i)%len(tags)]]++
			}
		}
	}
	round("all masters", tags)
	note(tags)

	srcID, dstID := nodeID(t, src.Addr), nodeID(t, dst.Addr)
	sc, dc := redis.NewClient(&redis.Options{Addr: src.Addr}), redis.NewClient(&redis.Options{Addr: dst.Addr})
	defer sc.Close()
	defer dc.Close()
	if err := dc.Do(ctx, "CLUSTER", "SETSLOT", slot, "IMPORTING", srcID).Err(); err != nil {
		t.Fatal(err)
	}
	if err := sc.Do(ctx, "CLUSTER", "SETSLOT", slot, "MIGRATING", dstID).Err(); err != nil {
		t.Fatal(err)
	}
	// Migrating: keys still on the source are served there, fresh keys are
	// redirected with ASK to the target.
	mixed := append(append([]string{}, tags...), fresh...)
	round("migrating", mixed)
	note(mixed)
	keys, err := sc.ClusterGetKeysInSlot(ctx, slot, 1000).Result()
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) > 0 {
		host, port, _ := net.SplitHostPort(dst.Addr)
		args := []any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		if err := sc.Do(ctx, args...).Err(); err != nil {
			t.Fatalf("MIGRATE: %v", err)
		}
	}
	round("migrated", mixed)
	note(mixed)
	for _, n := range cl.Nodes {
		nc := redis.NewClient(&redis.Options{Addr: n.Addr})
		err := nc.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", dstID).Err()
		nc.Close()
		if err != nil {
			t.Fatalf("SETSLOT NODE on %s: %v", n.Addr, err)
		}
	}
	// Moved: the client's slot map still names the source, which answers
	// MOVED.
	round("moved", mixed)
	note(mixed)
	if owner, err := cl.MasterOf(ctx, slot); err != nil || owner != dst {
		t.Fatalf("slot %d owner after the move: %v %v, want %s", slot, owner, err, dst.Addr)
	}
	for tag, want := range calls {
		if counts[tag] != want {
			t.Errorf("%s (slot %d): count %d, want %d", tag, rs.Slot(tag), counts[tag], want)
		}
	}
	t.Logf("slot %d moved from %s to %s: %d ASK and %d MOVED replies followed; %d pipelines carrying %d commands",
		slot, src.Addr, dst.Addr, h.ask.Load(), h.moved.Load(), h.batches.Load(), h.inBatches.Load())
	if h.ask.Load() == 0 || h.moved.Load() == 0 {
		t.Errorf("redirections not exercised: %d ASK, %d MOVED", h.ask.Load(), h.moved.Load())
	}
	if h.batches.Load() == 0 {
		t.Error("no pipelining")
	}
}

// nodeID returns the Cluster node id of the node at addr.
func nodeID(t *testing.T, addr string) string {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	id, err := c.ClusterMyID(t.Context()).Result()
	if err != nil {
		t.Fatalf("CLUSTER MYID on %s: %v", addr, err)
	}
	return id
}

// intsScript answers an array of integers of every form a script's reply
// may hold: an integer, a Redis nil (false), an integer in a string.
var intsScript = redisstore.NewScript(`
local n = redis.call('INCR', KEYS[1])
redis.call('PEXPIRE', KEYS[1], 60000)
return {n, redis.call('GET', KEYS[1] .. ':none'), tostring(tonumber(ARGV[1]) * 3), -tonumber(ARGV[1])}`)

// evalCounter is a user's wrapper of a go-redis client that counts the
// script calls made through its own methods.
type evalCounter struct {
	*redis.Client
	calls atomic.Int64
}

func (w *evalCounter) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	w.calls.Add(1)
	return w.Client.EvalSha(ctx, sha, keys, args...)
}

func (w *evalCounter) Eval(ctx context.Context, src string, keys []string, args ...any) *redis.Cmd {
	w.calls.Add(1)
	return w.Client.Eval(ctx, src, keys, args...)
}

// TestRunIntsGoRedis: RunInts on a go-redis client (its IntSliceCmd path)
// answers what ReplyInts makes of RunArgs's reply — a nil element 0, a
// string parsed — pipelined from 32 goroutines, plain, after a SCRIPT FLUSH
// (NOSCRIPT recovery), and on a user's wrapper, whose own methods see every
// call; a reply of the wrong length is an error.
func TestRunIntsGoRedis(t *testing.T) {
	srv := testenv.SharedRedis(t)
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	defer c.Close()
	h := &scriptCounter{}
	c.AddHook(h)
	wrapper := &evalCounter{Client: redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})}
	defer wrapper.Close()
	prefix := backendtest.UniquePrefix()
	backends := map[string]*backend.Redis{
		"autopipelined": backendtest.NewRedis(t, c, backend.WithPrefix(prefix)),
		"plain":         backendtest.NewRedis(t, c, backend.WithPrefix(prefix), backend.WithoutAutoPipeline()),
		"wrapper":       backendtest.NewRedis(t, wrapper, backend.WithPrefix(prefix)),
	}
	for name, r := range backends {
		if err := c.ScriptFlush(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		concurrently(32, 40, func(g, i int) {
			key := unwrap.Redis(r).Key(fmt.Sprint(name, g), "n")
			got, err := unwrap.Redis(r).RunInts(ctx, intsScript, []string{key}, []any{i}, 4)
			if err != nil {
				t.Errorf("%s: goroutine %d call %d: %v", name, g, i, err)
				return
			}
			reply, err := unwrap.Redis(r).RunArgs(ctx, intsScript, []string{key}, []any{i})
			if err != nil {
				t.Errorf("%s: goroutine %d call %d: RunArgs: %v", name, g, i, err)
				return
			}
			want, err := redisstore.ReplyInts(reply, 4)
			if err != nil {
				t.Errorf("%s: goroutine %d call %d: %v", name, g, i, err)
				return
			}
			want[0]-- // RunArgs counted once more
			if fmt.Sprint(got) != fmt.Sprint(want) || got[0] != int64(2*i+1) || got[1] != 0 || got[2] != int64(3*i) || got[3] != int64(-i) {
				t.Errorf("%s: goroutine %d call %d: RunInts %v, ReplyInts %v", name, g, i, got, want)
			}
		})
		if _, err := unwrap.Redis(r).RunInts(ctx, intsScript, []string{unwrap.Redis(r).Key(name, "n")}, []any{1}, 3); err == nil || !strings.Contains(err.Error(), "4 elements, want 3") {
			t.Errorf("%s: a reply of 4 elements where 3 are wanted: %v", name, err)
		}
	}
	// The scripts were flushed before each of the two backends on c: each
	// ran EVAL, which runScript sends only after NOSCRIPT. (The NOSCRIPT
	// replies themselves may complete after the pipeline hook has returned,
	// so the hook's count of them is not asserted.)
	if h.evals.Load() < 2 {
		t.Errorf("NOSCRIPT recovery was not exercised on both backends (%d NOSCRIPT seen, %d EVAL)", h.noscript.Load(), h.evals.Load())
	}
	if h.maxBatch.Load() < 2 {
		t.Error("no pipelining")
	}
	if n := wrapper.calls.Load(); n < 2*32*40 {
		t.Errorf("the wrapper's methods saw %d script calls, want at least %d", n, 2*32*40)
	}
}

// TestDirectScriptsArePlain: calls of a Direct script from 32 goroutines
// reach Redis each on its own, never in an autopipelined batch, with the
// same replies; the same script not Direct is pipelined.
func TestDirectScriptsArePlain(t *testing.T) {
	srv := testenv.SharedRedis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	defer c.Close()
	h := &scriptCounter{}
	c.AddHook(h)
	r := backendtest.NewRedis(t, c, backend.WithPrefix(backendtest.UniquePrefix()))
	rs := unwrap.Redis(r)
	ctx := context.Background()
	for _, direct := range []bool{true, false} {
		s := intsScript
		if direct {
			s = intsScript.Direct()
			if s == intsScript || s.SHA1() != intsScript.SHA1() || s.Source() != intsScript.Source() {
				t.Fatal("Direct must return a copy with the same source and SHA1")
			}
		}
		before := h.inBatches.Load()
		concurrently(32, 40, func(g, i int) {
			key := rs.Key(fmt.Sprint("direct", direct, g), "n")
			got, err := rs.RunInts(ctx, s, []string{key}, []any{i}, 4)
			if err != nil || got[0] != int64(2*i+1) || got[2] != int64(3*i) {
				t.Errorf("direct=%v goroutine %d call %d: %v %v", direct, g, i, got, err)
			}
			if _, err := rs.RunArgs(ctx, s, []string{key}, []any{i}); err != nil {
				t.Errorf("direct=%v goroutine %d call %d: %v", direct, g, i, err)
			}
		})
		batched := h.inBatches.Load() - before
		t.Logf("direct=%v: %d of %d script calls in pipelines", direct, batched, 2*32*40)
		if direct && batched != 0 {
			t.Errorf("%d calls of a Direct script were pipelined", batched)
		}
		if !direct && batched == 0 {
			t.Error("no call of the script was pipelined")
		}
	}
}
