package server

import (
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/internal/backendtest"
)

// carryYAML is a config whose limits change between versions: limit is the
// fixed window's limit and the GCRA burst.
func carryYAML(limit int) string {
	return fmt.Sprintf(`domain: api
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: %d}
  - key: path
    rate_limit: {unit: second, requests_per_unit: 1, algorithm: gcra, burst: %d}
`, limit, limit)
}

// TestReloadKeepsCounts: a reload that changes limits keeps what every key
// has spent, on every backend: raising a limit gives the difference, lowering
// it below what was spent denies.
func TestReloadKeepsCounts(t *testing.T) {
	for _, k := range backendtest.All() {
		t.Run(k.Name, func(t *testing.T) {
			fake := clock.NewFake(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC))
			s := newService(t, k.Make(t, fake), Options{})
			for _, key := range []string{"user", "path"} {
				if err := s.SetConfig(mustConfig(t, carryYAML(5)), "v5"); err != nil {
					t.Fatal(err)
				}
				for i := range 4 {
					if r := decide(t, s, desc(1, key, "alice")); r.Code != CodeOK {
						t.Fatalf("%s: request %d of 5: %+v", key, i+1, r.Statuses[0])
					}
				}
				if err := s.SetConfig(mustConfig(t, carryYAML(10)), "v10"); err != nil {
					t.Fatal(err)
				}
				if r := decide(t, s, desc(1, key, "alice")); r.Code != CodeOK || r.Statuses[0].Remaining != 5 {
					t.Fatalf("%s: raised to 10 after 4 spent: %+v, want OK with 5 left", key, r.Statuses[0])
				}
				if err := s.SetConfig(mustConfig(t, carryYAML(3)), "v3"); err != nil {
					t.Fatal(err)
				}
				if r := decide(t, s, desc(1, key, "alice")); r.Code != CodeOverLimit {
					t.Fatalf("%s: lowered to 3 after 5 spent: %+v, want OVER_LIMIT", key, r.Statuses[0])
				}
			}
		})
	}
}

// TestReloadFileKeepsCounts: the same through a config file that the server
// reloads by itself, as floodgate serve does.
func TestReloadFileKeepsCounts(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "api.yaml")
	writeConfig(t, path, carryYAML(5))
	srv := startServer(t, Config{ConfigPath: dir, ReloadInterval: 20 * time.Millisecond})
	for range 4 {
		if r := decide(t, srv.Service(), desc(1, "user", "bob")); r.Code != CodeOK {
			t.Fatalf("%+v", r.Statuses[0])
		}
	}
	writeConfig(t, path, carryYAML(10))
	waitFor(t, func() bool {
		_, v, _ := srv.Service().Config()
		return v != "" && decide(t, srv.Service(), desc(0, "user", "bob")).Statuses[0].Limit.RequestsPerUnit == 10
	})
	if r := decide(t, srv.Service(), desc(1, "user", "bob")); r.Code != CodeOK || r.Statuses[0].Remaining != 5 {
		t.Fatalf("after the reload to 10: %+v, want 5 left of 10 (4 spent before it, 1 now)", r.Statuses[0])
	}
}
