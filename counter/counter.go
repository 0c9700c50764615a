// Package counter keeps integer counters per key on the Memory or Redis
// backend: plain counters, counters that expire a fixed time after they are
// created (TTL, e.g. a session's request count) and counters per
// epoch-aligned window (Window, e.g. a daily sign-in sequence number).
//
//	daily, err := counter.New(b, "signin", counter.Window(24*time.Hour))
//	n, err := daily.Add(ctx, "2026-user-42", 1) // 1, 2, 3, ... until midnight UTC
//
// # Why there is no lock
//
// Add is one atomic step: on Redis it is one script call in which INCRBY (or
// HSET) and PEXPIRE run together, and Redis runs scripts one at a time, so no
// other client ever sees the counter between the increment and the expiry, and
// two concurrent Adds always produce two different values. On Memory one shard
// mutex covers the same step. A distributed lock around it would add two round
// trips (lock, unlock) to every increment and a failure mode — a holder that
// stalls blocks every increment until its lease runs out, and a lease lost to a
// pause lets two writers in anyway — without making anything more atomic.
//
// # Time
//
// On Redis time comes from the Redis server (TIME), on Memory from the
// backend's clock. A counter's state carries its own timestamps: a TTL
// counter stores its expiry instant, and a Window counter's key contains the
// window's number, so a value never outlives its TTL or leaks into the next
// window whatever Redis does with key TTLs; those only collect garbage.
//
// # Keys
//
// A key is any non-empty string, of any length: the empty key is refused
// with backend.ErrEmptyKey, and every other key is counted. A key of at most
// backend.MaxKeyLen bytes names its counter as it is. A longer one (a URL or
// a token taken from a request, say) is counted under its digest: its first
// 256 bytes, "#sha256:" and the hex SHA-256 of the whole key, 328 bytes in
// all, as package ratelimit does. So the same long key always has one
// counter, whichever of Add, Get, Inspect, Reset and Batched.Add reaches it,
// and two long keys that differ anywhere, also past their first MaxKeyLen
// bytes, are counted apart.
//
// For very hot keys, Batched adds locally and flushes the sums periodically.
package counter

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/internal/callid"
	"github.com/floodgate-dev/floodgate/internal/longkey"
	"github.com/floodgate-dev/floodgate/internal/memstore"
	"github.com/floodgate-dev/floodgate/internal/redisstore"
	"github.com/floodgate-dev/floodgate/internal/unwrap"
)

// Limits of values and periods.
const (
	// MaxValue is the largest magnitude of a counter and of a delta:
	// 2^53-1, the largest integer that Lua (whose numbers are doubles) and
	// JSON represent exactly.
	MaxValue = 1<<53 - 1
	// MaxPeriod is the longest TTL and Window: ten years.
	MaxPeriod = 10 * 365 * 24 * time.Hour
	// MaxNameLen is the longest counter name, in bytes.
	MaxNameLen = 512
)

// ErrOverflow is returned by Add when the new value would leave
// [-MaxValue, MaxValue], or the delta itself does; the counter is unchanged.
var ErrOverflow = errors.New("counter: value out of range ±(2^53-1)")

// Option configures a Counter.
type Option func(*config)

type config struct {
	ttl, window, offset time.Duration
	refresh, hasOffset  bool
	replay              time.Duration
	hasReplay           bool
}

// DefaultReplayWindow is how long a Redis counter remembers an Add's
// outcome, so that a client's resend of that call counts once.
const DefaultReplayWindow = time.Minute

// ReplayWindow sets how long, on Redis, each Add with a non-zero delta
// remembers its outcome, keyed by an ID that the client library's resends of
// the same call repeat: a resend (go-redis's MaxRetries after a read
// timeout, a reply lost on the network) that arrives within d returns the
// first run's value and counts nothing. Default DefaultReplayWindow (one
// minute: go-redis's default retries end within about 20 s). The record is
// one small key per Add that expires after d; ReplayWindow(0) turns it off
// for keys hot enough that its cost matters, and then a resent Add counts
// twice. It has no effect on Memory, where no reply is lost.
func ReplayWindow(d time.Duration) Option {
	return func(c *config) { c.replay, c.hasReplay = d, true }
}

// TTL makes a counter expire d after the Add that creates it: the Add that
// finds no live counter sets the expiry in the same atomic step as the
// increment. Later Adds do NOT move the expiry (a fixed lifetime, like a
// session's counter); use RefreshOnAdd for an idle timeout instead. Once
// expired the counter reads 0 and the next Add starts a new one with a new
// expiry. Default: no expiry; TTL(0) means no expiry too. d must be a whole
// number of microseconds, at most MaxPeriod; TTL and Window exclude each
// other.
func TTL(d time.Duration) Option { return func(c *config) { c.ttl = d } }

// RefreshOnAdd makes every Add with a non-zero delta restart a TTL counter's
// lifetime, so that it expires TTL after its last change (an idle timeout,
// e.g. an online-presence count). It needs TTL. Default: off.
func RefreshOnAdd() Option { return func(c *config) { c.refresh = true } }

// Window gives a counter one value per window of length d aligned to the
// Unix epoch (d = 24h: one value per UTC day): the first Add in a window
// starts from zero, whatever the previous window reached. The window's number
// is part of the stored key, so values never leak across windows; on Redis
// the key expires at the window's end plus a margin of min(d, 1m), which only
// collects garbage. Default: no windows; Window(0) means no windows too. d
// must be a whole number of microseconds, at most MaxPeriod; TTL and Window
// exclude each other.
func Window(d time.Duration) Option { return func(c *config) { c.window = d } }

// WindowOffset moves the window boundaries to offset + k·Window after the
// Unix epoch. For a counter per day in UTC+8, WindowOffset(-8*time.Hour)
// starts each window at local midnight. It needs Window and must lie strictly
// between -Window and Window. Default 0.
func WindowOffset(offset time.Duration) Option {
	return func(c *config) { c.offset, c.hasOffset = offset, true }
}

type mode uint8

const (
	modePlain mode = iota
	modeTTL
	modeWindow
)

// Counter is a family of integer counters, one per key, under one name. Add
// is atomic and needs no lock (see the package documentation); it is one
// script call on Redis. A Counter is safe for concurrent use; create it with
// New. Add is the method most callers want.
//
// The state of a counter is identified by the name, the key and, for Window
// counters, the window length and offset: Counters with the same name and
// options on one store share values. A TTL counter and a plain counter of the
// same name are different counters.
type Counter struct {
	name    string
	mode    mode
	period  int64 // µs: the TTL or the window length
	offset  int64 // µs in [0, period): where windows start
	margin  int64 // µs a Window key outlives its window on Redis
	refresh bool

	mem    *memstore.Table
	redis  *redisstore.Store
	suffix string   // Redis key suffix (after the hash tag)
	args   []string // ARGV[3...] of add.lua
	replay string   // µs a replay record lives; "" for none
}

// Info is a counter's value and how long until it expires.
type Info struct {
	Value int64
	// ResetAfter is the time until the counter expires (TTL) or its window
	// ends (Window). It is 0 when the counter does not exist (never added to,
	// expired, reset, or not yet added to in this window) and for counters
	// without TTL or Window.
	ResetAfter time.Duration
}

//go:embed lua/add.lua
var luaAdd string

//go:embed lua/reset.lua
var luaReset string

var (
	addScript   = redisstore.NewScript(luaAdd)
	resetScript = redisstore.NewScript(luaReset)
)

// New returns the counters named name on b. It fails with an error naming
// the option and value when an option is invalid, when name is empty or
// longer than MaxNameLen, and when b is nil.
func New(b backend.Backend, name string, opts ...Option) (*Counter, error) {
	if b == nil {
		return nil, errors.New("counter: backend is nil")
	}
	if name == "" {
		return nil, errors.New("counter: name is empty")
	}
	if len(name) > MaxNameLen {
		return nil, fmt.Errorf("counter: name must be at most %d bytes, got %d", MaxNameLen, len(name))
	}
	var cfg config
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	c := &Counter{name: name, refresh: cfg.refresh}
	ttl, err := period("TTL", cfg.ttl)
	if err != nil {
		return nil, err
	}
	window, err := period("Window", cfg.window)
	if err != nil {
		return nil, err
	}
	switch {
	case ttl > 0 && window > 0:
		return nil, fmt.Errorf("counter: TTL (%v) and Window (%v) exclude each other: a Window counter expires when its window ends", cfg.ttl, cfg.window)
	case cfg.refresh && ttl == 0:
		return nil, errors.New("counter: RefreshOnAdd needs a TTL")
	case cfg.hasOffset && window == 0:
		return nil, fmt.Errorf("counter: WindowOffset (%v) needs a Window", cfg.offset)
	}
	switch {
	case ttl > 0:
		c.mode, c.period = modeTTL, ttl
		c.suffix = "ct:" + name
	case window > 0:
		if cfg.offset <= -cfg.window || cfg.offset >= cfg.window {
			return nil, fmt.Errorf("counter: WindowOffset must lie strictly between -Window and Window (%v), got %v", cfg.window, cfg.offset)
		}
		if cfg.offset%time.Microsecond != 0 {
			return nil, fmt.Errorf("counter: WindowOffset must be a whole number of microseconds, got %v", cfg.offset)
		}
		c.mode, c.period = modeWindow, window
		c.offset = (cfg.offset.Microseconds() + window) % window
		c.margin = min(window, time.Minute.Microseconds())
		c.suffix = "cw" + strconv.FormatInt(window, 36)
		if c.offset != 0 {
			c.suffix += "." + strconv.FormatInt(c.offset, 36)
		}
		c.suffix += ":" + name
	default:
		c.mode = modePlain
		c.suffix = "c:" + name
	}
	replay := DefaultReplayWindow
	if cfg.hasReplay {
		if cfg.replay < 0 || cfg.replay > 24*time.Hour {
			return nil, fmt.Errorf("counter: ReplayWindow must be from 0 (off) to 24h, got %v", cfg.replay)
		}
		replay = cfg.replay
	}
	switch b := b.(type) {
	case *backend.Memory:
		c.mem = unwrap.Memory(b).Table("counter/" + c.suffix)
	case *backend.Redis:
		c.redis = unwrap.Redis(b)
		if replay > 0 {
			c.replay = strconv.FormatInt(replay.Microseconds(), 10)
		}
		p := strconv.FormatInt(c.period, 10)
		switch c.mode {
		case modePlain:
			c.args = []string{"p"}
		case modeTTL:
			refresh := "0"
			if c.refresh {
				refresh = "1"
			}
			c.args = []string{"t", p, refresh}
		case modeWindow:
			c.args = []string{"w", p, strconv.FormatInt(c.offset, 10), strconv.FormatInt(c.margin, 10)}
		}
	default:
		return nil, fmt.Errorf("counter: unsupported backend %T", b)
	}
	return c, nil
}

// period validates a TTL or Window and converts it to µs.
func period(field string, d time.Duration) (int64, error) {
	switch {
	case d < 0:
		return 0, fmt.Errorf("counter: %s must be >= 0 (0 for none), got %v", field, d)
	case d%time.Microsecond != 0:
		return 0, fmt.Errorf("counter: %s must be a whole number of microseconds, got %v", field, d)
	case d > MaxPeriod:
		return 0, fmt.Errorf("counter: %s must be at most MaxPeriod (87600h), got %v", field, d)
	}
	return d.Microseconds(), nil
}

// Name returns the counter's name.
func (c *Counter) Name() string { return c.name }

// Add adds delta (which may be negative) to the counter of key and returns
// the new value. A counter that does not exist starts at 0; the Add that
// creates a TTL counter sets its expiry, and with Window the first Add in a
// window starts that window's counter. Add with delta 0 only reads: it
// creates nothing and does not refresh a TTL.
//
// A key of any length is counted: see Keys in the package doc.
//
// Errors: backend.ErrEmptyKey for the empty key; ErrOverflow, with nothing
// changed, when the value or delta would leave ±MaxValue; the context's
// error; store errors (wrapped; on Redis bounded by ctx). When Add returns a
// store error the increment may or may not have been applied (the reply can
// be lost after Redis ran the script).
func (c *Counter) Add(ctx context.Context, key string, delta int64) (int64, error) {
	in, err := c.do(ctx, key, delta, "")
	return in.Value, err
}

// Get returns the value of the counter of key: 0 when it does not exist,
// has expired, or (Window) has not been added to in the current window. It
// changes nothing. Errors as for Add.
func (c *Counter) Get(ctx context.Context, key string) (int64, error) {
	in, err := c.do(ctx, key, 0, "")
	return in.Value, err
}

// Inspect returns the value of the counter of key and how long until it
// expires, changing nothing. Errors as for Add.
func (c *Counter) Inspect(ctx context.Context, key string) (Info, error) {
	return c.do(ctx, key, 0, "")
}

// Reset deletes the counter of key (with Window: the current window's), so
// that it reads 0 and the next Add starts afresh with a new expiry. Errors:
// backend.ErrEmptyKey for the empty key, the context's error, store errors.
func (c *Counter) Reset(ctx context.Context, key string) error {
	key, err := storeKey(key)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if c.mem != nil {
		sh := c.mem.Shard(key)
		sh.Lock()
		sh.Delete(key)
		sh.Unlock()
		return nil
	}
	args := []string{c.redis.NowArg(), c.args[0]}
	if c.mode == modeWindow {
		args = append(args, c.args[1], c.args[2])
	}
	_, err = c.redis.Run(ctx, resetScript, []string{c.redis.Key(key, c.suffix)}, args)
	return err
}

// storeKey returns the key that key's counter is kept under: key itself, or
// its digest when it is longer than backend.MaxKeyLen (package longkey), so
// that a long key is counted like any other (see Keys in the package doc).
// The empty key is refused with backend.ErrEmptyKey. A digest is its own
// store key, so storeKey may be applied twice (Batched does).
func storeKey(key string) (string, error) {
	if key == "" {
		return "", backend.ErrEmptyKey
	}
	return longkey.Key(key), nil
}

// do runs one Add (delta 0: a read). id is the call's replay ID on Redis:
// "" makes a new one; a caller that resends a call whose outcome it does not
// know passes the ID of the first send, so that it counts once (within the
// replay window).
func (c *Counter) do(ctx context.Context, key string, delta int64, id string) (Info, error) {
	key, err := storeKey(key)
	if err != nil {
		return Info{}, err
	}
	if delta > MaxValue || delta < -MaxValue {
		return Info{}, fmt.Errorf("%w: delta %d", ErrOverflow, delta)
	}
	if err := ctx.Err(); err != nil {
		return Info{}, err
	}
	var r reply
	if c.mem != nil {
		r = c.memDo(key, delta)
	} else {
		args := make([]string, 0, 4+len(c.args))
		args = append(args, c.redis.NowArg(), strconv.FormatInt(delta, 10))
		args = append(args, c.args...)
		keys := []string{c.redis.Key(key, c.suffix)}
		if delta != 0 && c.replay != "" {
			if id == "" {
				id = callid.New()
			}
			keys = append(keys, c.redis.Key(key, "r:"+c.suffix+":"+id)) // counters' suffixes start with "c"
			args = append(args, id, c.replay)
		}
		raw, err := c.redis.Run(ctx, addScript, keys, args)
		if err != nil {
			return Info{}, err
		}
		v, err := redisstore.ReplyInts(raw, 3)
		if err != nil {
			return Info{}, err
		}
		r = reply{ok: v[0] == 1, value: v[1], reset: v[2]}
	}
	in := Info{Value: r.value, ResetAfter: time.Duration(r.reset) * time.Microsecond}
	if !r.ok {
		return in, fmt.Errorf("%w: %d%+d", ErrOverflow, r.value, delta)
	}
	return in, nil
}

// reply is the outcome of add.lua and its Memory mirror: ok is false when
// the new value would overflow (value is then the unchanged one).
type reply struct {
	ok    bool
	value int64
	reset int64 // µs
}
