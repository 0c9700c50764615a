//go:build linux

package main

// End-to-end tests: the floodgate binary, started as a process, driven over
// gRPC with go-control-plane's Envoy RLS v3 client and over HTTP, on the
// memory backend and on real redis-server processes (internal/testenv).
// Helpers are in e2e_helpers_test.go.

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	ratelimittype "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/floodgate-dev/floodgate/internal/testenv"
)

// backends runs f once on the memory backend and once on the shared Redis,
// each with a server of its own started with args.
func backends(t *testing.T, cfg string, f func(t *testing.T, s *fgServer), args ...string) {
	t.Run("memory", func(t *testing.T) {
		f(t, startServer(t, cfg, args...))
	})
	t.Run("redis", func(t *testing.T) {
		f(t, startServer(t, cfg, append(redisArgs(t, testenv.SharedRedis(t)), args...)...))
	})
}

// redisArgs are the flags of a server on r for tests that are not about
// faults: keys of the test's own, and a store timeout far above what a
// loaded machine (-race, 2 cores) may need, with failures reported as
// errors rather than answered by the default "allow" failure mode, so
// that a slow call fails the test loudly instead of skewing a count.
func redisArgs(t *testing.T, r *testenv.Redis) []string {
	return []string{"--redis", redisURL(r), "--redis-prefix", uniquePrefix(t), "--timeout", "2s", "--failure-mode", "error"}
}

// faultTimeout is the store timeout of the fault tests: short, so that a
// dead Redis costs little, yet not so short that a loaded machine times out
// a healthy call.
const faultTimeout = "250ms"

// step is one request and the statuses expected for it.
type step struct {
	req  *rls.RateLimitRequest
	want []wantStatus
}

func hitsAddend(n uint32, r *rls.RateLimitRequest) *rls.RateLimitRequest {
	r.HitsAddend = n
	return r
}

// TestEnvoyConfigsCheck runs `floodgate config check` (the binary) on the
// envoyproxy/ratelimit-style corpus: each file, and the directory.
func TestEnvoyConfigsCheck(t *testing.T) {
	bin := floodgateBinary(t)
	files, err := filepath.Glob("testdata/envoy/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no testdata/envoy/*.yaml: %v", err)
	}
	for _, f := range append(files, "testdata/envoy") {
		out, err := runBinary(bin, "config", "check", f)
		if err != nil {
			t.Errorf("floodgate config check %s: %v\n%s", f, err, out)
		}
	}
	out, _ := runBinary(bin, "config", "check", "testdata/envoy")
	if n := strings.Count(out, "\n"); n != len(files) {
		t.Errorf("config check of the directory printed %d lines, want one per file (%d):\n%s", n, len(files), out)
	}
}

// TestConfigCheckInvalidExitsOne checks that an invalid file makes the
// binary exit 1 and name file:line for each problem.
func TestConfigCheckInvalidExitsOne(t *testing.T) {
	bin := floodgateBinary(t)
	path := filepath.Join("testdata", "invalid", "ratelimit.yaml")
	out, err := runBinary(bin, "config", "check", path)
	ee, isExit := err.(*execExitError)
	if !isExit || ee.code != 1 {
		t.Fatalf("config check %s: %v, want exit status 1\n%s", path, err, out)
	}
	for _, want := range []string{
		path + `:9: unknown key "requests_per_second" in rate_limit`,
		path + `:14: invalid unit "fortnight"`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("config check output lacks %q:\n%s", want, out)
		}
	}
	// serve refuses it too, with the same messages and status 1.
	out, err = runBinary(bin, "serve", "--config", path, "--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0")
	if ee, isExit := err.(*execExitError); !isExit || ee.code != 1 || !strings.Contains(out, path+":9:") {
		t.Errorf("serve with an invalid configuration: %v, want exit 1 naming %s:9\n%s", err, path, out)
	}
}

// TestEnvoyCompatibility replays cases of envoyproxy/ratelimit's integration
// tests and example configurations (rewritten in testdata/envoy) against the
// binary over gRPC, with answers computed by hand from the semantics:
// statuses in request order, current_limit, limit_remaining,
// duration_until_reset, nested descriptors, key-only defaults, wildcards,
// share_threshold, unlimited, replaces, shadow_mode, hits_addend at request
// and descriptor level, limit overrides, no match.
//
// Where floodgate deliberately differs from envoyproxy/ratelimit it is
// noted: a request over any limit consumes nothing from its other
// descriptors (envoyproxy/ratelimit counts it against all of them).
func TestEnvoyCompatibility(t *testing.T) {
	backends(t, "testdata/envoy", func(t *testing.T, s *fgServer) {
		for _, c := range envoyCases() {
			t.Run(c.name, func(t *testing.T) {
				// Minute windows are epoch-aligned: keep each case inside one.
				avoidWindowEdge(time.Minute, 5*time.Second)
				for i, st := range c.steps {
					checkResponse(t, fmt.Sprintf("step %d %v", i, st.req), s.mustRL(st.req), st.want...)
				}
			})
		}
	})
}

type envoyCase struct {
	name  string
	steps []step
}

func envoyCases() []envoyCase {
	var cases []envoyCase
	add := func(name string, steps ...step) { cases = append(cases, envoyCase{name, steps}) }
	one := func(req *rls.RateLimitRequest, want ...wantStatus) step { return step{req, want} }

	// --- basic: envoyproxy/ratelimit's integration test, step by step.
	add("unknown domain", one(request("foo", entries("hello", "world")), noLimit))
	add("key-only default", one(request("basic", entries("per_second", "foo")), ok(50, second, 49)))
	var overOne []step
	for i := range 25 {
		w := ok(20, minute, uint32(19-i))
		if i >= 20 {
			w = over(20, minute, 0)
		}
		overOne = append(overOne, one(request("basic", entries("per_minute", "k1")), w))
	}
	add("over a minute limit", overOne...)
	var overTwo []step
	for i := range 15 {
		// envoyproxy/ratelimit keeps counting per_minute once per_hour is
		// over (its limit_remaining goes on down to 5); floodgate consumes
		// nothing from a request it denies, so per_minute stays at 10.
		w1, w2 := ok(20, minute, uint32(19-i)), ok(10, hour, uint32(9-i))
		if i >= 10 {
			w1, w2 = ok(20, minute, 10), over(10, hour, 0)
		}
		overTwo = append(overTwo, one(request("basic", entries("per_minute", "k2"), entries("per_hour", "k2")), w1, w2))
	}
	add("two descriptors, the second over its limit", overTwo...)
	add("day unit", one(request("basic", entries("per_day", "x")), ok(20, day, 19)))
	add("one per minute",
		one(request("basic", entries("one_per_minute", "x")), ok(1, minute, 0)),
		one(request("basic", entries("one_per_minute", "x")), over(1, minute, 0)),
		one(request("basic", entries("one_per_minute", "y")), ok(1, minute, 0)))
	override := func() *rls.RateLimitRequest {
		d := entries("per_hour", "overridden")
		d.Limit = &rlscommon.RateLimitDescriptor_RateLimitOverride{RequestsPerUnit: 2, Unit: ratelimittype.RateLimitUnit_DAY}
		return request("basic", d)
	}
	add("limit override in the descriptor",
		one(override(), ok(2, day, 1).named("*")),
		one(override(), ok(2, day, 0).named("*")),
		one(override(), over(2, day, 0).named("*")),
		one(request("basic", entries("per_hour", "overridden")), ok(10, hour, 9)))

	// --- rl: nested descriptors (examples/ratelimit/config/example.yaml).
	add("nested pair",
		one(request("rl", entries("source_cluster", "proxy", "destination_cluster", "mock")), ok(1, minute, 0)),
		one(request("rl", entries("source_cluster", "proxy", "destination_cluster", "mock")), over(1, minute, 0)))
	add("first level without a limit", one(request("rl", entries("source_cluster", "proxy")), noLimit))
	add("second level without a default", one(request("rl", entries("source_cluster", "proxy", "destination_cluster", "other")), noLimit))
	add("deeper than the configuration", one(request("rl", entries("source_cluster", "proxy", "destination_cluster", "mock", "extra", "1")), noLimit))
	add("default at the first level",
		one(request("rl", entries("client", "c1")), ok(4, minute, 3)),
		one(request("rl", entries("client", "c1")), ok(4, minute, 2)),
		one(request("rl", entries("client", "c1")), ok(4, minute, 1)),
		one(request("rl", entries("client", "c1")), ok(4, minute, 0)),
		one(request("rl", entries("client", "c1")), over(4, minute, 0)))
	add("default at the second level, a counter per value",
		one(request("rl", entries("client", "c2", "path", "/a")), ok(3, minute, 2)),
		one(request("rl", entries("client", "c2", "path", "/a")), ok(3, minute, 1)),
		one(request("rl", entries("client", "c2", "path", "/b")), ok(3, minute, 2)))
	add("zero requests per unit", one(request("rl", entries("client", "c2", "path", "/admin")), over(0, minute, 0)))
	add("unlimited below a limited key", one(request("rl", entries("client", "c2", "health", "any")), unlimited))
	add("unlimited key", one(request("rl", entries("internal", "q")), unlimited))
	add("per second", one(request("rl", entries("client", "c2", "method", "GET")), ok(1, second, 0)))
	add("shadow mode: over the limit, answered OK",
		one(request("rl", entries("client", "c2", "method", "TRACE")), ok(1, minute, 0)),
		one(request("rl", entries("client", "c2", "method", "TRACE")), ok(1, minute, 0)),
		one(request("rl", entries("client", "c2", "method", "TRACE")), ok(1, minute, 0)))
	add("unknown key below a known one", one(request("rl", entries("client", "c2", "unknown", "z")), noLimit))
	add("statuses in request order",
		one(request("rl", entries("client", "c4"), entries("internal", "1"), entries("nomatch", "x"), entries("client", "c4", "path", "/b")),
			ok(4, minute, 3), unlimited, noLimit, ok(3, minute, 2)))
	add("a request over one limit consumes no other",
		one(request("rl", entries("internal", "1"), entries("client", "c3"), entries("nomatch", "x"), entries("client", "c3", "path", "/admin")),
			unlimited, ok(4, minute, 4), noLimit, over(0, minute, 0)),
		one(request("rl", entries("client", "c3")), ok(4, minute, 3)))

	// --- wild: patterns (test/config/wildcard.yaml, share_threshold.yaml).
	add("prefix pattern, a counter per value",
		one(request("wild", entries("image", "img-1")), ok(20, minute, 19)),
		one(request("wild", entries("image", "img-1")), ok(20, minute, 18)),
		one(request("wild", entries("image", "img-2")), ok(20, minute, 19)),
		one(request("wild", entries("image", "img-")), ok(20, minute, 19)), // '*' matches nothing too
		one(request("wild", entries("image", "png")), noLimit))
	add("exact value",
		one(request("wild", entries("exact", "img")), ok(21, minute, 20)),
		one(request("wild", entries("exact", "img-1")), noLimit))
	add("key only", one(request("wild", entries("anyvalue", "anything")), ok(22, minute, 21)))
	add("pattern in the middle",
		one(request("wild", entries("version", "v1-beta")), ok(23, minute, 22)),
		one(request("wild", entries("version", "v1beta")), ok(23, minute, 22)),
		one(request("wild", entries("version", "v1-alpha")), noLimit))
	add("share_threshold: one counter for the pattern",
		one(request("wild", entries("bucket", "logs/a")), ok(10, hour, 9)),
		one(request("wild", entries("bucket", "logs/b")), ok(10, hour, 8)),
		one(request("wild", entries("bucket", "logs/a")), ok(10, hour, 7)))
	add("no share_threshold: a counter per value",
		one(request("wild", entries("object", "objects/a")), ok(10, hour, 9)),
		one(request("wild", entries("object", "objects/b")), ok(10, hour, 9)))

	// --- replaces.
	add("replaces",
		one(request("replaces", entries("api", "reports", "user", "u1")), ok(2, hour, 1).named("per_user")),
		one(request("replaces", entries("api", "reports", "user", "u1")), ok(2, hour, 0).named("per_user")),
		one(request("replaces", entries("api", "reports", "user", "u1")), over(2, hour, 0).named("per_user")),
		// With the premium descriptor, per_user no longer applies.
		one(request("replaces", entries("api", "reports", "user", "u1"), entries("plan", "premium")), noLimit, ok(100, hour, 99).named("premium")),
		one(request("replaces", entries("plan", "premium"), entries("api", "reports", "user", "u2")), ok(100, hour, 98).named("premium"), noLimit),
		one(request("replaces", entries("api", "reports", "user", "u2")), ok(2, hour, 1).named("per_user")))

	// --- hits_addend.
	add("hits_addend",
		one(hitsAddend(3, request("hits", entries("cost", "c1"))), ok(10, hour, 7)),
		one(hitsAddend(0, request("hits", entries("cost", "c1"))), ok(10, hour, 6)), // 0 means 1
		one(request("hits", withHits(entries("cost", "c1"), 0)), ok(10, hour, 6)),   // a descriptor's 0 peeks
		one(hitsAddend(1, request("hits", withHits(entries("cost", "c1"), 5))), ok(10, hour, 1)),
		// Over the limit: nothing is taken (envoyproxy/ratelimit would count
		// the 2 hits and answer 0 remaining from then on).
		one(hitsAddend(2, request("hits", entries("cost", "c1"))), over(10, hour, 1)),
		one(request("hits", entries("cost", "c1")), ok(10, hour, 0)),
		one(request("hits", withHits(entries("cost", "c1"), 0)), ok(10, hour, 0)),
		one(request("hits", entries("cost", "c1")), over(10, hour, 0)))
	add("hits_addend per descriptor and per request",
		one(hitsAddend(4, request("hits", withHits(entries("cost", "c2"), 2), entries("cost", "c3"))), ok(10, hour, 8), ok(10, hour, 6)))
	add("more hits than the limit",
		one(hitsAddend(11, request("hits", entries("cost", "c4"))), over(10, hour, 10)),
		one(hitsAddend(10, request("hits", entries("cost", "c4"))), ok(10, hour, 0)))
	add("blocked", one(request("hits", entries("blocked", "x")), over(0, day, 0)))
	return cases
}

// execExitError is a command that ran and exited with a non-zero status.
type execExitError struct{ code int }

func (e *execExitError) Error() string { return "exit status " + strconv.Itoa(e.code) }

// runBinary runs the binary to completion and returns its combined output.
func runBinary(bin string, args ...string) (string, error) {
	cmd := exec.Command(bin, args...)
	out, err := cmd.CombinedOutput()
	if ee, isExit := err.(*exec.ExitError); isExit {
		return string(out), &execExitError{ee.ExitCode()}
	}
	return string(out), err
}

const e2eConfig = "testdata/e2e.yaml"

// jsonResponse decodes the protojson body of POST /json.
func jsonResponse(t *testing.T, body string) *rls.RateLimitResponse {
	t.Helper()
	var resp rls.RateLimitResponse
	if err := protojson.Unmarshal([]byte(body), &resp); err != nil {
		t.Fatalf("POST /json answered %q: %v", body, err)
	}
	return &resp
}

// TestHTTPAPI drives POST /json (Envoy's messages in protojson), POST
// /v1/check (friendly JSON), /healthz, /readyz and /metrics, and checks that
// malformed requests get 400 (oversized ones 413) over HTTP and InvalidArgument
// over gRPC.
func TestHTTPAPI(t *testing.T) {
	backends(t, e2eConfig, func(t *testing.T, s *fgServer) {
		avoidWindowEdge(time.Hour, 5*time.Second)
		if code, body := s.get("/healthz", ""); code != http.StatusOK || body != "ok\n" {
			t.Errorf("/healthz: %d %q", code, body)
		}
		if code, body := s.get("/readyz", ""); code != http.StatusOK {
			t.Errorf("/readyz: %d %q", code, body)
		}

		// POST /json: 200 while allowed, 429 once over the limit.
		for i, tc := range []struct {
			body string
			code int
			want wantStatus
		}{
			{`{"domain":"e2e","descriptors":[{"entries":[{"key":"user","value":"json"}]}]}`, 200, ok(3, hour, 2)},
			{`{"domain":"e2e","descriptors":[{"entries":[{"key":"user","value":"json"}]}],"hitsAddend":2}`, 200, ok(3, hour, 0)},
			{`{"domain":"e2e","descriptors":[{"entries":[{"key":"user","value":"json"}]}]}`, 429, over(3, hour, 0)},
		} {
			code, body := s.post("/json", "", tc.body)
			if code != tc.code {
				t.Errorf("/json request %d: %d %s, want %d", i, code, body, tc.code)
				continue
			}
			checkResponse(t, fmt.Sprintf("/json request %d", i), jsonResponse(t, body), tc.want)
		}

		// POST /v1/check.
		code, body := s.post("/v1/check", "", `{"domain":"e2e","descriptors":[{"user":"check"}],"cost":2}`)
		var cr struct {
			Allowed      bool   `json:"allowed"`
			Code         string `json:"code"`
			RetryAfterMS int64  `json:"retry_after_ms"`
			Failed       bool   `json:"store_failed"`
			Decisions    []struct {
				Code, Descriptor, Algorithm, Unit string
				Limit, Remaining                  int64
				RetryAfterMS                      int64 `json:"retry_after_ms"`
				ResetAfterMS                      int64 `json:"reset_after_ms"`
			} `json:"decisions"`
		}
		decode := func(body string) {
			t.Helper()
			cr.Decisions = nil
			if err := json.Unmarshal([]byte(body), &cr); err != nil || len(cr.Decisions) != 1 {
				t.Fatalf("/v1/check answered %q: %v", body, err)
			}
		}
		decode(body)
		d := cr.Decisions[0]
		if code != 200 || !cr.Allowed || cr.Code != "OK" || cr.Failed || d.Code != "OK" || d.Descriptor != "e2e|user" ||
			d.Algorithm != "fixed_window" || d.Limit != 3 || d.Unit != "HOUR" || d.Remaining != 1 || d.RetryAfterMS != 0 ||
			d.ResetAfterMS <= 0 || d.ResetAfterMS > 3600_000 {
			t.Errorf("/v1/check cost 2: %d %s", code, body)
		}
		resp, err := e2eHTTP.Post("http://"+s.HTTP+"/v1/check", "application/json",
			strings.NewReader(`{"domain":"e2e","descriptors":[{"user":"check"}],"cost":2}`))
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		decode(string(raw))
		d = cr.Decisions[0]
		retry, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
		if resp.StatusCode != 429 || cr.Allowed || cr.Code != "OVER_LIMIT" || d.Code != "OVER_LIMIT" || d.Remaining != 1 ||
			cr.RetryAfterMS <= 0 || retry <= 0 || retry > 3600 {
			t.Errorf("/v1/check over the limit: %d Retry-After %q %s", resp.StatusCode, resp.Header.Get("Retry-After"), raw)
		}

		// The same limit over gRPC, and shadow mode and detailed_metric.
		checkResponse(t, "grpc", s.mustRL(request("e2e", entries("user", "grpc"))), ok(3, hour, 2))
		for range 2 {
			checkResponse(t, "shadow", s.mustRL(request("e2e", entries("shadow", "s"))), ok(1, hour, 0))
		}
		checkResponse(t, "detailed", s.mustRL(request("e2e", entries("detailed", "d1"))), ok(5, hour, 4))

		// Decisions by domain, descriptor path and result; requests by API
		// and answer. Remaining 0 of 3 is near the limit (ratio 0.8).
		for _, m := range []struct {
			name   string
			labels []string
			want   float64
		}{
			{"floodgate_decisions_total", []string{"domain", "e2e", "descriptor", "e2e|user", "result", "within_limit"}, 3},
			{"floodgate_decisions_total", []string{"domain", "e2e", "descriptor", "e2e|user", "result", "near_limit"}, 1},
			{"floodgate_decisions_total", []string{"domain", "e2e", "descriptor", "e2e|user", "result", "over_limit"}, 2},
			{"floodgate_hits_total", []string{"domain", "e2e", "descriptor", "e2e|user"}, 1 + 2 + 1 + 2 + 2 + 1},
			{"floodgate_decisions_total", []string{"descriptor", "e2e|shadow", "result", "shadow_over_limit"}, 1},
			{"floodgate_decisions_total", []string{"descriptor", "e2e|shadow", "result", "over_limit"}, 0},
			{"floodgate_decisions_total", []string{"descriptor", "e2e|detailed|detailed_d1", "result", "within_limit"}, 1},
			{"floodgate_requests_total", []string{"api", "json", "code", "OK"}, 2},
			{"floodgate_requests_total", []string{"api", "json", "code", "OVER_LIMIT"}, 1},
			{"floodgate_requests_total", []string{"api", "check", "code", "OK"}, 1},
			{"floodgate_requests_total", []string{"api", "check", "code", "OVER_LIMIT"}, 1},
			{"floodgate_requests_total", []string{"api", "grpc", "code", "OK"}, 4},
			{"floodgate_request_duration_seconds_count", []string{"api", "grpc"}, 4},
			{"floodgate_config_reloads_total", []string{"result", "success"}, 1},
			{"floodgate_breaker_open", nil, 0},
		} {
			if got := s.metric("", m.name, m.labels...); got != m.want {
				t.Errorf("%s%v = %v, want %v", m.name, m.labels, got, m.want)
			}
		}

		// Malformed requests: 400 with a message (413 when too large),
		// never a 500 or a panic.
		tooMany := `{"domain":"e2e","descriptors":[` + strings.Repeat(`{"entries":[{"key":"user","value":"x"}]},`, 4) +
			`{"entries":[{"key":"user","value":"x"}]}]}`
		for _, tc := range []struct{ path, body, want string }{
			{"/json", `{"domain":`, "protojson"},
			{"/json", "{\"domain\":\"e2e\",\"descriptors\":[{\"entries\":[{\"key\":\"user\",\"value\":\"\xff\"}]}]}", "UTF-8"},
			{"/v1/check", "{\"domain\":\"e2e\",\"descriptors\":[{\"user\":\"\xff\"}]}", "invalid UTF-8"},
			{"/json", `not json at all`, "protojson"},
			{"/json", `{"domain":"e2e"}`, "descriptor list must not be empty"},
			{"/json", `{"descriptors":[{"entries":[{"key":"user","value":"x"}]}]}`, "domain is empty"},
			{"/json", `{"domain":"e2e","descriptors":[{"entries":[{"key":"","value":"x"}]}]}`, "key is empty"},
			{"/json", `{"domain":"e2e","descriptors":[{"entries":[]}]}`, "no entries"},
			{"/json", `{"domain":"e2e","descriptorz":[]}`, "descriptorz"},
			{"/json", tooMany, "at most 4"},
			{"/json", `{"domain":"e2e","descriptors":[{"entries":[{"key":"user","value":"` + strings.Repeat("x", 3000) + `"}]}]}`, "larger than 2048 bytes"},
			{"/v1/check", `{"domain":"e2e","descriptors":[{"user":"x"}]`, "check request"},
			{"/v1/check", `[]`, "check request"},
			{"/v1/check", `{"domain":"e2e","descriptors":[{"user":"x"}],"bogus":1}`, `unknown member "bogus"`},
			{"/v1/check", `{"domain":"e2e","descriptors":[{"user":{"nested":1}}]}`, "string, number or boolean"},
			{"/v1/check", `{"domain":"e2e","descriptors":[{"user":"x"}],"cost":-1}`, "cost -1"},
			{"/v1/check", `{"domain":"e2e","descriptors":[{"user":"` + strings.Repeat("x", 3000) + `"}]}`, "larger than 2048 bytes"},
		} {
			want := http.StatusBadRequest
			if strings.HasPrefix(tc.want, "larger than") {
				want = http.StatusRequestEntityTooLarge
			}
			if code, body := s.post(tc.path, "", tc.body); code != want || !strings.Contains(body, tc.want) {
				t.Errorf("POST %s %.60q: %d %q, want %d mentioning %q", tc.path, tc.body, code, body, want, tc.want)
			}
		}
		if code, _ := s.get("/json", ""); code != http.StatusMethodNotAllowed {
			t.Errorf("GET /json: %d, want 405", code)
		}
		five := request("e2e")
		for range 5 {
			five.Descriptors = append(five.Descriptors, entries("user", "x"))
		}
		huge := request("e2e", entries("user", strings.Repeat("x", 3000)))
		for _, tc := range []struct {
			req  *rls.RateLimitRequest
			code codes.Code
		}{
			{request("e2e"), codes.InvalidArgument},
			{request("", entries("user", "x")), codes.InvalidArgument},
			{request("e2e", entries("", "x")), codes.InvalidArgument},
			{five, codes.InvalidArgument},
			{huge, codes.ResourceExhausted}, // over --max-body-bytes: gRPC's own message size limit
		} {
			if _, err := s.rl(tc.req); grpcstatus.Code(err) != tc.code {
				t.Errorf("ShouldRateLimit(%.80v): %v, want %v", tc.req, err, tc.code)
			}
		}
		if got := s.metric("", "floodgate_requests_total", "api", "json", "code", "invalid"); got < 9 {
			t.Errorf("floodgate_requests_total{api=json,code=invalid} = %v, want the 9 bad /json requests", got)
		}
		// Still serving after all that.
		checkResponse(t, "after bad requests", s.mustRL(request("e2e", entries("user", "grpc"))), ok(3, hour, 1))
	}, "--max-body-bytes", "2048", "--max-descriptors", "4")
}

// TestAuth checks bearer-token auth: HTTP APIs answer 401 and gRPC
// Unauthenticated without the token; health endpoints stay open; `floodgate
// check --token` gets through.
func TestAuth(t *testing.T) {
	const token = "s3cret-token"
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		env  []string
		args []string
	}{
		{"token-file", nil, []string{"--token-file", tokenFile}},
		{"env", []string{"FLOODGATE_TOKEN=" + token}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startServerEnv(t, tc.env, e2eConfig, tc.args...)
			body := `{"domain":"e2e","descriptors":[{"entries":[{"key":"user","value":"auth"}]}]}`
			check := `{"domain":"e2e","descriptors":[{"user":"auth"}]}`
			for _, tok := range []string{"", "wrong"} {
				for _, r := range []struct{ method, path, body string }{
					{"POST", "/json", body}, {"POST", "/v1/check", check}, {"GET", "/metrics", ""},
				} {
					if code, _ := s.do(r.method, r.path, tok, r.body); code != http.StatusUnauthorized {
						t.Errorf("%s %s with token %q: %d, want 401", r.method, r.path, tok, code)
					}
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				if tok != "" {
					ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok)
				}
				_, err := s.client.ShouldRateLimit(ctx, request("e2e", entries("user", "auth")))
				cancel()
				if grpcstatus.Code(err) != codes.Unauthenticated {
					t.Errorf("gRPC with token %q: %v, want Unauthenticated", tok, err)
				}
			}
			for _, p := range []string{"/healthz", "/readyz"} {
				if code, _ := s.get(p, ""); code != http.StatusOK {
					t.Errorf("GET %s without a token: %d, want 200", p, code)
				}
			}
			hc := healthpb.NewHealthClient(s.conn)
			if hr, err := hc.Check(context.Background(), &healthpb.HealthCheckRequest{}); err != nil || hr.GetStatus() != healthpb.HealthCheckResponse_SERVING {
				t.Errorf("gRPC health without a token: %v, %v; want SERVING", hr, err)
			}

			if code, b := s.post("/json", token, body); code != http.StatusOK {
				t.Errorf("/json with the token: %d %s", code, b)
			}
			if code, b := s.post("/v1/check", token, check); code != http.StatusOK {
				t.Errorf("/v1/check with the token: %d %s", code, b)
			}
			ctx := metadata.AppendToOutgoingContext(context.Background(), "authorization", "Bearer "+token)
			resp, err := s.client.ShouldRateLimit(ctx, request("e2e", entries("user", "auth")))
			if err != nil {
				t.Fatalf("gRPC with the token: %v", err)
			}
			checkResponse(t, "gRPC with the token", resp, ok(3, hour, 0))
			if got := s.metric(token, "floodgate_requests_total", "code", "unauthorized"); got != 8 {
				t.Errorf("floodgate_requests_total{code=unauthorized} = %v, want 8", got)
			}

			// The check command: exit 1 without the token, 3 over the limit with it.
			bin := floodgateBinary(t)
			out, err := runBinary(bin, "check", "--addr", s.GRPC, "--domain", "e2e", "user=auth")
			if ee, isExit := err.(*execExitError); !isExit || ee.code != 1 || !strings.Contains(out, "Unauthenticated") {
				t.Errorf("floodgate check without a token: %v\n%s", err, out)
			}
			out, err = runBinary(bin, "check", "--addr", s.GRPC, "--domain", "e2e", "--token", token, "user=auth")
			if ee, isExit := err.(*execExitError); !isExit || ee.code != exitOverLimit || !strings.Contains(out, "OVER_LIMIT") {
				t.Errorf("floodgate check --token over the limit: %v, want exit %d\n%s", err, exitOverLimit, out)
			}
			out, err = runBinary(bin, "check", "--addr", s.GRPC, "--domain", "e2e", "--token", token, "--json", "user=auth2")
			if err != nil || jsonResponse(t, out).GetOverallCode() != codeOK {
				t.Errorf("floodgate check --json: %v\n%s", err, out)
			}
		})
	}
}

// reloadConfig is a one-domain configuration whose user limit is rpu an hour.
func reloadConfig(rpu int) string {
	return fmt.Sprintf("domain: reload\ndescriptors:\n  - key: user\n    rate_limit:\n      unit: hour\n      requests_per_unit: %d\n", rpu)
}

// waitLimit polls until [user=u] in domain reload is decided under rpu an
// hour, and fails after timeout.
func waitLimit(t *testing.T, s *fgServer, rpu uint32, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		resp := s.mustRL(request("reload", entries("user", "u")))
		got := resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit()
		if got == rpu {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("still served %d/hour %v after a configuration change to %d/hour", got, timeout, rpu)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestReload checks reloads on file change: a changed file is served within
// seconds without a restart, a new file in the directory adds its domain,
// and a broken file is logged and rejected while the old configuration keeps
// serving.
func TestReload(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "reload.yaml")
	writeConfig(t, cfg, reloadConfig(5))
	s := startServer(t, dir, "--reload-interval", "100ms")
	checkResponse(t, "first configuration", s.mustRL(request("reload", entries("user", "u"))), ok(5, hour, 4))

	writeConfig(t, cfg, reloadConfig(100))
	waitLimit(t, s, 100, 10*time.Second)

	writeConfig(t, filepath.Join(dir, "second.yaml"), "domain: second\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: day\n      requests_per_unit: 7\n")
	deadline := time.Now().Add(10 * time.Second)
	for s.mustRL(request("second", entries("k", "v"))).GetStatuses()[0].GetCurrentLimit() == nil {
		if time.Now().After(deadline) {
			t.Fatal("a new file in the configuration directory was not loaded")
		}
		time.Sleep(50 * time.Millisecond)
	}

	// A typo on line 7: rejected, logged with file and line, old limits kept.
	writeConfig(t, cfg, strings.Replace(reloadConfig(9), "requests_per_unit: 9", "requests_per_unit: 9\n      burts: 3", 1))
	s.waitLog(10*time.Second, "configuration rejected", cfg+":7", "burts")
	for range 3 {
		resp := s.mustRL(request("reload", entries("user", "u")))
		if got := resp.GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit(); got != 100 {
			t.Fatalf("after a broken file: served %d/hour, want the previous 100/hour", got)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if got := s.metric("", "floodgate_config_reloads_total", "result", "failure"); got != 1 {
		t.Errorf("floodgate_config_reloads_total{result=failure} = %v, want 1 (logged once)", got)
	}

	// Fixed: served again.
	writeConfig(t, cfg, reloadConfig(9))
	waitLimit(t, s, 9, 10*time.Second)

	// Files that are not configuration (an editor's swap file, notes, an
	// unreadable file, unless we run as root) neither reload it nor make
	// reloads fail.
	for _, name := range []string{".reload.yaml.swp", "NOTES.txt", "secret.txt"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(dir, "secret.txt"), 0); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // ten reload intervals
	for _, m := range []struct {
		result string
		want   float64
	}{{"success", 4}, {"failure", 1}} {
		if got := s.metric("", "floodgate_config_reloads_total", "result", m.result); got != m.want {
			t.Errorf("floodgate_config_reloads_total{result=%s} = %v, want %v", m.result, got, m.want)
		}
	}
}

// TestReloadSIGHUP checks that with --reload-interval 0 a changed file is
// served only after SIGHUP.
func TestReloadSIGHUP(t *testing.T) {
	cfg := filepath.Join(t.TempDir(), "reload.yaml")
	writeConfig(t, cfg, reloadConfig(5))
	s := startServer(t, cfg, "--reload-interval", "0")
	checkResponse(t, "first configuration", s.mustRL(request("reload", entries("user", "u"))), ok(5, hour, 4))
	writeConfig(t, cfg, reloadConfig(100))
	time.Sleep(1500 * time.Millisecond) // longer than the default interval
	if got := s.mustRL(request("reload", entries("user", "u"))).GetStatuses()[0].GetCurrentLimit().GetRequestsPerUnit(); got != 5 {
		t.Fatalf("served %d/hour without SIGHUP, want the loaded 5/hour", got)
	}
	s.signal(syscall.SIGHUP)
	waitLimit(t, s, 100, 10*time.Second)
	s.waitLog(5*time.Second, "SIGHUP")
}

// TestGracefulShutdown sends SIGTERM while an HTTP request and several gRPC
// requests are in flight (the HTTP one still sending its body, the gRPC ones
// waiting on a paused Redis): they all complete with real answers and the
// process exits 0.
func TestGracefulShutdown(t *testing.T) {
	r := testenv.NewRedis(t)
	s := startServer(t, e2eConfig, append(redisArgs(t, r), "--timeout", "10s", "--breaker-failures", "-1")...)
	checkResponse(t, "warm-up", s.mustRL(request("e2e", entries("open", "warm"))), ok(1000000, day, 999999))

	// An HTTP request whose handler is running: the server asked for the
	// body (100 Continue), which the client sends only after SIGTERM.
	conn, err := net.DialTimeout("tcp", s.HTTP, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetDeadline(time.Now().Add(30 * time.Second))
	body := `{"domain":"e2e","descriptors":[{"open":"http"}]}`
	fmt.Fprintf(conn, "POST /v1/check HTTP/1.1\r\nHost: floodgate\r\nContent-Type: application/json\r\nContent-Length: %d\r\nExpect: 100-continue\r\n\r\n", len(body))
	br := bufio.NewReader(conn)
	line, err := br.ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "HTTP/1.1 100") {
		t.Fatalf("want 100 Continue, got %q, %v", line, err)
	}
	if line, err = br.ReadString('\n'); err != nil || line != "\r\n" {
		t.Fatalf("after 100 Continue: %q, %v", line, err)
	}

	// gRPC requests stuck on a paused Redis.
	if err := r.Pause(); err != nil {
		t.Fatal(err)
	}
	defer r.Resume()
	const n = 4
	type result struct {
		resp *rls.RateLimitResponse
		err  error
	}
	results := make(chan result, n)
	for i := range n {
		go func() {
			resp, err := s.rl(request("e2e", entries("open", fmt.Sprint("grpc", i))))
			results <- result{resp, err}
		}()
	}
	// The commands reached the paused server (and so the RPCs the process).
	deadline := time.Now().Add(10 * time.Second)
	for socketBacklog(t, r.Port) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no command reached the paused Redis")
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond) // the other RPCs, sent at the same time

	s.signal(syscall.SIGTERM)
	s.waitLog(10*time.Second, "shutting down")
	if _, err := io.WriteString(conn, body); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if err := r.Resume(); err != nil {
		t.Fatal(err)
	}

	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatalf("the in-flight HTTP request got no answer: %v", err)
	}
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !strings.Contains(string(raw), `"remaining":999999`) {
		t.Errorf("in-flight HTTP request: %d %s", resp.StatusCode, raw)
	}
	for range n {
		res := <-results
		if res.err != nil {
			t.Errorf("in-flight gRPC request: %v", res.err)
			continue
		}
		checkResponse(t, "in-flight gRPC request", res.resp, ok(1000000, day, 999999))
	}
	if code := s.wait(20 * time.Second); code != 0 {
		t.Errorf("exit status %d after SIGTERM, want 0", code)
	}
	if strings.Contains(s.Logs(), "rate limit store failed") {
		t.Error("a store call failed during the drain")
	}
}

// answer is how one request was answered, for the fault tests.
type answer struct {
	resp *rls.RateLimitResponse
	err  error
	took time.Duration
}

// ask sends [key=value] in domain e2e over gRPC and times it.
func ask(s *fgServer, key, value string) answer {
	start := time.Now()
	resp, err := s.rl(request("e2e", entries(key, value)))
	return answer{resp, err, time.Since(start)}
}

// faultMode describes a --failure-mode: the descriptor key asked about, and
// how a normal answer and an answer during an outage look.
type faultMode struct {
	mode   string
	key    string
	normal func(a answer) bool
	failed func(a answer) bool
}

func codeOf(a answer) rls.RateLimitResponse_Code {
	if a.err != nil || len(a.resp.GetStatuses()) != 1 {
		return -1
	}
	return a.resp.GetStatuses()[0].GetCode()
}

var faultModes = []faultMode{
	{
		// allow: the blocked key is over its limit normally, OK while Redis is down.
		mode: "allow", key: "blocked",
		normal: func(a answer) bool { return codeOf(a) == codeOver },
		failed: func(a answer) bool { return codeOf(a) == codeOK },
	},
	{
		// deny: the open key is OK normally (with what remains), over the limit while Redis is down.
		mode: "deny", key: "open",
		normal: func(a answer) bool { return codeOf(a) == codeOK && a.resp.GetStatuses()[0].GetLimitRemaining() > 0 },
		failed: func(a answer) bool { return codeOf(a) == codeOver },
	},
	{
		// error: Unavailable while Redis is down, so that Envoy's failure_mode_deny decides.
		mode: "error", key: "open",
		normal: func(a answer) bool { return codeOf(a) == codeOK && a.resp.GetStatuses()[0].GetLimitRemaining() > 0 },
		failed: func(a answer) bool { return grpcstatus.Code(a.err) == codes.Unavailable },
	},
}

// maxAnswerTime bounds every answer during an outage: the store timeout
// (faultTimeout) plus generous slack, far below what a client would wait on
// a dead Redis without a timeout.
const maxAnswerTime = time.Second

// duringOutage sends a stream of requests from a few clients for d and
// checks that each is answered by the failure mode, quickly.
func duringOutage(t *testing.T, s *fgServer, m faultMode, what string, d time.Duration) {
	t.Helper()
	var wg sync.WaitGroup
	var count atomic.Int64
	stop := time.Now().Add(d)
	for c := range 3 {
		wg.Go(func() {
			for time.Now().Before(stop) {
				a := ask(s, m.key, fmt.Sprint("client", c))
				count.Add(1)
				if !m.failed(a) {
					t.Errorf("%s: answered %v, %v; want the %s failure mode's answer", what, a.resp, a.err, m.mode)
					return
				}
				if a.took > maxAnswerTime {
					t.Errorf("%s: an answer took %v, want well under %v", what, a.took, maxAnswerTime)
					return
				}
			}
		})
	}
	wg.Wait()
	if count.Load() == 0 {
		t.Errorf("%s: no request answered", what)
	}
}

// recovers waits until answers are normal (again: the circuit breaker
// closed), then wants 20 normal answers in a row and /readyz 200.
func recovers(t *testing.T, s *fgServer, m faultMode, what string) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		a := ask(s, m.key, "client0")
		if m.normal(a) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still answered %v, %v after 15s; want normal answers without a restart", what, a.resp, a.err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for i := range 20 {
		if a := ask(s, m.key, "client1"); !m.normal(a) {
			t.Fatalf("%s: answer %d after recovery: %v, %v", what, i, a.resp, a.err)
		}
	}
	s.waitReady(10 * time.Second)
}

// TestRedisFaults pauses (SIGSTOP) and then kills and restarts the Redis
// server under a stream of requests, with each --failure-mode: answers
// follow the mode and come back quickly; once Redis is back, answers are
// normal again without restarting floodgate.
func TestRedisFaults(t *testing.T) {
	for _, m := range faultModes {
		t.Run(m.mode, func(t *testing.T) {
			t.Parallel()
			r := testenv.NewRedis(t)
			s := startServer(t, e2eConfig, "--redis", redisURL(r), "--redis-prefix", uniquePrefix(t),
				"--failure-mode", m.mode, "--timeout", faultTimeout)
			recovers(t, s, m, "before any fault")

			if err := r.Pause(); err != nil {
				t.Fatal(err)
			}
			duringOutage(t, s, m, "Redis paused", 1500*time.Millisecond)
			// Readiness reports the open circuit breaker; the failures are counted.
			deadline := time.Now().Add(10 * time.Second)
			for {
				code, _ := s.get("/readyz", "")
				if code == http.StatusServiceUnavailable {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("/readyz still %d with Redis paused, want 503", code)
				}
				time.Sleep(20 * time.Millisecond)
			}
			if got := s.metric("", "floodgate_backend_errors_total", "reason", "timeout"); got < 1 {
				t.Errorf("floodgate_backend_errors_total{reason=timeout} = %v with Redis paused", got)
			}
			if got := s.metric("", "floodgate_failure_mode_total", "mode", m.mode); got < 1 {
				t.Errorf("floodgate_failure_mode_total{mode=%s} = %v with Redis paused", m.mode, got)
			}
			if m.mode == "error" {
				// The HTTP APIs answer 503.
				if code, body := s.post("/json", "", `{"domain":"e2e","descriptors":[{"entries":[{"key":"open","value":"x"}]}]}`); code != http.StatusServiceUnavailable {
					t.Errorf("/json with Redis paused: %d %s, want 503", code, body)
				}
				if code, body := s.post("/v1/check", "", `{"domain":"e2e","descriptors":[{"open":"x"}]}`); code != http.StatusServiceUnavailable {
					t.Errorf("/v1/check with Redis paused: %d %s, want 503", code, body)
				}
			} else {
				// /v1/check says the answer is the failure mode's.
				code, body := s.post("/v1/check", "", `{"domain":"e2e","descriptors":[{"`+m.key+`":"x"}]}`)
				if code == http.StatusInternalServerError || !strings.Contains(body, `"store_failed":true`) {
					t.Errorf("/v1/check with Redis paused: %d %s, want store_failed", code, body)
				}
			}
			if err := r.Resume(); err != nil {
				t.Fatal(err)
			}
			recovers(t, s, m, "Redis resumed")

			if err := r.Kill(); err != nil {
				t.Fatal(err)
			}
			duringOutage(t, s, m, "Redis killed", time.Second)
			if err := r.Restart(); err != nil {
				t.Fatal(err)
			}
			recovers(t, s, m, "Redis restarted")
		})
	}
}

// TestSentinelFailover runs floodgate on a Sentinel URL and, while clients
// send requests, has the Sentinel promote the replica twice: once on
// request (SENTINEL FAILOVER, the old master becomes a replica) and once
// after the master was killed. After each promotion service continues on the
// new master within a bounded time, without restarting floodgate.
func TestSentinelFailover(t *testing.T) {
	sn := testenv.NewSentinel(t)
	url := fmt.Sprintf("redis+sentinel://%s/%s", strings.Join(sn.SentinelAddrs, ","), sn.MasterName)
	s := startServer(t, e2eConfig, "--redis", url, "--redis-prefix", uniquePrefix(t), "--failure-mode", "error", "--timeout", faultTimeout)
	m := faultModes[2] // error: a failed answer is visible as Unavailable
	recovers(t, s, m, "before the failover")

	for _, kill := range []bool{false, true} {
		what := "SENTINEL FAILOVER"
		if kill {
			what = "master killed"
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		old, _, err := sn.Roles(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var newMaster string
		nOK, nFailed := underLoad(t, s, m, func() {
			if kill {
				if err := old.Kill(); err != nil {
					t.Error(err)
					return
				}
			}
			newMaster, err = sn.Failover(ctx)
			if err != nil {
				t.Errorf("%s: %v", what, err)
				return
			}
			recovers(t, s, m, what+": after the promotion of "+newMaster)
		})
		cancel()
		if t.Failed() {
			t.FailNow()
		}
		if newMaster == old.Addr {
			t.Fatalf("%s: %s is master still", what, old.Addr)
		}
		t.Logf("%s: %s promoted; %d OK and %d Unavailable answers under load", what, newMaster, nOK, nFailed)
		key := fmt.Sprint("after-", kill)
		checkResponse(t, what+": a new key", s.mustRL(request("e2e", entries("open", key))), ok1e6(999999))
		checkResponse(t, what+": the same key again", s.mustRL(request("e2e", entries("open", key))), ok1e6(999998))
	}
}

// ok1e6 is the status of the e2e "open" key.
func ok1e6(remaining uint32) wantStatus { return ok(1000000, day, remaining) }

// underLoad runs f while three clients send requests, each answered
// normally or by the failure mode of m within 5s; it returns how many were
// answered each way.
func underLoad(t *testing.T, s *fgServer, m faultMode, f func()) (normal, failed int64) {
	t.Helper()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var okCount, failCount atomic.Int64
	for c := range 3 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				a := ask(s, m.key, fmt.Sprint("load", c))
				switch {
				case m.normal(a):
					okCount.Add(1)
				case m.failed(a):
					failCount.Add(1)
				default:
					t.Errorf("under load: %v, %v; want a normal answer or the %s failure mode's", a.resp, a.err, m.mode)
					return
				}
				if a.took > 5*time.Second {
					t.Errorf("under load: an answer took %v", a.took)
					return
				}
			}
		})
	}
	defer func() { // also when f fails the test
		close(stop)
		wg.Wait()
		normal, failed = okCount.Load(), failCount.Load()
	}()
	time.Sleep(100 * time.Millisecond)
	f()
	return
}

// TestScaleOut runs two servers against one Redis: they keep no limit state
// of their own and enforce one shared limit exactly (50 a day, 200 requests
// spread over both, over gRPC and HTTP, concurrently → exactly 50 admitted).
// A third server started afterwards sees the limit used up.
func TestScaleOut(t *testing.T) {
	avoidWindowEdge(24*time.Hour, 30*time.Second)
	args := redisArgs(t, testenv.SharedRedis(t)) // one prefix for the three servers
	a := startServer(t, e2eConfig, args...)
	b := startServer(t, e2eConfig, args...)

	const total, clients = 200, 8
	var admitted, denied atomic.Int64
	var wg sync.WaitGroup
	per := total / clients
	for c := range clients {
		wg.Go(func() {
			for range per {
				var allowed bool
				if c%2 == 0 {
					resp, err := a.rl(request("e2e", entries("shared", "tenant")))
					if err != nil {
						t.Errorf("server A: %v", err)
						return
					}
					allowed = resp.GetOverallCode() == codeOK
				} else {
					resp, err := e2eHTTP.Post("http://"+b.HTTP+"/json", "application/json",
						strings.NewReader(`{"domain":"e2e","descriptors":[{"entries":[{"key":"shared","value":"tenant"}]}]}`))
					if err != nil {
						t.Errorf("server B: %v", err)
						return
					}
					io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
					if resp.StatusCode != 200 && resp.StatusCode != 429 {
						t.Errorf("server B: status %d", resp.StatusCode)
						return
					}
					allowed = resp.StatusCode == 200
				}
				if allowed {
					admitted.Add(1)
				} else {
					denied.Add(1)
				}
			}
		})
	}
	wg.Wait()
	if admitted.Load() != 50 || denied.Load() != total-50 {
		t.Fatalf("two servers admitted %d and denied %d of %d requests; want exactly 50 admitted", admitted.Load(), denied.Load(), total)
	}
	c := startServer(t, e2eConfig, args...)
	peek := request("e2e", withHits(entries("shared", "tenant"), 0))
	for name, s := range map[string]*fgServer{"A": a, "B": b, "a third server": c} {
		checkResponse(t, name+" peeks", s.mustRL(peek), ok(50, day, 0))
		checkResponse(t, name+" asks", s.mustRL(request("e2e", entries("shared", "tenant"))), over(50, day, 0))
	}
}

// TestAtomicMultiDescriptor checks through the server that a request whose
// second descriptor is over its limit consumes nothing from the first, one
// request at a time and under concurrency.
func TestAtomicMultiDescriptor(t *testing.T) {
	backends(t, e2eConfig, func(t *testing.T, s *fgServer) {
		avoidWindowEdge(time.Hour, 10*time.Second)
		pair := func(k string) *rls.RateLimitRequest {
			return request("e2e", entries("pair_a", k), entries("pair_b", k))
		}
		// pair_b (5 an hour) runs out while pair_a (10) has plenty.
		for i := range 5 {
			checkResponse(t, fmt.Sprint("pair ", i), s.mustRL(pair("seq")), ok(10, hour, uint32(9-i)), ok(5, hour, uint32(4-i)))
		}
		for range 5 {
			checkResponse(t, "pair over", s.mustRL(pair("seq")), ok(10, hour, 5), over(5, hour, 0))
		}
		checkResponse(t, "pair_a alone", s.mustRL(request("e2e", entries("pair_a", "seq"))), ok(10, hour, 4))

		// 40 concurrent pairs: exactly 5 admitted, and pair_a charged 5 only.
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for range 8 {
			wg.Go(func() {
				for range 5 {
					resp, err := s.rl(pair("conc"))
					if err != nil {
						t.Error(err)
						return
					}
					if resp.GetOverallCode() == codeOK {
						admitted.Add(1)
					}
				}
			})
		}
		wg.Wait()
		if admitted.Load() != 5 {
			t.Errorf("%d of 40 concurrent pairs admitted, want 5", admitted.Load())
		}
		checkResponse(t, "pair_a alone after the concurrent pairs", s.mustRL(request("e2e", entries("pair_a", "conc"))), ok(10, hour, 4))
	})
}
