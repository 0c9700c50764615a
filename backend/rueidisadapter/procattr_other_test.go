//go:build !linux

package rueidisadapter

import "syscall"

// childAttr: Pdeathsig exists on Linux only; elsewhere the test's Cleanup
// alone stops the server.
func childAttr() *syscall.SysProcAttr { return nil }
