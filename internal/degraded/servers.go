package degraded

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
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

// A Beater beats for one process on a store (Heartbeat, under a random
// member name) and keeps the count of live processes: the most counted by
// its last three beats, since a process stays live for three beats, so a
// lower count for less than that is not yet a process gone (a restarted
// store counts afresh). Not safe for concurrent use: one goroutine beats.
type Beater struct {
	b        backend.Backend
	member   string
	interval time.Duration
	recent   [3]int
	beats    int
}

// NewBeater returns a Beater for b that beats every interval.
func NewBeater(b backend.Backend, interval time.Duration) *Beater {
	var id [8]byte
	rand.Read(id[:])
	return &Beater{b: b, member: hex.EncodeToString(id[:]), interval: interval}
}

// Beat beats once, bounded by ctx and the interval, and returns the live
// processes counted so far; ok is false when the store did not answer
// (the count is then that of the beats before).
func (bt *Beater) Beat(ctx context.Context) (n int, ok bool) {
	ctx, cancel := context.WithTimeout(ctx, bt.interval)
	defer cancel()
	got, err := Heartbeat(ctx, bt.b, bt.member, 3*bt.interval)
	if err == nil {
		bt.recent[bt.beats%len(bt.recent)] = got
		bt.beats++
	}
	return max(bt.recent[0], bt.recent[1], bt.recent[2]), err == nil
}

// Run beats every interval until ctx ends, and calls set with the count
// after each beat the store answered.
func (bt *Beater) Run(ctx context.Context, set func(int)) {
	t := time.NewTicker(bt.interval)
	defer t.Stop()
	for {
		if n, ok := bt.Beat(ctx); ok {
			set(n)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
