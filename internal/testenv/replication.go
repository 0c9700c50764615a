package testenv

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// WaitReplicated waits until every online replica of master has processed
// everything master had written when WaitReplicated was called (its
// master_repl_offset, from INFO replication), so that killing master then
// loses none of it; or until ctx is done. It fails at once if master has no
// online replica. Unlike the WAIT command it needs no client connection of
// the writer's. For a Cluster's or a Sentinel group's master alike.
func WaitReplicated(ctx context.Context, master *Redis) error {
	f, err := info(ctx, master.Addr, "replication")
	if err != nil {
		return fmt.Errorf("testenv: INFO replication on %s: %w", master.Addr, err)
	}
	target, err := strconv.ParseInt(f["master_repl_offset"], 10, 64)
	if err != nil || f["role"] != "master" {
		return fmt.Errorf("testenv: %s is %s with offset %q, want a master", master.Addr, f["role"], f["master_repl_offset"])
	}
	check := func(ctx context.Context) error {
		f, err := info(ctx, master.Addr, "replication")
		if err != nil {
			return err
		}
		online := 0
		for k, v := range f {
			if !strings.HasPrefix(k, "slave") || !strings.Contains(v, "state=online") {
				continue
			}
			online++
			for field := range strings.SplitSeq(v, ",") {
				if s, ok := strings.CutPrefix(field, "offset="); ok {
					if off, _ := strconv.ParseInt(s, 10, 64); off < target {
						return fmt.Errorf("%s at offset %d", k, off)
					}
				}
			}
		}
		if online == 0 {
			return errors.New("no online replica")
		}
		return nil
	}
	for {
		lastErr := check(ctx)
		if lastErr == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("testenv: replicas of %s behind offset %d: %w", master.Addr, target, lastErr)
		case <-time.After(clusterPoll):
		}
	}
}
