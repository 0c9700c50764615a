package ratelimit

import (
	"fmt"
	"strings"

	"github.com/floodgate-dev/floodgate/internal/luafunc"
)

// Generated scripts (gen.go) inline lua/codec.lua's functions instead of
// defining them: each run of a script executes its `local function`
// statements, and making those closures cost Redis about 0.2 µs per call,
// with another 0.1 µs for the calls, about a tenth of a one-rule decision on
// a hot key. codec.lua stays the one statement of the formats: limits.lua
// calls its functions, and the generator copies their bodies from it. A
// body's return statements must end their line or stand as
// "then return ... end".

// codecHead is codec.lua without its functions (its constants), and
// codecFuncs its functions by name (package luafunc).
var codecHead, codecFuncs = splitCodec(luaCodec)

func splitCodec(src string) (string, map[string]luafunc.Func) {
	funcs, head, err := luafunc.Split(src)
	if err != nil {
		panic("ratelimit: lua/codec.lua: " + err.Error())
	}
	byName := make(map[string]luafunc.Func, len(funcs))
	for _, f := range funcs {
		byName[f.Name] = f
	}
	return head, byName
}

// inlineCall writes Lua that does `outs = name(args)` for codec.lua's
// function name without calling it: its parameters become locals of a block
// and each return assigns outs and leaves the block. outs must be declared
// by the caller, and no local of the body may have an out's name.
func inlineCall(name, args, outs string) string {
	fn, ok := codecFuncs[name]
	if !ok {
		panic("ratelimit: codec.lua has no function " + name)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "do\nlocal %s = %s\nrepeat\n", fn.Params, args)
	for _, line := range fn.Body {
		for _, out := range strings.Split(outs, ",") {
			if strings.Contains(line, "local "+strings.TrimSpace(out)) {
				panic("ratelimit: codec.lua: " + name + " has a local named like its out " + out)
			}
		}
		i := strings.Index(line, "return ")
		if i < 0 {
			b.WriteString(line + "\n")
			continue
		}
		expr := line[i+len("return "):]
		if strings.Contains(expr, "--") {
			panic("ratelimit: codec.lua: " + name + " has a comment after a return")
		}
		tail := ""
		if strings.HasSuffix(expr, " end") && strings.Contains(line[:i], " then") {
			expr, tail = strings.TrimSuffix(expr, " end"), " end"
		}
		fmt.Fprintf(&b, "%s%s = %s break%s\n", line[:i], outs, expr, tail)
	}
	b.WriteString("until true\nend\n")
	return b.String()
}
