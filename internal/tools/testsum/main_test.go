package main

import (
	"strings"
	"testing"
)

// stream is a go test -json run of four packages: one passing with a skipped
// test, one whose subtest fails, one that fails to build, and one cut short
// while a test was running (its binary killed by -timeout).
const stream = `{"Action":"start","Package":"m/a"}
{"Action":"run","Package":"m/a","Test":"TestOK"}
{"Action":"output","Package":"m/a","Test":"TestOK","Output":"=== RUN   TestOK\n"}
{"Action":"pass","Package":"m/a","Test":"TestOK","Elapsed":0.1}
{"Action":"run","Package":"m/a","Test":"TestSkip"}
{"Action":"output","Package":"m/a","Test":"TestSkip","Output":"    needs redis-server\n"}
{"Action":"skip","Package":"m/a","Test":"TestSkip"}
{"Action":"pass","Package":"m/a","Elapsed":1.5}
{"Action":"start","Package":"m/b"}
{"Action":"run","Package":"m/b","Test":"TestParent"}
{"Action":"run","Package":"m/b","Test":"TestParent/sub"}
{"Action":"output","Package":"m/b","Test":"TestParent/sub","Output":"    b_test.go:9: k0 = 24; want 8\n"}
{"Action":"fail","Package":"m/b","Test":"TestParent/sub"}
{"Action":"fail","Package":"m/b","Test":"TestParent"}
{"Action":"output","Package":"m/b","Output":"FAIL\n"}
{"Action":"fail","Package":"m/b","Elapsed":2}
{"ImportPath":"m/c [m/c.test]","Action":"build-output","Output":"c/c.go:3:1: syntax error\n"}
{"ImportPath":"m/c [m/c.test]","Action":"build-fail"}
{"Action":"start","Package":"m/c"}
{"Action":"output","Package":"m/c","Output":"FAIL\tm/c [build failed]\n"}
{"Action":"fail","Package":"m/c","Elapsed":0,"FailedBuild":"m/c [m/c.test]"}
not json: printed as it is
{"Action":"start","Package":"m/d"}
{"Action":"run","Package":"m/d","Test":"TestHang"}
{"Action":"output","Package":"m/d","Test":"TestHang","Output":"=== RUN   TestHang\n"}
`

func TestSummary(t *testing.T) {
	var out strings.Builder
	failed, closing := newSummary(&out, "m").read(strings.NewReader(stream))
	got := out.String()
	if !failed {
		t.Error("a run with failures was reported as passing")
	}
	if want := "tests: 1 passed, 2 failed, 1 skipped"; closing != want {
		t.Errorf("closing line %q, want %q", closing, want)
	}
	for _, want := range []string{
		"ok   a ",
		"1 passed, 1 skipped",
		"FAIL b ",
		"k0 = 24; want 8",
		"FAIL c ",
		"c/c.go:3:1: syntax error",
		"not json: printed as it is",
		"FAIL d ",
		"never finished",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("output lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "needs redis-server") {
		t.Errorf("the output of a skipped test was printed:\n%s", got)
	}
	if !strings.HasSuffix(got, closing+"\n") {
		t.Errorf("the output does not end with the closing line:\n%s", got)
	}
}

func TestSummaryPassing(t *testing.T) {
	var out strings.Builder
	failed, closing := newSummary(&out, "").read(strings.NewReader(strings.Join(strings.Split(stream, "\n")[:8], "\n")))
	if failed || closing != "tests: 1 passed, 0 failed, 1 skipped" {
		t.Errorf("a passing run: failed %v, closing %q\n%s", failed, closing, out.String())
	}
	failed, _ = newSummary(&out, "").read(strings.NewReader(""))
	if !failed {
		t.Error("an empty stream (no package tested) was reported as passing")
	}
}
