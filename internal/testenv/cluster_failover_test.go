package testenv_test

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/internal/testenv"
)

// TestClusterReplicasFailover starts three masters with a replica each,
// writes a key, waits for it to reach the replica, kills the key's master
// and checks that WaitPromoted sees the replica take over with the key.
func TestClusterReplicasFailover(t *testing.T) {
	c := testenv.NewClusterWith(t, testenv.WithReplicas(1), testenv.WithNodeTimeout(time.Second))
	if len(c.Nodes) != 6 || len(c.Addrs) != 6 {
		t.Fatalf("cluster has %d nodes and %d addrs, want 6", len(c.Nodes), len(c.Addrs))
	}
	ctx := ctxTimeout(t, 30*time.Second)
	ranges, err := c.Slots(ctx)
	if err != nil {
		t.Fatal(err)
	}
	masters := map[*testenv.Redis]bool{}
	for _, r := range ranges {
		masters[r.Master] = true
		if len(r.Replicas) != 1 || r.Replicas[0] == r.Master {
			t.Fatalf("slots %d-%d: master %s, replicas %v; want one replica", r.From, r.To, r.Master.Addr, r.Replicas)
		}
	}
	if len(masters) != 3 {
		t.Fatalf("%d masters, want 3", len(masters))
	}

	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs})
	defer cc.Close()
	const key = "failover:key"
	if err := cc.Set(ctx, key, "v", 0).Err(); err != nil {
		t.Fatal(err)
	}
	slot, err := cc.ClusterKeySlot(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	dead, err := c.MasterOf(ctx, int(slot))
	if err != nil {
		t.Fatal(err)
	}
	var replica *testenv.Redis
	for _, r := range ranges {
		if r.Master == dead && r.From <= int(slot) && int(slot) <= r.To {
			replica = r.Replicas[0]
		}
	}
	if err := c.WaitReplicated(ctx, dead); err != nil {
		t.Fatal(err)
	}

	if err := dead.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	if err := c.WaitPromoted(ctx, dead); err != nil {
		t.Fatal(err)
	}
	t.Logf("replica promoted %v after SIGKILL (cluster-node-timeout 1s)", time.Since(killed).Round(time.Millisecond))
	if got, err := c.MasterOf(ctx, int(slot)); err != nil || got != replica {
		t.Fatalf("MasterOf(%d) after the failover = %v, %v; want the replica %s", slot, got, err, replica.Addr)
	}
	if v, err := replica.Do(ctx, "GET", key); err != nil || v != "v" {
		t.Fatalf("GET on the promoted replica = %#v, %v; want the replicated value", v, err)
	}
	if err := c.WaitOK(ctxTimeout(t, 200*time.Millisecond)); err == nil {
		t.Fatal("WaitOK succeeded with a node dead")
	}
}
