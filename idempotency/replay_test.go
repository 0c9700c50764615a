package idempotency_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/idempotency"
	"github.com/floodgate-dev/floodgate/internal/backendtest"
	"github.com/floodgate-dev/floodgate/internal/testenv"
)

// Issue 13, "Safe when replies are lost": a script whose reply is lost still
// ran, and go-redis resends it (after an error reading the reply, or after
// ReadTimeout, up to MaxRetries times), so every script may run twice. The
// conformance suites run on replaying, where every script call runs twice
// and the caller gets the second reply, and must give the answers they give
// everywhere else; the tests below lose real replies through a proxy.

var replaying = backendtest.Kind{Name: "replaying", Make: func(t testing.TB, clk clock.Clock) backend.Backend {
	b, _ := backendtest.Replaying(t, clk)
	return b
}}

// TestReplayedCalls: the same call twice gets the same answer and changes
// nothing more; another call with the same key or token does not pass for
// it. Run on every backend, memory included, through the store calls.
func TestReplayedCalls(t *testing.T) {
	for _, bk := range allBackends() {
		t.Run(bk.Name, func(t *testing.T) {
			t.Parallel()
			clk := clock.NewFake(t0)
			s := newStore(t, bk.Make(t, clk), idempotency.Lease(3*time.Second), idempotency.TTL(10*time.Second))
			ctx := context.Background()
			twice := func(step string, want any, f func() (any, error)) {
				t.Helper()
				for run := 1; run <= 2; run++ {
					got, err := f()
					if err != nil || got != want {
						t.Fatalf("%s, run %d: %v %v, want %v", step, run, got, err, want)
					}
				}
			}
			begin := func(owner string) func() (any, error) {
				return func() (any, error) { return idempotency.Begin(ctx, s, "k", owner, "") }
			}
			twice("claim", claimed(), begin("A"))
			if got, _ := idempotency.Begin(ctx, s, "k", "B", ""); got != inFlight(3*time.Second) {
				t.Fatalf("another caller: %+v, want in flight", got)
			}
			twice("renew", true, func() (any, error) { return idempotency.Renew(ctx, s, "k", "A") })
			twice("complete", true, func() (any, error) { return idempotency.Complete(ctx, s, "k", "A", "r", false, "") })
			twice("begin after", doneWith("r"), begin("C"))
			if ok, _ := idempotency.Complete(ctx, s, "k", "B", "other", false, ""); ok {
				t.Fatal("another owner's complete of a done key succeeded")
			}

			twice("claim k2", claimed(), func() (any, error) { return idempotency.Begin(ctx, s, "k2", "A", "") })
			twice("abort", true, func() (any, error) { return idempotency.Abort(ctx, s, "k2", "A") })
			if ok, _ := idempotency.Abort(ctx, s, "k2", "B"); ok {
				t.Fatal("another owner's abort succeeded")
			}
			twice("claim after abort", claimed(), func() (any, error) { return idempotency.Begin(ctx, s, "k2", "B", "") })
			if ok, _ := idempotency.Abort(ctx, s, "k2", "A"); ok {
				t.Fatal("a replayed abort freed the next owner's claim")
			}

			tok, err := s.IssueToken(ctx)
			if err != nil {
				t.Fatal(err)
			}
			twice("consume", true, func() (any, error) { return idempotency.ConsumeTokenCall(ctx, s, tok, "call-1") })
			if ok, _ := idempotency.ConsumeTokenCall(ctx, s, tok, "call-2"); ok {
				t.Fatal("another call consumed a consumed token")
			}
			if ok, _ := s.ConsumeToken(ctx, tok); ok {
				t.Fatal("ConsumeToken of a consumed token: true")
			}
			clk.Advance(10 * time.Second)
			if ok, _ := idempotency.ConsumeTokenCall(ctx, s, tok, "call-1"); ok {
				t.Fatal("a replay after the token's TTL: true, want false (the record expires with the token)")
			}
		})
	}
}

// proxied returns a Store whose Redis client talks through a fault proxy,
// resends a command whose reply was lost (MaxRetries), and has its scripts
// cached already, so that the next lost reply is a call's own.
func proxied(t *testing.T, opts ...idempotency.Option) (*idempotency.Store, *testenv.Proxy) {
	t.Helper()
	p := testenv.NewProxy(t, testenv.SharedRedis(t).Addr)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: 2, ContextTimeoutEnabled: true})
	t.Cleanup(func() { rdb.Close() })
	s := newStore(t, backendtest.NewRedis(t, rdb, backend.WithPrefix(uniquePrefix())), opts...)
	ctx := context.Background()
	if _, _, err := s.Do(ctx, "warm-up", func(context.Context) ([]byte, error) { return nil, nil }); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Do(ctx, "warm-up-abort", func(context.Context) ([]byte, error) { return nil, errors.New("x") }); err == nil {
		t.Fatal("warm-up abort: no error")
	}
	tok, err := s.IssueToken(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.ConsumeToken(ctx, tok); err != nil {
		t.Fatal(err)
	}
	return s, p
}

// TestDoLostCompleteReply reproduces defect 3 of issue 13: the reply to
// storing the result is lost, go-redis resends the script, and the second
// run found the result stored: Do returned ErrLeaseLost although the result
// was recorded and is replayed to every retry. Now it is a success.
func TestDoLostCompleteReply(t *testing.T) {
	s, p := proxied(t)
	ctx := context.Background()
	res, replayed, err := s.Do(ctx, "charge-1", func(context.Context) ([]byte, error) {
		p.LoseNextReplies(1) // the next reply is the store-result script's
		return []byte("charged"), nil
	})
	if err != nil || string(res) != "charged" || replayed {
		t.Fatalf("Do whose result was stored but the reply lost: %q %v %v; want charged, nil", res, replayed, err)
	}
	if p.Lost() != 1 {
		t.Fatalf("%d replies lost, want 1", p.Lost())
	}
	res, replayed, err = s.Do(ctx, "charge-1", func(context.Context) ([]byte, error) {
		t.Error("fn ran again")
		return nil, nil
	})
	if err != nil || string(res) != "charged" || !replayed {
		t.Fatalf("the retry: %q %v %v; want the stored result replayed", res, replayed, err)
	}
}

// TestDoLostClaimReply: the reply to the claim is lost; the resend finds the
// call's own in-flight marker and must not answer ErrInFlight.
func TestDoLostClaimReply(t *testing.T) {
	s, p := proxied(t)
	ctx := context.Background()
	p.LoseNextReplies(1)
	runs := 0
	res, _, err := s.Do(ctx, "k", func(context.Context) ([]byte, error) {
		runs++
		return []byte("v"), nil
	})
	if err != nil || string(res) != "v" || runs != 1 || p.Lost() != 1 {
		t.Fatalf("Do whose claim's reply was lost: %q %v, runs %d, lost %d; want v, nil, 1, 1", res, err, runs, p.Lost())
	}
}

// TestDoLostAbortReply: the reply to removing the marker after fn failed is
// lost; Do returns fn's error alone, and the key is free for a retry.
func TestDoLostAbortReply(t *testing.T) {
	s, p := proxied(t)
	ctx := context.Background()
	boom := errors.New("boom")
	_, _, err := s.Do(ctx, "k", func(context.Context) ([]byte, error) {
		p.LoseNextReplies(1)
		return nil, boom
	})
	if err != boom || p.Lost() != 1 {
		t.Fatalf("Do whose abort's reply was lost: %v (lost %d), want boom alone", err, p.Lost())
	}
	res, replayed, err := s.Do(ctx, "k", func(context.Context) ([]byte, error) { return []byte("ok"), nil })
	if err != nil || replayed || string(res) != "ok" {
		t.Fatalf("retry after the abort: %q %v %v; want fn run", res, replayed, err)
	}
}

// TestConsumeTokenLostReply: the reply to a successful consume is lost and
// the resend must not turn it into false; another consume still gets false.
func TestConsumeTokenLostReply(t *testing.T) {
	s, p := proxied(t)
	ctx := context.Background()
	p.LoseNextReplies(1)
	tok, err := s.IssueToken(ctx)
	if err != nil || p.Lost() != 1 {
		t.Fatalf("IssueToken whose reply was lost: %v (lost %d)", err, p.Lost())
	}
	p.LoseNextReplies(1)
	if ok, err := s.ConsumeToken(ctx, tok); !ok || err != nil || p.Lost() != 2 {
		t.Fatalf("ConsumeToken whose reply was lost: %v %v (lost %d); want true: the first run consumed it", ok, err, p.Lost())
	}
	if ok, err := s.ConsumeToken(ctx, tok); ok || err != nil {
		t.Fatalf("a second ConsumeToken: %v %v, want false", ok, err)
	}
}

// TestDoAcrossStall is defect 3 as reported, scaled down: Redis (here the
// proxy in front of it) stalls for 1.3s while Do stores the result, longer
// than the client's 1s read timeout; go-redis resends the script on a new
// connection and both copies run when the stall ends. Do must succeed.
func TestDoAcrossStall(t *testing.T) {
	p := testenv.NewProxy(t, testenv.SharedRedis(t).Addr)
	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), ReadTimeout: time.Second, MaxRetries: 3})
	t.Cleanup(func() { rdb.Close() })
	s := newStore(t, backendtest.NewRedis(t, rdb, backend.WithPrefix(uniquePrefix())))
	ctx := context.Background()
	if _, _, err := s.Do(ctx, "warm-up", func(context.Context) ([]byte, error) { return nil, nil }); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	res, _, err := s.Do(ctx, "charge-2", func(context.Context) ([]byte, error) {
		p.Stall()
		time.AfterFunc(1300*time.Millisecond, p.Resume)
		return []byte("charged"), nil
	})
	if err != nil || string(res) != "charged" {
		t.Fatalf("Do across a stall: %q %v; want charged, nil", res, err)
	}
	if time.Since(start) < time.Second {
		t.Fatalf("Do returned after %v: the stall did not hold it", time.Since(start))
	}
	if res, replayed, err := s.Do(ctx, "charge-2", mustNotRun); string(res) != "charged" || !replayed || err != nil {
		t.Fatalf("the retry: %q %v %v; want the stored result replayed", res, replayed, err)
	}
}

func mustNotRun(context.Context) ([]byte, error) { return nil, errors.New("fn ran again") }
