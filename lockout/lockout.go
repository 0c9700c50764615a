// Package lockout protects logins against password guessing: a key that
// fails MaxFailures times within a Window is banned for BanFor.
//
//	g, err := lockout.New(b, lockout.Policy{MaxFailures: 5, Window: 15 * time.Minute, BanFor: 15 * time.Minute})
//	st, err := g.Check(ctx, account+"|"+ip) // before verifying the password
//	if st.Banned { /* 429, Retry-After: st.RetryAfter */ }
//	if !passwordOK { st, err = g.Fail(ctx, key) } else { err = g.Succeed(ctx, key) }
//
// # Counting
//
// Failures are counted exactly with a sliding log: each failure's time is
// kept for Window, and the ban starts with the failure that makes MaxFailures
// failures within the last Window — in any Window-long span, not per fixed
// window, so failures bunched around a window boundary cannot slip through.
// The log holds at most MaxFailures-1 entries per key; it is cleared when the
// ban starts, so a key whose ban has ended has MaxFailures attempts again.
// Every call is one atomic step (one script call on Redis), so concurrent
// failures of one key are never lost and the MaxFailures-th bans, not a
// later one.
//
// # Keys
//
// A key is any non-empty string, of any length: the empty key is refused
// with backend.ErrEmptyKey, and every other key is counted and banned. A key
// of at most backend.MaxKeyLen bytes names its state as it is. A longer one
// (a long username an attacker sends, say) is counted under its digest: its
// first 256 bytes, "#sha256:" and the hex SHA-256 of the whole key, 328
// bytes in all, as package ratelimit does. So the same long key always
// shares one state, whichever of Check, Fail, Succeed and Reset is called
// with it, and two long keys that differ anywhere, also past their first
// MaxKeyLen bytes, are counted apart. A client cannot escape the lockout by
// sending a long key.
//
// # Choosing keys
//
// A key such as "account|ip" bans one source from one account: an attacker
// cannot lock the real user out by failing from elsewhere, which a key per
// account alone would allow. Guessing one account from many addresses is not
// stopped by it; pair it with a second Guard per account with a looser
// policy, or a rate limit per account (package ratelimit).
package lockout

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"hash/fnv"
	"strconv"
	"time"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/internal/longkey"
	"github.com/floodgate-dev/floodgate/internal/memstore"
	"github.com/floodgate-dev/floodgate/internal/redisstore"
	"github.com/floodgate-dev/floodgate/internal/unwrap"
)

// Limits of a Policy.
const (
	// MaxMaxFailures is the largest Policy.MaxFailures: the log of a key
	// holds up to MaxFailures-1 times.
	MaxMaxFailures = 10000
	// MaxPeriod is the longest Window and BanFor: ten years.
	MaxPeriod = 10 * 365 * 24 * time.Hour
)

// Policy says when a key is banned: when MaxFailures failures fall within
// Window, for BanFor from the last of them. All fields are required.
type Policy struct {
	MaxFailures int64         // 1..MaxMaxFailures; 1 bans at the first failure
	Window      time.Duration // > 0, whole µs, at most MaxPeriod
	BanFor      time.Duration // > 0, whole µs, at most MaxPeriod
}

// Validate reports the first invalid field, naming it and its value.
func (p Policy) Validate() error {
	if p.MaxFailures < 1 || p.MaxFailures > MaxMaxFailures {
		return fmt.Errorf("lockout: Policy.MaxFailures must be between 1 and %d, got %d", MaxMaxFailures, p.MaxFailures)
	}
	for _, f := range []struct {
		name string
		d    time.Duration
	}{{"Window", p.Window}, {"BanFor", p.BanFor}} {
		switch {
		case f.d <= 0:
			return fmt.Errorf("lockout: Policy.%s must be > 0, got %v", f.name, f.d)
		case f.d%time.Microsecond != 0:
			return fmt.Errorf("lockout: Policy.%s must be a whole number of microseconds, got %v", f.name, f.d)
		case f.d > MaxPeriod:
			return fmt.Errorf("lockout: Policy.%s must be at most MaxPeriod (87600h), got %v", f.name, f.d)
		}
	}
	return nil
}

// Status is the state of a key.
type Status struct {
	// Banned is true while the key is banned.
	Banned bool
	// Remaining is how many more failures the key may have, counting the one
	// that bans it: with Remaining 1 the next failure bans. 0 while banned.
	Remaining int64
	// RetryAfter is how long the ban lasts from now; 0 when not banned.
	RetryAfter time.Duration
}

// Guard counts failures and bans keys under one Policy. It is safe for
// concurrent use; create it with New. Check (before verifying a password),
// Fail and Succeed are the methods most callers want.
//
// The state of a key is identified by the key and the Policy: Guards with
// the same Policy on one store share it, so any number of processes can
// guard one login. Guards with different policies keep separate state, so
// layered policies on the same key (5 per 15 minutes and 20 per day) work;
// it also means that changing a Policy starts every key afresh, without the
// bans of the old one.
type Guard struct {
	p                    Policy
	max                  int64
	window, ban          int64  // µs
	id                   string // hash of the policy, in every stored key
	mem                  *memstore.Table
	redis                *redisstore.Store
	banSuffix, logSuffix string
	args                 []string // ARGV[2...] of fail.lua and check.lua
}

//go:embed lua/fail.lua
var luaFail string

//go:embed lua/check.lua
var luaCheck string

//go:embed lua/clear.lua
var luaClear string

var (
	failScript  = redisstore.NewScript(luaFail)
	checkScript = redisstore.NewScript(luaCheck)
	clearScript = redisstore.NewScript(luaClear)
)

// New returns a Guard applying p on b. It fails when b is nil or a field of
// p is invalid, naming the field and its value.
func New(b backend.Backend, p Policy) (*Guard, error) {
	if b == nil {
		return nil, errors.New("lockout: backend is nil")
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	g := &Guard{p: p, max: p.MaxFailures, window: p.Window.Microseconds(), ban: p.BanFor.Microseconds()}
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%d/%d", g.max, g.window, g.ban)
	g.id = strconv.FormatUint(h.Sum64(), 36)
	switch b := b.(type) {
	case *backend.Memory:
		g.mem = unwrap.Memory(b).Table("lockout")
	case *backend.Redis:
		g.redis = unwrap.Redis(b)
		g.banSuffix, g.logSuffix = "lo"+g.id+":b", "lo"+g.id+":f"
		g.args = []string{strconv.FormatInt(g.max, 10), strconv.FormatInt(g.window, 10), strconv.FormatInt(g.ban, 10)}
	default:
		return nil, fmt.Errorf("lockout: unsupported backend %T", b)
	}
	return g, nil
}

// Policy returns the Guard's policy.
func (g *Guard) Policy() Policy { return g.p }

// Check returns the status of key without changing it: whether it is
// banned and for how long, and how many failures it has left. Call it before
// verifying a password, and refuse the attempt when Banned, so that a banned
// client learns nothing about the password.
//
// A key of any length is counted: see Keys in the package doc.
//
// Errors: backend.ErrEmptyKey for the empty key; the context's error; store
// errors (wrapped; on Redis bounded by ctx). Decide whether an error lets the
// login proceed (fail open) or not (fail closed).
func (g *Guard) Check(ctx context.Context, key string) (Status, error) {
	return g.call(ctx, key, checkScript, g.memCheck)
}

// Fail records a failed attempt of key and returns the status after it.
// The failure that makes MaxFailures failures within Window bans the key for
// BanFor (Banned, RetryAfter = BanFor) and clears its failures. While the key
// is banned, Fail records nothing and returns the ban unchanged: failures do
// not extend a ban. Errors as for Check; after a store error the failure may
// or may not have been recorded.
func (g *Guard) Fail(ctx context.Context, key string) (Status, error) {
	return g.call(ctx, key, failScript, g.memFail)
}

// Succeed clears the failures of key, after a successful login. It does not
// lift an active ban (Check refuses the attempt first; Reset lifts bans).
// Errors as for Check.
func (g *Guard) Succeed(ctx context.Context, key string) error {
	return g.clear(ctx, key, false)
}

// Reset clears the failures of key and lifts its ban, e.g. when support
// unlocks an account. Errors as for Check.
func (g *Guard) Reset(ctx context.Context, key string) error {
	return g.clear(ctx, key, true)
}

func (g *Guard) call(ctx context.Context, key string, s *redisstore.Script, mem func(string) Status) (Status, error) {
	key, err := storeKey(key)
	if err != nil {
		return Status{}, err
	}
	if err := ctx.Err(); err != nil {
		return Status{}, err
	}
	if g.mem != nil {
		return mem(key), nil
	}
	args := append([]string{g.redis.NowArg()}, g.args...)
	raw, err := g.redis.Run(ctx, s, g.keys(key), args)
	if err != nil {
		return Status{}, err
	}
	v, err := redisstore.ReplyInts(raw, 3)
	if err != nil {
		return Status{}, err
	}
	return Status{Banned: v[0] == 1, Remaining: v[1], RetryAfter: time.Duration(v[2]) * time.Microsecond}, nil
}

func (g *Guard) clear(ctx context.Context, key string, lift bool) error {
	key, err := storeKey(key)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if g.mem != nil {
		g.memClear(key, lift)
		return nil
	}
	arg := "0"
	if lift {
		arg = "1"
	}
	_, err = g.redis.Run(ctx, clearScript, g.keys(key), []string{arg})
	return err
}

// storeKey returns the key that key's state is kept under: key itself, or
// its digest when it is longer than backend.MaxKeyLen (package longkey), so
// that a long key is counted and banned like any other (see Keys in the
// package doc). The empty key is refused with backend.ErrEmptyKey.
func storeKey(key string) (string, error) {
	if key == "" {
		return "", backend.ErrEmptyKey
	}
	return longkey.Key(key), nil
}

// keys returns KEYS of the scripts: the ban and the failure log, with the
// user key as their shared hash tag.
func (g *Guard) keys(key string) []string {
	return []string{g.redis.Key(key, g.banSuffix), g.redis.Key(key, g.logSuffix)}
}
