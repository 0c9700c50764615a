package lockout_test

import (
	"os"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/internal/backendtest"
	"github.com/floodgate-dev/floodgate/internal/testenv"
)

func TestMain(m *testing.M) { os.Exit(testenv.Main(m)) }

// t0 is the fake clocks' start.
var t0 = time.Unix(1_699_920_000, 0)

// The backends every scenario runs on, from internal/backendtest.
type kindOfBackend = backendtest.Kind

func allBackends() []kindOfBackend   { return backendtest.All() }
func threeBackends() []kindOfBackend { return backendtest.Three() }
func newRedisAt(t testing.TB, addr string, clk clock.Clock) *backend.Redis {
	return backendtest.RedisAt(t, addr, clk)
}
