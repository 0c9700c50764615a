package counter_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/counter"
	"github.com/floodgate-dev/floodgate/internal/backendtest"
	"github.com/floodgate-dev/floodgate/internal/testenv"
)

// TestReplayedAddCountsOnce is issue 13 for counters: a client's resend of
// an Add whose reply was lost (every call runs twice on the replaying
// backend) counts once and returns the first run's value; with the replay
// record turned off it counts twice, as documented.
func TestReplayedAddCountsOnce(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name string
		opts []counter.Option
		want int64 // after three Adds of 1
	}{
		{"plain", nil, 3},
		{"ttl", []counter.Option{counter.TTL(time.Hour)}, 3},
		{"window", []counter.Option{counter.Window(time.Hour)}, 3},
		{"record off", []counter.Option{counter.ReplayWindow(0)}, 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, rp := backendtest.Replaying(t, nil)
			c, err := counter.New(b, "replayed", tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			var last int64
			for range 3 {
				if last, err = c.Add(ctx, "k", 1); err != nil {
					t.Fatal(err)
				}
			}
			got, err := c.Get(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want || last != tc.want {
				t.Fatalf("after 3 Adds, each run twice: value %d, last Add returned %d; want %d", got, last, tc.want)
			}
			if rp.Replays() < 3 {
				t.Fatalf("only %d calls replayed", rp.Replays())
			}
		})
	}
}

func TestReplayWindowOption(t *testing.T) {
	b := backendtest.Redis(t, nil)
	for _, d := range []time.Duration{-time.Second, 25 * time.Hour} {
		if _, err := counter.New(b, "x", counter.ReplayWindow(d)); err == nil || !strings.Contains(err.Error(), "ReplayWindow") {
			t.Errorf("ReplayWindow(%v): %v, want an error naming ReplayWindow", d, err)
		}
	}
}

// TestAddLostReplyResent: the reply of an Add is lost on the network (the
// proxy drops it and closes the connection) and go-redis resends the Add:
// the counter counts it once, and the resend answers the first run's value.
// With the replay record off, the same fault counts twice.
func TestAddLostReplyResent(t *testing.T) {
	r := testenv.SharedRedis(t)
	for _, tc := range []struct {
		name string
		opts []counter.Option
		want int64
	}{
		{"record on", nil, 2},
		{"record off", []counter.Option{counter.ReplayWindow(0)}, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := testenv.NewProxy(t, r.Addr)
			rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: 2, ContextTimeoutEnabled: true})
			t.Cleanup(func() { rdb.Close() })
			c, err := counter.New(backendtest.NewRedis(t, rdb, backend.WithPrefix(backendtest.UniquePrefix())), "lost", tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if _, err := c.Add(ctx, "k", 1); err != nil {
				t.Fatal(err)
			}
			p.LoseNextReplies(1)
			v, err := c.Add(ctx, "k", 1)
			if err != nil {
				t.Fatalf("Add whose reply was lost, resent: %v", err)
			}
			if p.Lost() != 1 {
				t.Fatalf("the proxy lost %d replies, want 1", p.Lost())
			}
			got, err := c.Get(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want || v != tc.want {
				t.Fatalf("two Adds, the second's reply lost and resent: value %d, Add returned %d; want %d", got, v, tc.want)
			}
		})
	}
}

// TestAddConnectionsClosedResent: more connections are closed under an Add
// than go-redis has retries for (MaxRetries 2: three sends, each reply
// lost), as when Redis restarts under a pool or a batch in flight. The
// backend sends the Add once more on a checked connection: it succeeds, and
// the replay record counts it once. When the resend's own three sends are
// lost as well, the error is the caller's.
func TestAddConnectionsClosedResent(t *testing.T) {
	r := testenv.SharedRedis(t)
	for _, tc := range []struct {
		name    string
		lost    int
		wantErr bool
	}{
		{"three lost", 3, false},
		{"six lost", 6, true}, // the resend's own retries lost too
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := testenv.NewProxy(t, r.Addr)
			rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: 2, ContextTimeoutEnabled: true})
			t.Cleanup(func() { rdb.Close() })
			c, err := counter.New(backendtest.NewRedis(t, rdb, backend.WithPrefix(backendtest.UniquePrefix())), "closed")
			if err != nil {
				t.Fatal(err)
			}
			ctx := context.Background()
			if _, err := c.Add(ctx, "k", 1); err != nil {
				t.Fatal(err)
			}
			p.LoseNextReplies(tc.lost)
			v, err := c.Add(ctx, "k", 1)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("Add with %d replies lost: no error, value %d", tc.lost, v)
				}
				return
			}
			if err != nil {
				t.Fatalf("Add with %d replies lost: %v; want it resent once more and answered", tc.lost, err)
			}
			if p.Lost() != tc.lost {
				t.Fatalf("the proxy lost %d replies, want %d", p.Lost(), tc.lost)
			}
			got, err := c.Get(ctx, "k")
			if err != nil {
				t.Fatal(err)
			}
			if got != 2 || v != 2 {
				t.Fatalf("two Adds, the second sent %d times: value %d, Add returned %d; want 2", tc.lost+1, got, v)
			}
		})
	}
}
