package rueidisadapter

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/internal/redisstore"
	"github.com/floodgate-dev/floodgate/internal/testenv"
	"github.com/redis/rueidis"
)

// message is one call of deliver.
type message struct{ channel, payload string }

// openPubSub opens the adapter's pub/sub connection on c, closed when the
// test ends; every message delivered goes to the returned channel.
func openPubSub(t *testing.T, c rueidis.Client) (redisstore.PubSubConn, <-chan message) {
	t.Helper()
	msgs := make(chan message, 1024)
	ps, err := scripter{c}.OpenPubSub(t.Context(), func(channel, payload string) {
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
func publish(t *testing.T, pub rueidis.Client, channel, payload string) int64 {
	t.Helper()
	n, err := pub.Do(context.Background(), pub.B().Publish().Channel(channel).Message(payload).Build()).AsInt64()
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

// TestSubscribeConfirmed: once Subscribe has returned, Redis has the
// subscription, so a PUBLISH right after it, from another client, reaches
// it. Before the fix Subscribe returned before its SUBSCRIBE reached Redis
// and most rounds failed (docs/locks.md's former "known gap on rueidis").
func TestSubscribeConfirmed(t *testing.T) {
	srv := testenv.NewRedis(t)
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			opt := rueidis.ClientOption{InitAddress: []string{srv.Addr}, AlwaysRESP2: p.resp2, DisableCache: true}
			ps, msgs := openPubSub(t, newClient(t, opt))
			pub := newClient(t, opt)
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

// TestUnsubscribe: Unsubscribe sends UNSUBSCRIBE (cancelling a Receive did
// not: Redis kept the channel); a channel unsubscribed and subscribed again
// at once ends subscribed, its new Subscribe waiting for its own
// confirmation.
func TestUnsubscribe(t *testing.T) {
	srv := testenv.NewRedis(t)
	opt := rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true}
	ps, msgs := openPubSub(t, newClient(t, opt))
	pub := newClient(t, opt)
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
		n, err := pub.Do(ctx, pub.B().PubsubNumpat().Build()).AsInt64()
		if err != nil {
			t.Fatal(err)
		}
		chans, err := pub.Do(ctx, pub.B().PubsubChannels().Build()).AsStrSlice()
		if err != nil {
			t.Fatal(err)
		}
		if n == 0 && len(chans) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Redis still has subscriptions 5s after Unsubscribe: channels %q, %d patterns", chans, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestResubscribe: when Redis closes the pub/sub connection (CLIENT KILL),
// the channels are subscribed again on a new one, and Subscribe works on it.
func TestResubscribe(t *testing.T) {
	srv := testenv.NewRedis(t)
	for _, p := range protocols {
		t.Run(p.name, func(t *testing.T) {
			opt := rueidis.ClientOption{InitAddress: []string{srv.Addr}, AlwaysRESP2: p.resp2, DisableCache: true}
			ps, msgs := openPubSub(t, newClient(t, opt))
			pub := newClient(t, opt)
			ctx := context.Background()
			ch := "resub:" + p.name
			if err := ps.Subscribe(ctx, ch); err != nil {
				t.Fatal(err)
			}
			for round := range 3 {
				if _, err := srv.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub"); err != nil {
					t.Fatalf("CLIENT KILL: %v", err)
				}
				// Published until the new connection has subscribed.
				deadline := time.Now().Add(10 * time.Second)
				for publish(t, pub, ch, "m") == 0 {
					if time.Now().After(deadline) {
						t.Fatalf("round %d: not subscribed again 10s after CLIENT KILL", round)
					}
					time.Sleep(5 * time.Millisecond)
				}
				if m := receive(t, msgs, "after CLIENT KILL"); m != (message{ch, "m"}) {
					t.Fatalf("round %d: got %v", round, m)
				}
				// A new channel is confirmed on the new connection.
				fresh := fmt.Sprintf("%s:%d", ch, round)
				if err := ps.Subscribe(ctx, fresh); err != nil {
					t.Fatalf("round %d: Subscribe after CLIENT KILL: %v", round, err)
				}
				if n := publish(t, pub, fresh, "m"); n != 1 {
					t.Fatalf("round %d: PUBLISH reached %d subscribers, want 1", round, n)
				}
				receive(t, msgs, "new channel after CLIENT KILL")
			}
		})
	}
}

// TestSubscribeFails: Subscribe returns the connection's error when Redis
// cannot be reached, ctx's error when ctx ends first, and works again once
// Redis is back.
func TestSubscribeFails(t *testing.T) {
	srv := testenv.NewRedis(t)
	opt := rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true}
	ps, msgs := openPubSub(t, newClient(t, opt))
	ctx := context.Background()
	if err := ps.Subscribe(ctx, "fails:a"); err != nil {
		t.Fatal(err)
	}

	// A paused server: ctx ends first.
	if err := srv.Pause(); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	err := ps.Subscribe(short, "fails:b")
	cancel()
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Subscribe on a paused server: %v, want context.DeadlineExceeded", err)
	}
	if err := srv.Resume(); err != nil {
		t.Fatal(err)
	}

	// A stopped server: the connection's error, long before ctx's.
	if err := srv.Stop(); err != nil {
		t.Fatal(err)
	}
	long, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := ps.Subscribe(long, "fails:c"); err == nil || long.Err() != nil {
		t.Errorf("Subscribe on a stopped server: %v (ctx: %v), want the connection's error", err, long.Err())
	}

	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	// An attempt to connect made before the restart may still fail this
	// Subscribe, not a later one.
	for attempt := 1; ; attempt++ {
		err := ps.Subscribe(long, "fails:d")
		if err == nil {
			break
		}
		if attempt == 3 {
			t.Fatalf("Subscribe after the restart, attempt %d: %v", attempt, err)
		}
	}
	pub := newClient(t, opt) // on the restarted server
	// fails:a is subscribed again too; fails:b and fails:c, which failed, are not.
	for ch, want := range map[string]int64{"fails:a": 1, "fails:b": 0, "fails:c": 0, "fails:d": 1} {
		if n := publish(t, pub, ch, "m"); n != want {
			t.Errorf("PUBLISH %s reached %d subscribers, want %d", ch, n, want)
		}
	}
	receive(t, msgs, "fails:a or fails:d")
	receive(t, msgs, "fails:a or fails:d")
}

// TestCloseStops: Close returns while a deliver call waits for its caller
// (as the hub's deliver waits for the lock Store.Close holds), stops every
// goroutine of the connection, and a later Subscribe fails.
func TestCloseStops(t *testing.T) {
	srv := testenv.NewRedis(t)
	opt := rueidis.ClientOption{InitAddress: []string{srv.Addr}, DisableCache: true}
	delivering := make(chan struct{}, 1)
	release := make(chan struct{})
	ps, err := scripter{newClient(t, opt)}.OpenPubSub(t.Context(), func(string, string) {
		select {
		case delivering <- struct{}{}:
		default:
		}
		<-release
	})
	if err != nil {
		t.Fatal(err)
	}
	pub := newClient(t, opt)
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
	if err := ps.Subscribe(ctx, "close:c"); err == nil {
		t.Error("Subscribe after Close returned nil")
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		n := goroutinesIn("rueidisadapter.(*pubsub).") + goroutinesIn("redisstore.(*Deliveries).")
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
// contains fn.
func goroutinesIn(fn string) int {
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
		if strings.Contains(g, fn) {
			count++
		}
	}
	return count
}

// TestSubscribeCluster: on a Cluster client the connection goes to one node
// (SUBSCRIBE has no key), and messages published on any node reach it.
func TestSubscribeCluster(t *testing.T) {
	cl := testenv.NewCluster(t)
	c := newClient(t, rueidis.ClientOption{InitAddress: cl.Addrs})
	ps, msgs := openPubSub(t, c)
	ctx := context.Background()
	for i := range 20 {
		ch := fmt.Sprintf("cluster:%d", i)
		if err := ps.Subscribe(ctx, ch); err != nil {
			t.Fatalf("round %d: Subscribe: %v", i, err)
		}
		// From each node in turn: the cluster passes the message on.
		node := cl.Nodes[i%len(cl.Nodes)]
		if _, err := node.Do(ctx, "PUBLISH", ch, "m"); err != nil {
			t.Fatalf("round %d: PUBLISH: %v", i, err)
		}
		if m := receive(t, msgs, fmt.Sprintf("round %d", i)); m != (message{ch, "m"}) {
			t.Fatalf("round %d: got %v, want %s/m", i, m, ch)
		}
	}
}
