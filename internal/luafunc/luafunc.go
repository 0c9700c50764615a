// Package luafunc reads the top-level local functions of a Lua library, the
// form floodgate's scripts share code in: lock/lua/common.lua, whose
// functions a lock script carries when it calls them, and
// ratelimit/lua/codec.lua, whose functions generated scripts inline.
//
// A function starts at a line that begins with "local function " and ends at
// the first line that is exactly "end", or on its own line when that line
// ends with " end" (a one-liner). Nothing else of Lua is parsed.
package luafunc

import (
	"fmt"
	"strings"
)

// Func is one top-level local function.
type Func struct {
	Name   string
	Params string   // as written between the parentheses
	Body   []string // the lines between the signature and "end"; a one-liner's body is one line
	Src    string   // the function's text, with the lines before it since the previous function's end
}

// Split returns the functions of src, in order, and the lines of src outside
// every function (rest). It fails on a function without its end or with a
// signature it cannot read.
func Split(src string) (funcs []Func, rest string, err error) {
	var (
		chunk, other strings.Builder
		cur          *Func
	)
	for line := range strings.Lines(src) {
		chunk.WriteString(line)
		l := strings.TrimRight(line, "\n")
		if cur == nil {
			sig, ok := strings.CutPrefix(l, "local function ")
			if !ok {
				other.WriteString(line)
				continue
			}
			open, end := strings.IndexByte(sig, '('), strings.IndexByte(sig, ')')
			if open <= 0 || end < open {
				return nil, "", fmt.Errorf("luafunc: cannot read the signature %q", l)
			}
			cur = &Func{Name: sig[:open], Params: sig[open+1 : end]}
			body, oneLiner := strings.CutSuffix(strings.TrimSpace(sig[end+1:]), " end")
			if !oneLiner {
				continue
			}
			cur.Body = []string{body}
		} else if l != "end" {
			cur.Body = append(cur.Body, l)
			continue
		}
		cur.Src = chunk.String()
		funcs = append(funcs, *cur)
		chunk.Reset()
		cur = nil
	}
	if cur != nil {
		return nil, "", fmt.Errorf("luafunc: function %s has no end", cur.Name)
	}
	return funcs, other.String(), nil
}
