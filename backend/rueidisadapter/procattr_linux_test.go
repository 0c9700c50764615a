//go:build linux

package rueidisadapter

import "syscall"

// childAttr makes the kernel kill a test's redis-server when the test binary
// dies, so that no server outlives a crashed or killed test run.
func childAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
