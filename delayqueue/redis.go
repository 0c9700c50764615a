package delayqueue

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
	//go:embed lua/common.lua
	luaCommon string
	//go:embed lua/enqueue.lua
	luaEnqueue string
	//go:embed lua/cancel.lua
	luaCancel string
	//go:embed lua/pump.lua
	luaPump string
	//go:embed lua/claim.lua
	luaClaim string
	//go:embed lua/extend.lua
	luaExtend string
	//go:embed lua/ack.lua
	luaAck string
	//go:embed lua/retry.lua
	luaRetry string
	//go:embed lua/stats.lua
	luaStats string
	//go:embed lua/listdead.lua
	luaListDead string
	//go:embed lua/requeue.lua
	luaRequeue string

	enqueueScript  = newScript(luaEnqueue)
	cancelScript   = newScript(luaCancel)
	pumpScript     = newScript(luaPump)
	claimScript    = newScript(luaClaim)
	extendScript   = newScript(luaExtend)
	ackScript      = newScript(luaAck)
	retryScript    = newScript(luaRetry)
	statsScript    = newScript(luaStats)
	listDeadScript = newScript(luaListDead)
	requeueScript  = newScript(luaRequeue)
)

// newScript returns main preceded by common.lua, the clock and receipt
// functions that the scripts call (Redis scripts cannot import each other).
func newScript(main string) *redisstore.Script {
	return redisstore.NewScript(luaCommon + "\n" + main)
}

// redisDriver keeps a queue in seven keys that share the hash tag {name}:
// dq:s scheduled, dq:r ready, dq:i inflight, dq:x dead (sorted sets of job
// ids), dq:p payloads, dq:m "attempt:due" per job and dq:c the call ID of
// the Enqueue of each job whose ID the caller chose (hashes). Due times and
// lease deadlines are µs by the Redis clock (or the injected one). The
// channel dq:n carries published due times. Calls that change a job leave a
// receipt "dq:k:<call ID>" for the replay window (see lua/claim.lua).
type redisDriver struct {
	r                                                  *redisstore.Store
	name                                               string
	sched, ready, inflight, dead, payload, meta, calls string
	channel                                            string
	window                                             string // receipts' lifetime, µs
}

func newRedisDriver(r *redisstore.Store, name string, window time.Duration) *redisDriver {
	return &redisDriver{
		r:        r,
		name:     name,
		sched:    r.Key(name, "dq:s"),
		ready:    r.Key(name, "dq:r"),
		inflight: r.Key(name, "dq:i"),
		dead:     r.Key(name, "dq:x"),
		payload:  r.Key(name, "dq:p"),
		meta:     r.Key(name, "dq:m"),
		calls:    r.Key(name, "dq:c"),
		channel:  r.Key(name, "dq:n"),
		window:   strconv.FormatInt(window.Microseconds(), 10),
	}
}

// receipt is the key of a call's receipt.
func (d *redisDriver) receipt(call string) string { return d.r.Key(d.name, "dq:k:"+call) }

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

func (d *redisDriver) run(ctx context.Context, s *redisstore.Script, keys []string, args ...string) (any, error) {
	v, err := d.r.Run(ctx, s, keys, args)
	if err != nil {
		return nil, fmt.Errorf("delayqueue: %w", err)
	}
	return v, nil
}

func (d *redisDriver) enqueue(ctx context.Context, id string, payload []byte, at, delay int64, call string) (int64, bool, error) {
	mode, t := "a", at
	if at < 0 {
		mode, t = "d", delay
	}
	reply, err := d.run(ctx, enqueueScript, []string{d.sched, d.payload, d.meta, d.calls},
		d.r.NowArg(), id, string(payload), mode, itoa(t), d.channel, call)
	if err != nil {
		return 0, false, err
	}
	v, err := redisstore.ReplyInts(reply, 2)
	if err != nil {
		return 0, false, fmt.Errorf("delayqueue: %w", err)
	}
	return v[1], v[0] == 0, nil
}

func (d *redisDriver) cancel(ctx context.Context, id, call string) (bool, error) {
	reply, err := d.run(ctx, cancelScript,
		[]string{d.sched, d.ready, d.inflight, d.dead, d.payload, d.meta, d.calls, d.receipt(call)},
		d.r.NowArg(), id, d.window)
	if err != nil {
		return false, err
	}
	n, _ := reply.(int64)
	return n == 1, nil
}

func (d *redisDriver) pump(ctx context.Context, maxAttempts int) (pumpResult, error) {
	reply, err := d.run(ctx, pumpScript, []string{d.sched, d.ready, d.inflight, d.dead, d.meta},
		d.r.NowArg(), strconv.Itoa(BatchSize), strconv.Itoa(maxAttempts))
	if err != nil {
		return pumpResult{}, err
	}
	v, err := redisstore.ReplyInts(reply, 7)
	if err != nil {
		return pumpResult{}, fmt.Errorf("delayqueue: %w", err)
	}
	return pumpResult{Moved: int(v[0]), Requeued: int(v[1]), Dead: int(v[2]), Ready: v[3],
		NextDue: v[4], NextDeadline: v[5], Now: v[6]}, nil
}

func (d *redisDriver) claim(ctx context.Context, visibility int64, call string) (*delivery, error) {
	reply, err := d.run(ctx, claimScript, []string{d.ready, d.inflight, d.payload, d.meta, d.receipt(call)},
		d.r.NowArg(), itoa(visibility), d.window)
	if err != nil {
		return nil, err
	}
	arr, ok := reply.([]any)
	if !ok {
		return nil, fmt.Errorf("delayqueue: unexpected claim reply %T", reply)
	}
	if len(arr) == 0 {
		return nil, nil
	}
	if len(arr) != 5 {
		return nil, fmt.Errorf("delayqueue: claim reply has %d elements, want 5", len(arr))
	}
	id, ok1 := arr[0].(string)
	payload, ok2 := arr[1].(string)
	nums, err := redisstore.ReplyInts(arr[2:], 3)
	if !ok1 || !ok2 || err != nil {
		return nil, fmt.Errorf("delayqueue: malformed claim reply %v", arr)
	}
	return &delivery{
		Job:      Job{ID: id, Payload: []byte(payload), Attempt: int(nums[0]), DueAt: microTime(nums[1])},
		deadline: nums[2],
		call:     call,
	}, nil
}

func (d *redisDriver) extend(ctx context.Context, id string, attempt int, visibility int64) (int64, error) {
	reply, err := d.run(ctx, extendScript, []string{d.inflight, d.meta},
		d.r.NowArg(), id, strconv.Itoa(attempt), itoa(visibility))
	if err != nil {
		return 0, err
	}
	n, _ := reply.(int64)
	return n, nil
}

func (d *redisDriver) ack(ctx context.Context, id string, attempt int, call string) (bool, error) {
	reply, err := d.run(ctx, ackScript, []string{d.inflight, d.payload, d.meta, d.calls, d.receipt(call)},
		d.r.NowArg(), id, strconv.Itoa(attempt), d.window)
	if err != nil {
		return false, err
	}
	n, _ := reply.(int64)
	return n == 1, nil
}

func (d *redisDriver) retry(ctx context.Context, id string, attempt int, backoff int64, maxAttempts int, call string) (retryOutcome, error) {
	reply, err := d.run(ctx, retryScript, []string{d.sched, d.inflight, d.dead, d.meta, d.receipt(call)},
		d.r.NowArg(), id, strconv.Itoa(attempt), itoa(backoff), strconv.Itoa(maxAttempts), d.channel, d.window)
	if err != nil {
		return leaseLost, err
	}
	v, err := redisstore.ReplyInts(reply, 2)
	if err != nil {
		return leaseLost, fmt.Errorf("delayqueue: %w", err)
	}
	return retryOutcome(v[0]), nil
}

func (d *redisDriver) stats(ctx context.Context) (Stats, error) {
	reply, err := d.run(ctx, statsScript, []string{d.sched, d.ready, d.inflight, d.dead})
	if err != nil {
		return Stats{}, err
	}
	v, err := redisstore.ReplyInts(reply, 4)
	if err != nil {
		return Stats{}, fmt.Errorf("delayqueue: %w", err)
	}
	return Stats{Scheduled: v[0], Ready: v[1], InFlight: v[2], Dead: v[3]}, nil
}

func (d *redisDriver) listDead(ctx context.Context, limit int) ([]DeadJob, error) {
	reply, err := d.run(ctx, listDeadScript, []string{d.dead, d.payload, d.meta}, strconv.Itoa(limit))
	if err != nil {
		return nil, err
	}
	arr, ok := reply.([]any)
	if !ok || len(arr)%5 != 0 {
		return nil, fmt.Errorf("delayqueue: malformed listdead reply %v", reply)
	}
	out := make([]DeadJob, 0, len(arr)/5)
	for i := 0; i < len(arr); i += 5 {
		id, ok1 := arr[i].(string)
		payload, ok2 := arr[i+1].(string)
		nums, err := redisstore.ReplyInts(arr[i+2:i+5], 3)
		if !ok1 || !ok2 || err != nil {
			return nil, fmt.Errorf("delayqueue: malformed listdead reply %v", arr[i:i+5])
		}
		out = append(out, DeadJob{
			Job:    Job{ID: id, Payload: []byte(payload), Attempt: int(nums[0]), DueAt: microTime(nums[1])},
			DiedAt: microTime(nums[2]),
		})
	}
	return out, nil
}

func (d *redisDriver) requeue(ctx context.Context, id, call string) (bool, error) {
	reply, err := d.run(ctx, requeueScript, []string{d.sched, d.dead, d.meta, d.receipt(call)},
		d.r.NowArg(), id, d.channel, d.window)
	if err != nil {
		return false, err
	}
	n, _ := reply.(int64)
	return n == 1, nil
}

func (d *redisDriver) subscribe(ctx context.Context) (<-chan string, func(), error) {
	sub, err := d.r.Subscribe(ctx, d.channel)
	if errors.Is(err, redisstore.ErrNoPubSub) {
		return nil, func() {}, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("delayqueue: subscribe: %w", err)
	}
	return sub.C, sub.Close, nil
}
