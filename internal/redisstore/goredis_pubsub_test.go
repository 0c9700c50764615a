package redisstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/internal/testenv"
)

// message is one call of deliver.
type message struct{ channel, payload string }

// protocols are the two ways go-redis talks to Redis.
var protocols = []struct {
	name     string
	protocol int
}{{"RESP3", 3}, {"RESP2", 2}}

// newGoRedis returns a go-redis client for addr speaking protocol, closed
// when the test ends.
func newGoRedis(t *testing.T, addr string, protocol int) *redis.Client {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, Protocol: protocol})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// openPubSub opens the go-redis adapter's pub/sub connection on c, closed
// when the test ends; every message delivered goes to the returned channel.
func openPubSub(t *testing.T, c redis.UniversalClient) (PubSubConn, <-chan message) {
	t.Helper()
	msgs := make(chan message, 1024)
	s, _ := GoRedis(c, false)
	ps, err := s.(PubSubber).OpenPubSub(t.Context(), func(channel, payload string) {
		msgs <- message{channel, payload}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ps.Close() })
	return ps, msgs
}

// publish sends PUBLISH through pub and returns how many subscribers Redis
// counted.
func publish(t *testing.T, pub redis.UniversalClient, channel, payload string) int64 {
	t.Helper()
	n, err := pub.Publish(context.Background(), channel, payload).Result()
	if err != nil {
		t.Fatalf("PUBLISH %s: %v", channel, err)
	}
	return n
}

// receive returns the next message, failing the test after 5s.
func receive(t *testing.T, msgs <-chan message, what string) message {
	t.Helper()
	select {
	case m := <-msgs:
		return m
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: no message after 5s", what)
		return message{}
	}
}

// TestGoRedisSubscribeConfirmed: once Subscribe has returned, Redis has the
// subscription, so a PUBLISH right after it, from another client, reaches
// it. Before the fix go-redis's Subscribe only wrote SUBSCRIBE, and most
// rounds failed: the PUBLISH reached no subscriber (a lock waiter's missed
// wake-up, docs/locks.md "Wake-ups").
func TestGoRedisSubscribeConfirmed(t *testing.T) {
	srv := testenv.NewRedis(t)
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			ps, msgs := openPubSub(t, newGoRedis(t, srv.Addr, p.protocol))
			pub := newGoRedis(t, srv.Addr, p.protocol)
			ctx := context.Background()
			for i := range 200 {
				ch := fmt.Sprintf("confirmed:%s:%d", p.name, i)
				if err := ps.Subscribe(ctx, ch); err != nil {
					t.Fatalf("round %d: Subscribe: %v", i, err)
				}
				if n := publish(t, pub, ch, "m"); n != 1 {
					t.Fatalf("round %d: PUBLISH right after Subscribe reached %d subscribers, want 1", i, n)
				}
				if m := receive(t, msgs, fmt.Sprintf("round %d", i)); m != (message{ch, "m"}) {
					t.Fatalf("round %d: got %v, want %s/m", i, m, ch)
				}
				if err := ps.Unsubscribe(ctx, ch); err != nil {
					t.Fatalf("round %d: Unsubscribe: %v", i, err)
				}
			}
		})
	}
}

// TestGoRedisSubscribeConfirmedCluster: on a Cluster client the connection
// goes to one node, and once Subscribe has returned exactly one node counts
// the subscription; a message published on any node then reaches it.
func TestGoRedisSubscribeConfirmedCluster(t *testing.T) {
	cl := testenv.NewCluster(t)
	c := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs})
	t.Cleanup(func() { _ = c.Close() })
	ps, msgs := openPubSub(t, c)
	nodes := make([]*redis.Client, len(cl.Addrs))
	for i, addr := range cl.Addrs {
		nodes[i] = newGoRedis(t, addr, 3)
	}
	ctx := context.Background()
	for i := range 200 {
		ch := fmt.Sprintf("cluster:%d", i)
		if err := ps.Subscribe(ctx, ch); err != nil {
			t.Fatalf("round %d: Subscribe: %v", i, err)
		}
		var subscribers int64
		for _, node := range nodes {
			n, err := node.PubSubNumSub(ctx, ch).Result()
			if err != nil {
				t.Fatalf("round %d: PUBSUB NUMSUB: %v", i, err)
			}
			subscribers += n[ch]
		}
		if subscribers != 1 {
			t.Fatalf("round %d: right after Subscribe the nodes count %d subscribers, want 1", i, subscribers)
		}
		// From each node in turn: the cluster passes the message on.
		publish(t, nodes[i%len(nodes)], ch, "m")
		if m := receive(t, msgs, fmt.Sprintf("round %d", i)); m != (message{ch, "m"}) {
			t.Fatalf("round %d: got %v, want %s/m", i, m, ch)
		}
		if err := ps.Unsubscribe(ctx, ch); err != nil {
			t.Fatalf("round %d: Unsubscribe: %v", i, err)
		}
	}
}

// TestGoRedisUnsubscribe: Unsubscribe sends UNSUBSCRIBE, and Redis has no
// subscription left (the barriers are never subscribed); a channel
// unsubscribed and subscribed again at once ends subscribed.
func TestGoRedisUnsubscribe(t *testing.T) {
	srv := testenv.NewRedis(t)
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			ps, msgs := openPubSub(t, newGoRedis(t, srv.Addr, p.protocol))
			pub := newGoRedis(t, srv.Addr, p.protocol)
			ctx := context.Background()
			for i := range 50 {
				ch := fmt.Sprintf("again:%d", i%3)
				if err := ps.Subscribe(ctx, ch); err != nil {
					t.Fatal(err)
				}
				if err := ps.Unsubscribe(ctx, ch); err != nil {
					t.Fatal(err)
				}
				if err := ps.Subscribe(ctx, ch); err != nil {
					t.Fatal(err)
				}
				if n := publish(t, pub, ch, "m"); n != 1 {
					t.Fatalf("round %d: PUBLISH reached %d subscribers after Unsubscribe and Subscribe, want 1", i, n)
				}
				receive(t, msgs, fmt.Sprintf("round %d", i))
				if err := ps.Unsubscribe(ctx, ch); err != nil {
					t.Fatal(err)
				}
			}
			deadline := time.Now().Add(5 * time.Second)
			for {
				chans, err := pub.PubSubChannels(ctx, "*").Result()
				if err != nil {
					t.Fatal(err)
				}
				if len(chans) == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("Redis still has subscriptions 5s after Unsubscribe: channels %q", chans)
				}
				time.Sleep(10 * time.Millisecond)
			}
		})
	}
}

// TestGoRedisResubscribe: when Redis closes the pub/sub connection (CLIENT
// KILL), go-redis subscribes the channels again on a new one, and a
// Subscribe on it is confirmed by its own barrier, not by the answers to
// the resubscription.
func TestGoRedisResubscribe(t *testing.T) {
	srv := testenv.NewRedis(t)
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			ps, msgs := openPubSub(t, newGoRedis(t, srv.Addr, p.protocol))
			pub := newGoRedis(t, srv.Addr, p.protocol)
			ctx := context.Background()
			chans := make([]string, 20) // many answers in each resubscription
			for i := range chans {
				chans[i] = fmt.Sprintf("resub:%s:%d", p.name, i)
			}
			if err := ps.Subscribe(ctx, chans...); err != nil {
				t.Fatal(err)
			}
			for round := range 3 {
				if _, err := srv.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub"); err != nil {
					t.Fatalf("CLIENT KILL: %v", err)
				}
				// A new channel, subscribed while go-redis reconnects and
				// subscribes the others again: confirmed all the same.
				fresh := fmt.Sprintf("resub:%s:fresh:%d", p.name, round)
				if err := ps.Subscribe(ctx, fresh); err != nil {
					t.Fatalf("round %d: Subscribe after CLIENT KILL: %v", round, err)
				}
				if n := publish(t, pub, fresh, "m"); n != 1 {
					t.Fatalf("round %d: PUBLISH after Subscribe reached %d subscribers, want 1", round, n)
				}
				if m := receive(t, msgs, "new channel after CLIENT KILL"); m != (message{fresh, "m"}) {
					t.Fatalf("round %d: got %v, want %s/m", round, m, fresh)
				}
				// The old channels are subscribed again.
				for _, ch := range chans {
					if n := publish(t, pub, ch, "m"); n != 1 {
						t.Fatalf("round %d: PUBLISH %s reached %d subscribers after the resubscription, want 1", round, ch, n)
					}
					if m := receive(t, msgs, "old channel after CLIENT KILL"); m != (message{ch, "m"}) {
						t.Fatalf("round %d: got %v, want %s/m", round, m, ch)
					}
				}
			}
		})
	}
}

// TestGoRedisSubscribeAnswerLost: when the connection dies after Subscribe
// sent its SUBSCRIBE and barrier, before Redis answered, Subscribe sends
// another barrier on go-redis's new connection and returns once that is
// answered: well before the client's ReadTimeout, and subscribed.
func TestGoRedisSubscribeAnswerLost(t *testing.T) {
	srv := testenv.NewRedis(t)
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			proxy := testenv.NewProxy(t, srv.Addr)
			c := redis.NewClient(&redis.Options{Addr: proxy.Addr(), Protocol: p.protocol, ReadTimeout: time.Minute})
			t.Cleanup(func() { _ = c.Close() })
			ps, msgs := openPubSub(t, c)
			pub := newGoRedis(t, srv.Addr, p.protocol)
			ctx := context.Background()
			if err := ps.Subscribe(ctx, "lost:warm"); err != nil { // the connection is open
				t.Fatal(err)
			}
			for round := range 3 {
				ch := fmt.Sprintf("lost:%s:%d", p.name, round)
				proxy.Stall()
				done := make(chan error, 1)
				start := time.Now()
				go func() { done <- ps.Subscribe(ctx, ch) }()
				time.Sleep(50 * time.Millisecond) // SUBSCRIBE and the barrier are held by the proxy
				proxy.CutAll()
				proxy.Resume()
				select {
				case err := <-done:
					if err != nil {
						t.Fatalf("round %d: Subscribe: %v", round, err)
					}
				case <-time.After(10 * time.Second):
					t.Fatalf("round %d: Subscribe still waiting 10s after its connection was cut", round)
				}
				t.Logf("round %d: Subscribe returned %v after it started", round, time.Since(start).Round(time.Millisecond))
				if n := publish(t, pub, ch, "m"); n != 1 {
					t.Fatalf("round %d: PUBLISH right after Subscribe reached %d subscribers, want 1", round, n)
				}
				if m := receive(t, msgs, fmt.Sprintf("round %d", round)); m != (message{ch, "m"}) {
					t.Fatalf("round %d: got %v, want %s/m", round, m, ch)
				}
			}
		})
	}
}

// TestGoRedisSubscribeFails: Subscribe returns ctx's error on a paused
// server, a time-out after the client's ReadTimeout when ctx has a later
// deadline, the connection's error when Redis is down, and works again
// once Redis is back. Before the fix Subscribe returned nil on the paused
// server: it only wrote SUBSCRIBE.
func TestGoRedisSubscribeFails(t *testing.T) {
	srv := testenv.NewRedis(t)
	ps, msgs := openPubSub(t, newGoRedis(t, srv.Addr, 3))
	short := redis.NewClient(&redis.Options{Addr: srv.Addr, ReadTimeout: 300 * time.Millisecond})
	t.Cleanup(func() { _ = short.Close() })
	psShort, _ := openPubSub(t, short)
	ctx := context.Background()
	if err := ps.Subscribe(ctx, "fails:a"); err != nil {
		t.Fatal(err)
	}
	if err := psShort.Subscribe(ctx, "fails:short"); err != nil {
		t.Fatal(err)
	}

	// A paused server: ctx ends first.
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	brief, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	err := ps.Subscribe(brief, "fails:b")
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Subscribe on a paused server: %v, want context.DeadlineExceeded", err)
	}
	// The client's ReadTimeout (300ms) ends the wait first.
	long, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	start := time.Now()
	err = psShort.Subscribe(long, "fails:short:b")
	if !errors.Is(err, os.ErrDeadlineExceeded) || long.Err() != nil || time.Since(start) > 10*time.Second {
		t.Errorf("Subscribe on a paused server with ReadTimeout 300ms: %v after %v (ctx: %v), want a time-out after about 300ms",
			err, time.Since(start), long.Err())
	}
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}

	// A stopped server: the connection's error, long before ctx's or the
	// client's ReadTimeout (5s).
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	if err := ps.Subscribe(long, "fails:c"); err == nil || errors.Is(err, os.ErrDeadlineExceeded) || long.Err() != nil {
		t.Errorf("Subscribe on a stopped server: %v (ctx: %v), want the connection's error", err, long.Err())
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("Subscribe on a stopped server took %v", d)
	}

	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	// go-redis may still be reconnecting: a few attempts.
	for attempt := 1; ; attempt++ {
		err := ps.Subscribe(long, "fails:d")
		if err == nil {
			break
		}
		if attempt == 3 {
			t.Fatalf("Subscribe after the restart, attempt %d: %v", attempt, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	pub := newGoRedis(t, srv.Addr, 3) // on the restarted server
	// fails:a is subscribed again too; fails:b and fails:c, which failed, are not.
	for ch, want := range map[string]int64{"fails:a": 1, "fails:b": 0, "fails:c": 0, "fails:d": 1} {
		if n := publish(t, pub, ch, "m"); n != want {
			t.Errorf("PUBLISH %s reached %d subscribers, want %d", ch, n, want)
		}
	}
	receive(t, msgs, "fails:a or fails:d")
	receive(t, msgs, "fails:a or fails:d")
}

// TestGoRedisCloseStops: Close returns while a deliver call waits for its
// caller (as the hub's deliver waits for the lock Store.Close holds), stops
// every goroutine of the connection, go-redis's among them, and a later
// Subscribe fails.
func TestGoRedisCloseStops(t *testing.T) {
	srv := testenv.NewRedis(t)
	delivering := make(chan struct{}, 1)
	release := make(chan struct{})
	s, _ := GoRedis(newGoRedis(t, srv.Addr, 3), false)
	ps, err := s.(PubSubber).OpenPubSub(t.Context(), func(string, string) {
		select {
		case delivering <- struct{}{}:
		default:
		}
		<-release
	})
	if err != nil {
		t.Fatal(err)
	}
	pub := newGoRedis(t, srv.Addr, 3)
	ctx := context.Background()
	if err := ps.Subscribe(ctx, "close:a", "close:b"); err != nil {
		t.Fatal(err)
	}
	publish(t, pub, "close:a", "m")
	publish(t, pub, "close:b", "m")
	select {
	case <-delivering:
	case <-time.After(5 * time.Second):
		t.Fatal("no message delivered after 5s")
	}
	// A Subscribe waits for Redis while deliver is blocked: the answer is
	// read all the same.
	if err := ps.Subscribe(ctx, "close:c"); err != nil {
		t.Fatalf("Subscribe while deliver is blocked: %v", err)
	}
	closed := make(chan struct{})
	go func() {
		_ = ps.Close()
		close(closed)
	}()
	select {
	case <-closed:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return while a deliver call waited for its caller")
	}
	close(release)
	if err := ps.Subscribe(ctx, "close:d"); err == nil {
		t.Error("Subscribe after Close returned nil")
	}
	if err := ps.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := goroutinesIn("redisstore.(*goRedisPubSub).", "go-redis/v9.(*channel).", "redisstore.(*Deliveries).")
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d goroutines of the pub/sub connection still running 5s after Close", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := publish(t, pub, "close:a", "m"); n != 0 {
		t.Errorf("PUBLISH after Close reached %d subscribers, want 0", n)
	}
}

// goroutinesIn counts the goroutines whose stack has a function whose name
// contains one of fns.
func goroutinesIn(fns ...string) int {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	count := 0
	for g := range strings.SplitSeq(string(buf), "\n\n") {
		for _, fn := range fns {
			if strings.Contains(g, fn) {
				count++
				break
			}
		}
	}
	return count
}

// TestGoRedisRingNoPubSub: a Ring has no pub/sub for the hub (go-redis's
// Ring.Subscribe panics without a channel, and a release publishes on the
// lock key's shard): OpenPubSub returns ErrNoPubSub, and waiters poll.
func TestGoRedisRingNoPubSub(t *testing.T) {
	ring := redis.NewRing(&redis.RingOptions{Addrs: map[string]string{"a": "127.0.0.1:1"}})
	t.Cleanup(func() { _ = ring.Close() })
	s, _ := GoRedis(ring, false)
	if _, err := s.(PubSubber).OpenPubSub(t.Context(), func(string, string) {}); !errors.Is(err, ErrNoPubSub) {
		t.Errorf("OpenPubSub on a Ring: %v, want ErrNoPubSub", err)
	}
}
