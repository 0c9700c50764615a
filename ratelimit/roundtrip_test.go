package ratelimit_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/internal/backendtest"
	"github.com/floodgate-dev/floodgate/internal/testenv"
	"github.com/floodgate-dev/floodgate/ratelimit"
)

// countHook counts the commands the client sends, and pipelines.
type countHook struct{ cmds, pipes atomic.Int64 }

func (h *countHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *countHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.cmds.Add(1)
		return next(ctx, cmd)
	}
}

func (h *countHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.pipes.Add(1)
		return next(ctx, cmds)
	}
}

// TestOneRoundTripPerDecision counts what the client sends: a decision over
// four rules of four kinds is one command (EVALSHA), and no pipeline.
func TestOneRoundTripPerDecision(t *testing.T) {
	srv := testenv.SharedRedis(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	h := &countHook{}
	c.AddHook(h)
	lim, err := ratelimit.New(backendtest.NewRedis(t, c, backend.WithPrefix(uniquePrefix(t))),
		ratelimit.FixedWindow{Limit: 100, Window: time.Minute},
		ratelimit.SlidingWindow{Limit: 100, Window: time.Minute},
		ratelimit.SlidingLog{Limit: 100, Window: time.Minute},
		ratelimit.GCRA{Rate: 100, Per: time.Minute, Burst: 100},
	)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := lim.Allow(ctx, "warm"); err != nil { // caches the script
		t.Fatal(err)
	}
	h.cmds.Store(0)
	h.pipes.Store(0) // the connection handshake
	for range 10 {
		if _, err := lim.Allow(ctx, "k"); err != nil {
			t.Fatal(err)
		}
	}
	if n, p := h.cmds.Load(), h.pipes.Load(); n != 10 || p != 0 {
		t.Fatalf("10 decisions sent %d commands and %d pipelines, want 10 and 0", n, p)
	}
}
