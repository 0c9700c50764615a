package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"
)

const (
	// SentinelMasterName is the name under which the Sentinel of
	// StartSentinel monitors its master.
	SentinelMasterName = "fgmaster"
	// sentinelReadyTimeout bounds the wait for replication and for the
	// Sentinel to know the replica.
	sentinelReadyTimeout = 15 * time.Second
	// failoverDefaultTimeout bounds Failover when ctx has no deadline.
	failoverDefaultTimeout = 30 * time.Second
)

// Sentinel is a private Redis Sentinel group on 127.0.0.1: a master, one
// replica of it, and one Sentinel monitoring the master as MasterName with
// quorum 1, down-after-milliseconds 1000 and failover-timeout 5000. Because
// the quorum is 1, the Sentinel fails over by itself about a second after the
// current master stops answering (Kill, Pause, Stop).
//
// The exported fields are set once by StartSentinel and never change: Master
// and Replica are the processes as started. After a failover their roles are
// swapped; Roles reports the current ones.
type Sentinel struct {
	// MasterName is the monitored master's name, "fgmaster", to pass to
	// a sentinel-aware client together with SentinelAddrs.
	MasterName string
	// Master is the node started as master; Replica the one started as
	// its replica.
	Master, Replica *Redis
	// SentinelAddrs are the Sentinels' "127.0.0.1:port" addresses.
	SentinelAddrs []string
	// Sentinels are the Sentinel processes, in the order of SentinelAddrs.
	Sentinels []*Redis

	failoverMu sync.Mutex
}

// SentinelOption configures a group started by StartSentinelWith or
// NewSentinelWith.
type SentinelOption func(*sentinelConfig)

type sentinelConfig struct {
	conf     []string // more sentinel.conf lines
	nodeOpts []Option // more options for the master, the replica and the Sentinel
}

// WithSentinelConf adds lines to the Sentinel's sentinel.conf, after the
// monitoring ones: for example an ACL user clients authenticate to the
// Sentinel as, "user app on >secret ~* &* +@all" (the default user stays
// as it is, without a password, which the helpers of this package use).
func WithSentinelConf(lines ...string) SentinelOption {
	return func(c *sentinelConfig) { c.conf = append(c.conf, lines...) }
}

// WithSentinelNodeOptions starts the master, the replica and the Sentinel
// with opts too, for example WithSentinelNodeOptions(WithTLS(ca, true)) for
// a group that speaks only TLS, to clients and between its processes, every
// certificate issued by ca (which must not be nil).
func WithSentinelNodeOptions(opts ...Option) SentinelOption {
	return func(c *sentinelConfig) { c.nodeOpts = append(c.nodeOpts, opts...) }
}

// StartSentinel starts a master, a replica (--replicaof the master) and a
// Sentinel monitoring the master, and returns once the replica is in sync
// (master_link_status:up) and the Sentinel lists it as a healthy replica, so
// that Failover can proceed at once. The caller must Close the group. It is
// StartSentinelWith with no options.
func StartSentinel() (*Sentinel, error) { return StartSentinelWith() }

// StartSentinelWith starts a group as StartSentinel does, with opts.
func StartSentinelWith(opts ...SentinelOption) (*Sentinel, error) {
	var cfg sentinelConfig
	for _, o := range opts {
		o(&cfg)
	}
	s := &Sentinel{MasterName: SentinelMasterName}
	// No diskless-sync delay: the replica syncs at once (also after a
	// failover, when roles are swapped).
	fast := append([]Option{WithArgs("--repl-diskless-sync-delay", "0", "--replica-announce-ip", "127.0.0.1")}, cfg.nodeOpts...)
	var err error
	if s.Master, err = StartRedis(fast...); err != nil {
		return nil, err
	}
	if s.Replica, err = StartRedis(append(fast, WithArgs("--replicaof", "127.0.0.1", strconv.Itoa(s.Master.Port)))...); err != nil {
		_ = s.Close()
		return nil, err
	}
	conf := append([]string{
		fmt.Sprintf("sentinel monitor %s 127.0.0.1 %d 1", s.MasterName, s.Master.Port),
		fmt.Sprintf("sentinel down-after-milliseconds %s 1000", s.MasterName),
		fmt.Sprintf("sentinel failover-timeout %s 5000", s.MasterName),
		fmt.Sprintf("sentinel parallel-syncs %s 1", s.MasterName),
	}, cfg.conf...)
	sn, err := StartRedis(append([]Option{withSentinel(conf...)}, cfg.nodeOpts...)...)
	if err != nil {
		_ = s.Close()
		return nil, err
	}
	s.Sentinels = []*Redis{sn}
	s.SentinelAddrs = []string{sn.Addr}

	ctx, cancel := context.WithTimeout(context.Background(), sentinelReadyTimeout)
	defer cancel()
	if err := s.waitHealthy(ctx, s.Master, s.Replica, true); err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

// waitHealthy waits until replica replicates from master with the link up
// and every Sentinel reports master as the master and replica as a replica
// without down flags (and, with linkOK, with master-link-status ok: a
// Sentinel refreshes that from a healthy replica only every 10 s, so it is
// not awaited after a failover).
func (s *Sentinel) waitHealthy(ctx context.Context, master, replica *Redis, linkOK bool) error {
	return poll(ctx, 50*time.Millisecond, func() error {
		if err := replicating(ctx, replica, master); err != nil {
			return err
		}
		for _, sn := range s.Sentinels {
			addr, err := s.masterAddr(ctx, sn.Addr)
			if err != nil {
				return err
			}
			if addr != master.Addr {
				return fmt.Errorf("sentinel %s reports master %s, want %s", sn.Addr, addr, master.Addr)
			}
			if err := s.replicaKnown(ctx, sn.Addr, replica.Addr, linkOK); err != nil {
				return err
			}
		}
		return nil
	})
}

// replicating checks that replica's ROLE is a connected replica of master.
func replicating(ctx context.Context, replica, master *Redis) error {
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	f, err := info(cctx, replica.Addr, "replication")
	if err != nil {
		return fmt.Errorf("replica %s: %w", replica.Addr, err)
	}
	if f["role"] != "slave" || f["master_port"] != strconv.Itoa(master.Port) || f["master_link_status"] != "up" {
		return fmt.Errorf("replica %s: role:%s master_port:%s master_link_status:%s, want a synced replica of %s",
			replica.Addr, f["role"], f["master_port"], f["master_link_status"], master.Addr)
	}
	return nil
}

// replicaKnown checks that the Sentinel at sentinelAddr lists replicaAddr as
// a replica of the master with no down flags and, with linkOK, with its
// link to the master ok.
func (s *Sentinel) replicaKnown(ctx context.Context, sentinelAddr, replicaAddr string, linkOK bool) error {
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	v, err := do(cctx, sentinelAddr, 0, "SENTINEL", "REPLICAS", s.MasterName)
	if err != nil {
		return fmt.Errorf("sentinel %s: %w", sentinelAddr, err)
	}
	list, _ := v.([]any)
	for _, e := range list {
		m := pairs(e)
		if net.JoinHostPort(m["ip"], m["port"]) != replicaAddr {
			continue
		}
		if m["flags"] != "slave" || (linkOK && m["master-link-status"] != "ok") {
			return fmt.Errorf("sentinel %s: replica %s has flags %q master-link-status %q",
				sentinelAddr, replicaAddr, m["flags"], m["master-link-status"])
		}
		return nil
	}
	return fmt.Errorf("sentinel %s does not list replica %s yet", sentinelAddr, replicaAddr)
}

// pairs turns a flat RESP2 [k1 v1 k2 v2 ...] array into a map.
func pairs(v any) map[string]string {
	m := make(map[string]string)
	arr, _ := v.([]any)
	for i := 0; i+1 < len(arr); i += 2 {
		k, _ := arr[i].(string)
		val, _ := arr[i+1].(string)
		m[k] = val
	}
	return m
}

// masterAddr asks one Sentinel for the master's address.
func (s *Sentinel) masterAddr(ctx context.Context, sentinelAddr string) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	v, err := do(cctx, sentinelAddr, 0, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", s.MasterName)
	if err != nil {
		return "", fmt.Errorf("sentinel %s: %w", sentinelAddr, err)
	}
	hp, _ := v.([]any)
	if len(hp) != 2 {
		return "", fmt.Errorf("sentinel %s: GET-MASTER-ADDR-BY-NAME %s: unexpected reply %#v", sentinelAddr, s.MasterName, v)
	}
	host, _ := hp[0].(string)
	port, _ := hp[1].(string)
	return net.JoinHostPort(host, port), nil
}

// MasterAddr returns the master's address as the (first) Sentinel reports it.
func (s *Sentinel) MasterAddr(ctx context.Context) (string, error) {
	return s.masterAddr(ctx, s.SentinelAddrs[0])
}

// Roles returns the node that the Sentinel currently reports as master and
// the other node. They are Master and Replica before any failover and
// swapped after an odd number of them.
func (s *Sentinel) Roles(ctx context.Context) (master, replica *Redis, err error) {
	addr, err := s.MasterAddr(ctx)
	if err != nil {
		return nil, nil, err
	}
	switch addr {
	case s.Master.Addr:
		return s.Master, s.Replica, nil
	case s.Replica.Addr:
		return s.Replica, s.Master, nil
	}
	return nil, nil, fmt.Errorf("testenv: sentinel reports unknown master %s", addr)
}

// role returns the first element of ROLE ("master", "slave", "sentinel").
func role(ctx context.Context, addr string) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	v, err := do(cctx, addr, 0, "ROLE")
	if err != nil {
		return "", err
	}
	arr, _ := v.([]any)
	if len(arr) == 0 {
		return "", fmt.Errorf("ROLE: unexpected reply %#v", v)
	}
	r, _ := arr[0].(string)
	return r, nil
}

// Failover makes the Sentinel promote the replica with SENTINEL FAILOVER
// (retrying while it answers NOGOODSLAVE or INPROG), waits until the
// Sentinel reports the other node as master and that node answers ROLE
// master, and returns its address. If the old master is still up it is then
// pointed at the new master (REPLICAOF, which the Sentinel would otherwise do
// only after several seconds) and Failover waits until it is a synced
// replica, so the group is healthy again and another Failover can follow.
// Writes the old master accepted after the promotion are lost, as in a real
// failover. ctx bounds the whole operation (30 s if it has no deadline).
// Calls are serialised.
func (s *Sentinel) Failover(ctx context.Context) (newMasterAddr string, err error) {
	s.failoverMu.Lock()
	defer s.failoverMu.Unlock()
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, failoverDefaultTimeout)
		defer cancel()
	}
	oldMaster, newMaster, err := s.Roles(ctx)
	if err != nil {
		return "", err
	}
	sentinel := s.SentinelAddrs[0]
	err = poll(ctx, 100*time.Millisecond, func() error {
		_, err := do(ctx, sentinel, 0, "SENTINEL", "FAILOVER", s.MasterName)
		var re ReplyError
		if errors.As(err, &re) && !strings.HasPrefix(string(re), "NOGOODSLAVE") && !strings.HasPrefix(string(re), "INPROG") {
			return permanent{err}
		}
		return err
	})
	if err != nil {
		return "", fmt.Errorf("testenv: SENTINEL FAILOVER %s: %w%s", s.MasterName, err, s.Sentinels[0].logTail())
	}
	err = poll(ctx, 50*time.Millisecond, func() error {
		addr, err := s.masterAddr(ctx, sentinel)
		if err != nil {
			return err
		}
		if addr != newMaster.Addr {
			return fmt.Errorf("sentinel still reports master %s", addr)
		}
		r, err := role(ctx, newMaster.Addr)
		if err != nil {
			return err
		}
		if r != "master" {
			return fmt.Errorf("%s has ROLE %s", newMaster.Addr, r)
		}
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("testenv: failover to %s: %w%s", newMaster.Addr, err, s.Sentinels[0].logTail())
	}
	if ping(ctx, oldMaster.Addr) != nil {
		return newMaster.Addr, nil // old master is down; the Sentinel will reconfigure it when it returns
	}
	if _, err := do(ctx, oldMaster.Addr, 0, "REPLICAOF", "127.0.0.1", strconv.Itoa(newMaster.Port)); err != nil {
		return "", fmt.Errorf("testenv: REPLICAOF on old master %s: %w", oldMaster.Addr, err)
	}
	if err := s.waitHealthy(ctx, newMaster, oldMaster, false); err != nil {
		return "", fmt.Errorf("testenv: after failover to %s: %w", newMaster.Addr, err)
	}
	return newMaster.Addr, nil
}

// permanent wraps an error that poll must not retry.
type permanent struct{ err error }

func (p permanent) Error() string { return p.err.Error() }

// poll calls f every interval until it returns nil, returns a permanent
// error, or ctx is done; then it returns f's last error.
func poll(ctx context.Context, interval time.Duration, f func() error) error {
	for {
		err := f()
		if err == nil {
			return nil
		}
		var p permanent
		if errors.As(err, &p) {
			return p.err
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%w (gave up: %v)", err, ctx.Err())
		case <-time.After(interval):
		}
	}
}

// Close stops the Sentinel, the replica and the master and removes their
// directories. It is idempotent and returns the processes' errors joined
// (nil if none).
func (s *Sentinel) Close() error {
	var errs []error
	for _, sn := range s.Sentinels {
		errs = append(errs, sn.Close())
	}
	for _, n := range []*Redis{s.Replica, s.Master} {
		if n != nil {
			errs = append(errs, n.Close())
		}
	}
	return errors.Join(errs...)
}

// WaitSwitchedTo waits until the Sentinel reports r as the master (after a
// failover: the former replica), polling every 20 ms, or until ctx is done.
func (s *Sentinel) WaitSwitchedTo(ctx context.Context, r *Redis) error {
	for {
		addr, err := s.MasterAddr(ctx)
		if err == nil && addr == r.Addr {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testenv: the Sentinel did not switch to %s: last answer %q, %v%s", r.Addr, addr, err, s.Sentinels[0].LogTail())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
