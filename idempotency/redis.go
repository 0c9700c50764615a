package idempotency

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/floodgate-dev/floodgate/internal/redisstore"
)

var (
	//go:embed lua/begin.lua
	luaBegin string
	//go:embed lua/renew.lua
	luaRenew string
	//go:embed lua/complete.lua
	luaComplete string
	//go:embed lua/abort.lua
	luaAbort string
	//go:embed lua/issue.lua
	luaIssue string
	//go:embed lua/consume.lua
	luaConsume string

	beginScript    = redisstore.NewScript(luaBegin)
	renewScript    = redisstore.NewScript(luaRenew)
	completeScript = redisstore.NewScript(luaComplete)
	abortScript    = redisstore.NewScript(luaAbort)
	issueScript    = redisstore.NewScript(luaIssue)
	consumeScript  = redisstore.NewScript(luaConsume)
)

// redisDriver keeps a key in one hash "<prefix>:{<key>}:ik[:<ns>]" and a
// token in one string "<prefix>:{<token>}:it[:<ns>]", so every call touches
// one key (Cluster-safe). Waiters subscribe to "<prefix>:{<key>}:ic[:<ns>]";
// complete and abort publish on it when a waiter asked for it.
type redisDriver struct {
	r      *redisstore.Store
	suffix string // "" or ":<ns>"
}

func newRedisDriver(r *redisstore.Store, ns string) *redisDriver {
	d := &redisDriver{r: r}
	if ns != "" {
		d.suffix = ":" + ns
	}
	return d
}

func (d *redisDriver) recordKey(key string) []string { return []string{d.r.Key(key, "ik"+d.suffix)} }
func (d *redisDriver) channel(key string) string     { return d.r.Key(key, "ic"+d.suffix) }
func (d *redisDriver) tokenKey(tok string) []string  { return []string{d.r.Key(tok, "it"+d.suffix)} }

func micros(d time.Duration) string { return strconv.FormatInt(d.Microseconds(), 10) }

func (d *redisDriver) begin(ctx context.Context, key, owner, fp string, lease time.Duration, waiting bool) (outcome, error) {
	w := "0"
	if waiting {
		w = "1"
	}
	reply, err := d.r.Run(ctx, beginScript, d.recordKey(key), []string{d.r.NowArg(), owner, fp, micros(lease), w})
	if err != nil {
		return outcome{}, err
	}
	return parseBegin(reply)
}

// parseBegin reads the reply of begin.lua.
func parseBegin(reply any) (outcome, error) {
	arr, ok := reply.([]any)
	if !ok || len(arr) == 0 {
		return outcome{}, fmt.Errorf("unexpected begin reply %v", reply)
	}
	code, ok := arr[0].(int64)
	switch {
	case !ok:
	case code == 0 && len(arr) == 1:
		return outcome{state: claimed}, nil
	case code == 3 && len(arr) == 1:
		return outcome{state: mismatch}, nil
	case code == 1 && len(arr) == 2:
		left, ok := arr[1].(int64)
		if ok {
			return outcome{state: inFlight, hint: time.Duration(left) * time.Microsecond}, nil
		}
	case code == 2 && len(arr) == 4:
		val, ok1 := arr[1].(string)
		failed, ok2 := arr[2].(int64)
		msg, ok3 := arr[3].(string)
		if ok1 && ok2 && ok3 {
			return outcome{state: done, res: result{val: []byte(val), failed: failed == 1, msg: msg}}, nil
		}
	}
	return outcome{}, fmt.Errorf("unexpected begin reply %v", reply)
}

// flag reads a 0/1 script reply.
func flag(reply any, err error) (bool, error) {
	if err != nil {
		return false, err
	}
	n, ok := reply.(int64)
	if !ok {
		return false, fmt.Errorf("unexpected script reply %T", reply)
	}
	return n == 1, nil
}

func (d *redisDriver) renew(ctx context.Context, key, owner string, lease time.Duration) (bool, error) {
	return flag(d.r.Run(ctx, renewScript, d.recordKey(key), []string{d.r.NowArg(), owner, micros(lease)}))
}

func (d *redisDriver) complete(ctx context.Context, key, owner string, ttl time.Duration, r result) (bool, error) {
	failed := "0"
	if r.failed {
		failed = "1"
	}
	return flag(d.r.Run(ctx, completeScript, d.recordKey(key), []string{
		d.r.NowArg(), owner, micros(ttl), string(r.val), failed, r.msg, d.channel(key),
	}))
}

func (d *redisDriver) abort(ctx context.Context, key, owner string) (bool, error) {
	return flag(d.r.Run(ctx, abortScript, d.recordKey(key), []string{d.r.NowArg(), owner, d.channel(key)}))
}

// subscribe subscribes to the key's wake-up channel. Without pub/sub in the
// client, waiters only poll (at most every MaxPoll).
func (d *redisDriver) subscribe(ctx context.Context, key string) (<-chan string, func(), error) {
	sub, err := d.r.Subscribe(ctx, d.channel(key))
	if errors.Is(err, redisstore.ErrNoPubSub) {
		return nil, func() {}, nil
	}
	if err != nil {
		return nil, nil, err
	}
	return sub.C, sub.Close, nil
}

func (d *redisDriver) issue(ctx context.Context, token string, ttl time.Duration) (bool, error) {
	reply, err := d.r.Run(ctx, issueScript, d.tokenKey(token), []string{d.r.NowArg(), micros(ttl)})
	if err != nil {
		return false, err
	}
	n, ok := reply.(int64)
	if !ok {
		return false, fmt.Errorf("unexpected issue reply %T", reply)
	}
	return n >= 1, nil // 2: stored by an earlier run of this call
}

func (d *redisDriver) consume(ctx context.Context, token, call string) (bool, error) {
	return flag(d.r.Run(ctx, consumeScript, d.tokenKey(token), []string{d.r.NowArg(), call, micros(ReplayWindow)}))
}
