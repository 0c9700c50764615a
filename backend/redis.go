package backend

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/internal/memstore"
	"github.com/floodgate-dev/floodgate/internal/redisstore"
	"github.com/floodgate-dev/floodgate/internal/unwrap"
)

func init() {
	unwrap.Set(
		func(b any) *memstore.Store {
			if m, ok := b.(*Memory); ok && m != nil {
				return m.s
			}
			return nil
		},
		func(b any) *redisstore.Store {
			if r, ok := b.(*Redis); ok && r != nil {
				return r.r
			}
			return nil
		})
}

// Redis runs primitives as Lua scripts on a Redis server: one EVALSHA per
// decision (EVAL when the server answers NOSCRIPT). Keys are
// "<prefix>:{<user key>}:<suffix>", so every key of one call shares a hash tag
// and a Cluster slot. Time comes from the server's TIME command unless a clock
// is injected with WithClock.
//
// A Redis is safe for concurrent use; it holds no state of its own besides the
// client and, once a primitive waits for a message, one pub/sub connection
// (see Close).
type Redis struct {
	r *redisstore.Store
}

// NewRedis returns a Redis backend over a go-redis client: *redis.Client,
// *redis.ClusterClient, a Sentinel failover client or a *redis.Ring, or a
// wrapper of the user's own. It returns an error, naming the problem, for a
// nil client and for invalid options (a prefix with braces); it does not
// contact Redis.
//
// Automatic pipelining: on a *redis.Client (a Sentinel failover client from
// redis.NewFailoverClient included) and on a *redis.ClusterClient, script
// calls go through the client's deferred autopipeliner
// (Client.AsyncAutoPipeline, EXPERIMENTAL in go-redis), so that the calls of
// concurrent goroutines share pipelines instead of each taking a connection
// for a round trip: with 64 goroutines each making one call after another,
// two to four times the decisions per second of plain calls, measured on
// one local Redis. A call that finds no other call of the backend under way
// is sent plain when the client has ContextTimeoutEnabled (otherwise alone
// in a pipeline, which waits on its context without a helper goroutine). The
// autopipeliner is the client's own, cached by go-redis and shared with any
// other user of the client (the first call's AutoPipelineOptions win: the
// client's Options.AutoPipelineOptions, or go-redis's defaults: ordered,
// one batch at a time); it is made on the first call and closes with the
// client. Each call waits for its reply or for its context, whichever comes
// first, whatever ContextTimeoutEnabled says: a call whose context ends
// returns its context's error at once, while its command, already queued,
// may still run (the batch runs to its end, bounded by ReadTimeout and
// WriteTimeout, and its retries are not cut short by the caller's context;
// see Retries for why that is safe). Errors stay per call: a script that
// fails fails only its own call, not the other calls of its batch; NOSCRIPT
// recovery and the Cluster reload below work as for plain calls, and a
// Cluster client's pipelines follow MOVED and ASK redirections themselves
// (up to MaxRedirects). If the client cannot give an autopipeliner (the
// client's AutoPipelineOptions are invalid, or it is closed), calls are
// plain, as they are on a *redis.Ring (which go-redis does not autopipeline)
// and on any other UniversalClient, such as a wrapper of the user's own:
// NewRedis never bypasses a wrapper to reach the client inside it.
// WithoutAutoPipeline turns it off: every call is then a plain call on the
// client, as before. The lock scripts are always plain calls: a lock's
// release and the next holder's acquire wait for each other, and a batch in
// flight would add its round trip to each.
//
// Deadlines: go-redis honours a context's deadline on the network only when
// the client is built with ContextTimeoutEnabled: true; otherwise a call to a
// hung server lasts its ReadTimeout (5s by default in go-redis v9.23). Set
// it: it costs nothing. For plain calls (see Automatic pipelining) on clients
// without it (a *redis.Client, *redis.ClusterClient or *redis.Ring whose
// options say so), every call with a cancellable context waits on the
// context in a helper goroutine, so the caller still gets an error when ctx
// ends; the command itself finishes in the background. Pipelined calls need
// no helper: they wait on their context themselves.
//
// Retries: go-redis resends a command whose reply did not arrive (a read
// timeout, a connection reset) up to MaxRetries times (3 by default), and the
// first copy may have run already: a lost reply does not mean a lost
// command. floodgate's scripts are written for it: every mutating call
// carries an ID that its resends repeat, and a script that sees its own call
// again answers as the first run did instead of acting twice (locks, the
// delay queue, idempotency, counters within their replay window). Rate
// limiters are the exception by design: a resent decision is decided again,
// so it may spend a second time; that can only deny more, never admit more
// than the rule allows (package ratelimit). With ContextTimeoutEnabled, the
// caller's deadline also ends the retries of a plain call. A call that still
// fails because its connection was closed under it (EOF, reset: a Redis that
// restarted under a pool, or under a batch in flight) is sent once more,
// while the caller's context lives, as a plain call on a connection the pool
// checks first; rueidisadapter does the same.
//
// Failover: on a *redis.ClusterClient, a call that fails with a network
// error, CLUSTERDOWN or TRYAGAIN makes the client reload its slot map
// (ClusterClient.ReloadState; go-redis runs at most one reload every 200 ms),
// so the slots of a dead master move to its promoted replica about when the
// Cluster promotes it, instead of at the next ClusterStateReloadInterval
// (60 s by default; leave it). During Redis's own failover window (about
// cluster-node-timeout) calls on that master's keys fail; keys on other
// masters are unaffected. A Sentinel failover client (redis.NewFailoverClient)
// follows Sentinel's switch-master messages by itself. Settings that matter:
// ContextTimeoutEnabled (true), MaxRetries (the default 3 is fine: see
// Retries), DialTimeout and ReadTimeout (how long a dead or hung node holds a
// call when the context has no deadline).
func NewRedis(c redis.UniversalClient, opts ...Option) (*Redis, error) {
	if c == nil {
		return nil, errors.New("backend: NewRedis: the redis.UniversalClient is nil")
	}
	cfg := newConfig(opts)
	if cfg.err != nil {
		return nil, cfg.err
	}
	s, direct := redisstore.GoRedis(c, !cfg.noAutoPipe)
	return &Redis{redisstore.New(s, direct, cfg.prefix, cfg.clock)}, nil
}

// Scripter is the contract of a Redis client adapter: the two ways of running
// a Lua script that floodgate needs. Package backend/rueidisadapter
// implements it for rueidis; an application whose Redis client is neither
// go-redis nor rueidis implements it to run floodgate on that client
// (NewRedisScripter). It stays public for that reason only: with go-redis,
// NewRedis takes the client itself, and a fault-injecting wrapper of a
// go-redis client is a redis.UniversalClient that NewRedis calls through.
//
// Replies must be normalised to int64, string, []any (nested alike) or nil for
// a Redis nil reply. An error whose text starts with "NOSCRIPT" means the
// script is not cached; the backend then retries with Eval. Pub/sub, with
// which Lock waiters are woken by a release, and an integer fast path are
// offered only by the adapters inside floodgate; on a Scripter of an
// application's own, waiters poll (lock.MaxPoll), with the same results.
type Scripter interface {
	EvalSha(ctx context.Context, sha1 string, keys []string, args []string) (any, error)
	Eval(ctx context.Context, src string, keys []string, args []string) (any, error)
}

// NewRedisScripter returns a Redis backend over any Scripter: the
// constructor of client adapters such as rueidisadapter.New, public so that
// adapters for other clients can be written (see Scripter). It returns an
// error for a nil Scripter and for invalid options.
func NewRedisScripter(s Scripter, opts ...Option) (*Redis, error) {
	if s == nil {
		return nil, errors.New("backend: NewRedisScripter: the Scripter is nil")
	}
	cfg := newConfig(opts)
	if cfg.err != nil {
		return nil, cfg.err
	}
	return &Redis{redisstore.New(s, nil, cfg.prefix, cfg.clock)}, nil
}

// Clock returns the injected clock, or nil when time comes from Redis TIME.
func (r *Redis) Clock() clock.Clock { return r.r.Clock() }

func (*Redis) sealed() {}

// Close closes the backend's pub/sub connection, if one was opened (by a
// primitive that waits for messages: lock waiters, delay queue workers,
// idempotency keys): waiting calls then fall back to polling, and the next
// wait opens a new connection. It does not close the Redis client, which
// stays the caller's. Close is idempotent; the backend stays usable.
func (r *Redis) Close() error { return r.r.Close() }
