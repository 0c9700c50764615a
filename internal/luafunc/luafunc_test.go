package luafunc

import (
	"reflect"
	"testing"
)

func TestSplit(t *testing.T) {
	src := "-- a library\nlocal K = 1\n\n-- f: doc\nlocal function f(x, y)\n  if x then return y end\n  return x\nend\nlocal function g(x) return x + K end\n-- trailing\n"
	funcs, rest, err := Split(src)
	if err != nil {
		t.Fatal(err)
	}
	want := []Func{
		{Name: "f", Params: "x, y", Body: []string{"  if x then return y end", "  return x"},
			Src: "-- a library\nlocal K = 1\n\n-- f: doc\nlocal function f(x, y)\n  if x then return y end\n  return x\nend\n"},
		{Name: "g", Params: "x", Body: []string{"return x + K"}, Src: "local function g(x) return x + K end\n"},
	}
	if !reflect.DeepEqual(funcs, want) {
		t.Errorf("functions:\n%#v\nwant\n%#v", funcs, want)
	}
	if wantRest := "-- a library\nlocal K = 1\n\n-- f: doc\n-- trailing\n"; rest != wantRest {
		t.Errorf("rest %q, want %q", rest, wantRest)
	}
	for _, bad := range []string{"local function f(x)\n  return x\n", "local function f\nend\n", "local function (x)\nend\n"} {
		if _, _, err := Split(bad); err == nil {
			t.Errorf("Split(%q): no error", bad)
		}
	}
}
