package testenv

import (
	"context"
	"os"

	"github.com/redis/go-redis/v9"
)

// Tests that import testenv keep go-redis's own log quiet: the dial errors
// its pool prints while a test holds a server stopped or paused on purpose
// ("connection pool: failed to dial after 5 attempts") are expected there,
// and drowned the output of go test. FLOODGATE_TEST_LOGS=1 keeps them.
func init() {
	if os.Getenv("FLOODGATE_TEST_LOGS") == "" {
		redis.SetLogger(quietLogger{})
	}
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}
