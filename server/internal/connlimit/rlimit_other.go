//go:build !unix

package connlimit

// DefaultMax returns 0, no cap: there is no descriptor limit to derive
// one from on this system. The server's MaxConns sets one.
func DefaultMax() int { return 0 }
