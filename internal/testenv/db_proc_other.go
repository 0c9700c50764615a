//go:build !linux

package testenv

import (
	"syscall"
	"time"
)

// descendants is not available outside Linux: signals reach the server's
// process group only.
func descendants(pid int) []int { return nil }

// anyAlive reports whether process group pgid or one of pids still exists.
func anyAlive(pgid int, pids []int) bool {
	if syscall.Kill(-pgid, 0) == nil {
		return true
	}
	for _, p := range pids {
		if syscall.Kill(p, 0) == nil {
			return true
		}
	}
	return false
}

// waitStoppedOrGone is a short grace period outside Linux.
func waitStoppedOrGone(pid int, timeout time.Duration) { time.Sleep(5 * time.Millisecond) }
