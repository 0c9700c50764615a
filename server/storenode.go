package server

import (
	"regexp"
	"sync"
)

// nodeAddr finds the store node a client error names: the remote end of
// "write tcp A->B: …" or "read tcp A->B", or the address of "dial tcp B: …".
var nodeAddr = regexp.MustCompile(`(?:->|dial tcp )(\[[0-9A-Fa-f:.]+\]:\d+|[A-Za-z0-9.-]+:\d+)`)

// storeNode returns the node a store error names, or "unknown" (a timeout
// names none). For the operator's metrics and logs only: callers never see it.
func storeNode(err error) string {
	if m := nodeAddr.FindStringSubmatch(err.Error()); m != nil {
		return m[1]
	}
	return "unknown"
}

// maxNodeLabels bounds the node label of floodgate_backend_node_errors_total:
// a Cluster has a handful of nodes, but an error text could name anything.
const maxNodeLabels = 64

// nodeLabels hands out node label values, at most maxNodeLabels of them;
// the rest count as "other".
type nodeLabels struct {
	mu   sync.Mutex
	seen map[string]bool
}

func (n *nodeLabels) label(node string) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.seen == nil {
		n.seen = map[string]bool{}
	}
	if !n.seen[node] {
		if len(n.seen) >= maxNodeLabels {
			return "other"
		}
		n.seen[node] = true
	}
	return node
}
