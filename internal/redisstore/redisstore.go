// Package redisstore runs floodgate's primitives on Redis: the runner of
// Lua scripts behind a backend.Redis (EVALSHA, EVAL on NOSCRIPT; keys with a
// hash tag; the "now" argument), the decoding of script replies, Cluster hash
// slots, the go-redis adapter (with its autopipelining) and the pub/sub hub
// that wakes waiters.
//
// It is internal: applications construct a backend.Redis and pass it on;
// floodgate's primitives reach its Store through package unwrap. The
// adapter contract open to other clients is backend.Scripter; the optional
// fast paths an adapter inside floodgate may add (IntsScripter, PubSubber)
// are declared here, so that they can change with the code that uses them.
package redisstore

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/floodgate-dev/floodgate/clock"
)

// Scripter is the narrowest view of a Redis client that floodgate needs: two
// ways of running a Lua script. It has the method set of backend.Scripter,
// the public contract of adapters, which documents it: any backend.Scripter
// is a Scripter.
//
// Replies must be normalised to int64, string, []any (nested alike) or nil for
// a Redis nil reply. An error whose text starts with "NOSCRIPT" means the
// script is not cached; Store then retries with Eval.
type Scripter interface {
	EvalSha(ctx context.Context, sha1 string, keys []string, args []string) (any, error)
	Eval(ctx context.Context, src string, keys []string, args []string) (any, error)
}

// Store runs primitives as Lua scripts on a Redis server: one EVALSHA per
// decision (EVAL when the server answers NOSCRIPT). Keys are
// "<prefix>:{<user key>}:<suffix>", so every key of one call shares a hash tag
// and a Cluster slot. Time comes from the server's TIME command unless a clock
// is injected.
//
// A Store is safe for concurrent use; it holds no state of its own besides the
// client and its pub/sub connection.
type Store struct {
	s      Scripter
	direct Scripter // for Direct scripts; nil: s
	prefix string
	clk    clock.Clock

	hubOnce sync.Once
	hub     *hub
}

// New returns a Store over s whose keys start with prefix. direct, when not
// nil, runs the scripts made Direct (see Script.Direct); clk, when not nil,
// gives the scripts their "now" (see NowArg). The caller validates prefix.
func New(s, direct Scripter, prefix string, clk clock.Clock) *Store {
	return &Store{s: s, direct: direct, prefix: prefix, clk: clk}
}

// Scripter returns the Scripter r runs its scripts on, for tests that wrap
// it (to inject faults or replay calls) in a backend of their own.
func (r *Store) Scripter() Scripter { return r.s }

// Clock returns the injected clock, or nil when time comes from Redis TIME.
func (r *Store) Clock() clock.Clock { return r.clk }

// Prefix returns the key prefix.
func (r *Store) Prefix() string { return r.prefix }

// NowArg returns the "now" argument of a script: the injected clock's time in
// microseconds since the Unix epoch, or "" so that the script calls TIME.
func (r *Store) NowArg() string {
	if r.clk == nil {
		return ""
	}
	return strconv.FormatInt(r.clk.Now().UnixMicro(), 10)
}

// Key returns "<prefix>:{<tag>}:<suffix>". The tag is escaped so that braces in
// it cannot move the hash tag: '{', '}' and '%' become %7B, %7D and %25.
func (r *Store) Key(tag, suffix string) string {
	var b strings.Builder
	b.Grow(len(r.prefix) + len(tag) + len(suffix) + 4)
	b.WriteString(r.prefix)
	b.WriteString(":{")
	writeTag(&b, tag)
	b.WriteString("}:")
	b.WriteString(suffix)
	return b.String()
}

func writeTag(b *strings.Builder, tag string) {
	if !strings.ContainsAny(tag, "{}%") {
		b.WriteString(tag)
		return
	}
	for i := 0; i < len(tag); i++ {
		switch c := tag[i]; c {
		case '{':
			b.WriteString("%7B")
		case '}':
			b.WriteString("%7D")
		case '%':
			b.WriteString("%25")
		default:
			b.WriteByte(c)
		}
	}
}

// Script is a Lua script with its SHA1, ready for EVALSHA.
type Script struct {
	src    string
	sha    string
	direct bool
}

// Direct returns a copy of s whose calls are never queued in the client's
// automatic pipeline (see backend.NewRedis): each is sent on its own connection at
// once. For scripts whose calls form a chain where each waits for the one
// before — a lock's release and the next holder's acquire — a pipeline's
// batch in flight would add its whole round trip to every link; with go-redis's
// default ordered autopipeliner, 16 goroutines on one lock took half the
// acquisitions per second they take with Direct scripts. Clients whose
// pipelining never holds a command back (rueidis) run Direct scripts as any
// other.
func (s *Script) Direct() *Script {
	c := *s
	c.direct = true
	return &c
}

// NewScript wraps Lua source.
func NewScript(src string) *Script {
	h := sha1.Sum([]byte(src))
	return &Script{src: src, sha: hex.EncodeToString(h[:])}
}

// Source returns the Lua source.
func (s *Script) Source() string { return s.src }

// SHA1 returns the hex SHA1 of the source.
func (s *Script) SHA1() string { return s.sha }

// Run runs the script with EVALSHA and, when Redis does not have it cached,
// with EVAL (which caches it). Errors are wrapped with "backend: redis:".
func (r *Store) Run(ctx context.Context, s *Script, keys []string, args []string) (any, error) {
	sc := r.scripter(s)
	return runScript(ctx, r, s,
		func(sha string) (any, error) { return sc.EvalSha(ctx, sha, keys, args) },
		func(src string) (any, error) { return sc.Eval(ctx, src, keys, args) })
}

// scripter is the Scripter that runs s.
func (r *Store) scripter(s *Script) Scripter {
	if s.direct && r.direct != nil {
		return r.direct
	}
	return r.s
}

// runScript is the one way every Run* method runs a script: evalSha with
// its SHA1 and, when Redis does not have it cached (NOSCRIPT), eval with its
// source (which caches it). Errors are wrapped with "backend: redis:".
func runScript[T any](ctx context.Context, r *Store, s *Script, evalSha, eval func(string) (T, error)) (T, error) {
	reply, err := evalSha(s.sha)
	if err != nil && strings.HasPrefix(err.Error(), "NOSCRIPT") {
		reply, err = eval(s.src)
	}
	if err != nil {
		var zero T
		return zero, r.wrap(ctx, err)
	}
	return reply, nil
}

// contextCause returns the context's error when it explains err: the context
// ended, its deadline has passed (its timer may not have fired yet), or err
// is a network time-out at the deadline (a client that derives its socket
// deadline from ctx times out a hair before ctx does).
func contextCause(ctx context.Context, err error) error {
	if ctxErr := ctx.Err(); ctxErr != nil {
		return ctxErr
	}
	dl, ok := ctx.Deadline()
	if !ok {
		return nil
	}
	var ne net.Error
	if left := time.Until(dl); left <= 0 || errors.As(err, &ne) && ne.Timeout() && left < 10*time.Millisecond {
		return context.DeadlineExceeded
	}
	return nil
}

// anyScripter is implemented by Scripters whose client takes arguments as
// []any (the go-redis adapter).
type anyScripter interface {
	evalShaAny(ctx context.Context, sha string, keys []string, args []any) (any, error)
	evalAny(ctx context.Context, src string, keys []string, args []any) (any, error)
}

// RunArgs is Run with arguments as values: strings and integers (int, int64).
// Primitives on a hot path keep their constant arguments pre-built in this
// form, so that a go-redis client sends them without a conversion per call.
func (r *Store) RunArgs(ctx context.Context, s *Script, keys []string, args []any) (any, error) {
	as, ok := r.scripter(s).(anyScripter)
	if !ok {
		strs, err := argStrings(args)
		if err != nil {
			return nil, err
		}
		return r.Run(ctx, s, keys, strs)
	}
	return runScript(ctx, r, s,
		func(sha string) (any, error) { return as.evalShaAny(ctx, sha, keys, args) },
		func(src string) (any, error) { return as.evalAny(ctx, src, keys, args) })
}

// argStrings converts RunArgs's arguments to strings.
func argStrings(args []any) ([]string, error) {
	strs := make([]string, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case string:
			strs[i] = v
		case int64:
			strs[i] = strconv.FormatInt(v, 10)
		case int:
			strs[i] = strconv.Itoa(v)
		default:
			return nil, fmt.Errorf("backend: script argument %d has type %T", i, a)
		}
	}
	return strs, nil
}

// IntsScripter is an optional fast path of a Scripter for scripts whose
// reply is an array of integers: the reply comes back as []int64, with no
// []any of boxed values in between (each a heap allocation). An element
// that is a Redis nil is 0; a string element holding an integer is parsed.
// The rueidis adapter implements it; NOSCRIPT is reported as by EvalSha.
type IntsScripter interface {
	EvalShaInts(ctx context.Context, sha1 string, keys []string, args []string) ([]int64, error)
	EvalInts(ctx context.Context, src string, keys []string, args []string) ([]int64, error)
}

// intsAnyScripter is implemented by Scripters that read an array of
// integers straight into []int64 from arguments in go-redis's own form (the
// go-redis adapter, on a client of a go-redis type).
type intsAnyScripter interface {
	evalShaInts(ctx context.Context, sha string, keys []string, args []any) ([]int64, error)
	evalInts(ctx context.Context, src string, keys []string, args []any) ([]int64, error)
}

// RunInts is RunArgs for a script whose reply is an array of integers, of
// want elements (any number when want < 0): ReplyInts of RunArgs's reply, or
// the Scripter's integer fast path when it has one (IntsScripter, or the
// go-redis adapter's own).
func (r *Store) RunInts(ctx context.Context, s *Script, keys []string, args []any, want int) ([]int64, error) {
	var ints []int64
	var err error
	switch is := r.scripter(s).(type) {
	case intsAnyScripter:
		ints, err = runScript(ctx, r, s,
			func(sha string) ([]int64, error) { return is.evalShaInts(ctx, sha, keys, args) },
			func(src string) ([]int64, error) { return is.evalInts(ctx, src, keys, args) })
	case IntsScripter:
		strs, serr := argStrings(args)
		if serr != nil {
			return nil, serr
		}
		ints, err = runScript(ctx, r, s,
			func(sha string) ([]int64, error) { return is.EvalShaInts(ctx, sha, keys, strs) },
			func(src string) ([]int64, error) { return is.EvalInts(ctx, src, keys, strs) })
	default:
		reply, rerr := r.RunArgs(ctx, s, keys, args)
		if rerr != nil {
			return nil, rerr
		}
		return ReplyInts(reply, want)
	}
	if err != nil {
		return nil, err
	}
	if want >= 0 && len(ints) != want {
		return nil, fmt.Errorf("backend: script reply has %d elements, want %d", len(ints), want)
	}
	return ints, nil
}

func (r *Store) wrap(ctx context.Context, err error) error {
	if ctxErr := contextCause(ctx, err); ctxErr != nil && !errors.Is(err, ctxErr) {
		return fmt.Errorf("backend: redis: %w", errors.Join(err, ctxErr))
	}
	return fmt.Errorf("backend: redis: %w", err)
}

// ReplyInts converts a script reply that is an array of integers.
func ReplyInts(reply any, want int) ([]int64, error) {
	arr, ok := reply.([]any)
	if !ok {
		return nil, fmt.Errorf("backend: unexpected script reply %T", reply)
	}
	if want >= 0 && len(arr) != want {
		return nil, fmt.Errorf("backend: script reply has %d elements, want %d", len(arr), want)
	}
	out := make([]int64, len(arr))
	for i, v := range arr {
		switch x := v.(type) {
		case int64:
			out[i] = x
		case string:
			n, err := strconv.ParseInt(x, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("backend: script reply element %d: %w", i, err)
			}
			out[i] = n
		case nil:
			out[i] = 0
		default:
			return nil, fmt.Errorf("backend: script reply element %d is %T", i, v)
		}
	}
	return out, nil
}
