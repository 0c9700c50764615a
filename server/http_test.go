package server

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/server/checkapi"
)

func post(t *testing.T, h http.Handler, path, body string, hdr ...string) *httptest.ResponseRecorder {
	t.Helper()
	req := httptest.NewRequest("POST", path, strings.NewReader(body))
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w
}

func TestHTTPCheck(t *testing.T) {
	s := newService(t, backend.NewMemory(), Options{Metrics: NewMetrics()})
	h := NewHTTPHandler(s, HTTPOptions{})
	body := `{"domain":"api","descriptors":[{"path":"/upload","user":"ann"}],"cost":2}`
	w := post(t, h, "/v1/check", body)
	var resp checkapi.Response
	if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil || w.Code != 200 {
		t.Fatalf("%d %s %v", w.Code, w.Body, err)
	}
	d := resp.Decisions[0]
	if !resp.Allowed || d.Name != "uploads" || d.Algorithm != "sliding_window" || d.Limit != 2 || d.Unit != "DAY" || d.Remaining != 0 {
		t.Fatalf("%+v", resp)
	}
	w = post(t, h, "/v1/check", body)
	if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil || w.Code != http.StatusTooManyRequests {
		t.Fatalf("%d %s %v", w.Code, w.Body, err)
	}
	if resp.Allowed || resp.Decisions[0].Code != "OVER_LIMIT" || resp.RetryAfterMS <= 0 || w.Header().Get("Retry-After") == "" {
		t.Fatalf("%+v %v", resp, w.Header())
	}
	// Member order is entry order: user then path matches nothing.
	w = post(t, h, "/v1/check", `{"domain":"api","descriptors":[{"user":"ann","path":"/upload"}]}`)
	resp = checkapi.Response{}
	if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil || w.Code != 200 || resp.Decisions[0].Descriptor != "" {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
	// Unlimited.
	w = post(t, h, "/v1/check", `{"domain":"api","descriptors":[{"user":"vip"}]}`)
	resp = checkapi.Response{}
	if err := json.Unmarshal(w.Body.Bytes(), &resp); err != nil || !resp.Decisions[0].Unlimited || resp.Decisions[0].Remaining != 1<<32-1 {
		t.Fatalf("%s", w.Body)
	}
}

func TestHTTPCheckBadInput(t *testing.T) {
	s := newService(t, backend.NewMemory(), Options{})
	h := NewHTTPHandler(s, HTTPOptions{MaxBodyBytes: 200})
	cases := map[string]string{
		``:                                       "check request",
		`[]`:                                     "want",
		`{"domain":"api"}`:                       "must not be empty",
		`{"domain":1,"descriptors":[{"a":"b"}]}`: "domain must be a string",
		`{"domain":"api","descriptors":[{"a":[]}]}`:                "string, number or boolean",
		`{"domain":"api","descriptors":{}}`:                        "list of objects",
		`{"domain":"api","descriptors":[{}]}`:                      "no entries",
		`{"domain":"api","cost":-1}`:                               "whole number from 0",
		`{"domain":"api","cost":1.5}`:                              "whole number from 0",
		`{"domain":"api","extra":1}`:                               `unknown member "extra"`,
		`{"domain":"api","domain":"api"}`:                          "repeated",
		`{"domain":"api","descriptors":[{"a":"b"}]} {}`:            "data after",
		"{\"domain\":\"api\",\"descriptors\":[{\"a\":\"b\xff\"}]}": "invalid UTF-8",
	}
	for body, want := range cases {
		w := post(t, h, "/v1/check", body)
		if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), want) {
			t.Errorf("%q: %d %q, want 400 containing %q", body, w.Code, w.Body, want)
		}
	}
	for _, path := range []string{"/v1/check", "/json"} {
		w := post(t, h, path, `{"domain":"api","descriptors":[{"a":"`+strings.Repeat("b", 300))
		if w.Code != http.StatusRequestEntityTooLarge || !strings.Contains(w.Body.String(), "larger than 200 bytes") {
			t.Errorf("%s: oversized body: %d %q, want 413", path, w.Code, w.Body)
		}
	}
	for body, want := range map[string]string{
		"{\"domain\":\"api\",\"descriptors\":[{\"entries\":[{\"key\":\"user\",\"value\":\"\xff\"}]}]}": "UTF-8",
		`{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"x"}]}],"bogus":1}`:          "protojson",
		`not json`:                          "protojson",
		`{"domain":"api","descriptors":[]}`: "must not be empty",
	} {
		w := post(t, h, "/json", body)
		if w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), want) {
			t.Errorf("/json %q: %d %q, want 400 containing %q", body, w.Code, w.Body, want)
		}
	}
}

func TestHTTPJSON(t *testing.T) {
	s := newService(t, backend.NewMemory(), Options{})
	h := NewHTTPHandler(s, HTTPOptions{})
	body := `{"domain":"api","descriptors":[{"entries":[{"key":"user","value":"zed"}],"hits_addend":"3"},{"entries":[{"key":"none","value":"x"}]}]}`
	w := post(t, h, "/json", body)
	var resp rls.RateLimitResponse
	if err := protojson.Unmarshal(w.Body.Bytes(), &resp); err != nil || w.Code != 200 {
		t.Fatalf("%d %s %v", w.Code, w.Body, err)
	}
	st := resp.Statuses
	if len(st) != 2 || st[0].GetCurrentLimit().GetRequestsPerUnit() != 3 || st[0].LimitRemaining != 0 || st[1].CurrentLimit != nil {
		t.Fatalf("%v", &resp)
	}
	if st[0].GetCurrentLimit().GetUnit() != rls.RateLimitResponse_RateLimit_DAY || st[0].GetDurationUntilReset().AsDuration() <= 0 {
		t.Fatalf("%v", &resp)
	}
	w = post(t, h, "/json", body)
	if w.Code != http.StatusTooManyRequests || !strings.Contains(w.Body.String(), "OVER_LIMIT") {
		t.Fatalf("%d %s", w.Code, w.Body)
	}
}

// TestHTTPCrossSite: what a page on another site can make a browser send
// without a CORS preflight is refused, token or not; curl's requests are not.
func TestHTTPCrossSite(t *testing.T) {
	s := newService(t, backend.NewMemory(), Options{})
	h := NewHTTPHandler(s, HTTPOptions{})
	body := `{"domain":"api","descriptors":[{"nolimit":"csrf"}]}`
	for _, hdr := range [][]string{
		{"Content-Type", "text/plain"},
		{"Content-Type", "text/plain;charset=UTF-8"},
		{"Content-Type", "multipart/form-data; boundary=x"},
	} {
		for _, path := range []string{"/v1/check", "/json"} {
			if w := post(t, h, path, body, hdr...); w.Code != http.StatusUnsupportedMediaType || !strings.Contains(w.Body.String(), "application/json") {
				t.Errorf("%s with %s: %d %q, want 415", path, hdr[1], w.Code, w.Body)
			}
		}
	}
	for _, hdr := range [][]string{
		{"Sec-Fetch-Site", "cross-site"},
		{"Sec-Fetch-Site", "same-site"},
		{"Origin", "https://evil.example"},
	} {
		if w := post(t, h, "/v1/check", body, hdr...); w.Code != http.StatusForbidden {
			t.Errorf("%s: %s: %d %q, want 403", hdr[0], hdr[1], w.Code, w.Body)
		}
	}
	for _, hdr := range [][]string{
		nil,
		{"Content-Type", "application/json"},
		{"Content-Type", "application/x-www-form-urlencoded"}, // curl -d
		{"Sec-Fetch-Site", "same-origin"},
		{"Origin", "http://example.com"}, // httptest's Host
	} {
		if w := post(t, h, "/v1/check", body, hdr...); w.Code != http.StatusOK {
			t.Errorf("%v: %d %q, want 200", hdr, w.Code, w.Body)
		}
	}
}

func TestHTTPAuthAndProbes(t *testing.T) {
	s := newService(t, backend.NewMemory(), Options{Metrics: NewMetrics()})
	h := NewHTTPHandler(s, HTTPOptions{Token: "s3cret"})
	body := `{"domain":"api","descriptors":[{"user":"x"}]}`
	if w := post(t, h, "/v1/check", body); w.Code != http.StatusUnauthorized {
		t.Fatalf("no token: %d", w.Code)
	}
	if w := post(t, h, "/v1/check", body, "Authorization", "Bearer wrong"); w.Code != http.StatusUnauthorized {
		t.Fatalf("wrong token: %d", w.Code)
	}
	if w := post(t, h, "/v1/check", body, "Authorization", "Bearer s3cret"); w.Code != 200 {
		t.Fatalf("right token: %d %s", w.Code, w.Body)
	}
	// Auth schemes are case-insensitive (RFC 9110 §11.1).
	unlimited := `{"domain":"api","descriptors":[{"nolimit":"x"}]}`
	for _, auth := range []string{"bearer s3cret", "BEARER s3cret", "Bearer  s3cret"} {
		if w := post(t, h, "/v1/check", unlimited, "Authorization", auth); w.Code != 200 {
			t.Fatalf("%q: %d %s", auth, w.Code, w.Body)
		}
	}
	for _, auth := range []string{"Basic s3cret", "Bearers3cret", "s3cret", "Bearer s3cretx"} {
		if w := post(t, h, "/v1/check", unlimited, "Authorization", auth); w.Code != http.StatusUnauthorized {
			t.Fatalf("%q accepted: %d", auth, w.Code)
		}
	}
	for _, p := range []string{"/healthz", "/readyz"} {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest("GET", p, nil))
		if w.Code != 200 {
			t.Fatalf("%s: %d", p, w.Code)
		}
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, httptest.NewRequest("GET", "/metrics", nil))
	if w.Code != http.StatusUnauthorized {
		t.Fatalf("metrics without a token: %d", w.Code)
	}
	req := httptest.NewRequest("GET", "/metrics", nil)
	req.Header.Set("Authorization", "Bearer s3cret")
	w = httptest.NewRecorder()
	h.ServeHTTP(w, req)
	m := w.Body.String()
	for _, want := range []string{
		`floodgate_decisions_total{descriptor="api|user",domain="api",result="within_limit"} 1`,
		`floodgate_requests_total{api="check",code="unauthorized"} 6`,
		`floodgate_requests_total{api="check",code="OK"} 4`,
		`floodgate_config_info{version="v1"} 1`,
	} {
		if !strings.Contains(m, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	notReady, _ := NewService(backend.NewMemory(), Options{})
	w = httptest.NewRecorder()
	NewHTTPHandler(notReady, HTTPOptions{}).ServeHTTP(w, httptest.NewRequest("GET", "/readyz", nil))
	if w.Code != http.StatusServiceUnavailable || !strings.Contains(w.Body.String(), "no configuration") {
		t.Fatalf("readyz without config: %d %s", w.Code, w.Body)
	}
}

// startServer runs a Server on loopback ports with the given config file.
func startServer(t *testing.T, c Config) *Server {
	t.Helper()
	if c.Backend == nil {
		c.Backend = backend.NewMemory()
	}
	if c.HTTPAddr == "" {
		c.HTTPAddr = "127.0.0.1:0"
	}
	if c.GRPCAddr == "" {
		c.GRPCAddr = "127.0.0.1:0"
	}
	srv, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return srv
}

func writeConfig(t *testing.T, path, yaml string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func TestGRPC(t *testing.T) {
	dir := t.TempDir()
	writeConfig(t, filepath.Join(dir, "api.yaml"), testYAML)
	srv := startServer(t, Config{ConfigPath: dir, Token: "tok"})
	conn, err := grpc.NewClient(srv.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := rls.NewRateLimitServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	req := &rls.RateLimitRequest{Domain: "api", HitsAddend: 2, Descriptors: []*rlscommon.RateLimitDescriptor{
		{Entries: []*rlscommon.RateLimitDescriptor_Entry{{Key: "user", Value: "gil"}}},
		{Entries: []*rlscommon.RateLimitDescriptor_Entry{{Key: "user", Value: "vip"}}},
		{Entries: []*rlscommon.RateLimitDescriptor_Entry{{Key: "user", Value: "hal"}}, HitsAddend: wrapperspb.UInt64(0)},
	}}
	if _, err := client.ShouldRateLimit(ctx, req); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("without a token: %v", err)
	}
	actx := metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer tok")
	resp, err := client.ShouldRateLimit(actx, req)
	if err != nil {
		t.Fatal(err)
	}
	st := resp.Statuses
	if resp.OverallCode != rls.RateLimitResponse_OK || st[0].LimitRemaining != 1 || st[1].LimitRemaining != 1<<32-1 || st[1].CurrentLimit != nil || st[2].LimitRemaining != 3 {
		t.Fatalf("%v", resp)
	}
	resp, err = client.ShouldRateLimit(actx, req)
	if err != nil || resp.OverallCode != rls.RateLimitResponse_OVER_LIMIT || st[0].Code != rls.RateLimitResponse_OK || resp.Statuses[0].Code != rls.RateLimitResponse_OVER_LIMIT {
		t.Fatalf("%v %v", resp, err)
	}
	if _, err := client.ShouldRateLimit(actx, &rls.RateLimitRequest{Domain: "api"}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("empty descriptors: %v", err)
	}
	h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	if err != nil || h.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("health: %v %v", h, err)
	}
}

// TestReload: a changed file is served without restart; a broken one is
// rejected and the previous configuration keeps serving.
func TestReload(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "api.yaml")
	writeConfig(t, path, "domain: api\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 1}\n")
	srv := startServer(t, Config{ConfigPath: dir, ReloadInterval: 50 * time.Millisecond})
	limitOf := func() uint32 {
		resp, err := srv.Service().Decide(context.Background(), &Request{Domain: "api", Descriptors: []Descriptor{desc(0, "k", "v")}})
		if err != nil {
			t.Fatal(err)
		}
		return resp.Statuses[0].Limit.RequestsPerUnit
	}
	if limitOf() != 1 {
		t.Fatal("initial limit")
	}
	writeConfig(t, path, "domain: api\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 7}\n")
	waitFor(t, func() bool { return limitOf() == 7 })
	_, v1, _ := srv.Service().Config()

	writeConfig(t, path, "domain: api\ndescriptors:\n  - key: k\n    rate_limit: {unit: fortnight, requests_per_unit: 9}\n")
	if err := srv.Reload(); err == nil || !strings.Contains(err.Error(), "api.yaml:4") {
		t.Fatalf("broken config: %v", err)
	}
	time.Sleep(200 * time.Millisecond)
	if _, v, _ := srv.Service().Config(); v != v1 || limitOf() != 7 {
		t.Fatalf("broken config replaced the good one: version %s, limit %d", v, limitOf())
	}
	resp, err := http.Get("http://" + srv.HTTPAddr() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `floodgate_config_reloads_total{result="failure"} 1`) ||
		!strings.Contains(string(body), `floodgate_config_reloads_total{result="success"} 2`) {
		t.Fatalf("reload counters:\n%s", grepLines(string(body), "reloads"))
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestNewErrors(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "bad.yaml")
	writeConfig(t, path, "domain: api\ndescriptors:\n  - key: k\n    rate_limit: {unit: day, requests_per_unit: 1, colour: red}\n")
	if _, err := New(Config{ConfigPath: path, Backend: backend.NewMemory(), HTTPAddr: "127.0.0.1:0"}); err == nil || !strings.Contains(err.Error(), "bad.yaml:4") || !strings.Contains(err.Error(), "colour") {
		t.Fatalf("bad config: %v", err)
	}
	good := filepath.Join(dir, "good.yml")
	writeConfig(t, good, testYAML)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if _, err := New(Config{ConfigPath: good, Backend: backend.NewMemory(), HTTPAddr: ln.Addr().String()}); err == nil || !strings.Contains(err.Error(), "HTTP") {
		t.Fatalf("taken port: %v", err)
	}
	if _, err := New(Config{ConfigPath: good, Backend: backend.NewMemory()}); err == nil {
		t.Fatal("no addresses accepted")
	}
	if _, err := New(Config{ConfigPath: good, Backend: backend.NewMemory(), HTTPAddr: "127.0.0.1:0", TLSCertFile: "x"}); err == nil {
		t.Fatal("a certificate without a key accepted")
	}
}

// TestUnixSockets: both APIs listen on Unix sockets (unix:PATH and
// unix:///PATH), a stale socket file is replaced, and a live one is refused.
func TestUnixSockets(t *testing.T) {
	dir := t.TempDir()
	writeConfig(t, filepath.Join(dir, "api.yaml"), testYAML)
	grpcSock, httpSock := filepath.Join(dir, "g.sock"), filepath.Join(dir, "h.sock")
	// A stale socket file, as a killed server leaves behind.
	stale, err := net.Listen("unix", grpcSock)
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	stale.Close()

	srv := startServer(t, Config{ConfigPath: dir, GRPCAddr: "unix://" + grpcSock, HTTPAddr: "unix:" + httpSock})
	conn, err := grpc.NewClient("unix://"+grpcSock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := rls.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx, &rls.RateLimitRequest{Domain: "api",
		Descriptors: []*rlscommon.RateLimitDescriptor{{Entries: []*rlscommon.RateLimitDescriptor_Entry{{Key: "user", Value: "gil"}}}}})
	if err != nil || resp.OverallCode != rls.RateLimitResponse_OK || resp.Statuses[0].LimitRemaining != 2 {
		t.Fatalf("gRPC over a Unix socket: %v %v", resp, err)
	}
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", httpSock)
	}}}
	r, err := hc.Post("http://floodgate/v1/check", "application/json", strings.NewReader(`{"domain":"api","descriptors":[{"user":"gil"}]}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(r.Body)
	r.Body.Close()
	if r.StatusCode != http.StatusOK || !strings.Contains(string(body), `"remaining":1`) {
		t.Fatalf("HTTP over a Unix socket: %d %s", r.StatusCode, body)
	}
	if srv.GRPCAddr() != grpcSock {
		t.Fatalf("GRPCAddr %q, want %q", srv.GRPCAddr(), grpcSock)
	}

	// The socket is live: a second server must not take it over.
	if _, err := New(Config{ConfigPath: dir, Backend: backend.NewMemory(), GRPCAddr: "unix:" + grpcSock}); err == nil || !strings.Contains(err.Error(), "another server") {
		t.Fatalf("second server on a live socket: %v", err)
	}
	if _, err := New(Config{ConfigPath: dir, Backend: backend.NewMemory(), GRPCAddr: "unix:"}); err == nil || !strings.Contains(err.Error(), "needs a path") {
		t.Fatalf("empty socket path: %v", err)
	}
}
