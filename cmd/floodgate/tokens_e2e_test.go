package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rlqs "github.com/envoyproxy/go-control-plane/envoy/service/rate_limit_quota/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// tokensYAML is a tokens file giving each name its token's digest and its
// domains.
func tokensYAML(entries ...[3]string) string {
	var b strings.Builder
	b.WriteString("tokens:\n")
	for _, e := range entries {
		sum := sha256.Sum256([]byte(e[1]))
		fmt.Fprintf(&b, "  - name: %s\n    sha256: %s\n    domains: [%s]\n", e[0], hex.EncodeToString(sum[:]), e[2])
	}
	return b.String()
}

// TestScopedTokens: with --tokens-file, a tenant's token checks and
// charges its own domain and is refused every other one — over gRPC
// (PERMISSION_DENIED), the HTTP API (403) and RLQS — before anything is
// counted; a token of every domain and --token-file's single token reach
// them all and /metrics, which a tenant's token may not read. Refusals are
// counted and logged by the token's name, never the token. An edit of the
// tokens file takes effect at the next reload, and a bad edit keeps the
// tokens in use.
func TestScopedTokens(t *testing.T) {
	dir := t.TempDir()
	cfg := filepath.Join(dir, "conf")
	if err := os.Mkdir(cfg, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"tenant-a", "tenant-b"} {
		writeConfig(t, filepath.Join(cfg, d+".yaml"), "domain: "+d+"\ndescriptors:\n  - key: user\n    rate_limit: {unit: hour, requests_per_unit: 5}\n")
	}
	const (
		tokA     = "token-of-tenant-a-5f2c"
		tokAdmin = "token-of-the-platform-team-9d1e"
		single   = "the-single-token-77aa"
	)
	tokens := filepath.Join(dir, "tokens.yaml")
	writeConfig(t, tokens, tokensYAML([3]string{"tenant-a", tokA, "tenant-a"}, [3]string{"platform", tokAdmin, `"*"`}))
	singleFile := filepath.Join(dir, "token")
	if err := os.WriteFile(singleFile, []byte(single), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, cfg, "--tokens-file", tokens, "--token-file", singleFile, "--reload-interval", "100ms")

	grpcCheck := func(tok, domain string) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tok)
		_, err := s.client.ShouldRateLimit(ctx, request(domain, entries("user", "u")))
		return err
	}
	httpCheck := func(tok, domain string) int {
		code, _ := s.post("/v1/check", tok, `{"domain":"`+domain+`","descriptors":[{"user":"u"}]}`)
		return code
	}
	jsonCheck := func(tok, domain string) int {
		code, _ := s.post("/json", tok, `{"domain":"`+domain+`","descriptors":[{"entries":[{"key":"user","value":"u"}]}]}`)
		return code
	}

	// The tenant's token: its own domain, over both APIs.
	if err := grpcCheck(tokA, "tenant-a"); err != nil {
		t.Fatalf("tenant-a's token on tenant-a over gRPC: %v", err)
	}
	if code := httpCheck(tokA, "tenant-a"); code != http.StatusOK {
		t.Fatalf("tenant-a's token on tenant-a over HTTP: %d", code)
	}
	// Not another tenant's, and nothing is counted there.
	for range 3 {
		if err := grpcCheck(tokA, "tenant-b"); grpcstatus.Code(err) != codes.PermissionDenied {
			t.Errorf("tenant-a's token on tenant-b over gRPC: %v, want PermissionDenied", err)
		}
		if code := httpCheck(tokA, "tenant-b"); code != http.StatusForbidden {
			t.Errorf("tenant-a's token on tenant-b, POST /v1/check: %d, want 403", code)
		}
		if code := jsonCheck(tokA, "tenant-b"); code != http.StatusForbidden {
			t.Errorf("tenant-a's token on tenant-b, POST /json: %d, want 403", code)
		}
	}
	if code, body := s.post("/v1/check", tokAdmin, `{"domain":"tenant-b","descriptors":[{"user":"u"}]}`); code != http.StatusOK || !strings.Contains(body, `"remaining":4`) {
		t.Errorf("the platform token on tenant-b: %d %s; want OK with 4 remaining (the refused calls counted nothing)", code, body)
	}
	if err := grpcCheck(single, "tenant-b"); err != nil {
		t.Errorf("--token-file's token on tenant-b: %v", err)
	}
	if err := grpcCheck("not-a-token", "tenant-a"); grpcstatus.Code(err) != codes.Unauthenticated {
		t.Errorf("an unknown token: %v, want Unauthenticated", err)
	}

	// RLQS: a stream for another tenant's domain ends at its first report.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := rlqs.NewRateLimitQuotaServiceClient(s.conn).StreamRateLimitQuotas(metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+tokA))
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Send(&rlqs.RateLimitQuotaUsageReports{Domain: "tenant-b", BucketQuotaUsages: []*rlqs.RateLimitQuotaUsageReports_BucketQuotaUsage{{
		BucketId: &rlqs.BucketId{Bucket: map[string]string{"user": "u"}}, NumRequestsAllowed: 1, TimeElapsed: durationpb.New(time.Second),
	}}}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Recv(); grpcstatus.Code(err) != codes.PermissionDenied {
		t.Errorf("RLQS stream of tenant-a's token for tenant-b: %v, want PermissionDenied", err)
	}

	// /metrics shows every domain: not for a tenant's token.
	if code, _ := s.get("/metrics", tokA); code != http.StatusForbidden {
		t.Errorf("GET /metrics with tenant-a's token: %d, want 403", code)
	}
	for api, want := range map[string]float64{"grpc": 3, "check": 3, "json": 3, "rlqs": 1, "metrics": 1} {
		if got := s.metric(tokAdmin, "floodgate_requests_total", "api", api, "code", "forbidden"); got != want {
			t.Errorf("floodgate_requests_total{api=%s,code=forbidden} = %v, want %v", api, got, want)
		}
	}
	logs := s.waitLog(5*time.Second, "may not use the domain", `"token":"tenant-a"`, `"domain":"tenant-b"`)
	for _, tok := range []string{tokA, tokAdmin, single} {
		if strings.Contains(logs, tok) {
			t.Errorf("a token is in the logs:\n%s", logs)
		}
	}

	// A bad edit: logged, the tokens in use kept.
	writeConfig(t, tokens, "tokens:\n  - name: tenant-a\n    sha256: nothex\n    domains: [tenant-a]\n")
	s.waitLog(5*time.Second, "tokens file rejected")
	if err := grpcCheck(tokA, "tenant-a"); err != nil {
		t.Errorf("after a bad edit, tenant-a's token on tenant-a: %v", err)
	}
	// A good one: tenant-a may use tenant-b now; the platform token is gone.
	writeConfig(t, tokens, tokensYAML([3]string{"tenant-a", tokA, "tenant-a, tenant-b"}))
	s.waitLog(5*time.Second, "tokens file reloaded")
	if err := grpcCheck(tokA, "tenant-b"); err != nil {
		t.Errorf("after the edit, tenant-a's token on tenant-b: %v", err)
	}
	if err := grpcCheck(tokAdmin, "tenant-a"); grpcstatus.Code(err) != codes.Unauthenticated {
		t.Errorf("after the edit, the removed platform token: %v, want Unauthenticated", err)
	}
}
