package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestDebugAddrLoopbackOnly: --debug-addr refuses addresses open to the
// network unless a token guards it, and then the token is required.
func TestDebugAddrLoopbackOnly(t *testing.T) {
	for _, addr := range []string{":0", "0.0.0.0:0", "[::]:0"} {
		if ln, err := listenDebug(addr, false); err == nil {
			ln.Close()
			t.Errorf("%s accepted without a token", addr)
		} else if !strings.Contains(err.Error(), "not a loopback address") {
			t.Errorf("%s: %v", addr, err)
		}
	}
	for _, addr := range []string{"127.0.0.1:0", "localhost:0"} {
		ln, err := listenDebug(addr, false)
		if err != nil {
			t.Fatalf("%s: %v", addr, err)
		}
		ln.Close()
	}
	ln, err := listenDebug("0.0.0.0:0", true)
	if err != nil {
		t.Fatalf("with a token: %v", err)
	}
	ln.Close()

	srv := httptest.NewServer(debugHandler("s3cret"))
	defer srv.Close()
	for auth, want := range map[string]int{"": 401, "Bearer nope": 401, "Bearer s3cret": 200, "bearer s3cret": 200} {
		req, _ := http.NewRequest("GET", srv.URL+"/debug/pprof/", nil)
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("Authorization %q: %d, want %d", auth, resp.StatusCode, want)
		}
	}
}

// TestDebugCmdlineRedacted: /debug/pprof/cmdline shows the command line
// without the passwords a --redis URL carries.
func TestDebugCmdlineRedacted(t *testing.T) {
	got := redactArgs([]string{"floodgate", "serve", "--redis", "redis://u:pw1@h:1", "--redis=redis+sentinel://:pw2@s:2/m?sentinel_password=pw3", "--config", "x.yaml"})
	joined := strings.Join(got, " ")
	for _, pw := range []string{"pw1", "pw2", "pw3"} {
		if strings.Contains(joined, pw) {
			t.Errorf("password %s shown: %s", pw, joined)
		}
	}
	if !strings.Contains(joined, "--redis=redis+sentinel://:xxxxx@s:2/m?sentinel_password=xxxxx") || !strings.Contains(joined, "--config x.yaml") {
		t.Errorf("arguments mangled: %s", joined)
	}
	srv := httptest.NewServer(debugHandler(""))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/debug/pprof/cmdline")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || len(body) == 0 {
		t.Fatalf("cmdline: %d %q", resp.StatusCode, body)
	}
}
