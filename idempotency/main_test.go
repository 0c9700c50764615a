package idempotency_test

import (
	"os"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/idempotency"
	"github.com/floodgate-dev/floodgate/internal/backendtest"
	"github.com/floodgate-dev/floodgate/internal/testenv"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(childMain())
	}
	os.Exit(testenv.Main(m))
}

// t0 is the start of every fake-clock scenario.
var t0 = time.Unix(1_700_000_000, 0)

// The backends every behaviour test runs on, from internal/backendtest:
// memory, a standalone Redis through go-redis and through rueidis, a
// 3-master Redis Cluster, and a standalone Redis on which every script runs
// twice (what a client's resend after a lost reply does; see replay_test.go).
// clk == nil means real time (Redis TIME, time.Now).
type kindOfBackend = backendtest.Kind

func allBackends() []kindOfBackend { return append(backendtest.All(), replaying) }

// coreBackends is allBackends without the second standalone client, for the
// slower real-time tests.
func coreBackends() []kindOfBackend { return backendtest.Three() }

func uniquePrefix() string { return backendtest.UniquePrefix() }

func newStore(t testing.TB, b backend.Backend, opts ...idempotency.Option) *idempotency.Store {
	t.Helper()
	s, err := idempotency.New(b, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
