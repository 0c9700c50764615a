package zklock

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// protectedPrefix starts the name of every node this package creates:
// "_c_<guid>-<kind>-<sequence>", the form of Curator's protected nodes and of
// go-zookeeper's zk.Lock, so that a client whose create reply was lost finds
// its node by the GUID.
const protectedPrefix = "_c_"

// Node kinds: the part of a node name before its sequence number.
const (
	kindLock  = "lock"  // Mutex
	kindRead  = "read"  // RWMutex, read side
	kindWrite = "write" // RWMutex, write side
	kindLease = "lease" // Semaphore
)

// child is one node under a lock path.
type child struct {
	name string // the node's name, without the lock path
	kind string // kindLock, kindRead, ...: what comes before "-<sequence>"
	seq  int64  // the sequence number ZooKeeper appended
}

// parseChild parses a sequential node name "…<kind>-<10 digits>", with or
// without the protection prefix. Nodes that carry no sequence number are not
// part of any queue and are reported as !ok.
func parseChild(name string) (child, bool) {
	i := strings.LastIndexByte(name, '-')
	if i < 0 || len(name)-i-1 != 10 {
		return child{}, false
	}
	seq, err := strconv.ParseUint(name[i+1:], 10, 31)
	if err != nil {
		return child{}, false
	}
	rest := name[:i]
	kind := rest[strings.LastIndexByte(rest, '-')+1:]
	return child{name: name, kind: kind, seq: int64(seq)}, true
}

// parseChildren returns the sequential nodes among names, in queue order
// (by sequence number).
func parseChildren(names []string) []child {
	nodes := make([]child, 0, len(names))
	for _, n := range names {
		if c, ok := parseChild(n); ok {
			nodes = append(nodes, c)
		}
	}
	slices.SortFunc(nodes, func(a, b child) int { return compareInt(a.seq, b.seq) })
	return nodes
}

func compareInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// indexOf returns the position of the node called name in nodes, or -1.
func indexOf(nodes []child, name string) int {
	return slices.IndexFunc(nodes, func(c child) bool { return c.name == name })
}

// newGUID returns the random protection id of one create: 32 hex digits.
func newGUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// protectedName returns the name to create, without the sequence that
// ZooKeeper appends: "_c_<guid>-<kind>-".
func protectedName(guid, kind string) string {
	return protectedPrefix + guid + "-" + kind + "-"
}

// findProtected returns the child created with the protection id guid, if
// any. It is how a client recovers the node of a create whose reply was lost
// with the connection: the create may or may not have been applied, and the
// GUID in the name tells which.
func findProtected(children []string, guid string) (string, bool) {
	if guid == "" {
		return "", false
	}
	prefix := protectedPrefix + guid + "-"
	for _, c := range children {
		if strings.HasPrefix(c, prefix) {
			return c, true
		}
	}
	return "", false
}

// holdData is the content of a node: the owner id and its hold count, for
// re-entry. It is stored as "<count> <owner>".
type holdData struct {
	count int64
	owner string
}

func (h holdData) encode() []byte {
	return []byte(strconv.FormatInt(h.count, 10) + " " + h.owner)
}

var errBadData = errors.New("zklock: node data is not \"<count> <owner>\"")

// decodeHold parses node data written by encode. Nodes of other clients
// (zk.Lock, Curator) fail to parse; their owner matches no one.
func decodeHold(b []byte) (holdData, error) {
	s := string(b)
	i := strings.IndexByte(s, ' ')
	if i < 0 {
		return holdData{}, errBadData
	}
	n, err := strconv.ParseInt(s[:i], 10, 64)
	if err != nil || n < 1 {
		return holdData{}, errBadData
	}
	return holdData{count: n, owner: s[i+1:]}, nil
}

// recipe decides, from the queue, who holds the lock and whom a waiter
// watches. Every node of the lock path takes part in the queue, whatever
// its kind, so that a foreign node is never overtaken.
type recipe struct {
	kind    string // kind of the nodes this side creates
	permits int    // Semaphore: holders at once; 1 for the others
}

// admitted reports whether nodes[i] holds the lock. Once admitted, a node
// stays admitted until it is deleted: only lower nodes decide, and no node
// lower than an existing one is ever created.
func (r recipe) admitted(nodes []child, i int) bool {
	switch r.kind {
	case kindRead:
		// A reader waits for every lower node that is not a reader.
		for _, c := range nodes[:i] {
			if c.kind != kindRead {
				return false
			}
		}
		return true
	case kindLease:
		return i < r.permits
	}
	return i == 0
}

// watch returns the nodes the waiter nodes[i] watches: their deletion (or a
// change of their data, for the semaphore) is what can admit it. Each node
// is watched by a bounded number of waiters, so a release wakes no herd.
//
//   - Mutex and writer: the next lower node, of any kind. The writer waits
//     for readers queued before it, and readers queued after it wait for it,
//     so writers are not starved.
//   - Reader: the closest lower node that is not a reader; the readers that
//     wait for one writer are admitted together when it goes.
//   - Semaphore: the first waiter (i == permits) watches every holder, since
//     the release of any one admits it; a later waiter watches the node just
//     before it, which changes its data when it is admitted (see poke) or is
//     deleted when it gives up.
func (r recipe) watch(nodes []child, i int) []child {
	switch r.kind {
	case kindRead:
		for j := i - 1; j >= 0; j-- {
			if nodes[j].kind != kindRead {
				return nodes[j : j+1]
			}
		}
		return nil
	case kindLease:
		if i == r.permits {
			return nodes[:i]
		}
	}
	return nodes[i-1 : i]
}

// poke reports whether a newly admitted node must touch its data to wake
// the waiter behind it, which then becomes the first waiter and must watch
// every holder: only a semaphore of several permits needs it.
func (r recipe) poke() bool { return r.kind == kindLease && r.permits > 1 }

// checkPath validates a lock path: absolute, no trailing slash, not the
// root, and no empty, "." or ".." element.
func checkPath(path string) error {
	switch {
	case path == "":
		return errors.New("zklock: path is empty")
	case !strings.HasPrefix(path, "/"):
		return fmt.Errorf("zklock: path must be absolute, got %q", path)
	case path == "/":
		return errors.New("zklock: path must not be the root \"/\"")
	case strings.HasSuffix(path, "/"):
		return fmt.Errorf("zklock: path must not end with \"/\", got %q", path)
	case strings.ContainsRune(path, 0):
		return fmt.Errorf("zklock: path must not contain NUL, got %q", path)
	}
	for _, el := range strings.Split(path[1:], "/") {
		if el == "" || el == "." || el == ".." {
			return fmt.Errorf("zklock: path must not have an empty, \".\" or \"..\" element, got %q", path)
		}
	}
	return nil
}
