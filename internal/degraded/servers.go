package degraded

import (
	"context"
	_ "embed"
	"strconv"
	"time"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/internal/redisstore"
	"github.com/floodgate-dev/floodgate/internal/unwrap"
)

//go:embed servers.lua
var luaServers string

var serversScript = redisstore.NewScript(luaServers)

// Heartbeat records that the server named member is live on b's store, for
// live, and returns how many servers are live on it, member included. Every
// server sharing a store beats on the same key (under b's prefix), so
// servers with the same prefix count each other. On the memory backend,
// which no other server shares, it is 1.
func Heartbeat(ctx context.Context, b backend.Backend, member string, live time.Duration) (int, error) {
	rb, ok := b.(*backend.Redis)
	if !ok {
		return 1, nil
	}
	r := unwrap.Redis(rb)
	raw, err := r.Run(ctx, serversScript, []string{r.Key("floodgate", "servers")},
		[]string{r.NowArg(), member, strconv.FormatInt(live.Microseconds(), 10)})
	if err != nil {
		return 0, err
	}
	v, err := redisstore.ReplyInts(raw, 1)
	if err != nil {
		return 0, err
	}
	return int(max(v[0], 1)), nil
}
