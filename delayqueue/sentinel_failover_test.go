package delayqueue_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/internal/backendtest"
	"github.com/floodgate-dev/floodgate/internal/testenv"
)

// TestNothingLostAcrossSentinelFailover is TestNothingLostAcrossClusterFailover
// (issue 14, "a failover is not an outage") on a Sentinel group: a master,
// its replica and a Sentinel with down-after-milliseconds 1000, reached
// through a go-redis FailoverClient with default settings (only the master
// name, the Sentinel addresses and ContextTimeoutEnabled). Jobs due from 1 s
// to 2 s ahead are enqueued and replicated (the replica's slave_repl_offset
// reaches the master's master_repl_offset), a consumer runs, and the master
// is SIGKILLed when about half of them are due. More jobs are enqueued from
// the kill until a second after the Sentinel's switch (as SENTINEL
// GET-MASTER-ADDR-BY-NAME reports it); those may fail. Every job whose
// Enqueue returned nil must be handled at least once within failoverDrain of
// the switch, and the queue must drain to empty Stats.
func TestNothingLostAcrossSentinelFailover(t *testing.T) {
	s := testenv.NewSentinel(t)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	fc := redis.NewFailoverClient(&redis.FailoverOptions{
		MasterName:            s.MasterName,
		SentinelAddrs:         s.SentinelAddrs,
		ContextTimeoutEnabled: true,
	})
	t.Cleanup(func() { fc.Close() })
	b := backendtest.NewRedis(t, fc, backend.WithPrefix(uniquePrefix()))
	t.Cleanup(func() { b.Close() })
	failoverScenario(ctx, t, b, failover{
		queue: "sfo-jobs",
		event: "the switch",
		// WAIT on a fresh connection would prove nothing about the writes
		// made on the client's pooled ones; the offsets do.
		replicated: func() error { return testenv.WaitReplicated(ctx, s.Master) },
		kill:       s.Master.Kill,
		wait:       func() error { return s.WaitSwitchedTo(ctx, s.Replica) },
		what:       fmt.Sprintf("Sentinel master %s, replica %s (down-after-milliseconds 1000)", s.Master.Addr, s.Replica.Addr),
	})
}
