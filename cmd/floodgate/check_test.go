package main

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/server"
)

// TestCheckHints: `floodgate check` says what to do about each failure:
// a missing or wrong token is not taken for a server that is not running.
func TestCheckHints(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, dir, "api.yaml", "domain: api\ndescriptors:\n  - key: user\n    rate_limit: {unit: minute, requests_per_unit: 5}\n")
	srv, err := server.New(server.Config{
		ConfigPath: cfg,
		GRPCAddr:   "127.0.0.1:0",
		Backend:    backend.NewMemory(),
		Token:      "s3cret",
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	defer func() { cancel(); <-done }()
	addr := srv.GRPCAddr()

	for _, tc := range []struct {
		args    []string
		code    int
		want    string
		mustNot string
	}{
		{args: []string{"--addr", addr, "--domain", "api", "user=a"}, code: exitFailure, want: "requires a bearer token: give it with --token", mustNot: "running there"},
		{args: []string{"--addr", addr, "--token", "wrong", "--domain", "api", "user=a"}, code: exitFailure, want: "refused the token", mustNot: "running there"},
		{args: []string{"--addr", addr, "--token", "s3cret", "--domain", "api", "user=a"}, code: exitOK, want: ""},
		// Nothing matched: a mistyped domain or descriptor is not a success.
		{args: []string{"--addr", addr, "--token", "s3cret", "--domain", "nope", "user=a"}, code: exitNoMatch, want: `no limit matched: the server does not know the domain "nope", or none of its descriptors match user=a`},
		{args: []string{"--addr", addr, "--token", "s3cret", "--domain", "api", "usr=a"}, code: exitNoMatch, want: "no limit matched"},
		{args: []string{"--addr", addr, "--token", "s3cret", "--domain", "api", "usr=a", "user=b"}, code: exitOK, want: ""},
		{args: []string{"--addr", addr, "--token", "s3cret", "--allow-unmatched", "--domain", "nope", "user=a"}, code: exitOK, want: ""},
		{args: []string{"--addr", filepath.Join("unix://", dir, "none.sock"), "--timeout", "2s", "--domain", "api", "user=a"}, code: exitFailure, want: "running there"},
	} {
		code, out, errOut := floodgate(t, append([]string{"check"}, tc.args...)...)
		if code != tc.code || !strings.Contains(errOut, tc.want) || tc.mustNot != "" && strings.Contains(errOut, tc.mustNot) {
			t.Errorf("floodgate check %v: exit %d, stdout %q, stderr %q; want exit %d and %q", tc.args, code, out, errOut, tc.code, tc.want)
		}
	}
}

// TestCheckPrintsPeriod: `floodgate check` shows a period of several units
// (current_limit.unit_multiplier) as such, and one unit as before.
func TestCheckPrintsPeriod(t *testing.T) {
	req := &rls.RateLimitRequest{Domain: "api", Descriptors: []*rlscommon.RateLimitDescriptor{
		{Entries: []*rlscommon.RateLimitDescriptor_Entry{{Key: "user", Value: "a"}}},
		{Entries: []*rlscommon.RateLimitDescriptor_Entry{{Key: "ip", Value: "b"}}},
	}}
	resp := &rls.RateLimitResponse{OverallCode: rls.RateLimitResponse_OK, Statuses: []*rls.RateLimitResponse_DescriptorStatus{
		{Code: rls.RateLimitResponse_OK, LimitRemaining: 999, CurrentLimit: &rls.RateLimitResponse_RateLimit{
			RequestsPerUnit: 1000, Unit: rls.RateLimitResponse_RateLimit_SECOND, UnitMultiplier: wrapperspb.UInt32(10)}},
		{Code: rls.RateLimitResponse_OK, LimitRemaining: 4, CurrentLimit: &rls.RateLimitResponse_RateLimit{
			RequestsPerUnit: 5, Unit: rls.RateLimitResponse_RateLimit_MINUTE, UnitMultiplier: wrapperspb.UInt32(1)}},
	}}
	var b strings.Builder
	printDecision(&b, req, resp)
	if out := b.String(); !strings.Contains(out, "user=a      OK    1000/10 seconds  999") || !strings.Contains(out, "ip=b        OK    5/minute         4") {
		t.Errorf("got\n%s", out)
	}
}
