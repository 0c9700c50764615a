//go:build !linux

package testenv

import (
	"os/exec"
	"time"
)

// startCmd starts cmd. Outside Linux there is no Pdeathsig: servers are
// stopped only by Close (and Main).
func startCmd(cmd *exec.Cmd) error { return cmd.Start() }

// waitStopped is a short grace period outside Linux, where the process state
// cannot be read portably.
func waitStopped(pid int, stopped bool, timeout time.Duration) error {
	time.Sleep(20 * time.Millisecond)
	return nil
}
