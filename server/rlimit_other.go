//go:build !unix

package server

// defaultMaxConns returns 0, no cap: there is no descriptor limit to derive
// one from on this system. Config.MaxConns sets one.
func defaultMaxConns() int { return 0 }
