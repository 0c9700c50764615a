package lock

import (
	"context"
	_ "embed"
	"fmt"
	"time"

	"github.com/floodgate-dev/floodgate/internal/callid"
	"github.com/floodgate-dev/floodgate/internal/redisstore"
	"github.com/floodgate-dev/floodgate/lock/internal/lockdriver"
)

var (
	//go:embed lua/rw_acquire.lua
	luaRWAcquire string
	//go:embed lua/rw_release.lua
	luaRWRelease string
	//go:embed lua/rw_extend.lua
	luaRWExtend string
	//go:embed lua/rw_leave.lua
	luaRWLeave string
	//go:embed lua/rw_cancel.lua
	luaRWCancel string

	rwAcquireScript = script(luaRWAcquire)
	rwReleaseScript = script(luaRWRelease)
	rwExtendScript  = script(luaRWExtend)
	rwLeaveScript   = script(luaRWLeave)
	rwCancelScript  = script(luaRWCancel)
)

// rwRedis is an RWMutex on Redis. Every key of a name shares the hash tag
// {name}, so the scripts run on Redis Cluster; the suffixes (rw*) differ from
// the mutex's, so a Mutex and an RWMutex of one name are separate locks. The
// state of both sides, the fence and the tombstones are one hash (see
// lua/rw_acquire.lua). Waiters queue in two sorted sets, readers and writers,
// by place, which exist only while someone waits; a release publishes on the
// lock's channel which side and places may retry (see lua/rw_release.lua).
//
// The 0.9 layout (keys rwl, rwr, rwh, rwqr, rwqw, rwd, rwx:*) is not read,
// but for its fence rwf, which the first acquisition continues above and
// deletes; its keys have TTLs and expire.
type rwRedis struct {
	r       *redisstore.Store
	o       lockdriver.Options
	keys    []string // lock hash, fence of 0.9, waiting readers, waiting writers, waiter deadlines
	channel string
}

func newRWRedis(r *redisstore.Store, name string, o lockdriver.Options) *rwRedis {
	return &rwRedis{
		r: r,
		o: o,
		keys: []string{
			r.Key(name, "rwk"),
			r.Key(name, "rwf"),
			r.Key(name, "rwwr"),
			r.Key(name, "rwww"),
			r.Key(name, "rwwd"),
		},
		channel: r.Key(name, "rwn"),
	}
}

// side returns the Driver of one side, read or write.
func (d *rwRedis) side(s byte) lockdriver.Driver { return rwRedisSide{d: d, side: string(s)} }

type rwRedisSide struct {
	d    *rwRedis
	side string // "r" or "w"
}

func (s rwRedisSide) Acquire(ctx context.Context, owner string, ttl time.Duration, wait bool) (lockdriver.Grant, error) {
	d := s.d
	reentrant := boolArg(d.o.Owner != "")
	try := func(ctx context.Context, waiting bool, call string) (lockdriver.Grant, time.Duration, int64, error) {
		reply, err := d.r.Run(ctx, rwAcquireScript, d.keys, []string{
			d.r.NowArg(), s.side, owner, micros(ttl), boolArg(d.o.Fair), boolArg(waiting), micros(3 * d.o.MaxPoll),
			call, reentrant,
		})
		if err != nil {
			return lockdriver.Grant{}, 0, 0, fmt.Errorf("lock: %w", err)
		}
		return parseAttempt(reply, d.o.MaxPoll)
	}
	leave := func(ctx context.Context) error {
		_, err := d.r.Run(ctx, rwLeaveScript, d.keys, []string{d.r.NowArg(), s.side, owner, d.channel})
		return err
	}
	cancel := func(ctx context.Context, call string) error {
		_, err := d.r.Run(ctx, rwCancelScript, d.keys, []string{
			d.r.NowArg(), s.side, owner, d.channel, call, micros(ttl), reentrant,
		})
		return err
	}
	return redisWait(ctx, d.r, d.channel, s.side[0], wait, ttl, d.o.MaxPoll, try, leave, cancel)
}

func (s rwRedisSide) Extend(ctx context.Context, owner string, ttl time.Duration) error {
	reply, err := s.d.r.Run(ctx, rwExtendScript, s.d.keys[:1], []string{s.d.r.NowArg(), s.side, owner, micros(ttl)})
	if err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	if n, _ := reply.(int64); n != 1 {
		return ErrNotHeld
	}
	return nil
}

func (s rwRedisSide) Release(ctx context.Context, owner string) error {
	reply, err := s.d.r.Run(ctx, rwReleaseScript, s.d.keys, []string{s.d.r.NowArg(), s.side, owner, s.d.channel, callid.New()})
	if err != nil {
		return fmt.Errorf("lock: %w", err)
	}
	if n, _ := reply.(int64); n < 0 {
		return ErrNotHeld
	}
	return nil
}
