package testenv

import (
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"sync"
)

// Ports are drawn at random from [portMin, portMax): below the Linux
// ephemeral range (32768+) even with the cluster bus offset, so that neither
// a server's port nor its bus port can be taken meanwhile by some client's
// outgoing connection (which matters for Restart on the same port). 6379,
// 16379 and 26379 (the defaults of a machine's own Redis and Sentinel) are
// never used.
const (
	portMin       = 11000
	portMax       = 22700
	clusterBusGap = 10000
	portAttempts  = 200
)

var (
	portsMu  sync.Mutex
	portsUse = make(map[int]bool) // ports handed out in this process
)

// reservePort returns a port on 127.0.0.1 that nothing listens on right now
// (and, with bus, whose port+10000 is free too) and that this process has not
// handed out before. Another process may still grab it before the server
// binds; callers retry the start with a new port when binding fails.
func reservePort(bus bool) (int, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	for range portAttempts {
		p := portMin + rand.IntN(portMax-portMin)
		if portsUse[p] || portsUse[p+clusterBusGap] || p == 16379 || p+clusterBusGap == 26379 {
			continue
		}
		if !portFree(p) || (bus && !portFree(p+clusterBusGap)) {
			continue
		}
		portsUse[p] = true
		if bus {
			portsUse[p+clusterBusGap] = true
		}
		return p, nil
	}
	return 0, fmt.Errorf("testenv: no free port pair found in [%d,%d) after %d tries", portMin, portMax, portAttempts)
}

func portFree(p int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(p)))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}
