package testenv

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// scanAll feeds stream to a fresh scanner in pieces of the given sizes
// (cycled) and returns the offsets of every start and end event, and whether
// the scanner gave up.
func scanAll(stream string, sizes []int) (starts, ends []int, bad bool) {
	var s respScanner
	b := []byte(stream)
	off := 0
	for i := 0; off < len(b); i++ {
		piece := b[off:min(off+sizes[i%len(sizes)], len(b))]
		for pos := 0; pos < len(piece); {
			k, ev := s.step(piece[pos:])
			pos += k
			switch ev {
			case scanStart:
				starts = append(starts, off+pos)
			case scanEnd:
				ends = append(ends, off+pos)
			}
		}
		off += len(piece)
	}
	return starts, ends, s.bad
}

func TestProxyRESPScanner(t *testing.T) {
	big := strings.Repeat("x", 100000)
	for _, tc := range []struct {
		name    string
		replies []string // consecutive replies; the stream is their concatenation
		bad     bool
	}{
		{name: "RESP2 scalars", replies: []string{"+OK\r\n", "-ERR no\r\n", ":42\r\n", "$3\r\nfoo\r\n", "$-1\r\n", "$0\r\n\r\n"}},
		{name: "bulk with CRLF inside", replies: []string{"$7\r\na\r\nb\r\n\n\r\n", "+OK\r\n"}},
		{name: "large bulk", replies: []string{"$100000\r\n" + big + "\r\n", ":1\r\n"}},
		{name: "arrays", replies: []string{"*2\r\n$1\r\na\r\n:1\r\n", "*-1\r\n", "*0\r\n", "*2\r\n*1\r\n+x\r\n*0\r\n"}},
		{name: "EVALSHA table with error", replies: []string{"*3\r\n:1\r\n-ERR inner\r\n$-1\r\n"}},
		{name: "RESP3 types", replies: []string{
			"_\r\n", ",3.14\r\n", "#t\r\n", "(12345678901234567890\r\n", "!5\r\nERR x\r\n", "=7\r\ntxt:abc\r\n",
			"%2\r\n+a\r\n:1\r\n+b\r\n*1\r\n:2\r\n", "~2\r\n+a\r\n+b\r\n", "%0\r\n",
		}},
		{name: "HELLO 3 map", replies: []string{"%3\r\n$6\r\nserver\r\n$5\r\nredis\r\n$5\r\nproto\r\n:3\r\n$7\r\nmodules\r\n*0\r\n"}},
		{name: "attribute before a reply", replies: []string{"|1\r\n+ttl\r\n:3\r\n*2\r\n:1\r\n:2\r\n", "|0\r\n+OK\r\n"}},
		{name: "attribute inside an array", replies: []string{"*2\r\n|1\r\n+k\r\n+v\r\n:1\r\n:2\r\n", "+OK\r\n"}},
		{name: "push", replies: []string{">3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$2\r\nhi\r\n", "+OK\r\n"}},
		{name: "LF-only lines", replies: []string{"+OK\n", ":1\n"}},
		{name: "not RESP", replies: []string{"\x00\x00\x00\x10hello"}, bad: true},
		{name: "streamed string", replies: []string{"$?\r\n;4\r\nHell\r\n;0\r\n"}, bad: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			stream := strings.Join(tc.replies, "")
			var wantStarts, wantEnds []int
			off := 0
			for _, r := range tc.replies {
				wantStarts = append(wantStarts, off)
				off += len(r)
				wantEnds = append(wantEnds, off)
			}
			rng := rand.New(rand.NewPCG(1, 2))
			random := make([]int, 50)
			for i := range random {
				random[i] = 1 + rng.IntN(7)
			}
			for _, sizes := range [][]int{{len(stream)}, {1}, {2}, {3}, {5}, random, {4096}} {
				starts, ends, bad := scanAll(stream, sizes)
				if tc.bad {
					if !bad {
						t.Errorf("pieces %v: scanner did not give up on %q (ends %v)", sizes, stream, ends)
					}
					continue
				}
				if bad || !slices.Equal(starts, wantStarts) || !slices.Equal(ends, wantEnds) {
					t.Errorf("pieces %v: starts %v, ends %v, bad %v; want starts %v, ends %v", sizes[:min(len(sizes), 5)], starts, ends, bad, wantStarts, wantEnds)
				}
			}
		})
	}
}

func TestProxyCommandName(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"*2\r\n$3\r\nget\r\n$1\r\nk\r\n", "GET"},
		{"*1\r\n$4\r\nPING\r\n", "PING"},
		{"*3\r\n$7\r\nEVALSHA\r\n$40\r\n", "EVALSHA"},
		{"*2\r\n$7\r\nEVALS", ""},    // cut short
		{"*1\r\n", ""},               // header only
		{"+OK\r\n", ""},              // not a command
		{"*1\r\n:1\r\n", ""},         // not a bulk string
		{"*1\r\n$-1\r\n", ""},        // null
		{"*1\n$5\nmulti\n", "MULTI"}, // LF only
	} {
		if got := commandName([]byte(tc.in)); got != tc.want {
			t.Errorf("commandName(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}
