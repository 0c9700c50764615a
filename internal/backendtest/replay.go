package backendtest

import (
	"context"
	"sync/atomic"
	"testing"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/internal/redisstore"
	"github.com/floodgate-dev/floodgate/internal/unwrap"
)

// Replaying returns a backend on the shared standalone Redis on which every
// script call runs twice with the same keys and arguments, and the caller
// gets the second run's reply: what a client's resend after a lost reply
// does, made deterministic. A primitive whose calls are safe to run twice
// behaves on it exactly as on any other backend, so the conformance suites
// can run on it. It has no pub/sub (waiters are not woken by messages).
// Replays() counts the doubled calls.
func Replaying(t testing.TB, clk clock.Clock) (*backend.Redis, *Replayer) {
	inner := Redis(t, clk)
	rp := &Replayer{s: unwrap.Redis(inner).Scripter()}
	b, err := backend.NewRedisScripter(rp, Options(clk)...)
	if err != nil {
		t.Fatal(err)
	}
	return b, rp
}

// Replayer is the Scripter of a Replaying backend.
type Replayer struct {
	s redisstore.Scripter
	n atomic.Int64
}

// Replays returns how many calls ran twice.
func (r *Replayer) Replays() int64 { return r.n.Load() }

func (r *Replayer) EvalSha(ctx context.Context, sha string, keys, args []string) (any, error) {
	if _, err := r.s.EvalSha(ctx, sha, keys, args); err != nil {
		return nil, err // NOSCRIPT included: the caller falls back to Eval
	}
	r.n.Add(1)
	return r.s.EvalSha(ctx, sha, keys, args)
}

func (r *Replayer) Eval(ctx context.Context, src string, keys, args []string) (any, error) {
	if _, err := r.s.Eval(ctx, src, keys, args); err != nil {
		return nil, err
	}
	r.n.Add(1)
	return r.s.Eval(ctx, src, keys, args)
}
