package lock

import (
	"context"
	_ "embed"
	"fmt"
	"strconv"
	"time"

	"github.com/floodgate-dev/floodgate/internal/callid"
	"github.com/floodgate-dev/floodgate/internal/redisstore"
	"github.com/floodgate-dev/floodgate/lock/internal/lockdriver"
)

var (
	//go:embed lua/sem_acquire.lua
	luaSemAcquire string
	//go:embed lua/sem_release.lua
	luaSemRelease string
	//go:embed lua/sem_extend.lua
	luaSemExtend string
	//go:embed lua/sem_leave.lua
	luaSemLeave string
	//go:embed lua/sem_cancel.lua
	luaSemCancel string

	semAcquireScript = script(luaSemAcquire)
	semReleaseScript = script(luaSemRelease)
	semExtendScript  = script(luaSemExtend)
	semLeaveScript   = script(luaSemLeave)
	semCancelScript  = script(luaSemCancel)
)

// semRedis is a Semaphore on Redis. Every key of a name shares the hash tag
// {name}, so the scripts run on Redis Cluster; the suffixes (sm*) differ from
// those of the other locks. The permits (each with its lease deadline, so an
// expired permit stops counting at its deadline), the fence and the
// tombstones are one hash (see lua/sem_acquire.lua); waiters queue in a
// sorted set by place, which exists only while someone waits, and a release
// publishes on the lock's channel up to which place waiters may retry (see
// lua/sem_release.lua).
//
// The 0.9 layout (keys smh, smc, smq, smd, smx:*) is not read, but for its
// fence smf, which the first acquisition continues above and deletes; its
// keys have TTLs and expire.
type semRedis struct {
	r       *redisstore.Store
	o       lockdriver.Options
	permits string
	keys    []string // lock hash, fence of 0.9, waiters, waiter deadlines
	channel string
}

func newSemRedis(r *redisstore.Store, name string, permits int, o lockdriver.Options) *semRedis {
	return &semRedis{
		r:       r,
		o:       o,
		permits: strconv.Itoa(permits),
		keys: []string{
			r.Key(name, "smk"),
			r.Key(name, "smf"),
			r.Key(name, "smw"),
			r.Key(name, "smwd"),
		},
		channel: r.Key(name, "smn"),
	}
}

func (d *semRedis) Acquire(ctx context.Context, owner string, ttl time.Duration, wait bool) (lockdriver.Grant, error) {
	reentrant := boolArg(d.o.Owner != "")
	try := func(ctx context.Context, waiting bool, call string) (lockdriver.Grant, time.Duration, int64, error) {
		reply, err := d.r.Run(ctx, semAcquireScript, d.keys, []string{
			d.r.NowArg(), owner, micros(ttl), d.permits, boolArg(d.o.Fair), boolArg(waiting), micros(3 * d.o.MaxPoll),
			call, reentrant,
		})
		if err != nil {
			return lockdriver.Grant{}, 0, 0, fmt.Errorf("lock: %w", err)
		}
		return parseAttempt(reply, d.o.MaxPoll)
	}
	leave := func(ctx context.Context) error {
		_, err := d.r.Run(ctx, semLeaveScript, d.keys, []string{d.r.NowArg(), owner, d.permits, d.channel})
		return err
	}
	cancel := func(ctx context.Context, call string) error {
		_, err := d.r.Run(ctx, semCancelScript, d.keys, []string{
			d.r.NowArg(), owner, d.permits, d.channel, call, micros(ttl), reentrant,
		})
		return err
	}
	return redisWait(ctx, d.r, d.channel, sideSem, wait, ttl, d.o.MaxPoll, try, leave, cancel)
}

func (d *semRedis) Extend(ctx context.Context, owner string, ttl time.Duration) error {
	reply, err := d.r.Run(ctx, semExtendScript, d.keys[:1], []string{d.r.NowArg(), owner, micros(ttl)})
	if err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	if n, _ := reply.(int64); n != 1 {
		return ErrNotHeld
	}
	return nil
}

func (d *semRedis) Release(ctx context.Context, owner string) error {
	reply, err := d.r.Run(ctx, semReleaseScript, d.keys, []string{d.r.NowArg(), owner, d.permits, d.channel, callid.New()})
	if err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	if n, _ := reply.(int64); n < 0 {
		return ErrNotHeld
	}
	return nil
}
