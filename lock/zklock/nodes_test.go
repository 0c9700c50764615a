package zklock

import (
	"slices"
	"strings"
	"testing"
)

func TestParseChild(t *testing.T) {
	guid := strings.Repeat("ab", 16)
	cases := []struct {
		name string
		ok   bool
		kind string
		seq  int64
	}{
		{"_c_" + guid + "-lock-0000000012", true, "lock", 12},
		{"_c_" + guid + "-read-0000000000", true, "read", 0},
		{"_c_" + guid + "-write-2147483647", true, "write", 2147483647},
		{"lock-0000000003", true, "lock", 3},                                         // unprotected node of another client
		{"_c_1b4e28ba-2fa1-11d2-883f-0016d3cca427-lock-0000000004", true, "lock", 4}, // Curator: a UUID with dashes
		{"lock-12", false, "", 0},
		{"lock-00000000x2", false, "", 0},
		{"lock--2147483648", false, "", 0}, // sequence overflow: out of any queue
		{"config", false, "", 0},
		{"", false, "", 0},
	}
	for _, c := range cases {
		got, ok := parseChild(c.name)
		if ok != c.ok || (ok && (got.kind != c.kind || got.seq != c.seq || got.name != c.name)) {
			t.Errorf("parseChild(%q) = %+v, %v; want kind %q seq %d, %v", c.name, got, ok, c.kind, c.seq, c.ok)
		}
	}
}

func TestParseChildrenOrder(t *testing.T) {
	// The protection id comes first in the name: names do not sort by
	// sequence, the queue must.
	nodes := parseChildren([]string{
		"_c_ff-lock-0000000002", "_c_00-lock-0000000010", "junk", "_c_aa-lock-0000000001",
	})
	var got []int64
	for _, n := range nodes {
		got = append(got, n.seq)
	}
	if want := []int64{1, 2, 10}; !slices.Equal(got, want) {
		t.Fatalf("queue order %v, want %v", got, want)
	}
	if i := indexOf(nodes, "_c_00-lock-0000000010"); i != 2 {
		t.Fatalf("indexOf = %d, want 2", i)
	}
	if i := indexOf(nodes, "gone"); i != -1 {
		t.Fatalf("indexOf(gone) = %d, want -1", i)
	}
}

// TestFindProtected is the look-up that recovers a node whose create reply
// was lost: the client's own node is recognised by its GUID, and nothing
// else is.
func TestFindProtected(t *testing.T) {
	mine, other := newGUID(), newGUID()
	if len(mine) != 32 || mine == other {
		t.Fatalf("GUIDs %q and %q", mine, other)
	}
	children := []string{
		protectedName(other, kindLock) + "0000000001",
		"lock-0000000002",
		protectedName(mine, kindLock) + "0000000003",
		protectedName(mine[:31], kindLock) + "0000000004", // a prefix of ours is not ours
	}
	got, ok := findProtected(children, mine)
	if !ok || got != children[2] {
		t.Fatalf("findProtected = %q, %v; want %q", got, ok, children[2])
	}
	if got, ok := findProtected(children[:2], mine); ok {
		t.Fatalf("found %q for a create that was not applied", got)
	}
	if _, ok := findProtected(children, ""); ok {
		t.Fatal("an empty GUID matched")
	}
	if _, ok := findProtected(nil, mine); ok {
		t.Fatal("found a node in an empty list")
	}
}

func TestHoldData(t *testing.T) {
	for _, h := range []holdData{{1, "owner-1"}, {42, "with spaces in it"}, {3, ""}} {
		got, err := decodeHold(h.encode())
		if err != nil || got != h {
			t.Errorf("decode(encode(%+v)) = %+v, %v", h, got, err)
		}
	}
	for _, bad := range []string{"", "owner", "0 owner", "-1 owner", "x owner"} {
		if _, err := decodeHold([]byte(bad)); err == nil {
			t.Errorf("decodeHold(%q) accepted", bad)
		}
	}
}

// queue builds a queue from kinds, with sequence numbers 0, 1, ...
func queue(kinds ...string) []child {
	var nodes []child
	for i, k := range kinds {
		nodes = append(nodes, child{name: k + string(rune('a'+i)), kind: k, seq: int64(i)})
	}
	return nodes
}

func names(nodes []child) []string {
	var out []string
	for _, n := range nodes {
		out = append(out, n.name)
	}
	return out
}

func TestRecipes(t *testing.T) {
	mutex := recipe{kind: kindLock, permits: 1}
	read := recipe{kind: kindRead, permits: 1}
	write := recipe{kind: kindWrite, permits: 1}
	sem := recipe{kind: kindLease, permits: 2}
	cases := []struct {
		name  string
		r     recipe
		q     []child
		i     int
		admit bool
		watch []string
	}{
		{"mutex head", mutex, queue("lock", "lock"), 0, true, nil},
		{"mutex waiter watches predecessor", mutex, queue("lock", "lock", "lock"), 2, false, []string{"lockb"}},
		{"readers share", read, queue("read", "read", "read"), 2, true, nil},
		{"reader waits for lower writer", read, queue("read", "write", "read", "read"), 3, false, []string{"writeb"}},
		{"reader after writer then readers", read, queue("write", "read", "read"), 2, false, []string{"writea"}},
		{"writer waits for readers", write, queue("read", "read", "write"), 2, false, []string{"readb"}},
		{"writer head", write, queue("write", "read"), 0, true, nil},
		{"foreign node excludes readers", read, queue("lock", "read"), 1, false, []string{"locka"}},
		{"semaphore holders", sem, queue("lease", "lease", "lease"), 1, true, nil},
		{"semaphore first waiter watches holders", sem, queue("lease", "lease", "lease", "lease"), 2, false, []string{"leasea", "leaseb"}},
		{"semaphore later waiter watches predecessor", sem, queue("lease", "lease", "lease", "lease"), 3, false, []string{"leasec"}},
	}
	for _, c := range cases {
		if got := c.r.admitted(c.q, c.i); got != c.admit {
			t.Errorf("%s: admitted = %v, want %v", c.name, got, c.admit)
			continue
		}
		if !c.admit {
			if got := names(c.r.watch(c.q, c.i)); !slices.Equal(got, c.watch) {
				t.Errorf("%s: watch %v, want %v", c.name, got, c.watch)
			}
		}
	}
	if mutex.poke() || read.poke() || (recipe{kind: kindLease, permits: 1}).poke() || !sem.poke() {
		t.Error("only a semaphore of several permits pokes")
	}
}

func TestCheckPath(t *testing.T) {
	for _, ok := range []string{"/a", "/locks/orders-42", "/a/b/c"} {
		if err := checkPath(ok); err != nil {
			t.Errorf("checkPath(%q): %v", ok, err)
		}
	}
	bad := map[string]string{
		"":        `zklock: path is empty`,
		"a/b":     `zklock: path must be absolute, got "a/b"`,
		"/":       `zklock: path must not be the root "/"`,
		"/a/":     `zklock: path must not end with "/", got "/a/"`,
		"/a//b":   `zklock: path must not have an empty, "." or ".." element, got "/a//b"`,
		"/a/./b":  `zklock: path must not have an empty, "." or ".." element, got "/a/./b"`,
		"/a/../b": `zklock: path must not have an empty, "." or ".." element, got "/a/../b"`,
		"/a\x00b": `zklock: path must not contain NUL, got "/a\x00b"`,
	}
	for p, want := range bad {
		if err := checkPath(p); err == nil || err.Error() != want {
			t.Errorf("checkPath(%q) = %v, want %q", p, err, want)
		}
	}
}
