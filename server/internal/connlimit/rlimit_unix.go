//go:build unix

package connlimit

import (
	"runtime"
	"syscall"
)

// DefaultMax returns the default cap on open connections: connCap of
// the process's soft RLIMIT_NOFILE, or 0 (no cap) when it cannot be read.
// The Go runtime has already raised the soft limit to the hard one at start
// (Go 1.19 and later), so this is the most the process may open.
func DefaultMax() int {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0
	}
	return Cap(uint64(lim.Cur), runtime.GOMAXPROCS(0))
}
