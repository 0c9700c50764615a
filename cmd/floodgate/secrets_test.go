package main

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/internal/testenv"
)

// TestServeSecretsStaySecret is issue 12's "the Redis password leaks": the
// password can be given in a file or the environment instead of the URL,
// and no log line, error, metric or page shows it, whichever way it came.
func TestServeSecretsStaySecret(t *testing.T) {
	r := testenv.NewRedis(t)
	const pass = "pw-Zq81x7-secret"
	if _, err := r.Do(t.Context(), "CONFIG", "SET", "requirepass", pass); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	passFile := writeFile(t, dir, "redis.pass", pass+"\n")
	tokenFile := writeFile(t, dir, "token", "tok3n\n")
	const body = `{"domain":"e2e","descriptors":[{"user":"secrets"}]}`
	noPassword := func(what, text string) {
		t.Helper()
		if strings.Contains(text, pass) {
			t.Errorf("%s shows the Redis password:\n%s", what, text)
		}
	}

	for _, tc := range []struct {
		name string
		env  []string
		args []string
	}{
		{name: "file", args: []string{"--redis", redisURL(r), "--redis-password-file", passFile}},
		{name: "env", env: []string{"FLOODGATE_REDIS_PASSWORD=" + pass}, args: []string{"--redis", redisURL(r)}},
		{name: "url", args: []string{"--redis", "redis://:" + pass + "@" + r.Addr}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			args := append(tc.args, "--redis-prefix", uniquePrefix(t), "--token-file", tokenFile, "--debug-addr", "127.0.0.1:0")
			s := startServerEnv(t, tc.env, e2eConfig, args...)
			if code, out := s.post("/v1/check", "tok3n", body); code != http.StatusOK {
				t.Fatalf("a decision on the password-protected Redis: %d %s", code, out)
			}
			_, metrics := s.get("/metrics", "tok3n")
			noPassword("/metrics", metrics)

			var rec struct{ Addr string }
			if err := json.Unmarshal([]byte(s.waitLog(5*time.Second, "profiling endpoint")), &rec); err != nil || rec.Addr == "" {
				t.Fatalf("no profiling endpoint address logged: %v", err)
			}
			if code, _ := httpGet(t, "http://"+rec.Addr+"/debug/pprof/cmdline", ""); code != http.StatusUnauthorized {
				t.Errorf("/debug/pprof/cmdline without the token: %d, want 401", code)
			}
			code, cmdline := httpGet(t, "http://"+rec.Addr+"/debug/pprof/cmdline", "tok3n")
			if code != http.StatusOK || !strings.Contains(cmdline, "--redis") {
				t.Fatalf("/debug/pprof/cmdline: %d %q", code, cmdline)
			}
			noPassword("/debug/pprof/cmdline", cmdline)
			noPassword("the log", s.Logs())
		})
	}

	// Start-up errors: a wrong password, a Sentinel URL with its password
	// in the query, and a password given twice.
	bin := floodgateBinary(t)
	for _, args := range [][]string{
		{"--redis", "redis://:" + pass + "x@" + r.Addr},
		{"--redis", "redis+sentinel://:" + pass + "@127.0.0.1:1/mymaster?sentinel_password=" + pass + "&dial_timeout=300ms"},
		{"--redis", "redis://:" + pass + "@" + r.Addr, "--redis-password-file", passFile},
		{"--redis", redisURL(r), "--debug-addr", ":0"},
	} {
		out, err := runBinary(bin, append([]string{"serve", "--config", e2eConfig, "--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0"}, args...)...)
		var ee *execExitError
		if !errors.As(err, &ee) {
			t.Errorf("floodgate serve %s: %v, want a failed start; output:\n%s", strings.Join(redactArgs(args), " "), err, out)
		}
		noPassword("the start-up error of floodgate serve "+strings.Join(redactArgs(args), " "), out)
	}
}

// httpGet GETs url with a bearer token ("" for none).
func httpGet(t *testing.T, url, token string) (int, string) {
	t.Helper()
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(data)
}
