package main

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	fg "github.com/floodgate-dev/floodgate"
)

// floodgate runs the command line in process.
func floodgate(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = run(args, &out, &errOut)
	return code, out.String(), errOut.String()
}

func writeFile(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestConfigCheckOK(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "b.yaml", "domain: b\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	a := writeFile(t, dir, "a.yml", "domain: a\ndescriptors:\n  - key: k\n  - key: j\n    descriptors:\n      - key: x\n        rate_limit: {unlimited: true}\n")

	code, out, errOut := floodgate(t, "config", "check", dir)
	want := a + `: domain "a": 3 descriptors, 1 limit` + "\n" +
		filepath.Join(dir, "b.yaml") + `: domain "b": 1 descriptor, 1 limit` + "\n"
	if code != 0 || out != want || errOut != "" {
		t.Errorf("exit %d\nstdout %q\nwant   %q\nstderr %q", code, out, want, errOut)
	}

	// The configurations of server/config's tests, envoyproxy/ratelimit's schema.
	code, out, errOut = floodgate(t, "config", "check", "../../server/config/testdata", a)
	if code != 0 || strings.Count(out, "\n") != 7 || !strings.Contains(out, `messaging.yaml: domain "messaging": 11 descriptors, 8 limits`) {
		t.Errorf("exit %d\nstdout %s\nstderr %s", code, out, errOut)
	}
}

func TestConfigCheckErrors(t *testing.T) {
	dir := t.TempDir()
	bad := writeFile(t, dir, "rules.yaml", `domain: d
descriptors:
  - key: a
    rate_limit:
      unit: second
      requests_per_unitt: 5
  - key: b
    rate_limit:
      unit: fortnight
`)
	good := writeFile(t, t.TempDir(), "good.yaml", "domain: g\n")
	code, out, errOut := floodgate(t, "config", "check", good, bad)
	wantErr := bad + `:6: unknown key "requests_per_unitt" in rate_limit (did you mean "requests_per_unit"?)` + "\n" +
		bad + `:9: invalid unit "fortnight" (want second, minute, hour, day, week, month or year)` + "\n"
	if code != 1 || errOut != wantErr || out != good+`: domain "g": 0 descriptors, 0 limits`+"\n" {
		t.Errorf("exit %d\nstdout %q\nstderr %q\nwant   %q", code, out, errOut, wantErr)
	}

	code, _, errOut = floodgate(t, "config", "check", filepath.Join(dir, "missing.yaml"))
	if code != 1 || !strings.Contains(errOut, "missing.yaml: stat: no such file or directory\n") ||
		!strings.HasSuffix(errOut, "give a configuration file, or a directory of *.yaml files (examples/floodgate.yaml is one)\n") {
		t.Errorf("missing file: exit %d, stderr %q", code, errOut)
	}
}

func TestVersion(t *testing.T) {
	code, out, errOut := floodgate(t, "version")
	if code != 0 || !strings.HasPrefix(out, "floodgate v"+fg.Version+" ") || !strings.HasSuffix(out, runtime.Version()+"\n") || errOut != "" {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	v := "floodgate v" + fg.Version
	for _, tc := range []struct {
		info *debug.BuildInfo
		want string
	}{
		{nil, v + " "},
		{&debug.BuildInfo{Main: debug.Module{Version: "(devel)"}}, v + " "},
		{&debug.BuildInfo{Main: debug.Module{Version: "v" + fg.Version}}, v + " "},
		{&debug.BuildInfo{Main: debug.Module{Version: "v0.9.1-0.20261201120000-0123456789ab"}},
			v + " (module v0.9.1-0.20261201120000-0123456789ab) "},
		{&debug.BuildInfo{Main: debug.Module{Version: "(devel)"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123456789abcdef"}, {Key: "vcs.modified", Value: "true"}}},
			v + " (rev 0123456789ab, modified) "},
		{&debug.BuildInfo{Main: debug.Module{Version: "v1.0.0"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "0123456789abcdef"}, {Key: "vcs.modified", Value: "false"}}},
			v + " (module v1.0.0, rev 0123456789ab) "},
	} {
		if got := versionString(tc.info); got != tc.want+runtime.Version() {
			t.Errorf("versionString = %q, want %q", got, tc.want+runtime.Version())
		}
	}
	if code, _, errOut := floodgate(t, "version", "extra"); code != 2 || !strings.Contains(errOut, `unexpected argument "extra"`) {
		t.Errorf("version extra: exit %d, stderr %q", code, errOut)
	}
}

func TestHelp(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // in stdout
	}{
		{[]string{"--help"}, "floodgate <command> [arguments]"},
		{[]string{"-h"}, "floodgate <command> [arguments]"},
		{[]string{"help"}, "floodgate config check /etc/floodgate/"},
		{[]string{"config", "--help"}, "floodgate config check FILE|DIR..."},
		{[]string{"config", "check", "--help"}, "Examples:\n  floodgate config check ratelimit.yaml"},
		{[]string{"config", "check", "x.yaml", "-help"}, "exits 1"},
		{[]string{"help", "config", "check"}, "exits 1"},
		{[]string{"version", "--help"}, "Example:\n  floodgate version"},
		{[]string{"help", "version"}, "floodgate version"},
	} {
		code, out, errOut := floodgate(t, tc.args...)
		if code != 0 || !strings.Contains(out, tc.want) || errOut != "" {
			t.Errorf("floodgate %v: exit %d, stderr %q, stdout:\n%s", tc.args, code, errOut, out)
		}
	}
	// Every command's help has examples, and the top-level help lists them all.
	_, top, _ := floodgate(t, "--help")
	for _, c := range commands() {
		if !strings.Contains(top, "\n  "+c.name+" ") {
			t.Errorf("top-level help does not list %s", c.name)
		}
		if _, out, _ := floodgate(t, c.name, "--help"); !strings.Contains(out, "Example") {
			t.Errorf("floodgate %s --help has no example:\n%s", c.name, out)
		}
	}
}

func TestUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string // in stderr
	}{
		{nil, "floodgate <command> [arguments]"},
		{[]string{"bogus"}, "floodgate: unknown command \"bogus\"\nRun 'floodgate --help' for usage.\n"},
		{[]string{"-x"}, "floodgate: flag provided but not defined: -x"},
		{[]string{"config"}, "floodgate config check FILE|DIR..."},
		{[]string{"config", "lint"}, "floodgate config: unknown command \"lint\""},
		{[]string{"config", "check"}, "floodgate config check: no file or directory to check"},
		{[]string{"config", "check", "--strict", "x.yaml"}, "floodgate config check: flag provided but not defined: -strict"},
		{[]string{"config", "check", "--", "--help"}, "--help: stat: no such file or directory"},
	} {
		code, out, errOut := floodgate(t, tc.args...)
		wantCode := 2
		if tc.args != nil && tc.args[len(tc.args)-1] == "--help" {
			wantCode = 1 // a file named --help, checked
		}
		if code != wantCode || out != "" || !strings.Contains(errOut, tc.want) {
			t.Errorf("floodgate %v: exit %d, stdout %q, stderr %q, want %q", tc.args, code, out, errOut, tc.want)
		}
	}
}

// TestPprofMux: --debug-addr serves Go's profiles, and nothing else.
func TestPprofMux(t *testing.T) {
	srv := httptest.NewServer(pprofMux())
	defer srv.Close()
	for path, want := range map[string]int{"/debug/pprof/": 200, "/debug/pprof/goroutine?debug=1": 200, "/v1/check": 404, "/metrics": 404} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("%s: %d, want %d", path, resp.StatusCode, want)
		}
		if want == 200 && !strings.Contains(string(body), "goroutine") {
			t.Errorf("%s: no goroutine profile in %.200s", path, body)
		}
	}
}
