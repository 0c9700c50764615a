package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/floodgate-dev/floodgate/internal/testenv"
)

// Tests of `floodgate serve --compat envoy`, started as envoyproxy/ratelimit
// is, by its environment variables alone, against a Redis of the test's own.
// The expected values are envoyproxy/ratelimit's (f2fb157): its
// test/integration/integration_test.go and test/service/ratelimit_test.go.

const envoyTestConfig = `domain: envoy-compat
descriptors:
  - key: per_second
    rate_limit: {unit: second, requests_per_unit: 50}
  - key: per_minute
    rate_limit: {unit: minute, requests_per_unit: 3}
  - key: per_hour
    rate_limit: {unit: hour, requests_per_unit: 2}
  - key: per_day
    rate_limit: {unit: day, requests_per_unit: 10}
  - key: shadow
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: quota_a
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: quota_b
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 5}
`

// envoyRuntime lays out envoy's runtime directory, ROOT/SUBDIR/config, with
// config.yaml holding cfg; it returns ROOT.
func envoyRuntime(t *testing.T, cfg string) string {
	t.Helper()
	root := t.TempDir()
	dir := filepath.Join(root, "ratelimit", "config")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "config.yaml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	return root
}

// startEnvoyCompat starts `floodgate serve --compat envoy` with envoy's
// variables for r and root and the extra ones.
func startEnvoyCompat(t *testing.T, r *testenv.Redis, root string, extra ...string) *fgServer {
	t.Helper()
	return startServerWith(t, serveOpts{env: append(envoyEnv(t, r, root), extra...), bare: true}, "", "--compat", "envoy")
}

// envoyEnv is the environment startEnvoyCompat gives the process: envoy's
// variables for r and root, on free ports.
func envoyEnv(t *testing.T, r *testenv.Redis, root string) []string {
	return []string{
		"HOST=127.0.0.1", "PORT=0", "GRPC_HOST=127.0.0.1", "GRPC_PORT=0", "LOG_FORMAT=json",
		"REDIS_SOCKET_TYPE=tcp", "REDIS_URL=" + r.Addr, "REDIS_TIMEOUT=2s",
		"CACHE_KEY_PREFIX=" + uniquePrefix(t),
		"RUNTIME_ROOT=" + root, "RUNTIME_SUBDIRECTORY=ratelimit", "RUNTIME_WATCH_ROOT=false",
	}
}

// wholeSeconds checks envoy's duration_until_reset: whole seconds, the
// unit's length less the Unix time modulo it; units are in seconds, one per
// status.
func wholeSeconds(t *testing.T, what string, resp *rls.RateLimitResponse, units ...int64) {
	t.Helper()
	for i, st := range resp.GetStatuses() {
		unit := units[i]
		d := st.GetDurationUntilReset()
		if d == nil {
			t.Errorf("%s: statuses[%d] has no duration_until_reset", what, i)
			continue
		}
		now := time.Now().Unix()
		want, wantBefore := unit-now%unit, unit-(now-1)%unit
		if d.GetNanos() != 0 || d.GetSeconds() != want && d.GetSeconds() != wantBefore {
			t.Errorf("%s: statuses[%d].duration_until_reset = %v, want {seconds:%d}", what, i, d, want)
		}
	}
}

func TestEnvoyCompatResponses(t *testing.T) {
	r := testenv.NewRedis(t)
	s := startEnvoyCompat(t, r, envoyRuntime(t, envoyTestConfig))

	t.Run("whole seconds", func(t *testing.T) {
		// integration_test.go: a 50 per second limit answers {seconds:1}.
		resp := s.mustRL(request("envoy-compat", entries("per_second", "a")))
		checkResponse(t, "per_second", resp, ok(50, second, 49))
		if d := resp.GetStatuses()[0].GetDurationUntilReset(); d.GetSeconds() != 1 || d.GetNanos() != 0 {
			t.Errorf("per_second: duration_until_reset = %v, want {seconds:1}", d)
		}
		avoidWindowEdge(time.Hour, 5*time.Second)
		resp = s.mustRL(request("envoy-compat", entries("per_hour", "a")))
		wholeSeconds(t, "per_hour", resp, 3600)
	})

	t.Run("over limit counts the others", func(t *testing.T) {
		avoidWindowEdge(time.Minute, 5*time.Second)
		// per_hour "b" is spent; per_day "b" is still counted by every request.
		for range 2 {
			s.mustRL(request("envoy-compat", entries("per_hour", "b")))
		}
		resp := s.mustRL(request("envoy-compat", entries("per_hour", "b"), entries("per_day", "b")))
		checkResponse(t, "one over", resp, over(2, hour, 0), ok(10, day, 9))
		resp = s.mustRL(request("envoy-compat", entries("per_hour", "b"), entries("per_day", "b")))
		checkResponse(t, "one over again", resp, over(2, hour, 0), ok(10, day, 8))
		wholeSeconds(t, "over", resp, 3600, 3600*24)
	})

	t.Run("an over-limit request spends what is left", func(t *testing.T) {
		avoidWindowEdge(time.Minute, 5*time.Second)
		// 3 per minute: 1 spent, a request of 5 is over, and so is a later
		// request of 1, since envoy counted the 5.
		checkResponse(t, "first", s.mustRL(request("envoy-compat", entries("per_minute", "c"))), ok(3, minute, 2))
		checkResponse(t, "five", s.mustRL(request("envoy-compat", withHits(entries("per_minute", "c"), 5))), over(3, minute, 0))
		checkResponse(t, "one more", s.mustRL(request("envoy-compat", entries("per_minute", "c"))), over(3, minute, 0))
	})

	t.Run("shadow mode descriptor", func(t *testing.T) {
		avoidWindowEdge(time.Minute, 5*time.Second)
		checkResponse(t, "first", s.mustRL(request("envoy-compat", entries("shadow", "d"))), ok(1, minute, 0))
		checkResponse(t, "second", s.mustRL(request("envoy-compat", entries("shadow", "d"))), ok(1, minute, 0))
	})

	t.Run("quota mode descriptors", func(t *testing.T) {
		avoidWindowEdge(time.Minute, 5*time.Second)
		s.mustRL(request("envoy-compat", entries("quota_a", "e")))
		// quota_a over, quota_b within: OK overall, quota_a's status OVER_LIMIT.
		resp := s.mustRL(request("envoy-compat", entries("quota_a", "e"), entries("quota_b", "e")))
		if resp.GetOverallCode() != codeOK {
			t.Errorf("one quota descriptor over: overall %v, want OK", resp.GetOverallCode())
		}
		if c := resp.GetStatuses()[0].GetCode(); c != codeOver {
			t.Errorf("quota_a: %v, want OVER_LIMIT", c)
		}
		// Alone, every quota descriptor is over: OVER_LIMIT.
		resp = s.mustRL(request("envoy-compat", entries("quota_a", "e")))
		if resp.GetOverallCode() != codeOver {
			t.Errorf("every quota descriptor over: overall %v, want OVER_LIMIT", resp.GetOverallCode())
		}
	})

	t.Run("errors", func(t *testing.T) {
		_, err := s.rl(request("", entries("per_minute", "x")))
		if status.Code(err) != codes.Unknown || status.Convert(err).Message() != "rate limit domain must not be empty" {
			t.Errorf("empty domain: %v, want Unknown \"rate limit domain must not be empty\"", err)
		}
		_, err = s.rl(request("envoy-compat"))
		if status.Code(err) != codes.Unknown || status.Convert(err).Message() != "rate limit descriptor list must not be empty" {
			t.Errorf("no descriptors: %v, want Unknown \"rate limit descriptor list must not be empty\"", err)
		}
		code, body := s.post("/json", "", `{"domain": ""}`)
		if code != http.StatusBadRequest || body != "Bad Request\n" {
			t.Errorf("/json with an empty domain: %d %q, want 400 \"Bad Request\\n\"", code, body)
		}
		code, body = s.post("/json", "", `{not json`)
		if code != http.StatusBadRequest || body != "Bad Request\n" {
			t.Errorf("/json not JSON: %d %q, want 400 \"Bad Request\\n\"", code, body)
		}
		code, body = s.post("/json", "", `{"domain": "envoy-compat", "descriptors": [{"entries": [{"key": "per_second", "value": "j"}]}]}`)
		if code != http.StatusOK || !strings.Contains(body, `"durationUntilReset":"1s"`) {
			t.Errorf("/json: %d %s, want 200 with durationUntilReset 1s", code, body)
		}
	})

	t.Run("a descriptor without entries", func(t *testing.T) {
		// test/config TestBasicConfig: no limit matches it, in a known
		// domain or an unknown one; the request is answered, not refused.
		for _, domain := range []string{"envoy-compat", "foo_domain"} {
			resp, err := s.rl(request(domain, entries(), entries("per_minute", "w")))
			if err != nil {
				t.Fatalf("%s: %v", domain, err)
			}
			if domain == "envoy-compat" {
				checkResponse(t, domain, resp, noLimit, ok(3, minute, 2))
			} else {
				checkResponse(t, domain, resp, noLimit, noLimit)
			}
		}
	})

	t.Run("health", func(t *testing.T) {
		hc := healthpb.NewHealthClient(s.conn)
		for _, name := range []string{"ratelimit", ""} {
			resp, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: name})
			if err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_SERVING {
				t.Errorf("Health.Check(%q) = %v, %v; want SERVING", name, resp, err)
			}
		}
		code, body := s.get("/healthcheck", "")
		if code != http.StatusOK || body != "OK" {
			t.Errorf("/healthcheck: %d %q, want 200 \"OK\"", code, body)
		}
	})
}

func TestEnvoyCompatStopIncrementWhenOverLimit(t *testing.T) {
	r := testenv.NewRedis(t)
	s := startEnvoyCompat(t, r, envoyRuntime(t, envoyTestConfig), "STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true")
	avoidWindowEdge(time.Minute, 5*time.Second)
	s.mustRL(request("envoy-compat", entries("per_hour", "b")))
	s.mustRL(request("envoy-compat", entries("per_hour", "b")))
	resp := s.mustRL(request("envoy-compat", entries("per_hour", "b"), entries("per_day", "b")))
	checkResponse(t, "one over", resp, over(2, hour, 0), ok(10, day, 10))
	resp = s.mustRL(request("envoy-compat", entries("per_day", "b")))
	checkResponse(t, "per_day alone", resp, ok(10, day, 9))
}

func TestEnvoyCompatResponseHeadersAndShadowMode(t *testing.T) {
	r := testenv.NewRedis(t)
	s := startEnvoyCompat(t, r, envoyRuntime(t, envoyTestConfig),
		"LIMIT_RESPONSE_HEADERS_ENABLED=true", "LIMIT_REMAINING_HEADER=X-Left", "SHADOW_MODE=true")
	avoidWindowEdge(time.Minute, 5*time.Second)
	// service/ratelimit_test.go: the headers are those of the descriptor
	// closest to its limit; reset in whole seconds of its unit.
	resp := s.mustRL(request("envoy-compat", entries("per_day", "h"), entries("per_minute", "h")))
	now := time.Now().Unix()
	want := map[string]string{"RateLimit-Limit": "3", "X-Left": "2"}
	got := map[string]string{}
	for _, h := range resp.GetResponseHeadersToAdd() {
		got[h.GetKey()] = h.GetValue()
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("header %s = %q, want %q (headers %v)", k, got[k], v, got)
		}
	}
	if r := got["RateLimit-Reset"]; r != fmt.Sprint(60-now%60) && r != fmt.Sprint(60-(now-1)%60) {
		t.Errorf("RateLimit-Reset = %q, want %d", r, 60-now%60)
	}
	// SHADOW_MODE: over the limit, the overall code is OK, the status keeps OVER_LIMIT.
	for range 3 {
		resp = s.mustRL(request("envoy-compat", entries("per_minute", "h")))
	}
	if resp.GetOverallCode() != codeOK || resp.GetStatuses()[0].GetCode() != codeOver {
		t.Errorf("SHADOW_MODE: %v, want overall OK with an OVER_LIMIT status", resp)
	}
}

func TestEnvoyCompatRedisDown(t *testing.T) {
	r := testenv.NewRedis(t)
	s := startEnvoyCompat(t, r, envoyRuntime(t, envoyTestConfig), "REDIS_TIMEOUT=300ms")
	s.mustRL(request("envoy-compat", entries("per_minute", "z")))
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	_, err := s.rl(request("envoy-compat", entries("per_minute", "z")))
	if status.Code(err) != codes.Unknown {
		t.Errorf("Redis down: %v, want an error with code Unknown, as envoy's", err)
	}
}

func TestEnvoyCompatInvalidInitialConfig(t *testing.T) {
	r := testenv.NewRedis(t)
	root := envoyRuntime(t, "domain: envoy-compat\ndescriptors:\n  - key: a\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n")
	s := startEnvoyCompat(t, r, root, "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED=true")
	_, err := s.rl(request("envoy-compat", entries("per_minute", "a")))
	if status.Code(err) != codes.Unknown || status.Convert(err).Message() != "no rate limit configuration loaded" {
		t.Errorf("no configuration: %v, want Unknown \"no rate limit configuration loaded\"", err)
	}
	if code, body := s.get("/healthcheck", ""); code != http.StatusInternalServerError || body != "" {
		t.Errorf("/healthcheck without a configuration: %d %q, want 500 \"\"", code, body)
	}
	hc := healthpb.NewHealthClient(s.conn)
	if resp, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "ratelimit"}); err != nil || resp.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("Health.Check(ratelimit) without a configuration = %v, %v; want NOT_SERVING", resp, err)
	}
	writeConfig(t, filepath.Join(root, "ratelimit", "config", "config.yaml"), envoyTestConfig)
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, body := s.get("/healthcheck", "")
		if code == http.StatusOK && body == "OK" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/healthcheck after a valid configuration: %d %q, want 200 \"OK\"", code, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	checkResponse(t, "after reload", s.mustRL(request("envoy-compat", entries("per_minute", "a"))), ok(3, minute, 2))
}

func TestEnvoyCompatRefusedAndIgnoredVariables(t *testing.T) {
	bin := floodgateBinary(t)
	cmd := execServe(bin, "BACKEND_TYPE=memcache")
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "BACKEND_TYPE") {
		t.Errorf("BACKEND_TYPE=memcache: %v, %s; want a start-up error naming BACKEND_TYPE", err, out)
	}
	r := testenv.NewRedis(t)
	s := startEnvoyCompat(t, r, envoyRuntime(t, envoyTestConfig), "USE_DOG_STATSD_MOGRIFIERS=HITS", "REDIS_AUTH=")
	s.waitLog(10*time.Second, "USE_DOG_STATSD_MOGRIFIERS", "ignored")
}

// execServe is `floodgate serve --compat envoy` with env added.
func execServe(bin string, env ...string) *exec.Cmd {
	c := exec.Command(bin, "serve", "--compat", "envoy")
	c.Env = append(os.Environ(), env...)
	return c
}

// TestEnvoyCompatEmptyConfigDirectory: a runtime directory without
// configuration files is a configuration without domains, as envoy loads
// it: requests are answered OK without limits, and under
// HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED the health checks fail until a
// file with a domain is there, and again once it is removed (envoy's
// test/service TestServiceHealthStatusAtLeastOneConfigLoaded, whose
// configuration "with no domains" a process sees as an emptied directory).
func TestEnvoyCompatEmptyConfigDirectory(t *testing.T) {
	r := testenv.NewRedis(t)
	root := envoyRuntime(t, envoyTestConfig)
	file := filepath.Join(root, "ratelimit", "config", "config.yaml")
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	s := startEnvoyCompat(t, r, root, "HEALTHY_WITH_AT_LEAST_ONE_CONFIG_LOADED=true")
	waitHealth(t, s, "config", healthpb.HealthCheckResponse_NOT_SERVING, http.StatusInternalServerError)
	checkResponse(t, "no configuration files", s.mustRL(request("envoy-compat", entries("per_minute", "e"))), noLimit)

	writeConfig(t, file, envoyTestConfig)
	waitHealth(t, s, "config", healthpb.HealthCheckResponse_SERVING, http.StatusOK)
	avoidWindowEdge(time.Minute, 5*time.Second)
	checkResponse(t, "a configuration file", s.mustRL(request("envoy-compat", entries("per_minute", "e"))), ok(3, minute, 2))

	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	waitHealth(t, s, "config", healthpb.HealthCheckResponse_NOT_SERVING, http.StatusInternalServerError)
	checkResponse(t, "the file removed", s.mustRL(request("envoy-compat", entries("per_minute", "e"))), noLimit)
}

// TestEnvoyCompatHealthFollowsRedis: with REDIS_HEALTH_CHECK_ACTIVE_CONNECTION
// the health checks pass while Redis answers, fail while it does not, and
// pass again once it is back (envoyproxy/ratelimit f2fb157, test/server
// TestHealthCheck and TestGrpcHealthCheck: Redis healthy, failed, healthy).
func TestEnvoyCompatHealthFollowsRedis(t *testing.T) {
	r := testenv.NewRedis(t)
	s := startEnvoyCompat(t, r, envoyRuntime(t, envoyTestConfig), "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION=true", "REDIS_TIMEOUT=300ms")
	waitHealth(t, s, "Redis up", healthpb.HealthCheckResponse_SERVING, http.StatusOK)
	if err := r.Pause(); err != nil {
		t.Fatal(err)
	}
	waitHealth(t, s, "Redis paused", healthpb.HealthCheckResponse_NOT_SERVING, http.StatusInternalServerError)
	if err := r.Resume(); err != nil {
		t.Fatal(err)
	}
	waitHealth(t, s, "Redis back", healthpb.HealthCheckResponse_SERVING, http.StatusOK)
}

// waitHealth waits (up to 10 s) until s's gRPC health service answers want
// for "ratelimit" and its /healthcheck wantHTTP; what names the step in the
// failure.
func waitHealth(t *testing.T, s *fgServer, what string, want healthpb.HealthCheckResponse_ServingStatus, wantHTTP int) {
	t.Helper()
	hc := healthpb.NewHealthClient(s.conn)
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{Service: "ratelimit"})
		code, _ := s.get("/healthcheck", "")
		if err == nil && resp.GetStatus() == want && code == wantHTTP {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: Health.Check(ratelimit) = %v, %v, /healthcheck %d; want %v, %d", what, resp, err, code, want, wantHTTP)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestEnvoyCompatHealthDuringDrain: on SIGTERM envoyproxy/ratelimit fails
// its health at once (f2fb157, src/server/health.go, the "sigterm"
// component: gRPC "ratelimit" NOT_SERVING, /healthcheck 500), then drains
// its gRPC server (GracefulStop) while its HTTP server still answers, and
// closes that only after (src/server/server_impl.go Stop). So, with a gRPC
// call held in flight by a paused Redis: a health Watch opened before the
// signal sees NOT_SERVING, and then its stream ends, so that it does not
// hold the drain; a /healthcheck on a new connection answers 500; once
// Redis answers, the call completes with its real answer, and the process
// exits 0 long before its --shutdown-timeout.
func TestEnvoyCompatHealthDuringDrain(t *testing.T) {
	r := testenv.NewRedis(t)
	s := startServerWith(t, serveOpts{env: append(envoyEnv(t, r, envoyRuntime(t, envoyTestConfig)), "REDIS_TIMEOUT=60s"), bare: true},
		"", "--compat", "envoy", "--shutdown-timeout", "5m")
	checkResponse(t, "warm-up", s.mustRL(request("envoy-compat", entries("per_day", "warm"))), ok(10, day, 9))

	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	watch, err := healthpb.NewHealthClient(s.conn).Watch(ctx, &healthpb.HealthCheckRequest{Service: "ratelimit"})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := watch.Recv(); err != nil || m.GetStatus() != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("Watch(ratelimit) first: %v, %v; want SERVING", m, err)
	}

	// A call held in flight by a paused Redis.
	if err := r.Pause(); err != nil {
		t.Fatal(err)
	}
	defer r.Resume()
	type result struct {
		resp *rls.RateLimitResponse
		err  error
	}
	inFlight := make(chan result, 1)
	go func() {
		resp, err := s.client.ShouldRateLimit(ctx, request("envoy-compat", entries("per_day", "in-flight")))
		inFlight <- result{resp, err}
	}()
	for deadline := time.Now().Add(10 * time.Second); socketBacklog(t, r.Port) == 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the call did not reach the paused Redis")
		}
	}

	s.signal(syscall.SIGTERM)
	s.waitLog(10*time.Second, "shutting down")
	if m, err := watch.Recv(); err != nil || m.GetStatus() != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("Watch(ratelimit) after SIGTERM: %v, %v; want NOT_SERVING", m, err)
	}
	// Ended by the server, not by the test's deadline.
	if m, err := watch.Recv(); err == nil || status.Code(err) == codes.DeadlineExceeded {
		t.Fatalf("Watch(ratelimit) after NOT_SERVING: %v, %v; want the stream ended by the server", m, err)
	}
	fresh := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := fresh.Get("http://" + s.HTTP + "/healthcheck")
	if err != nil {
		t.Fatalf("GET /healthcheck during the drain: %v; want 500 (envoy's HTTP server serves until gRPC has drained)", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusInternalServerError {
		t.Fatalf("GET /healthcheck during the drain: %d, want 500", resp.StatusCode)
	}
	select {
	case res := <-inFlight:
		t.Fatalf("the in-flight call ended before Redis was resumed: %v, %v", res.resp, res.err)
	default:
	}

	if err := r.Resume(); err != nil {
		t.Fatal(err)
	}
	res := <-inFlight
	if res.err != nil {
		t.Fatalf("the in-flight call: %v", res.err)
	}
	checkResponse(t, "the in-flight call", res.resp, ok(10, day, 9))
	if code := s.wait(30 * time.Second); code != 0 {
		t.Errorf("exit status %d after SIGTERM, want 0", code)
	}
}

// TestEnvoyCompatWaitsForRedisAtStart: as envoyproxy/ratelimit (f2fb157,
// src/redis/driver_impl.go, REDIS_STARTUP_*), a Redis that does not answer
// at start is tried again, with back-off, before the APIs listen; once it
// answers, the server serves. With REDIS_STARTUP_MAX_ELAPSED_TIME it gives
// up after that long and exits 1, naming the variable.
func TestEnvoyCompatWaitsForRedisAtStart(t *testing.T) {
	r := testenv.NewRedis(t)
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	root := envoyRuntime(t, envoyTestConfig)

	t.Run("Redis comes", func(t *testing.T) {
		const retrying = "Redis does not answer; trying again"
		seen := make(chan struct{})
		var once sync.Once
		restarted := make(chan error, 1)
		go func() {
			<-seen
			restarted <- r.Restart()
		}()
		s := startServerWith(t, serveOpts{bare: true, env: append(envoyEnv(t, r, root),
			"REDIS_STARTUP_INITIAL_INTERVAL=50ms", "REDIS_STARTUP_MAX_INTERVAL=200ms"),
			onLog: func(line string) {
				if strings.Contains(line, retrying) {
					once.Do(func() { close(seen) })
				}
			}}, "", "--compat", "envoy")
		if err := <-restarted; err != nil {
			t.Fatal(err)
		}
		checkResponse(t, "once Redis answers", s.mustRL(request("envoy-compat", entries("per_day", "waited"))), ok(10, day, 9))
	})

	t.Run("gives up", func(t *testing.T) {
		if err := r.Stop(); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(floodgateBinary(t), "serve", "--compat", "envoy")
		cmd.Env = append(os.Environ(), append(envoyEnv(t, r, root), "REDIS_STARTUP_INITIAL_INTERVAL=50ms",
			"REDIS_STARTUP_MAX_INTERVAL=100ms", "REDIS_STARTUP_MAX_ELAPSED_TIME=300ms", "USE_STATSD=false")...)
		out, err := cmd.CombinedOutput()
		var exit *exec.ExitError
		if !errors.As(err, &exit) || exit.ExitCode() != 1 {
			t.Fatalf("exit: %v, want status 1; output:\n%s", err, out)
		}
		if !strings.Contains(string(out), "REDIS_STARTUP_MAX_ELAPSED_TIME") || !strings.Contains(string(out), "trying again") ||
			strings.Contains(string(out), `"serving"`) {
			t.Fatalf("output does not show retries then giving up by REDIS_STARTUP_MAX_ELAPSED_TIME, without serving:\n%s", out)
		}
	})
}
