// Package rueidisadapter runs floodgate's Redis backend over a
// github.com/redis/rueidis client instead of go-redis, so that a program that
// already uses rueidis does not need a second Redis client.
//
// The backend it returns behaves as the one from backend.NewRedis: the same
// keys, the same scripts (EVALSHA, then EVAL when the server answers
// NOSCRIPT) and the same reply values. Scripts go through Client.Do, which
// rueidis auto-pipelines: concurrent decisions share a few connections and are
// written to Redis in batches, with no connection taken from the blocking pool
// (unless the client was built with ClientOption.DisableAutoPipelining, which
// this package respects).
//
// Replies are normalised as the go-redis adapter's over RESP2: an integer is
// an int64, a simple or bulk string a string, an array (or set) a []any of the
// same kinds, a nil reply nil and an error reply a *rueidis.RedisError (in an
// array, as an element; at the top level, as the error) whose text is Redis's
// own, "ERR " included, so that a NOSCRIPT reply starts with "NOSCRIPT". Over
// RESP3, which rueidis speaks by default, a Lua true becomes int64(1) and a
// false nil, as over RESP2; a double becomes a float64 and a map a flat []any
// of keys and values, keys sorted.
//
// Retries: rueidis resends only read-only commands after a network error
// (ClientOption.DisableRetry turns that off), and EVALSHA is not one. This
// package resends a script call once, on a new connection, when the
// connection it went out on turned out to be closed (EOF, reset, broken
// pipe) and the caller's context is still live. That is the connection of
// a Redis that restarted while the client was idle: rueidis finds it closed
// only when the next call is sent on it, where go-redis's pool would have
// checked it before use. If Redis ran the script and then closed the
// connection before replying, the resend runs it a second time, as
// go-redis's resends (MaxRetries) do; floodgate's primitives are written for
// both that and a lost reply (see backend.NewRedis): a failed Lock holds
// nothing, a resent Add counts once, a resent decision can only deny more.
// Other errors, a timeout among them, are not resent.
//
// Throughput: when many goroutines decide at once and client and Redis
// share a few cores, build the client with ClientOption.MaxFlushDelay
// (rueidis suggests about 20µs): each write then gathers more commands, and
// both sides make fewer system calls per decision. On a 2-core VM it lifted
// floodgate's decisions/s by about 40% at 256 goroutines, for at most that
// much more latency per call (bench/results/issue15.md).
package rueidisadapter

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/internal/redisstore"
	"github.com/redis/rueidis"
)

// New returns a *backend.Redis that runs its scripts through c. It works with
// every client that rueidis.NewClient builds: standalone, Cluster and
// Sentinel. New fails on a nil client and on invalid options (a prefix with
// braces).
//
// The client stays the caller's: the backend never closes it.
func New(c rueidis.Client, opts ...backend.Option) (*backend.Redis, error) {
	if c == nil {
		return nil, errors.New("rueidisadapter: rueidis client is nil")
	}
	return backend.NewRedisScripter(scripter{c}, opts...)
}

// scripter implements backend.Scripter, the public contract of adapters,
// over a rueidis.Client, and the fast paths that only adapters inside
// floodgate can offer: redisstore.IntsScripter and redisstore.PubSubber.
type scripter struct{ c rueidis.Client }

// Cluster reports whether the client is a Cluster client.
func (s scripter) Cluster() bool { return s.c.Mode() == rueidis.ClientModeCluster }

var _ backend.Scripter = scripter{}

// EvalSha sends EVALSHA sha numkeys keys... args... through Do, so that it is
// auto-pipelined.
func (s scripter) EvalSha(ctx context.Context, sha string, keys []string, args []string) (any, error) {
	return normalise(s.do(ctx, true, sha, keys, args))
}

// Eval sends EVAL src numkeys keys... args... through Do.
func (s scripter) Eval(ctx context.Context, src string, keys []string, args []string) (any, error) {
	return normalise(s.do(ctx, false, src, keys, args))
}

var _ redisstore.IntsScripter = scripter{}

// EvalShaInts is EvalSha for a reply of integers: redisstore.IntsScripter.
func (s scripter) EvalShaInts(ctx context.Context, sha string, keys []string, args []string) ([]int64, error) {
	return ints(s.do(ctx, true, sha, keys, args))
}

// EvalInts is Eval for a reply of integers: redisstore.IntsScripter.
func (s scripter) EvalInts(ctx context.Context, src string, keys []string, args []string) ([]int64, error) {
	return ints(s.do(ctx, false, src, keys, args))
}

// do sends EVALSHA sha (evalSha) or EVAL src (payload) with keys and
// args, and sends it once more when the connection the first went out on
// was found closed (see Retries in the package documentation). The command
// is built again for the resend: rueidis may still hold the first one.
func (s scripter) do(ctx context.Context, evalSha bool, payload string, keys, args []string) (rueidis.RedisResult, error) {
	build := s.eval
	if evalSha {
		build = s.evalSha
	}
	cmd, err := build(payload, keys, args)
	if err != nil {
		return rueidis.RedisResult{}, err
	}
	res := s.c.Do(ctx, cmd)
	if !redisstore.ConnClosed(res.NonRedisError()) || ctx.Err() != nil {
		return res, nil
	}
	if cmd, err = build(payload, keys, args); err != nil {
		return rueidis.RedisResult{}, err
	}
	return s.c.Do(ctx, cmd), nil
}

// ints turns the result of Do into integers, errors as normalise does.
func ints(res rueidis.RedisResult, err error) ([]int64, error) {
	if err != nil {
		return nil, err
	}
	m, err := res.ToMessage()
	if err != nil {
		if rueidis.IsRedisNil(err) {
			return nil, nil
		}
		if _, ok := rueidis.IsRedisErr(err); ok && res.NonRedisError() == nil {
			return nil, redisError(&m)
		}
		return nil, err
	}
	vs, err := m.ToArray()
	if err != nil {
		return nil, fmt.Errorf("rueidisadapter: script reply is not an array: %w", err)
	}
	out := make([]int64, len(vs))
	for i := range vs {
		v := &vs[i]
		switch {
		case v.IsInt64():
			out[i], _ = v.ToInt64()
		case v.IsNil():
		default:
			if out[i], err = v.AsInt64(); err != nil {
				return nil, fmt.Errorf("rueidisadapter: script reply element %d: %w", i, err)
			}
		}
	}
	return out, nil
}

// evalSha builds the EVALSHA command. The builder appends the strings to a
// pooled command slice without copying them. A Cluster client's builder panics
// when keys hash to different slots; that becomes an error here, as go-redis
// gets CROSSSLOT from the server.
func (s scripter) evalSha(sha string, keys, args []string) (cmd rueidis.Completed, err error) {
	defer recoverSlot(&err)
	return s.c.B().Evalsha().Sha1(sha).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build(), nil
}

// eval builds the EVAL command, as evalSha.
func (s scripter) eval(src string, keys, args []string) (cmd rueidis.Completed, err error) {
	defer recoverSlot(&err)
	return s.c.B().Eval().Script(src).Numkeys(int64(len(keys))).Key(keys...).Arg(args...).Build(), nil
}

func recoverSlot(err *error) {
	if p := recover(); p != nil {
		*err = fmt.Errorf("rueidisadapter: CROSSSLOT keys of one script call must hash to the same cluster slot: %v", p)
	}
}

// normalise turns the result of Do into a backend.Scripter reply.
func normalise(res rueidis.RedisResult, err error) (any, error) {
	if err != nil {
		return nil, err
	}
	m, err := res.ToMessage()
	if err != nil {
		if rueidis.IsRedisNil(err) {
			return nil, nil
		}
		if _, ok := rueidis.IsRedisErr(err); ok && res.NonRedisError() == nil {
			return nil, redisError(&m)
		}
		return nil, err
	}
	return value(&m)
}

// value converts one reply message. An error reply becomes a
// *rueidis.RedisError value: normalise never passes a top-level one here, and
// in an array it is an element, as go-redis puts its RedisError there.
func value(m *rueidis.RedisMessage) (any, error) {
	switch {
	case m.IsInt64():
		return m.ToInt64()
	case m.IsString():
		return m.ToString()
	case m.IsArray():
		vs, err := m.ToArray()
		if err != nil {
			return nil, err
		}
		out := make([]any, len(vs))
		for i := range vs {
			if out[i], err = value(&vs[i]); err != nil {
				return nil, err
			}
		}
		return out, nil
	case m.IsNil():
		return nil, nil
	case m.IsBool():
		// Lua booleans over RESP3; RESP2 turns true into 1 and false into nil.
		if b, _ := m.ToBool(); b {
			return int64(1), nil
		}
		return nil, nil
	case m.IsFloat64():
		return m.ToFloat64()
	case m.IsMap():
		return flatMap(m)
	}
	if m.Error() != nil {
		return redisError(m), nil
	}
	// Verbatim strings and big numbers.
	return m.ToAny()
}

// flatMap converts a RESP3 map to the RESP2 shape, key1, value1, key2, ...,
// keys sorted since a map has no order.
func flatMap(m *rueidis.RedisMessage) (any, error) {
	kv, err := m.ToMap()
	if err != nil {
		return nil, err
	}
	keys := make([]string, 0, len(kv))
	for k := range kv {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := make([]any, 0, 2*len(kv))
	for _, k := range keys {
		v := kv[k]
		e, err := value(&v)
		if err != nil {
			return nil, err
		}
		out = append(out, k, e)
	}
	return out, nil
}

// redisError returns the error reply m as a *rueidis.RedisError with Redis's
// text untouched. (RedisMessage.Error drops a leading "ERR ", which go-redis
// keeps; RedisError is defined as a RedisMessage, so the conversion is exact.)
func redisError(m *rueidis.RedisMessage) error {
	c := *m
	return (*rueidis.RedisError)(&c)
}
