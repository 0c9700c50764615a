package lock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/floodgate-dev/floodgate/internal/callid"
	"github.com/floodgate-dev/floodgate/internal/luafunc"
	"github.com/floodgate-dev/floodgate/internal/redisstore"
	"github.com/floodgate-dev/floodgate/lock/internal/cohort"
	"github.com/floodgate-dev/floodgate/lock/internal/lockdriver"
)

//go:embed lua/common.lua
var luaCommon string

// script returns the lock script src preceded by the helpers of
// lua/common.lua that it calls, directly or through another helper: Redis
// scripts cannot load each other, and each helper is a closure made anew on
// every run, so a script carries only the ones it uses. Lock scripts are
// Direct: under contention each release and the next acquire wait on each
// other, and a pipeline batch ahead of them would lengthen every hand-off.
func script(src string) *redisstore.Script {
	return redisstore.NewScript(withHelpers(luaCommon, src)).Direct()
}

// luaHelper is one local function of lua/common.lua, with the comment
// before it.
type luaHelper struct {
	name string
	src  string
	call *regexp.Regexp // a call of it
}

// helpersOf returns the local functions of common, in order, each with the
// comment before it (package luafunc).
func helpersOf(common string) []luaHelper {
	funcs, _, err := luafunc.Split(common)
	if err != nil {
		panic("lock: lua/common.lua: " + err.Error())
	}
	out := make([]luaHelper, len(funcs))
	for i, f := range funcs {
		out[i] = luaHelper{name: f.Name, src: f.Src, call: regexp.MustCompile(`\b` + f.Name + `\(`)}
	}
	return out
}

// withHelpers returns src preceded by the helpers of common it calls,
// directly or through other helpers, in common's order.
func withHelpers(common, src string) string {
	helpers := helpersOf(common)
	used := make([]bool, len(helpers))
	for changed := true; changed; {
		changed = false
		for i, h := range helpers {
			if used[i] {
				continue
			}
			if h.call.MatchString(src) {
				used[i], changed = true, true
				continue
			}
			for j, o := range helpers {
				if used[j] && j != i && h.call.MatchString(o.src) {
					used[i], changed = true, true
					break
				}
			}
		}
	}
	var b strings.Builder
	for i, h := range helpers {
		if used[i] {
			b.WriteString(h.src)
		}
	}
	b.WriteString("\n")
	b.WriteString(src)
	return b.String()
}

var (
	//go:embed lua/acquire.lua
	luaAcquire string
	//go:embed lua/release.lua
	luaRelease string
	//go:embed lua/extend.lua
	luaExtend string
	//go:embed lua/leave.lua
	luaLeave string
	//go:embed lua/cancel.lua
	luaCancel string
	//go:embed lua/handoff.lua
	luaHandoff string

	acquireScript = script(luaAcquire)
	releaseScript = script(luaRelease)
	extendScript  = script(luaExtend)
	leaveScript   = script(luaLeave)
	cancelScript  = script(luaCancel)
	handoffScript = script(luaHandoff)
)

// redisDriver is a mutex on Redis. Every key of a lock name shares the hash
// tag {name}, so the scripts run on Redis Cluster. Waiters queue in a sorted
// set; a release publishes the next waiter's id on the lock's channel, and
// only that waiter retries. Waiters also retry when the holder's lease should
// have ended and at least every MaxPoll, for holders that die without
// releasing and for lost messages.
type redisDriver struct {
	r       *redisstore.Store
	o       lockdriver.Options
	local   cohort.Queue // the process's local queue of the name (package cohort)
	tomb    string       // key prefix of tombstones: + call id
	keys    []string     // lock, fence, queue, waiter deadlines
	channel string
}

func newRedisDriver(r *redisstore.Store, name string, o lockdriver.Options) *redisDriver {
	return &redisDriver{
		r:     r,
		o:     o,
		local: cohort.New(r, name),
		tomb:  r.Key(name, "lx:"),
		keys: []string{
			r.Key(name, "lk"),
			r.Key(name, "lf"),
			r.Key(name, "lq"),
			r.Key(name, "lw"),
		},
		channel: r.Key(name, "ln"),
	}
}

func micros(d time.Duration) string { return strconv.FormatInt(d.Microseconds(), 10) }

func boolArg(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// callKeys returns the lock's keys followed by the tombstone key of call.
func (d *redisDriver) callKeys(call string) []string {
	return append(d.keys[:len(d.keys):len(d.keys)], d.tomb+call)
}

// try makes one attempt, a call of its own. When its answer does not come
// (an error other than ErrLocked), the attempt may still have taken the lock
// or queued owner: try gives the call up in the background (see abandon), so
// that it holds nothing however it lands.
func (d *redisDriver) try(ctx context.Context, owner string, ttl time.Duration, waiting bool) (lockdriver.Grant, time.Duration, error) {
	call := callid.New()
	keys := d.callKeys(call)
	reply, err := d.r.Run(ctx, acquireScript, keys, []string{
		d.r.NowArg(), owner, micros(ttl), boolArg(d.o.Fair), boolArg(waiting), micros(3 * d.o.MaxPoll),
		call, boolArg(d.o.Owner != ""),
	})
	var v []int64
	if err == nil {
		v, err = redisstore.ReplyInts(reply, 2)
	}
	if err != nil {
		abandon(ttl, func(ctx context.Context) error {
			_, err := d.r.Run(ctx, cancelScript, keys, []string{
				d.r.NowArg(), owner, call, micros(ttl), d.channel, boolArg(d.o.Owner != ""),
			})
			return err
		})
		return lockdriver.Grant{}, 0, fmt.Errorf("lock: %w", err)
	}
	if v[0] == 1 {
		return lockdriver.Grant{Token: v[1]}, 0, nil
	}
	wait := d.o.MaxPoll
	if v[1] > 0 {
		wait = min(wait, time.Duration(v[1]+1)*time.Microsecond)
	}
	return lockdriver.Grant{}, wait, ErrLocked
}

func (d *redisDriver) Acquire(ctx context.Context, owner string, ttl time.Duration, wait bool) (lockdriver.Grant, error) {
	if !wait || d.o.Owner != "" || d.o.Fair {
		return d.acquire(ctx, owner, ttl, wait)
	}
	// Lock calls of this process on this name take turns in process first;
	// the turn may come with the lock, handed over by its release.
	token, err := d.local.WaitTurn(ctx, owner, "", ttl, d.o.MaxPoll)
	if err != nil {
		return lockdriver.Grant{}, err
	}
	g := lockdriver.Grant{Token: token}
	if token == 0 {
		g, err = d.acquire(ctx, owner, ttl, wait)
	}
	d.local.Done(owner, err == nil, time.Now().Add(ttl))
	return g, err
}

// acquire is Acquire in Redis: an attempt, then (when wait) the wait in
// Redis's queue, woken by pub/sub.
func (d *redisDriver) acquire(ctx context.Context, owner string, ttl time.Duration, wait bool) (lockdriver.Grant, error) {
	// One attempt first: a free lock is taken without the subscription a
	// waiter needs.
	g, _, err := d.try(ctx, owner, ttl, false)
	if !wait || !errors.Is(err, ErrLocked) {
		return g, err
	}
	// Subscribe before the first attempt, so that a release between the
	// attempt and the wait is not missed. Without pub/sub, waiters poll at
	// most every MaxPoll.
	var wake <-chan string
	if sub, err := d.r.Subscribe(ctx, d.channel); err == nil {
		defer sub.Close()
		wake = sub.C
	} else if !errors.Is(err, redisstore.ErrNoPubSub) {
		return lockdriver.Grant{}, fmt.Errorf("lock: %w", err) // ctx's error too, when it explains err
	}
	queued := false
	defer func() {
		if queued {
			// Leave the queue, and pass on a wake-up meant for us.
			leaveQueue(ctx, d.o.MaxPoll, func(ctx context.Context) error {
				_, err := d.r.Run(ctx, leaveScript, d.keys, []string{d.r.NowArg(), owner, d.channel})
				return err
			})
		}
	}()
	for {
		g, retry, err := d.try(ctx, owner, ttl, true)
		if err == nil {
			queued = false
			return g, nil
		}
		if !errors.Is(err, ErrLocked) {
			queued = false // the cancel leaves the queue
			return lockdriver.Grant{}, err
		}
		queued = true
		t := time.NewTimer(retry)
	wait:
		for {
			select {
			case <-ctx.Done():
				t.Stop()
				return lockdriver.Grant{}, ctx.Err()
			case next := <-wake:
				if next == owner || next == "" {
					break wait
				}
			case <-t.C:
				break wait
			}
		}
		t.Stop()
	}
}

func (d *redisDriver) Extend(ctx context.Context, owner string, ttl time.Duration) error {
	sent := time.Now()
	reply, err := d.r.Run(ctx, extendScript, d.keys[:1], []string{d.r.NowArg(), redisOwner(owner), micros(ttl)})
	if err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	if n, _ := reply.(int64); n != 1 {
		endRun(owner)
		d.local.Released(owner)
		return ErrNotHeld
	}
	extendedRun(owner, sent, ttl)
	d.local.Extended(owner, time.Now().Add(ttl))
	return nil
}

func (d *redisDriver) Release(ctx context.Context, owner string) error {
	if w := d.local.Handing(owner); w != nil {
		if token := pass(owner, w.Owner(), w.TTL()); token > 0 {
			d.handedTo(w, token)
			return nil
		}
		return d.handoff(ctx, owner, w)
	}
	// Whatever the answer, this process's holding is over: the next local
	// caller goes to Redis (where the lock is free, or held by another
	// process, or still ours if the release failed: then it waits there).
	defer d.local.Released(owner)
	reply, err := d.r.Run(ctx, releaseScript, d.keys, []string{d.r.NowArg(), endRun(owner), d.channel, callid.New()})
	if err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	if n, _ := reply.(int64); n < 0 {
		return ErrNotHeld
	}
	return nil
}

// handoff releases owner's holding and, in the same script, gives the lock
// to the local waiter w when no other process waits in Redis (see
// package cohort), starting a run of local passes (see pass.go). w learns
// the outcome through its turn: the lock, or an attempt of its own (which,
// after a lost reply, finds the lock if the hand-off ran: acquire.lua's
// resend path). When w's call has returned meanwhile, what it got is given
// up here.
func (d *redisDriver) handoff(ctx context.Context, owner string, w *cohort.Waiter) error {
	call := callid.New()
	keys := d.callKeys(call)
	window := passWindow(w.TTL())
	sent := time.Now()
	reply, err := d.r.Run(ctx, handoffScript, keys, []string{
		d.r.NowArg(), endRun(owner), d.channel, callid.New(), w.Owner(), micros(w.TTL() + window), call,
		strconv.Itoa(passBlock),
	})
	var v []int64
	if err == nil {
		v, err = redisstore.ReplyInts(reply, 2)
	}
	if err != nil {
		if !d.local.HandedTo(w, 0) {
			// w is gone and the hand-off may have run: undo it for w's call.
			abandon(w.TTL(), func(ctx context.Context) error {
				_, err := d.r.Run(ctx, cancelScript, keys, []string{
					d.r.NowArg(), w.Owner(), call, micros(w.TTL()), d.channel, "0",
				})
				return err
			})
			d.local.Done(w.Owner(), false, time.Time{})
		}
		return fmt.Errorf("lock: %w", err)
	}
	if v[1] > 0 {
		startRun(w.Owner(), v[1], sent, w.TTL(), window)
	}
	d.handedTo(w, v[1])
	if v[0] < 0 {
		return ErrNotHeld
	}
	return nil
}

// handedTo tells w the outcome of a hand-off to it: token > 0 when it holds
// the lock. When w's call has returned meanwhile, a lock it got is released
// on its behalf, handing it on.
func (d *redisDriver) handedTo(w *cohort.Waiter, token int64) {
	if d.local.HandedTo(w, token) {
		return
	}
	held := token > 0
	d.local.Done(w.Owner(), held, time.Now().Add(w.TTL()))
	if held {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			defer cancel()
			_ = d.Release(ctx, w.Owner())
		}()
	}
}
