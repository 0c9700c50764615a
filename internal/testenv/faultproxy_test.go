package testenv_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/floodgate-dev/floodgate/internal/testenv"
)

// proxied returns a go-redis client that talks to the server through p,
// with the given MaxRetries (-1: none), closed by t.Cleanup.
func proxied(t *testing.T, p *testenv.Proxy, maxRetries int) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{
		Addr:                  p.Addr(),
		MaxRetries:            maxRetries,
		ContextTimeoutEnabled: true,
		DialTimeout:           2 * time.Second,
		ReadTimeout:           5 * time.Second,
	})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// dialRaw opens a plain TCP connection to addr that gives up after 10 s.
func dialRaw(t *testing.T, addr string) net.Conn {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	if err := conn.SetDeadline(time.Now().Add(10 * time.Second)); err != nil {
		t.Fatal(err)
	}
	return conn
}

// command encodes a command in RESP.
func command(args ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	return b.String()
}

// expectLine reads one line from br and fails the test unless it is want
// (without CR LF).
func expectLine(t *testing.T, br *bufio.Reader, want string) {
	t.Helper()
	line, err := br.ReadString('\n')
	if got := strings.TrimSuffix(line, "\r\n"); err != nil || got != want {
		t.Fatalf("read %q, %v; want %q", got, err, want)
	}
}

// readToEnd reads until the connection ends and returns what arrived; an
// end by reset counts like EOF, a timeout fails the test.
func readToEnd(t *testing.T, r io.Reader) string {
	t.Helper()
	b, err := io.ReadAll(r)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("connection still open after %d bytes: %v", len(b), err)
	}
	return string(b)
}

// proxyGoroutines returns the stacks of the goroutines running the proxy's
// code, waiting up to a second for them to be gone (a goroutine that has
// signalled its end to Close may still be returning, as goleak allows for).
func proxyGoroutines() []string {
	deadline := time.Now().Add(time.Second)
	for {
		g := proxyStacks()
		if len(g) == 0 || time.Now().After(deadline) {
			return g
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// proxyStacks returns the stacks of the goroutines running the proxy's code
// now.
func proxyStacks() []string {
	buf := make([]byte, 1<<20)
	buf = buf[:runtime.Stack(buf, true)]
	var found []string
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		if strings.Contains(g, "testenv.(*Proxy)") || strings.Contains(g, "testenv.(*proxyConn)") {
			found = append(found, g)
		}
	}
	return found
}

func TestProxyForwards(t *testing.T) {
	r := testenv.NewRedis(t)
	p := testenv.NewProxy(t, r.Addr)
	if p.Addr() == r.Addr || !strings.HasPrefix(p.Addr(), "127.0.0.1:") {
		t.Fatalf("proxy Addr %q (target %s)", p.Addr(), r.Addr)
	}
	ctx := ctxTimeout(t, 10*time.Second)
	c := proxied(t, p, -1)
	if err := c.Set(ctx, "proxy:fwd", "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	if got, err := client(t, r).Get(ctx, "proxy:fwd").Result(); err != nil || got != "v" {
		t.Fatalf("direct GET = %q, %v; want v", got, err)
	}
	if p.Lost() != 0 {
		t.Fatalf("Lost = %d with no faults", p.Lost())
	}
}

func TestProxySetDelay(t *testing.T) {
	r := testenv.NewRedis(t)
	p := testenv.NewProxy(t, r.Addr)
	ctx := ctxTimeout(t, 20*time.Second)
	c := proxied(t, p, -1)
	big := strings.Repeat("d", 1<<20)
	if err := client(t, r).Set(ctx, "proxy:delay:big", big, 0).Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.Ping(ctx).Err(); err != nil { // connect before timing
		t.Fatal(err)
	}
	const d = 300 * time.Millisecond
	p.SetDelay(d)
	start := time.Now()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < d || el > d+2*time.Second {
		t.Fatalf("PING with delay %v took %v", d, el)
	}
	// Latency, not a per-chunk throttle: a reply of ~32 chunks is d late,
	// not 32 d.
	start = time.Now()
	got, err := c.Get(ctx, "proxy:delay:big").Result()
	if err != nil || got != big {
		t.Fatalf("GET of 1 MiB through the delay: %d bytes, %v", len(got), err)
	}
	if el := time.Since(start); el < d || el > 4*d {
		t.Fatalf("1 MiB GET with delay %v took %v", d, el)
	}
	p.SetDelay(0)
	start = time.Now()
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el >= d {
		t.Fatalf("PING after SetDelay(0) took %v", el)
	}
}

func TestProxyStallResume(t *testing.T) {
	r := testenv.NewRedis(t)
	p := testenv.NewProxy(t, r.Addr)
	ctx := ctxTimeout(t, 20*time.Second)
	direct := client(t, r)
	c := proxied(t, p, -1)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	raw := dialRaw(t, p.Addr())
	br := bufio.NewReader(raw)
	if _, err := io.WriteString(raw, command("PING")); err != nil {
		t.Fatal(err)
	}
	expectLine(t, br, "+PONG")

	p.Stall()
	set := make(chan error, 1)
	go func() { set <- c.Set(ctx, "proxy:stall", "v", 0).Err() }()
	// Three commands in three writes on one connection: held, then applied
	// and answered in order.
	for _, s := range []string{"a", "b", "c"} {
		if _, err := io.WriteString(raw, command("APPEND", "proxy:stall:order", s)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// A new connection is accepted but held too.
	late := proxied(t, p, -1)
	ping := make(chan error, 1)
	go func() { ping <- late.Ping(ctx).Err() }()

	time.Sleep(300 * time.Millisecond)
	select {
	case err := <-set:
		t.Fatalf("SET returned during the stall: %v", err)
	case err := <-ping:
		t.Fatalf("PING on a new connection returned during the stall: %v", err)
	default:
	}
	if n, err := direct.Exists(ctx, "proxy:stall", "proxy:stall:order").Result(); err != nil || n != 0 {
		t.Fatalf("EXISTS during the stall = %d, %v; want 0: the commands must be held", n, err)
	}

	p.Resume()
	if err := <-set; err != nil {
		t.Fatalf("SET after Resume: %v", err)
	}
	if err := <-ping; err != nil {
		t.Fatalf("PING after Resume: %v", err)
	}
	if got, err := direct.Get(ctx, "proxy:stall").Result(); err != nil || got != "v" {
		t.Fatalf("GET after Resume = %q, %v; want v", got, err)
	}
	for _, want := range []string{":1", ":2", ":3"} {
		expectLine(t, br, want)
	}
	if got, err := direct.Get(ctx, "proxy:stall:order").Result(); err != nil || got != "abc" {
		t.Fatalf("APPENDs applied as %q, %v; want abc", got, err)
	}
}

// LoseNextReplies(1) on an INCR: the command runs, the client gets an error.
func TestProxyLoseNextReplies(t *testing.T) {
	r := testenv.NewRedis(t)
	p := testenv.NewProxy(t, r.Addr)
	ctx := ctxTimeout(t, 10*time.Second)
	c := proxied(t, p, -1)
	if err := c.Ping(ctx).Err(); err != nil { // the handshake's replies are not the ones to lose
		t.Fatal(err)
	}
	p.LoseNextReplies(1)
	if n, err := c.Incr(ctx, "proxy:lose:n").Result(); err == nil {
		t.Fatalf("INCR whose reply was lost returned %d, no error", n)
	}
	if !p.WaitLost(1, 5*time.Second) || p.Lost() != 1 {
		t.Fatalf("Lost = %d, want 1", p.Lost())
	}
	if got, err := client(t, r).Get(ctx, "proxy:lose:n").Int(); err != nil || got != 1 {
		t.Fatalf("counter = %d, %v; want 1: the INCR ran", got, err)
	}
	// Only one: the client reconnects and the next replies arrive.
	if n, err := c.Incr(ctx, "proxy:lose:n").Result(); err != nil || n != 2 {
		t.Fatalf("next INCR = %d, %v; want 2", n, err)
	}
	if p.Lost() != 1 {
		t.Fatalf("Lost = %d after a normal command, want 1", p.Lost())
	}
}

// The bug class of issue 13: go-redis retries a command whose reply was
// lost, so a non-idempotent INCR runs twice and the caller sees 2.
func TestProxyLostReplyRetryRunsTwice(t *testing.T) {
	r := testenv.NewRedis(t)
	p := testenv.NewProxy(t, r.Addr)
	ctx := ctxTimeout(t, 10*time.Second)
	c := proxied(t, p, 3)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	p.LoseNextReplies(1)
	n, err := c.Incr(ctx, "proxy:retry:n").Result()
	if err != nil {
		t.Fatalf("INCR with retries: %v", err)
	}
	got, gerr := client(t, r).Get(ctx, "proxy:retry:n").Int()
	if n != 2 || gerr != nil || got != 2 {
		t.Fatalf("one INCR with MaxRetries 3 returned %d and left the counter at %d (%v); want 2 and 2: the lost reply's retry ran it again", n, got, gerr)
	}
	if p.Lost() != 1 {
		t.Fatalf("Lost = %d, want 1", p.Lost())
	}
}

// LoseNextRepliesTo loses only the replies to the named commands, so it
// needs no warm-up: a new connection's handshake and the other commands pass.
func TestProxyLoseNextRepliesTo(t *testing.T) {
	r := testenv.NewRedis(t)
	p := testenv.NewProxy(t, r.Addr)
	ctx := ctxTimeout(t, 10*time.Second)
	direct := client(t, r)
	incr := redis.NewScript(`return redis.call('INCR', KEYS[1])`)
	if err := incr.Load(ctx, direct).Err(); err != nil {
		t.Fatal(err)
	}

	c := proxied(t, p, -1) // no connection yet: HELLO goes first
	p.LoseNextRepliesTo(1, "evalsha")
	if err := c.Set(ctx, "proxy:to:other", "x", 0).Err(); err != nil {
		t.Fatalf("SET (not named) lost: %v", err)
	}
	if n, err := incr.EvalSha(ctx, c, []string{"proxy:to:n"}).Int(); err == nil {
		t.Fatalf("EVALSHA whose reply was lost returned %d, no error", n)
	}
	if !p.WaitLost(1, 5*time.Second) {
		t.Fatalf("Lost = %d, want 1", p.Lost())
	}
	if got, err := direct.Get(ctx, "proxy:to:n").Int(); err != nil || got != 1 {
		t.Fatalf("counter = %d, %v; want 1: the script ran", got, err)
	}

	// Pipelined: the reply before arrives, the named one and the rest are
	// lost with the connection.
	raw := dialRaw(t, p.Addr())
	p.LoseNextRepliesTo(1, "INCR")
	if _, err := io.WriteString(raw, command("SET", "proxy:to:k", "1")+command("INCR", "proxy:to:k")+command("GET", "proxy:to:k")); err != nil {
		t.Fatal(err)
	}
	if got := readToEnd(t, raw); got != "+OK\r\n" {
		t.Fatalf("pipeline read %q, want only +OK", got)
	}
	if !p.WaitLost(2, 5*time.Second) || p.Lost() != 2 {
		t.Fatalf("Lost = %d, want 2", p.Lost())
	}
	if got, err := direct.Get(ctx, "proxy:to:k").Result(); err != nil || got != "2" {
		t.Fatalf("proxy:to:k = %q, %v; want 2: INCR ran", got, err)
	}
}

// The same through rueidis (RESP3, client-side caching on, pipelined
// handshake): an invalidation push is not a reply, and a lost INCR reply is
// an error while the INCR ran; rueidis does not retry it.
func TestProxyLoseReplyRueidis(t *testing.T) {
	r := testenv.NewRedis(t)
	p := testenv.NewProxy(t, r.Addr)
	ctx := ctxTimeout(t, 10*time.Second)
	invalidated := make(chan struct{}, 1)
	c, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress:           []string{p.Addr()},
		DisableAutoPipelining: true,
		OnInvalidations: func([]rueidis.RedisMessage) {
			select {
			case invalidated <- struct{}{}:
			default:
			}
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// Cache a key, then change it: the server pushes an invalidation,
	// which must not take the loss meant for the next reply.
	if err := c.DoCache(ctx, c.B().Get().Key("proxy:rue:c").Cache(), time.Minute).Error(); !rueidis.IsRedisNil(err) {
		t.Fatalf("cached GET: %v", err)
	}
	p.LoseNextReplies(1)
	if err := client(t, r).Set(ctx, "proxy:rue:c", "1", 0).Err(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-invalidated:
	case <-ctx.Done():
		t.Fatalf("no invalidation push arrived (lost %d)", p.Lost())
	}
	if p.Lost() != 0 {
		t.Fatalf("Lost = %d: a push was taken for a reply", p.Lost())
	}
	// Do may open a connection of its own, whose handshake is not to be lost.
	p.LoseNextRepliesTo(1, "INCR")
	if n, err := c.Do(ctx, c.B().Incr().Key("proxy:rue:n").Build()).AsInt64(); err == nil {
		t.Fatalf("INCR whose reply was lost returned %d, no error", n)
	}
	if !p.WaitLost(1, 5*time.Second) {
		t.Fatalf("Lost = %d, want 1", p.Lost())
	}
	if got, err := client(t, r).Get(ctx, "proxy:rue:n").Int(); err != nil || got != 1 {
		t.Fatalf("counter = %d, %v; want 1", got, err)
	}
	if n, err := c.Do(ctx, c.B().Incr().Key("proxy:rue:n").Build()).AsInt64(); err != nil || n != 2 {
		t.Fatalf("next INCR = %d, %v; want 2 after reconnecting", n, err)
	}
}

// A stream that is not RESP has no replies to lose: it passes whole.
func TestProxyLoseRepliesNotRESP(t *testing.T) {
	addr, accepted := fakeServer(t)
	p := testenv.NewProxy(t, addr)
	p.LoseNextReplies(1)
	raw := dialRaw(t, p.Addr())
	srv, ok := <-accepted
	if !ok {
		t.Fatal("fake server accepted nothing")
	}
	const msg = "\x00\x00\x00\x05hello*1\r\n+x\r\n"
	if _, err := io.WriteString(srv, msg); err != nil {
		t.Fatal(err)
	}
	_ = srv.Close()
	if got := readToEnd(t, raw); got != msg {
		t.Fatalf("read %q, want %q", got, msg)
	}
	if p.Lost() != 0 {
		t.Fatalf("Lost = %d on a stream that is not RESP", p.Lost())
	}
}

// A reply of many TCP chunks is lost whole: the client gets none of it.
func TestProxyLoseLargeReply(t *testing.T) {
	r := testenv.NewRedis(t)
	p := testenv.NewProxy(t, r.Addr)
	ctx := ctxTimeout(t, 10*time.Second)
	if err := client(t, r).Set(ctx, "proxy:large", strings.Repeat("L", 1<<20), 0).Err(); err != nil {
		t.Fatal(err)
	}
	raw := dialRaw(t, p.Addr())
	br := bufio.NewReader(raw)
	if _, err := io.WriteString(raw, command("PING")); err != nil {
		t.Fatal(err)
	}
	expectLine(t, br, "+PONG")
	p.LoseNextReplies(1)
	if _, err := io.WriteString(raw, command("GET", "proxy:large")); err != nil {
		t.Fatal(err)
	}
	if got := readToEnd(t, br); got != "" {
		t.Fatalf("client got %d bytes of the lost reply (%.20q...)", len(got), got)
	}
	if !p.WaitLost(1, 5*time.Second) {
		t.Fatalf("Lost = %d, want 1", p.Lost())
	}
}

// fakeServer accepts one connection and hands it to the test.
func fakeServer(t *testing.T) (addr string, accepted <-chan net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ln.Close() })
	ch := make(chan net.Conn, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			close(ch)
			return
		}
		ch <- conn
	}()
	return ln.Addr().String(), ch
}

// Replies before the lost one arrive, a RESP3 push is not a reply, a reply
// split across writes is lost whole, and what follows it on the connection
// is lost with it.
func TestProxyLoseReplyBoundaries(t *testing.T) {
	addr, accepted := fakeServer(t)
	p := testenv.NewProxy(t, addr)
	raw := dialRaw(t, p.Addr())
	srv, ok := <-accepted
	if !ok {
		t.Fatal("fake server accepted nothing")
	}
	defer srv.Close()
	br := bufio.NewReader(raw)
	if _, err := io.WriteString(srv, "+first\r\n"); err != nil {
		t.Fatal(err)
	}
	expectLine(t, br, "+first")

	p.LoseNextReplies(1)
	const push = ">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$2\r\nhi\r\n"
	for _, part := range []string{push + "*2\r\n$10\r\n01234", "56789\r\n:7", "\r\n+after\r\n"} {
		if _, err := io.WriteString(srv, part); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if got := readToEnd(t, br); got != push {
		t.Fatalf("client got %q, want only the push %q", got, push)
	}
	if !p.WaitLost(1, 5*time.Second) || p.Lost() != 1 {
		t.Fatalf("Lost = %d, want 1", p.Lost())
	}
	// The server side is closed too.
	_ = srv.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := srv.Read(make([]byte, 1)); !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) && !strings.Contains(err.Error(), "reset") {
		t.Fatalf("server side after the loss: %v, want EOF", err)
	}
}

func TestProxyLoseNextChunks(t *testing.T) {
	r := testenv.NewRedis(t)
	p := testenv.NewProxy(t, r.Addr)
	ctx := ctxTimeout(t, 10*time.Second)
	c := proxied(t, p, -1)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	p.LoseNextChunks(1)
	if err := c.Incr(ctx, "proxy:chunks:n").Err(); err == nil {
		t.Fatal("INCR whose reply chunk was lost succeeded")
	}
	if !p.WaitLost(1, 5*time.Second) {
		t.Fatalf("Lost = %d, want 1", p.Lost())
	}
	if got, err := client(t, r).Get(ctx, "proxy:chunks:n").Int(); err != nil || got != 1 {
		t.Fatalf("counter = %d, %v; want 1", got, err)
	}
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after the lost chunk: %v", err)
	}
}

func TestProxyCutAll(t *testing.T) {
	r := testenv.NewRedis(t)
	p := testenv.NewProxy(t, r.Addr)
	ctx := ctxTimeout(t, 10*time.Second)
	blocked := proxied(t, p, -1)
	c := proxied(t, p, 3)
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	raw := dialRaw(t, p.Addr())
	blpop := make(chan error, 1)
	go func() { blpop <- blocked.BLPop(ctx, 0, "proxy:cut:nothing").Err() }()
	time.Sleep(100 * time.Millisecond) // let BLPOP reach the server

	start := time.Now()
	p.CutAll()
	if err := <-blpop; err == nil {
		t.Fatal("BLPOP on a cut connection succeeded")
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("BLPOP took %v to notice the cut", el)
	}
	if got := readToEnd(t, raw); got != "" {
		t.Fatalf("cut raw connection read %q", got)
	}
	// Clients reconnect through the proxy.
	if err := c.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after CutAll: %v", err)
	}
	if err := blocked.Ping(ctx).Err(); err != nil {
		t.Fatalf("second client's PING after CutAll: %v", err)
	}
	if p.Lost() != 0 {
		t.Fatalf("Lost = %d after CutAll, want 0: a cut is not a lost reply", p.Lost())
	}
}

func TestProxyRefuse(t *testing.T) {
	r := testenv.NewRedis(t)
	p := testenv.NewProxy(t, r.Addr)
	ctx := ctxTimeout(t, 10*time.Second)
	open := dialRaw(t, p.Addr())
	br := bufio.NewReader(open)
	if _, err := io.WriteString(open, command("PING")); err != nil {
		t.Fatal(err)
	}
	expectLine(t, br, "+PONG")

	p.Refuse(true)
	refused := dialRaw(t, p.Addr())
	if got := readToEnd(t, refused); got != "" {
		t.Fatalf("refused connection read %q", got)
	}
	if err := proxied(t, p, -1).Ping(ctx).Err(); err == nil {
		t.Fatal("PING through a refusing proxy succeeded")
	}
	// A connection opened before is left alone.
	if _, err := io.WriteString(open, command("PING")); err != nil {
		t.Fatal(err)
	}
	expectLine(t, br, "+PONG")

	p.Refuse(false)
	if err := proxied(t, p, -1).Ping(ctx).Err(); err != nil {
		t.Fatalf("PING after Refuse(false): %v", err)
	}
}

// A target that cannot be reached: the client is disconnected.
func TestProxyTargetDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	p := testenv.NewProxy(t, addr)
	raw := dialRaw(t, p.Addr())
	if got := readToEnd(t, raw); got != "" {
		t.Fatalf("read %q through a proxy to nothing", got)
	}
}

// Close ends every goroutine of the proxy, whatever its connections were
// doing: stalled with data held, delayed, blocked, or idle.
func TestProxyCloseLeavesNoGoroutines(t *testing.T) {
	r := testenv.NewRedis(t)
	if g := proxyGoroutines(); len(g) != 0 {
		t.Fatalf("proxy goroutines before the test:\n%s", strings.Join(g, "\n\n"))
	}
	p, err := testenv.StartProxy(r.Addr)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx := ctxTimeout(t, 10*time.Second)
	idle := proxied(t, p, -1)
	if err := idle.Ping(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	blocked := proxied(t, p, -1)
	go func() { _ = blocked.BLPop(ctx, 0, "proxy:close:nothing").Err() }()
	p.SetDelay(time.Hour)
	delayed := dialRaw(t, p.Addr())
	if _, err := io.WriteString(delayed, command("PING")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	p.Stall()
	stalled := dialRaw(t, p.Addr())
	if _, err := io.WriteString(stalled, command("SET", "proxy:close:held", "v")); err != nil {
		t.Fatal(err)
	}
	p.LoseNextReplies(5)
	time.Sleep(100 * time.Millisecond)
	if n := len(proxyStacks()); n < 5 {
		t.Fatalf("only %d proxy goroutines with 4 connections open", n)
	}

	start := time.Now()
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Fatalf("Close took %v", el)
	}
	if g := proxyGoroutines(); len(g) != 0 {
		t.Fatalf("%d proxy goroutines after Close:\n%s", len(g), strings.Join(g, "\n\n"))
	}
	if got := readToEnd(t, stalled); got != "" {
		t.Fatalf("stalled connection read %q after Close", got)
	}
	if conn, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		conn.Close()
		t.Fatal("proxy still accepts after Close")
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if n, err := client(t, r).Exists(ctx, "proxy:close:held").Result(); err != nil || n != 0 {
		t.Fatalf("EXISTS of a SET held when the proxy closed = %d, %v; want 0", n, err)
	}
}

// The proxy serves many clients at once with faults switched on and off
// under them (for the race detector).
func TestProxyConcurrentUse(t *testing.T) {
	r := testenv.NewRedis(t)
	p := testenv.NewProxy(t, r.Addr)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c := proxied(t, p, 5)
	done := make(chan struct{})
	errs := make(chan error, 8)
	for i := range 8 {
		go func() {
			for j := 0; ; j++ {
				select {
				case <-done:
					errs <- nil
					return
				default:
				}
				if err := c.Set(ctx, fmt.Sprintf("proxy:conc:%d", i), j, 0).Err(); err != nil && ctx.Err() != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for range 20 {
		p.SetDelay(time.Millisecond)
		p.Stall()
		time.Sleep(5 * time.Millisecond)
		p.Resume()
		p.LoseNextReplies(1)
		p.LoseNextChunks(1)
		time.Sleep(5 * time.Millisecond)
		p.CutAll()
		p.SetDelay(0)
		_ = p.Lost()
	}
	close(done)
	for range 8 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
