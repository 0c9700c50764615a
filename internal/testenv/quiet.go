package testenv

import (
	"context"
	"os"

	"github.com/go-sql-driver/mysql"
	"github.com/redis/go-redis/v9"
)

// Tests that import testenv keep the client libraries' own logs quiet: the
// errors go-redis's pool and the MySQL driver print while a test holds a
// server stopped, paused or killed on purpose ("connection pool: failed to
// dial after 5 attempts", "packets.go: unexpected EOF") are expected there,
// and drowned the output of go test. FLOODGATE_TEST_LOGS=1 keeps them.
func init() {
	if os.Getenv("FLOODGATE_TEST_LOGS") == "" {
		redis.SetLogger(quietLogger{})
		_ = mysql.SetLogger(quietLogger{}) // fails only for a nil logger
	}
}

type quietLogger struct{}

func (quietLogger) Printf(context.Context, string, ...any) {}
func (quietLogger) Print(...any)                           {}
