package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"time"
)

const (
	// clusterMasters is the number of master nodes of a Cluster.
	clusterMasters = 3
	// clusterSlots is the number of hash slots of Redis Cluster.
	clusterSlots = 16384
	// clusterCreateTimeout bounds redis-cli --cluster create.
	clusterCreateTimeout = 30 * time.Second
	// clusterReadyTimeout bounds the wait for cluster_state:ok everywhere.
	clusterReadyTimeout = 15 * time.Second
	// clusterAttempts is how many times StartCluster builds a cluster
	// from scratch before giving up.
	clusterAttempts = 2
)

// Cluster is a private three-master Redis Cluster (no replicas) on
// 127.0.0.1: each node is a Redis with cluster mode enabled, its cluster bus
// on Port+10000, and its nodes.conf in its Dir. Exported fields are set once
// by StartCluster.
type Cluster struct {
	// Addrs are the nodes' "127.0.0.1:port" addresses, usable as the
	// seed list of a cluster client.
	Addrs []string
	// Nodes are the node processes, in the order of Addrs. A test may
	// Pause, Kill or Restart one; WaitOK then waits for recovery.
	Nodes []*Redis
}

// StartCluster starts three redis-server --cluster-enabled yes processes,
// joins them with redis-cli --cluster create --cluster-replicas 0, and
// returns once every node reports cluster_state:ok with all 16384 slots
// assigned and served (see WaitOK). A failed attempt is retried once from
// scratch on new ports. The caller must Close the cluster.
func StartCluster() (*Cluster, error) {
	cli, err := lookBinary("redis-cli")
	if err != nil {
		return nil, err
	}
	var lastErr error
	for range clusterAttempts {
		c, err := startCluster(cli)
		if err == nil {
			return c, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

func startCluster(cli string) (*Cluster, error) {
	c := &Cluster{}
	for range clusterMasters {
		n, err := StartRedis(withClusterBus(), WithArgs(
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", "5000",
			"--cluster-announce-ip", "127.0.0.1",
		))
		if err != nil {
			_ = c.Close()
			return nil, err
		}
		c.Nodes = append(c.Nodes, n)
		c.Addrs = append(c.Addrs, n.Addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterCreateTimeout)
	defer cancel()
	args := append([]string{"--cluster", "create"}, c.Addrs...)
	args = append(args, "--cluster-replicas", "0", "--cluster-yes")
	cmd := exec.CommandContext(ctx, cli, args...)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	err := startCmd(cmd)
	if err == nil {
		err = cmd.Wait()
	}
	if err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("testenv: redis-cli --cluster create %v: %w\n%s", c.Addrs, err, out.String())
	}
	ctx, cancel = context.WithTimeout(context.Background(), clusterReadyTimeout)
	defer cancel()
	if err := c.WaitOK(ctx); err != nil {
		err = fmt.Errorf("%w\nredis-cli output:\n%s", err, out.String())
		_ = c.Close()
		return nil, err
	}
	return c, nil
}

// WaitOK polls until every node answers CLUSTER INFO with cluster_state:ok,
// cluster_slots_assigned and cluster_slots_ok of 16384 and all three nodes
// known, and CLUSTER SLOTS on every node covers all 16384 slots with known
// addresses; or until ctx is done, returning the last problem seen.
func (c *Cluster) WaitOK(ctx context.Context) error {
	var lastErr error
	for {
		lastErr = c.checkOK(ctx)
		if lastErr == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testenv: cluster %v not ok: %w", c.Addrs, lastErr)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (c *Cluster) checkOK(ctx context.Context) error {
	want := strconv.Itoa(clusterSlots)
	for _, n := range c.Nodes {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		f, err := info(cctx, n.Addr, "cluster-info")
		if err == nil {
			switch {
			case f["cluster_state"] != "ok":
				err = fmt.Errorf("cluster_state:%s", f["cluster_state"])
			case f["cluster_slots_assigned"] != want || f["cluster_slots_ok"] != want:
				err = fmt.Errorf("slots assigned %s ok %s", f["cluster_slots_assigned"], f["cluster_slots_ok"])
			case f["cluster_known_nodes"] != strconv.Itoa(len(c.Nodes)):
				err = fmt.Errorf("cluster_known_nodes:%s", f["cluster_known_nodes"])
			}
		}
		if err == nil {
			err = checkSlots(cctx, n.Addr)
		}
		cancel()
		if err != nil {
			return fmt.Errorf("node %s: %w", n.Addr, err)
		}
	}
	return nil
}

// checkSlots verifies that CLUSTER SLOTS on addr covers every slot and names
// a reachable-looking address for each range.
func checkSlots(ctx context.Context, addr string) error {
	v, err := do(ctx, addr, 0, "CLUSTER", "SLOTS")
	if err != nil {
		return err
	}
	ranges, ok := v.([]any)
	if !ok {
		return fmt.Errorf("CLUSTER SLOTS: unexpected reply %#v", v)
	}
	covered := 0
	for _, rg := range ranges {
		r, ok := rg.([]any)
		if !ok || len(r) < 3 {
			return fmt.Errorf("CLUSTER SLOTS: bad range %#v", rg)
		}
		from, ok1 := r[0].(int64)
		to, ok2 := r[1].(int64)
		node, ok3 := r[2].([]any)
		if !ok1 || !ok2 || !ok3 || len(node) < 2 {
			return fmt.Errorf("CLUSTER SLOTS: bad range %#v", rg)
		}
		if ip, _ := node[0].(string); ip == "" {
			return fmt.Errorf("CLUSTER SLOTS: slots %d-%d without address", from, to)
		}
		if port, _ := node[1].(int64); port == 0 {
			return fmt.Errorf("CLUSTER SLOTS: slots %d-%d without port", from, to)
		}
		covered += int(to - from + 1)
	}
	if covered != clusterSlots {
		return fmt.Errorf("CLUSTER SLOTS covers %d slots", covered)
	}
	return nil
}

// Close stops every node and removes their directories. It is idempotent
// and returns the nodes' errors joined (nil if none).
func (c *Cluster) Close() error {
	var errs []error
	for _, n := range c.Nodes {
		errs = append(errs, n.Close())
	}
	return errors.Join(errs...)
}
