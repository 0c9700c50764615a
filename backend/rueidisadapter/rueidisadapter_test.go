package rueidisadapter

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/internal/redisstore"
	"github.com/floodgate-dev/floodgate/internal/testenv"
	"github.com/floodgate-dev/floodgate/internal/unwrap"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"
)

// startRedis starts a private redis-server (testenv.NewRedis) with extra
// redis-server arguments and returns its address; it is stopped when the
// test ends. The test fails when no server can be started, or, under -short,
// skips when redis-server is not installed.
func startRedis(t testing.TB, extra ...string) string {
	t.Helper()
	return testenv.NewRedis(t, testenv.WithArgs(extra...)).Addr
}

func newClient(t testing.TB, opt rueidis.ClientOption) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(opt)
	if err != nil {
		t.Fatalf("rueidis.NewClient: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

func newBackend(t testing.TB, c rueidis.Client, opts ...backend.Option) *backend.Redis {
	t.Helper()
	r, err := New(c, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return r
}

// protocols are the two ways rueidis talks to Redis.
var protocols = []struct {
	name  string
	resp2 bool
}{{"RESP3", false}, {"RESP2", true}}

// replyCases are scripts whose normalised replies must equal the go-redis
// adapter's over RESP2.
var replyCases = []struct {
	name, src string
	want      any
	booleans  bool // RESP3 sends Lua booleans as booleans
}{
	{"nested", `return {1, "a", {2}}`, []any{int64(1), "a", []any{int64(2)}}, false},
	{"nil", `return nil`, nil, false},
	{"int", `return 1234567890123`, int64(1234567890123), false},
	{"negative", `return -7`, int64(-7), false},
	{"bulk", `return ARGV[1]`, "x\x00y", false},
	{"status", `return redis.status_reply("OK")`, "OK", false},
	{"empty array", `return {}`, []any{}, false},
	{"true", `return true`, int64(1), true},
	{"false", `return false`, nil, true},
	{"booleans in array", `return {true, false, 3}`, []any{int64(1), nil, int64(3)}, true},
	{"call reply", `redis.call("SET", KEYS[1], "v"); return {redis.call("GET", KEYS[1]), redis.call("GET", KEYS[1] .. ":none")}`,
		[]any{"v", nil}, true}, // a Redis nil inside Lua is false
	{"deep", `return {{{{5}}}, {"b", {6, "c"}}}`,
		[]any{[]any{[]any{[]any{int64(5)}}}, []any{"b", []any{int64(6), "c"}}}, false},
}

func TestNormalise(t *testing.T) {
	addr := startRedis(t)
	ctx := context.Background()
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			r := newBackend(t, newClient(t, rueidis.ClientOption{InitAddress: []string{addr}, AlwaysRESP2: p.resp2, DisableCache: p.resp2}))
			rs := unwrap.Redis(r)
			for _, tc := range replyCases {
				got, err := rs.Run(ctx, redisstore.NewScript(tc.src), []string{rs.Key("norm", "k")}, []string{"x\x00y"})
				if err != nil {
					t.Errorf("%s: %v", tc.name, err)
					continue
				}
				if !reflect.DeepEqual(got, tc.want) {
					t.Errorf("%s: got %#v, want %#v", tc.name, got, tc.want)
				}
			}
		})
	}
}

// TestSameAsGoRedis runs the reply cases through the go-redis adapter too, to
// check that the expectations above are go-redis's. go-redis over RESP3 gives
// bool for Lua booleans, which the Scripter contract does not allow; the cases
// without booleans must agree with it too.
func TestSameAsGoRedis(t *testing.T) {
	addr := startRedis(t)
	ctx := context.Background()
	for _, proto := range []int{2, 3} {
		t.Run(fmt.Sprintf("go-redis RESP%d", proto), func(t *testing.T) {
			gc := redis.NewClient(&redis.Options{Addr: addr, Protocol: proto})
			t.Cleanup(func() { _ = gc.Close() })
			g, err := backend.NewRedis(gc)
			if err != nil {
				t.Fatal(err)
			}
			gs := unwrap.Redis(g)
			for _, tc := range replyCases {
				if proto == 3 && tc.booleans {
					continue
				}
				got, err := gs.Run(ctx, redisstore.NewScript(tc.src), []string{gs.Key("norm", "k")}, []string{"x\x00y"})
				if err != nil {
					t.Errorf("%s: %v", tc.name, err)
					continue
				}
				if !reflect.DeepEqual(got, tc.want) {
					t.Errorf("%s: go-redis gives %#v, this adapter %#v", tc.name, got, tc.want)
				}
			}

			// Error replies: the same text from both adapters.
			r := newBackend(t, newClient(t, rueidis.ClientOption{InitAddress: []string{addr}, AlwaysRESP2: proto == 2, DisableCache: proto == 2}))
			for _, src := range []string{
				`return redis.error_reply("MYERR something went wrong")`,
				`return redis.error_reply("ERR with the usual code")`,
				`return redis.error_reply("no code")`,
				`redis.call("SET", KEYS[1], "x"); return redis.call("INCR", KEYS[1])`,
				`return redis.call("NOSUCHCOMMAND")`,
				`error("raised")`,
			} {
				keys := []string{gs.Key("err", "s")}
				_, gerr := gs.Run(ctx, redisstore.NewScript(src), keys, nil)
				_, rerr := unwrap.Redis(r).Run(ctx, redisstore.NewScript(src), keys, nil)
				if gerr == nil || rerr == nil || gerr.Error() != rerr.Error() {
					t.Errorf("%s: go-redis gives error %v, this adapter %v", src, gerr, rerr)
				}
			}
		})
	}
}

func TestRESP3Types(t *testing.T) {
	addr := startRedis(t)
	ctx := context.Background()
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			r := newBackend(t, newClient(t, rueidis.ClientOption{InitAddress: []string{addr}, AlwaysRESP2: p.resp2, DisableCache: p.resp2}))
			rs := unwrap.Redis(r)
			got, err := rs.Run(ctx, redisstore.NewScript(`redis.setresp(3); return {double = 3.5}`), nil, nil)
			var want any = 3.5
			if p.resp2 {
				want = "3.5" // Redis sends a RESP3 double as a bulk string over RESP2
			}
			if err != nil || !reflect.DeepEqual(got, want) {
				t.Errorf("double: got %#v, %v; want %#v", got, err, want)
			}
			got, err = rs.Run(ctx, redisstore.NewScript(`redis.setresp(3); return {map = {b = 2, a = "x"}}`), nil, nil)
			if err != nil {
				t.Fatalf("map: %v", err)
			}
			arr, ok := got.([]any)
			if !ok || len(arr) != 4 {
				t.Fatalf("map: got %#v, want a flat array of 4", got)
			}
			pairs := map[any]any{arr[0]: arr[1], arr[2]: arr[3]}
			if want := map[any]any{"a": "x", "b": int64(2)}; !reflect.DeepEqual(pairs, want) {
				t.Errorf("map: got %#v, want the pairs %#v", got, want)
			}
			got, err = rs.Run(ctx, redisstore.NewScript(`redis.setresp(3); return {set = {z = true}}`), nil, nil)
			if want := []any{"z"}; err != nil || !reflect.DeepEqual(got, want) {
				t.Errorf("set: got %#v, %v; want %#v", got, err, want)
			}
		})
	}
}

func TestErrorReply(t *testing.T) {
	addr := startRedis(t)
	ctx := context.Background()
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			c := newClient(t, rueidis.ClientOption{InitAddress: []string{addr}, AlwaysRESP2: p.resp2, DisableCache: p.resp2})
			r := newBackend(t, c)
			rs := unwrap.Redis(r)
			s := scripter{c}

			for _, msg := range []string{"MYERR something went wrong", "ERR with the usual code"} {
				src := fmt.Sprintf(`return redis.error_reply(%q)`, msg)
				v, err := s.Eval(ctx, src, nil, nil)
				if err == nil || !strings.HasPrefix(err.Error(), msg) {
					t.Errorf("Eval %s: got %#v, %v; want an error starting with %q", src, v, err, msg)
				}
				if re, ok := rueidis.IsRedisErr(err); !ok || re.IsNil() {
					t.Errorf("Eval %s: error %T is not a *rueidis.RedisError", src, err)
				}
				_, err = rs.Run(ctx, redisstore.NewScript(src), nil, nil)
				if err == nil || !strings.HasPrefix(err.Error(), "backend: redis: "+msg) {
					t.Errorf("Run %s: got %v, want an error with text %q", src, err, msg)
				}
				var re *rueidis.RedisError
				if !errors.As(err, &re) {
					t.Errorf("Run %s: %v does not wrap a *rueidis.RedisError", src, err)
				}
			}

			// A runtime error: Redis's own text, "ERR ..." kept as go-redis keeps it.
			_, err := rs.Run(ctx, redisstore.NewScript(`redis.call("SET", KEYS[1], "x"); return redis.call("INCR", KEYS[1])`), []string{rs.Key("err", "s")}, nil)
			if err == nil || !strings.HasPrefix(err.Error(), "backend: redis: ERR ") {
				t.Errorf("INCR of a string: got %v, want an ERR reply", err)
			}

			// An error inside an array is an element, as in go-redis.
			got, err := rs.Run(ctx, redisstore.NewScript(`return {1, redis.error_reply("INNER bad")}`), nil, nil)
			arr, _ := got.([]any)
			if err != nil || len(arr) != 2 || arr[0] != int64(1) {
				t.Fatalf("nested error: got %#v, %v", got, err)
			}
			if e, ok := arr[1].(*rueidis.RedisError); !ok || !strings.HasPrefix(e.Error(), "INNER bad") {
				t.Errorf("nested error: element is %#v, want a *rueidis.RedisError INNER bad", arr[1])
			}
		})
	}
}

func TestNoScript(t *testing.T) {
	addr := startRedis(t)
	ctx := context.Background()
	c := newClient(t, rueidis.ClientOption{InitAddress: []string{addr}})
	r := newBackend(t, c)
	rs := unwrap.Redis(r)

	script := redisstore.NewScript(fmt.Sprintf("-- %d\nreturn {tonumber(ARGV[1]) + 1, KEYS[1]}", time.Now().UnixNano()))
	_, err := scripter{c}.EvalSha(ctx, script.SHA1(), []string{"k"}, []string{"1"})
	if err == nil || !strings.HasPrefix(err.Error(), "NOSCRIPT") {
		t.Fatalf("EvalSha of an unknown script: got %v, want NOSCRIPT", err)
	}
	if re, ok := rueidis.IsRedisErr(err); !ok || !re.IsNoScript() {
		t.Errorf("EvalSha of an unknown script: %#v is not a NOSCRIPT *rueidis.RedisError", err)
	}
	key := rs.Key("ns", "a")
	want := []any{int64(42), key}
	for i := 0; i < 3; i++ {
		got, err := rs.Run(ctx, script, []string{key}, []string{"41"})
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("run %d: got %#v, %v; want %#v", i, got, err, want)
		}
		if err := c.Do(ctx, c.B().ScriptFlush().Build()).Error(); err != nil {
			t.Fatalf("SCRIPT FLUSH: %v", err)
		}
	}
	// After a Run the script is cached: EVALSHA alone works.
	if _, err := rs.Run(ctx, script, []string{key}, []string{"41"}); err != nil {
		t.Fatal(err)
	}
	if got, err := (scripter{c}).EvalSha(ctx, script.SHA1(), []string{key}, []string{"41"}); err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("EvalSha after Run: got %#v, %v; want %#v", got, err, want)
	}
}

func TestConcurrent(t *testing.T) {
	addr := startRedis(t)
	ctx := context.Background()
	// One pipelining connection, so that the connection count below shows
	// whether any script went on a dedicated connection instead.
	c := newClient(t, rueidis.ClientOption{InitAddress: []string{addr}, PipelineMultiplex: -1})
	r := newBackend(t, c)
	rs := unwrap.Redis(r)
	script := redisstore.NewScript(`local n = redis.call("INCRBY", KEYS[1], ARGV[1]); return {tonumber(ARGV[1]) * 2, ARGV[1], KEYS[1], n}`)
	counter := rs.Key("conc", "n")
	if err := c.Do(ctx, c.B().ScriptFlush().Build()).Error(); err != nil {
		t.Fatal(err)
	}

	const workers, calls = 64, 200
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	start := make(chan struct{})
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for i := 0; i < calls; i++ {
				n := w*calls + i + 1
				arg := strconv.Itoa(n)
				got, err := rs.Run(ctx, script, []string{counter}, []string{arg})
				if err != nil {
					errs <- fmt.Errorf("worker %d call %d: %v", w, i, err)
					return
				}
				arr, ok := got.([]any)
				if !ok || len(arr) != 4 || arr[0] != int64(2*n) || arr[1] != arg || arr[2] != counter {
					errs <- fmt.Errorf("worker %d call %d: got %#v", w, i, got)
					return
				}
				if _, ok := arr[3].(int64); !ok {
					errs <- fmt.Errorf("worker %d call %d: counter %#v is not an int64", w, i, arr[3])
					return
				}
			}
		}()
	}
	close(start)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	total := workers * calls
	wantSum := strconv.Itoa(total * (total + 1) / 2)
	if got, err := c.Do(ctx, c.B().Get().Key(counter).Build()).ToString(); err != nil || got != wantSum {
		t.Errorf("counter = %q, %v; want %s", got, err, wantSum)
	}

	list, err := c.Do(ctx, c.B().ClientList().Build()).ToString()
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(strings.TrimSpace(list), "\n") + 1; n != 1 {
		t.Errorf("%d client connections after %d concurrent script calls, want the 1 pipelining connection:\n%s", n, total, list)
	}
}

func TestCommandsArePipelined(t *testing.T) {
	addr := startRedis(t)
	s := scripter{newClient(t, rueidis.ClientOption{InitAddress: []string{addr}})}
	sha, err := s.evalSha("0123456789012345678901234567890123456789", []string{"k1", "k2"}, []string{"a"})
	if err != nil {
		t.Fatal(err)
	}
	ev, err := s.eval("return 1", []string{"k1"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for name, cmd := range map[string]rueidis.Completed{"EVALSHA": sha, "EVAL": ev} {
		if cmd.IsBlock() {
			t.Errorf("%s is marked blocking: rueidis would send it on a dedicated connection", name)
		}
	}
	if got, want := sha.Commands(), []string{"EVALSHA", "0123456789012345678901234567890123456789", "2", "k1", "k2", "a"}; !reflect.DeepEqual(got, want) {
		t.Errorf("EVALSHA command = %q, want %q", got, want)
	}
	if got, want := ev.Commands(), []string{"EVAL", "return 1", "1", "k1"}; !reflect.DeepEqual(got, want) {
		t.Errorf("EVAL command = %q, want %q", got, want)
	}
}

func TestNew(t *testing.T) {
	addr := startRedis(t)
	c := newClient(t, rueidis.ClientOption{InitAddress: []string{addr}})
	r := newBackend(t, c, backend.WithPrefix("x"))
	rs := unwrap.Redis(r)
	if got, want := rs.Key("user{1}", "tokens"), "x:{user%7B1%7D}:tokens"; got != want {
		t.Errorf("Key = %q, want %q", got, want)
	}
	if rs.Prefix() != "x" || rs.NowArg() != "" {
		t.Errorf("Prefix = %q, NowArg = %q; want x and \"\"", rs.Prefix(), rs.NowArg())
	}
	if _, err := New(c, backend.WithPrefix("a{b")); err == nil {
		t.Error("New accepted a prefix with a brace")
	}
	if _, err := New(nil); err == nil {
		t.Error("New accepted a nil client")
	}
	if got := unwrap.Redis(newBackend(t, c)).Key("k", "s"); got != "fg:{k}:s" {
		t.Errorf("default Key = %q", got)
	}
}

func TestCanceledContext(t *testing.T) {
	addr := startRedis(t)
	r := newBackend(t, newClient(t, rueidis.ClientOption{InitAddress: []string{addr}}))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := unwrap.Redis(r).Run(ctx, redisstore.NewScript(`return 1`), nil, nil)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Run with a canceled context: got %v, want context.Canceled", err)
	}
}

func TestCluster(t *testing.T) {
	srv := testenv.NewRedis(t, testenv.WithArgs("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"))
	addr := srv.Addr
	if _, err := srv.Do(t.Context(), "CLUSTER", "ADDSLOTSRANGE", "0", "16383"); err != nil {
		t.Fatalf("CLUSTER ADDSLOTSRANGE: %v", err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		reply, err := srv.Do(t.Context(), "CLUSTER", "INFO")
		info, _ := reply.(string)
		if err == nil && strings.Contains(info, "cluster_state:ok") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("cluster did not become ok: %q, %v", info, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	ctx := context.Background()
	c := newClient(t, rueidis.ClientOption{InitAddress: []string{addr}})
	if c.Mode() != rueidis.ClientModeCluster {
		t.Fatalf("client mode %q, want cluster", c.Mode())
	}
	r := newBackend(t, c)
	rs := unwrap.Redis(r)
	script := redisstore.NewScript(`redis.call("SET", KEYS[1], ARGV[1]); redis.call("SET", KEYS[2], ARGV[1]); return {redis.call("GET", KEYS[1]), #KEYS}`)
	got, err := rs.Run(ctx, script, []string{rs.Key("u", "a"), rs.Key("u", "b")}, []string{"v"})
	if want := []any{"v", int64(2)}; err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("cluster Run: got %#v, %v; want %#v", got, err, want)
	}
	// Keys in different slots: an error, as go-redis gets CROSSSLOT, not a panic.
	_, err = rs.Run(ctx, script, []string{rs.Key("u1", "a"), rs.Key("u2", "a")}, []string{"v"})
	if err == nil || !strings.Contains(err.Error(), "CROSSSLOT") {
		t.Errorf("cross-slot Run: got %v, want a CROSSSLOT error", err)
	}
}

// BenchmarkRun measures one decision-sized script call from 32 goroutines per
// CPU, so that auto-pipelining batches them; compare with BenchmarkRunGoRedis.
func BenchmarkRun(b *testing.B) {
	addr := startRedis(b)
	r := newBackend(b, newClient(b, rueidis.ClientOption{InitAddress: []string{addr}}))
	benchRun(b, r)
}

// BenchmarkRunGoRedis is BenchmarkRun through the go-redis adapter.
func BenchmarkRunGoRedis(b *testing.B) {
	addr := startRedis(b)
	gc := redis.NewClient(&redis.Options{Addr: addr})
	b.Cleanup(func() { _ = gc.Close() })
	r, err := backend.NewRedis(gc)
	if err != nil {
		b.Fatal(err)
	}
	benchRun(b, r)
}

func benchRun(b *testing.B, r *backend.Redis) {
	ctx := context.Background()
	script := redisstore.NewScript(`return {1, tonumber(ARGV[1]), 1000000}`)
	keys := []string{unwrap.Redis(r).Key("bench", "tokens"), unwrap.Redis(r).Key("bench", "ts")}
	args := []string{"10", "1", "1700000000000000"}
	if _, err := unwrap.Redis(r).Run(ctx, script, keys, args); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.SetParallelism(32)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := unwrap.Redis(r).Run(ctx, script, keys, args); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// TestRunIntsSameAsGoRedis: Store.RunInts through this adapter's
// IntsScripter fast path gives what the go-redis adapter's generic path
// (RunArgs then ReplyInts) gives: integers, nil elements as 0, integer
// strings parsed; errors and wrong lengths alike.
func TestRunIntsSameAsGoRedis(t *testing.T) {
	addr := startRedis(t)
	ctx := context.Background()
	gc := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = gc.Close() })
	g, err := backend.NewRedis(gc)
	if err != nil {
		t.Fatal(err)
	}
	gs := unwrap.Redis(g)
	for _, proto := range []int{2, 3} {
		r := newBackend(t, newClient(t, rueidis.ClientOption{InitAddress: []string{addr}, AlwaysRESP2: proto == 2, DisableCache: proto == 2}))
		for _, tc := range []struct {
			src  string
			want int
			ok   bool
		}{
			{`return {1, -2, 3000000000000}`, 3, true},
			{`return {tonumber(ARGV[1]), false, "42"}`, 3, true},
			{`return {1, 2}`, 3, false},
			{`return {1, "x"}`, -1, false},
			{`return redis.error_reply("MYERR nope")`, -1, false},
		} {
			s := redisstore.NewScript(tc.src)
			keys, args := []string{gs.Key("ints", "k")}, []any{int64(7)}
			gi, gerr := gs.RunInts(ctx, s, keys, args, tc.want)
			ri, rerr := unwrap.Redis(r).RunInts(ctx, s, keys, args, tc.want)
			if (gerr == nil) != tc.ok || (rerr == nil) != tc.ok {
				t.Errorf("RESP%d %s: go-redis %v %v, rueidis %v %v; want ok %v", proto, tc.src, gi, gerr, ri, rerr, tc.ok)
				continue
			}
			if tc.ok && !reflect.DeepEqual(gi, ri) {
				t.Errorf("RESP%d %s: go-redis %v, rueidis %v", proto, tc.src, gi, ri)
			}
		}
	}
}

// TestRestartedServer kills and restarts Redis between two calls, with no
// call in between: the connection the first call used is closed by then,
// and rueidis notices only when the next call is sent on it. That call must
// still be answered (resent once on a new connection), as it is on go-redis,
// whose pool checks a connection before reusing it. Every kind of call is
// tried: plain replies, integer replies, EVAL after NOSCRIPT.
func TestRestartedServer(t *testing.T) {
	srv := testenv.NewRedis(t)
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			c := newClient(t, rueidis.ClientOption{InitAddress: []string{srv.Addr}, AlwaysRESP2: p.resp2, DisableCache: true})
			r := unwrap.Redis(newBackend(t, c))
			script := redisstore.NewScript(`return {1, 2}`)
			ctx := context.Background()
			for i := range 3 {
				if _, err := r.Run(ctx, script, nil, nil); err != nil {
					t.Fatalf("call %d before the restart: %v", i, err)
				}
				if _, err := r.RunInts(ctx, script, nil, nil, 2); err != nil {
					t.Fatalf("integer call %d before the restart: %v", i, err)
				}
				if err := srv.Kill(); err != nil {
					t.Fatal(err)
				}
				if err := srv.Restart(); err != nil {
					t.Fatal(err)
				}
				// The restarted server has no scripts: EVALSHA gets
				// NOSCRIPT after the resend, then EVAL runs it.
				if i%2 == 0 {
					v, err := r.Run(ctx, script, nil, nil)
					if err != nil || !reflect.DeepEqual(v, []any{int64(1), int64(2)}) {
						t.Fatalf("call %d after the restart: %v, %v; want [1 2]", i, v, err)
					}
				} else {
					v, err := r.RunInts(ctx, script, nil, nil, 2)
					if err != nil || !reflect.DeepEqual(v, []int64{1, 2}) {
						t.Fatalf("integer call %d after the restart: %v, %v; want [1 2]", i, v, err)
					}
				}
			}
		})
	}
}
