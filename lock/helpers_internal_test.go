package lock

import (
	"strings"
	"testing"
)

// TestScriptHelpers: every local function of lua/common.lua is found, and
// a script carries exactly the helpers it calls, directly or through
// another helper.
func TestScriptHelpers(t *testing.T) {
	helpers := helpersOf(luaCommon)
	if got, want := len(helpers), strings.Count(luaCommon, "\nlocal function "); got != want {
		t.Fatalf("%d helpers found, common.lua has %d", got, want)
	}
	var names []string
	for _, h := range helpers {
		names = append(names, h.name)
	}
	t.Logf("helpers: %s", strings.Join(names, " "))
	has := func(src, name string) bool { return strings.Contains(src, "local function "+name+"(") }
	acquire := withHelpers(luaCommon, luaAcquire)
	for _, name := range []string{"clock", "reenter", "record", "logged", "int", "unqueue", "firstLive"} {
		if !has(acquire, name) {
			t.Errorf("acquire.lua lacks %s", name)
		}
	}
	for _, name := range []string{"sharedTake", "rwWake", "semWake", "cancel", "release", "bury", "sweep", "sharedLive"} {
		if has(acquire, name) {
			t.Errorf("acquire.lua carries %s, which it never calls", name)
		}
	}
	// semWake calls firstLive: a script that calls only semWake gets both.
	if src := withHelpers(luaCommon, "semWake(KEYS[1], nil, KEYS[2], KEYS[3], 1, 'c', 0)"); !has(src, "firstLive") || !has(src, "int") || has(src, "nextToken") {
		t.Errorf("semWake's helpers: %s", src)
	}
	if got := withHelpers(luaCommon, "return 1"); got != "\nreturn 1" {
		t.Errorf("a script calling no helper: %q", got)
	}
}
