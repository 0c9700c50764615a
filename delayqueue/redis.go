package delayqueue

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"strings"
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
	//go:embed lua/take.lua
	luaTake string
	//go:embed lua/extend.lua
	luaExtend string
	//go:embed lua/retry.lua
	luaRetry string
	//go:embed lua/stats.lua
	luaStats string
	//go:embed lua/listdead.lua
	luaListDead string
	//go:embed lua/requeue.lua
	luaRequeue string

	enqueueScript = newScript(luaEnqueue)
	cancelScript  = newScript(luaCancel)
	// A consumer's takes are Direct: on go-redis they do not wait in the
	// automatic pipeline behind other calls (its batches run one at a time),
	// so that a due job is claimed as soon as it is due.
	takeScript     = newScript(luaTake).Direct()
	extendScript   = newScript(luaExtend)
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
// dq:s scheduled, dq:i inflight, dq:x dead (sorted sets of job ids), dq:p payloads, dq:m "attempt:due" per job and dq:c the call ID of
// the Enqueue of each job whose ID the caller chose (hashes), and dq:w the
// waker (a string, see lua/take.lua). Due times and lease deadlines are µs
// by the Redis clock (or the injected one). The channel dq:n carries
// published due times for every consumer, dq:n:<runner> those for one.
// Calls that change a job leave a receipt "dq:k:<call ID>" for the replay
// window (see lua/take.lua). dq:r is the ready set of version 0.9 and earlier,
// which this one empties (see lua/take.lua).
type redisDriver struct {
	r                                                         *redisstore.Store
	name                                                      string
	sched, ready, inflight, dead, payload, meta, calls, waker string
	channel                                                   string
	window                                                    string // receipts' lifetime, µs
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
		waker:    r.Key(name, "dq:w"),
		channel:  r.Key(name, "dq:n"),
		window:   strconv.FormatInt(window.Microseconds(), 10),
	}
}

// receipt is the key of a call's receipt.
func (d *redisDriver) receipt(call string) string { return d.r.Key(d.name, "dq:k:"+call) }

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

var legacyArg = map[bool]string{false: "", true: "1"}

func (d *redisDriver) run(ctx context.Context, s *redisstore.Script, keys []string, args ...string) (any, error) {
	v, err := d.r.Run(ctx, s, keys, args)
	if err != nil {
		return nil, fmt.Errorf("delayqueue: %w", err)
	}
	return v, nil
}

func (d *redisDriver) enqueue(ctx context.Context, jobs []newJob, call string) ([]enqueued, error) {
	args := make([]string, 0, 3+4*len(jobs))
	args = append(args, d.r.NowArg(), d.channel, call)
	for _, j := range jobs {
		when, t := "a", j.at
		if j.at < 0 {
			when, t = "d", j.delay
		}
		if j.chosen {
			when = strings.ToUpper(when)
		}
		args = append(args, j.id, string(j.payload), when, itoa(t))
	}
	reply, err := d.run(ctx, enqueueScript, []string{d.sched, d.payload, d.meta, d.calls, d.waker}, args...)
	if err != nil {
		return nil, err
	}
	v, err := redisstore.ReplyInts(reply, 2*len(jobs))
	if err != nil {
		return nil, fmt.Errorf("delayqueue: %w", err)
	}
	out := make([]enqueued, len(jobs))
	for i := range out {
		out[i] = enqueued{due: v[2*i+1], dup: v[2*i] == 0}
	}
	return out, nil
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

func (d *redisDriver) take(ctx context.Context, a takeArgs) (takeResult, error) {
	keys := make([]string, 0, 9+len(a.acks))
	keys = append(keys, d.sched, d.ready, d.inflight, d.dead, d.payload, d.meta, d.calls, d.receipt(a.call), d.waker)
	args := make([]string, 0, 11+2*len(a.acks))
	args = append(args, d.r.NowArg(), strconv.Itoa(a.n), itoa(a.visibility), d.window, strconv.Itoa(BatchSize),
		strconv.Itoa(a.maxAttempts), a.runner, strconv.Itoa(a.spare), itoa(a.poll), d.channel, legacyArg[a.legacy])
	for _, ack := range a.acks {
		keys = append(keys, d.receipt(ack.call))
		args = append(args, ack.ID, strconv.Itoa(ack.Attempt))
	}
	reply, err := d.run(ctx, takeScript, keys, args...)
	if err != nil {
		return takeResult{}, err
	}
	arr, ok := reply.([]any)
	head := 9 + len(a.acks)
	if !ok || len(arr) < head || (len(arr)-head)%5 != 0 {
		return takeResult{}, fmt.Errorf("delayqueue: malformed take reply %v", reply)
	}
	v, err := redisstore.ReplyInts(arr[:head], head)
	if err != nil || v[0] != int64(len(a.acks)) {
		return takeResult{}, fmt.Errorf("delayqueue: malformed take reply %v", reply)
	}
	res := takeResult{
		pumpResult: pumpResult{Requeued: int(v[1]), Dead: int(v[2]), More: v[3] == 1,
			NextDue: v[4], NextDeadline: v[5], Now: v[6]},
		Wake: v[7], Waker: v[8] == 1,
	}
	for _, ok := range v[9:] {
		res.Acked = append(res.Acked, ok == 1)
	}
	for i := head; i < len(arr); i += 5 {
		id, ok1 := arr[i].(string)
		payload, ok2 := arr[i+1].(string)
		nums, err := redisstore.ReplyInts(arr[i+2:i+5], 3)
		if !ok1 || !ok2 || err != nil {
			return takeResult{}, fmt.Errorf("delayqueue: malformed take reply %v", arr[i:i+5])
		}
		res.Deliveries = append(res.Deliveries, &delivery{
			Job:      Job{ID: id, Payload: []byte(payload), Attempt: int(nums[0]), DueAt: microTime(nums[1])},
			deadline: nums[2],
			call:     a.call + "." + strconv.Itoa((i-head)/5),
		})
	}
	return res, nil
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

func (d *redisDriver) retry(ctx context.Context, id string, attempt int, backoff int64, maxAttempts int, call string) (retryOutcome, error) {
	reply, err := d.run(ctx, retryScript, []string{d.sched, d.inflight, d.dead, d.meta, d.receipt(call), d.waker},
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
	reply, err := d.run(ctx, statsScript, []string{d.sched, d.ready, d.inflight, d.dead}, d.r.NowArg())
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
	reply, err := d.run(ctx, requeueScript, []string{d.sched, d.dead, d.meta, d.receipt(call), d.waker},
		d.r.NowArg(), id, d.channel, d.window)
	if err != nil {
		return false, err
	}
	n, _ := reply.(int64)
	return n == 1, nil
}

func (d *redisDriver) subscribe(ctx context.Context, runner string) (all, own <-chan string, stop func(), err error) {
	sub, err := d.r.Subscribe(ctx, d.channel)
	if errors.Is(err, redisstore.ErrNoPubSub) {
		return nil, nil, func() {}, nil
	}
	if err != nil {
		return nil, nil, nil, fmt.Errorf("delayqueue: subscribe: %w", err)
	}
	mine, err := d.r.Subscribe(ctx, d.channel+":"+runner)
	if err != nil {
		sub.Close()
		return nil, nil, nil, fmt.Errorf("delayqueue: subscribe: %w", err)
	}
	return sub.C, mine.C, func() { sub.Close(); mine.Close() }, nil
}
