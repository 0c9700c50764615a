package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

const (
	// clusterMasters is the number of master nodes of a Cluster.
	clusterMasters = 3
	// clusterSlots is the number of hash slots of Redis Cluster.
	clusterSlots = 16384
	// clusterCreateTimeout bounds redis-cli --cluster create.
	clusterCreateTimeout = 30 * time.Second
	// clusterReadyTimeout bounds the wait for cluster_state:ok everywhere
	// (and, with replicas, for every replica's first sync).
	clusterReadyTimeout = 15 * time.Second
	// clusterAttempts is how many times StartCluster builds a cluster
	// from scratch before giving up.
	clusterAttempts = 2
	// defaultNodeTimeout is cluster-node-timeout unless WithNodeTimeout.
	defaultNodeTimeout = 5 * time.Second
	// clusterPoll is how often WaitOK and WaitPromoted look again.
	clusterPoll = 20 * time.Millisecond
)

// ClusterOption configures a cluster started by StartClusterWith or
// NewClusterWith.
type ClusterOption func(*clusterConfig)

type clusterConfig struct {
	replicas    int           // per master
	nodeTimeout time.Duration // cluster-node-timeout
	args        []string      // more redis-server flags for every node
	nodeOpts    []Option      // more options for every node
}

// WithReplicas gives each of the three masters n replicas (0 by default:
// masters only; a negative n counts as 0), so that killing a master makes
// the Cluster promote one of its replicas (see WaitPromoted). The cluster
// then has 3*(1+n) nodes; which of them start as masters is redis-cli's
// choice: ask Slots or MasterOf.
func WithReplicas(n int) ClusterOption {
	return func(c *clusterConfig) { c.replicas = max(n, 0) }
}

// WithNodeTimeout sets cluster-node-timeout (5s by default; zero or
// negative keeps the default; Redis takes whole milliseconds). It is how
// long a node may be unreachable before the others count it as failing, so
// a replica's promotion after its master dies takes about d plus one to two
// seconds (Redis's election delay, 500-1000 ms, and the vote). Below about
// 500 ms a slow or loaded machine may see failovers nobody asked for.
func WithNodeTimeout(d time.Duration) ClusterOption {
	return func(c *clusterConfig) {
		if d > 0 {
			c.nodeTimeout = d
		}
	}
}

// WithNodeArgs appends redis-server flags to every node's command line,
// after the cluster's own (none by default), for example
// WithNodeArgs("--cluster-require-full-coverage", "no"), under which the
// masters that are up keep serving their slots while a dead master's slots
// have no owner, instead of all refusing every key with CLUSTERDOWN.
func WithNodeArgs(args ...string) ClusterOption {
	return func(c *clusterConfig) { c.args = append(c.args, args...) }
}

// WithNodeOptions starts every node with opts too, for example
// WithNodeOptions(WithTLS(ca, true)) for a Cluster that speaks only TLS,
// to clients and on its bus, every node's certificate issued by ca (which
// must not be nil: the nodes verify each other against it). A client then
// trusts ca and presents Nodes[i].TLS.Client when authClients.
func WithNodeOptions(opts ...Option) ClusterOption {
	return func(c *clusterConfig) { c.nodeOpts = append(c.nodeOpts, opts...) }
}

// Cluster is a private Redis Cluster of three masters on 127.0.0.1, with
// WithReplicas n replicas each (none by default): each node is a Redis with
// cluster mode enabled, its cluster bus on Port+10000, and its nodes.conf in
// its Dir. Exported fields are set once by StartCluster or StartClusterWith.
// Its methods are safe for concurrent use.
type Cluster struct {
	// Addrs are the nodes' "127.0.0.1:port" addresses, usable as the
	// seed list of a cluster client.
	Addrs []string
	// Nodes are the node processes, in the order of Addrs. A test may
	// Pause, Kill or Restart one; WaitOK then waits for recovery, and with
	// replicas WaitPromoted waits for a killed master's replica to take
	// over.
	Nodes []*Redis

	cfg clusterConfig
}

// StartCluster starts a three-master cluster without replicas and a
// cluster-node-timeout of 5s: StartClusterWith with no options.
func StartCluster() (*Cluster, error) { return StartClusterWith() }

// StartClusterWith starts 3*(1+replicas) redis-server --cluster-enabled yes
// processes (see WithReplicas, WithNodeTimeout), joins them with redis-cli
// --cluster create --cluster-replicas <replicas>, and returns once every node
// reports cluster_state:ok with all 16384 slots assigned and served and
// every replica has finished its first sync from its master (see WaitOK). A
// failed attempt is retried once from scratch on new ports. The caller must
// Close the cluster. The error matches ErrNotInstalled when redis-server or
// redis-cli is not on PATH.
func StartClusterWith(opts ...ClusterOption) (*Cluster, error) {
	cfg := clusterConfig{nodeTimeout: defaultNodeTimeout}
	for _, o := range opts {
		o(&cfg)
	}
	cli, err := lookBinary("redis-cli")
	if err != nil {
		return nil, err
	}
	var lastErr error
	for range clusterAttempts {
		c, err := startCluster(cli, cfg)
		if err == nil {
			return c, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

// NewClusterWith starts a fresh private cluster with opts for this test, as
// NewCluster does: closed by t.Cleanup, failing (or under -short, when Redis
// is not installed, skipping) the test if it cannot start. It does not need
// Main.
func NewClusterWith(t testing.TB, opts ...ClusterOption) *Cluster {
	t.Helper()
	return newServer(t, "Redis Cluster", func() (*Cluster, error) { return StartClusterWith(opts...) })
}

func startCluster(cli string, cfg clusterConfig) (*Cluster, error) {
	c := &Cluster{cfg: cfg}
	timeoutMS := strconv.FormatInt(max(cfg.nodeTimeout.Milliseconds(), 1), 10)
	for range clusterMasters * (1 + cfg.replicas) {
		opts := append([]Option{withClusterBus(), WithArgs(
			"--cluster-enabled", "yes",
			"--cluster-config-file", "nodes.conf",
			"--cluster-node-timeout", timeoutMS,
			"--cluster-announce-ip", "127.0.0.1",
			// A replica's first sync starts at once instead of after 5s.
			"--repl-diskless-sync-delay", "0",
		)}, cfg.nodeOpts...)
		n, err := StartRedis(append(opts, WithArgs(cfg.args...))...)
		if err != nil {
			_ = c.Close()
			return nil, err
		}
		c.Nodes = append(c.Nodes, n)
		c.Addrs = append(c.Addrs, n.Addr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), clusterCreateTimeout)
	defer cancel()
	var args []string
	if t := c.Nodes[0].TLS; t != nil {
		args = []string{"--tls", "--cacert", t.CA.CertFile, "--cert", t.Client.CertFile, "--key", t.Client.KeyFile}
	}
	args = append(append(args, "--cluster", "create"), c.Addrs...)
	args = append(args, "--cluster-replicas", strconv.Itoa(cfg.replicas), "--cluster-yes")
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
// cluster_slots_assigned and cluster_slots_ok of 16384 and all nodes known,
// CLUSTER SLOTS on every node covers all 16384 slots with known addresses,
// and, with WithReplicas, every replica's link to its master is up with its
// sync done; or until ctx is done, returning the last problem seen. A node
// that is stopped, killed or paused keeps it waiting: after killing a
// master, use WaitPromoted.
func (c *Cluster) WaitOK(ctx context.Context) error {
	return c.poll(ctx, "not ok", c.checkOK)
}

// WaitPromoted polls until the Cluster has recovered from the death of the
// master dead (stopped or killed by the test): every node still running
// answers CLUSTER INFO with cluster_state:ok and all 16384 slots assigned
// and served, and CLUSTER SLOTS on each covers every slot with no slot left
// on dead's address — its replica was promoted and every live node knows.
// It returns nil then, or the last problem seen when ctx is done. It says
// nothing of dead's replicas' data (see WaitReplicated) and does not wait
// for the other nodes' replication links. The moment it returns is the
// promotion time as clients can observe it, within about 20 ms of polling.
func (c *Cluster) WaitPromoted(ctx context.Context, dead *Redis) error {
	return c.poll(ctx, "has not replaced "+dead.Addr, func(ctx context.Context) error {
		live := 0
		for _, n := range c.Nodes {
			if n == dead || !n.Running() {
				continue
			}
			live++
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			err := checkClusterInfo(cctx, n.Addr, -1)
			var ranges []slotRange
			if err == nil {
				ranges, err = readSlots(cctx, n.Addr)
			}
			cancel()
			if err != nil {
				return fmt.Errorf("node %s: %w", n.Addr, err)
			}
			for _, r := range ranges {
				if r.master == dead.Addr {
					return fmt.Errorf("node %s: slots %d-%d still on %s", n.Addr, r.from, r.to, dead.Addr)
				}
			}
		}
		if live == 0 {
			return errors.New("no node is running")
		}
		return nil
	})
}

// poll runs check every clusterPoll until it returns nil or ctx is done.
func (c *Cluster) poll(ctx context.Context, what string, check func(context.Context) error) error {
	for {
		lastErr := check(ctx)
		if lastErr == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testenv: cluster %v %s: %w", c.Addrs, what, lastErr)
		case <-time.After(clusterPoll):
		}
	}
}

func (c *Cluster) checkOK(ctx context.Context) error {
	replicas := 0
	for _, n := range c.Nodes {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		err := checkClusterInfo(cctx, n.Addr, len(c.Nodes))
		if err == nil {
			err = checkSlots(cctx, n.Addr)
		}
		if err == nil && c.cfg.replicas > 0 {
			var replica bool
			replica, err = checkReplication(cctx, n.Addr)
			if replica {
				replicas++
			}
			if err == nil {
				err = c.checkReplicasKnown(cctx, n.Addr)
			}
		}
		cancel()
		if err != nil {
			return fmt.Errorf("node %s: %w", n.Addr, err)
		}
	}
	if want := clusterMasters * c.cfg.replicas; replicas != want {
		return fmt.Errorf("%d nodes are replicas, want %d", replicas, want)
	}
	return nil
}

// checkReplicasKnown verifies that the node at addr knows every master's
// replicas (CLUSTER NODES), as it must to vote for one when its master dies.
func (c *Cluster) checkReplicasKnown(ctx context.Context, addr string) error {
	nodes, err := readNodes(ctx, addr)
	if err != nil {
		return err
	}
	ranges, err := c.slotRanges(addr, nodes)
	if err != nil {
		return err
	}
	for _, r := range ranges {
		if len(r.Replicas) != c.cfg.replicas {
			return fmt.Errorf("CLUSTER NODES shows %d replicas of %s, want %d", len(r.Replicas), r.Master.Addr, c.cfg.replicas)
		}
	}
	return nil
}

// checkClusterInfo verifies that CLUSTER INFO on addr says cluster_state:ok
// with every slot assigned and served, and, unless known < 0, that the node
// knows that many nodes.
func checkClusterInfo(ctx context.Context, addr string, known int) error {
	want := strconv.Itoa(clusterSlots)
	f, err := info(ctx, addr, "cluster-info")
	switch {
	case err != nil:
		return err
	case f["cluster_state"] != "ok":
		return fmt.Errorf("cluster_state:%s", f["cluster_state"])
	case f["cluster_slots_assigned"] != want || f["cluster_slots_ok"] != want:
		return fmt.Errorf("slots assigned %s ok %s", f["cluster_slots_assigned"], f["cluster_slots_ok"])
	case known >= 0 && f["cluster_known_nodes"] != strconv.Itoa(known):
		return fmt.Errorf("cluster_known_nodes:%s", f["cluster_known_nodes"])
	}
	return nil
}

// checkReplication reports whether addr is a replica and, if so, verifies
// that its link to its master is up and its sync finished.
func checkReplication(ctx context.Context, addr string) (replica bool, err error) {
	f, err := info(ctx, addr, "replication")
	if err != nil || f["role"] != "slave" {
		return false, err
	}
	if f["master_link_status"] != "up" || f["master_sync_in_progress"] != "0" {
		return true, fmt.Errorf("replica link %s, sync in progress %s", f["master_link_status"], f["master_sync_in_progress"])
	}
	return true, nil
}

// checkSlots verifies that CLUSTER SLOTS on addr covers every slot and names
// a reachable-looking address for each range.
func checkSlots(ctx context.Context, addr string) error {
	_, err := readSlots(ctx, addr)
	return err
}

// slotRange is one range of CLUSTER SLOTS and its master's "ip:port".
type slotRange struct {
	from, to int
	master   string
}

// readSlots runs CLUSTER SLOTS on addr and checks that its ranges cover
// every slot, each with an address.
func readSlots(ctx context.Context, addr string) ([]slotRange, error) {
	v, err := do(ctx, addr, 0, "CLUSTER", "SLOTS")
	if err != nil {
		return nil, err
	}
	ranges, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("CLUSTER SLOTS: unexpected reply %#v", v)
	}
	var out []slotRange
	covered := 0
	for _, rg := range ranges {
		r, ok := rg.([]any)
		if !ok || len(r) < 3 {
			return nil, fmt.Errorf("CLUSTER SLOTS: bad range %#v", rg)
		}
		from, ok1 := r[0].(int64)
		to, ok2 := r[1].(int64)
		node, ok3 := r[2].([]any)
		if !ok1 || !ok2 || !ok3 || len(node) < 2 {
			return nil, fmt.Errorf("CLUSTER SLOTS: bad range %#v", rg)
		}
		ip, _ := node[0].(string)
		if ip == "" {
			return nil, fmt.Errorf("CLUSTER SLOTS: slots %d-%d without address", from, to)
		}
		port, _ := node[1].(int64)
		if port == 0 {
			return nil, fmt.Errorf("CLUSTER SLOTS: slots %d-%d without port", from, to)
		}
		out = append(out, slotRange{from: int(from), to: int(to), master: net.JoinHostPort(ip, strconv.FormatInt(port, 10))})
		covered += int(to - from + 1)
	}
	if covered != clusterSlots {
		return nil, fmt.Errorf("CLUSTER SLOTS covers %d slots", covered)
	}
	return out, nil
}

// SlotRange is a range of hash slots, From to To inclusive, and the nodes
// that serve it, as one node of the cluster sees them.
type SlotRange struct {
	From, To int
	// Master is the node that owns the slots.
	Master *Redis
	// Replicas are its replicas that the node does not count as failed.
	Replicas []*Redis
}

// Slots returns the slot map of the cluster as the first running node that
// answers CLUSTER NODES sees it: each master's slot ranges, in slot order,
// with its replicas. A master that has failed keeps its slots until one of
// its replicas is promoted (see WaitPromoted); replicas flagged as failed
// are left out. Right after a failure nodes may disagree until the Cluster
// has settled. It fails if no running node answers or if an address is not
// one of Nodes.
func (c *Cluster) Slots(ctx context.Context) ([]SlotRange, error) {
	var lastErr error
	for _, n := range c.Nodes {
		if !n.Running() {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		nodes, err := readNodes(cctx, n.Addr)
		cancel()
		if err != nil {
			lastErr = fmt.Errorf("testenv: CLUSTER NODES on %s: %w", n.Addr, err)
			if ctx.Err() != nil {
				break
			}
			continue
		}
		return c.slotRanges(n.Addr, nodes)
	}
	if lastErr == nil {
		lastErr = fmt.Errorf("testenv: cluster %v: no node is running", c.Addrs)
	}
	return nil, lastErr
}

// slotRanges builds Slots's answer from the CLUSTER NODES of the node at
// from.
func (c *Cluster) slotRanges(from string, nodes []nodeLine) ([]SlotRange, error) {
	byID := make(map[string]*Redis, len(nodes))
	for _, nl := range nodes {
		if r := c.node(nl.addr); r != nil {
			byID[nl.id] = r
		} else {
			return nil, fmt.Errorf("testenv: CLUSTER NODES on %s names %s, not a node of the cluster", from, nl.addr)
		}
	}
	var out []SlotRange
	for _, nl := range nodes {
		if nl.master != "" {
			continue
		}
		var replicas []*Redis
		for _, rl := range nodes {
			if rl.master == nl.id && !rl.failed {
				replicas = append(replicas, byID[rl.id])
			}
		}
		for _, sr := range nl.slots {
			out = append(out, SlotRange{From: sr[0], To: sr[1], Master: byID[nl.id], Replicas: replicas})
		}
	}
	slices.SortFunc(out, func(a, b SlotRange) int { return a.From - b.From })
	return out, nil
}

// nodeLine is one line of CLUSTER NODES.
type nodeLine struct {
	id, addr string   // addr is "ip:port", without the bus port
	master   string   // the master's id for a replica, else ""
	failed   bool     // flagged fail (not just pfail)
	slots    [][2]int // owned slot ranges
}

// readNodes runs CLUSTER NODES on addr and parses it.
func readNodes(ctx context.Context, addr string) ([]nodeLine, error) {
	s, err := doString(ctx, addr, "CLUSTER", "NODES")
	if err != nil {
		return nil, err
	}
	var out []nodeLine
	for line := range strings.SplitSeq(strings.TrimSpace(s), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			return nil, fmt.Errorf("bad line %q", line)
		}
		nl := nodeLine{id: f[0], addr: f[1]}
		if i := strings.IndexAny(nl.addr, "@,"); i >= 0 {
			nl.addr = nl.addr[:i]
		}
		flags := strings.Split(f[2], ",")
		nl.failed = slices.Contains(flags, "fail")
		if slices.Contains(flags, "slave") {
			nl.master = f[3]
		}
		for _, sl := range f[8:] {
			if strings.HasPrefix(sl, "[") {
				continue // a slot being migrated or imported
			}
			lo, hi, ok := strings.Cut(sl, "-")
			if !ok {
				hi = lo
			}
			a, err1 := strconv.Atoi(lo)
			b, err2 := strconv.Atoi(hi)
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("bad slots %q in line %q", sl, line)
			}
			nl.slots = append(nl.slots, [2]int{a, b})
		}
		out = append(out, nl)
	}
	return out, nil
}

// MasterOf returns the node that owns slot (0-16383) according to Slots.
func (c *Cluster) MasterOf(ctx context.Context, slot int) (*Redis, error) {
	ranges, err := c.Slots(ctx)
	if err != nil {
		return nil, err
	}
	for _, r := range ranges {
		if r.From <= slot && slot <= r.To {
			return r.Master, nil
		}
	}
	return nil, fmt.Errorf("testenv: slot %d is not assigned", slot)
}

// node returns the node listening on addr, or nil.
func (c *Cluster) node(addr string) *Redis {
	for _, n := range c.Nodes {
		if n.Addr == addr {
			return n
		}
	}
	return nil
}

// WaitReplicated waits until every online replica of master has processed
// everything master had written when WaitReplicated was called; see the
// package function WaitReplicated.
func (c *Cluster) WaitReplicated(ctx context.Context, master *Redis) error {
	return WaitReplicated(ctx, master)
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
