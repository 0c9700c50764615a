package redisstore

import (
	"context"
	"errors"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/redis/go-redis/v9"
)

// GoRedis returns the Scripters of a backend.Redis over the go-redis client
// c (see backend.NewRedis, whose documentation describes the behaviour): s
// for every script, and direct for the scripts made Direct, or nil when s
// runs them too. With autoPipeline, calls on a *redis.Client or a
// *redis.ClusterClient go through the client's deferred autopipeliner, and
// direct is a Scripter of plain calls. c must not be nil.
func GoRedis(c redis.UniversalClient, autoPipeline bool) (s, direct Scripter) {
	g := goRedis{c: c, guard: !contextTimeoutEnabled(c), known: knownClient(c)}
	if autoPipeline {
		g.ap = newAutoPipe(c)
	}
	if !g.known {
		return g, nil
	}
	if g.ap != nil {
		plain := g
		plain.ap = nil
		direct = goRedisInts{plain}
	}
	return goRedisInts{g}, direct
}

// knownClient reports whether c is of a go-redis client type (not a
// wrapper), on which floodgate may build and send commands of its own.
func knownClient(c redis.UniversalClient) bool {
	switch c.(type) {
	case *redis.Client, *redis.ClusterClient, *redis.Ring:
		return true
	}
	return false
}

// newAutoPipe returns the source of c's deferred autopipeliner, or nil when
// c is not a client type that offers one. The type is matched exactly: a
// user's wrapper is called as it is, never bypassed.
func newAutoPipe(c redis.UniversalClient) *autoPipe {
	switch c := c.(type) {
	case *redis.Client:
		return &autoPipe{get: c.AsyncAutoPipeline}
	case *redis.ClusterClient:
		return &autoPipe{get: c.AsyncAutoPipeline}
	}
	return nil
}

// autoPipe holds a client's deferred autopipeliner, got on first use.
// go-redis caches it per client; it is the client's, so floodgate never
// closes it. Should it be closed (by its user, or with the client), the next
// call asks the client again; if the client cannot give one, calls are plain
// from then on.
type autoPipe struct {
	get      func() (*redis.AutoPipeliner, error)
	cur      atomic.Pointer[redis.AutoPipeliner]
	off      atomic.Bool
	inFlight atomic.Int64 // calls of this backend under way
}

// pipeliner returns the autopipeliner for a call, or nil for a plain call,
// and done, to call when the call ends. A call that finds no other call of
// this backend under way is plain when the client honours contexts itself
// (ContextTimeoutEnabled): it has nothing to share a pipeline with, and the
// autopipeliner's hand-offs between goroutines would only add latency
// (about twice a plain call's, measured with one goroutine on a local Redis).
func (g goRedis) pipeliner() (*redis.AutoPipeliner, func()) {
	if g.ap == nil {
		return nil, noop
	}
	if g.ap.inFlight.Add(1) == 1 && !g.guard {
		return nil, g.ap.done
	}
	return g.ap.pipeliner(), g.ap.done
}

func noop() {}

func (a *autoPipe) done() { a.inFlight.Add(-1) }

// pipeliner returns the autopipeliner, or nil for a plain call.
func (a *autoPipe) pipeliner() *redis.AutoPipeliner {
	if a == nil || a.off.Load() {
		return nil
	}
	if ap := a.cur.Load(); ap != nil && !ap.IsClosed() {
		return ap
	}
	ap, err := a.get()
	if err != nil {
		a.off.Store(true)
		return nil
	}
	a.cur.Store(ap)
	return ap
}

func contextTimeoutEnabled(c redis.UniversalClient) bool {
	switch c := c.(type) {
	case *redis.Client:
		return c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		return c.Options().ContextTimeoutEnabled
	}
	return false
}

type goRedis struct {
	c     redis.UniversalClient
	guard bool      // plain calls wait on ctx in a goroutine: the client ignores deadlines
	ap    *autoPipe // nil: every call is plain
	known bool      // c is a go-redis client type, not a wrapper: commands may be built here
}

// goRedisInts is goRedis on a client of a go-redis type, which also
// offers Store.RunInts its IntSliceCmd path. A wrapper of the user's own
// gets goRedis alone, so that its EvalSha and Eval methods see every call.
type goRedisInts struct{ goRedis }

// Cluster reports whether the client is a Cluster client.
func (g goRedis) Cluster() bool {
	_, ok := g.c.(*redis.ClusterClient)
	return ok
}

func (g goRedis) EvalSha(ctx context.Context, sha string, keys []string, args []string) (any, error) {
	return g.evalStrings(ctx, "evalsha", sha, keys, args)
}

func (g goRedis) Eval(ctx context.Context, src string, keys []string, args []string) (any, error) {
	return g.evalStrings(ctx, "eval", src, keys, args)
}

// evalStrings is evalCmd with string arguments, which a client of a
// go-redis type gets as one command built in place: no []any of the
// arguments first.
func (g goRedis) evalStrings(ctx context.Context, name, payload string, keys []string, args []string) (any, error) {
	if !g.known {
		return g.evalCmd(ctx, name, payload, keys, strArgs(args))
	}
	cmdArgs := evalArgs(name, payload, keys, nil, len(args))
	for _, a := range args {
		cmdArgs = append(cmdArgs, a)
	}
	return g.run(ctx, cmdArgs, len(keys) > 0)
}

// evalShaAny and evalAny take go-redis's own argument form, so that
// Store.RunArgs passes pre-built arguments without converting them.
func (g goRedis) evalShaAny(ctx context.Context, sha string, keys []string, args []any) (any, error) {
	return g.evalCmd(ctx, "evalsha", sha, keys, args)
}

func (g goRedis) evalAny(ctx context.Context, src string, keys []string, args []any) (any, error) {
	return g.evalCmd(ctx, "eval", src, keys, args)
}

// evalCmd runs EVALSHA or EVAL (name) with a reply of any shape. A client
// of unknown type (a user's wrapper) gets the call through its own EvalSha
// or Eval method, never bypassed.
func (g goRedis) evalCmd(ctx context.Context, name, payload string, keys []string, args []any) (any, error) {
	if !g.known {
		call := func() (any, error) {
			if name == "evalsha" {
				return g.c.EvalSha(ctx, payload, keys, args...).Result()
			}
			return g.c.Eval(ctx, payload, keys, args...).Result()
		}
		if !g.guard || ctx.Done() == nil {
			return g.followTopology(normal(call()))
		}
		return g.followTopology(g.guarded(ctx, call))
	}
	return g.run(ctx, evalArgs(name, payload, keys, args, 0), len(keys) > 0)
}

// run sends a command built by evalArgs, with a reply of any shape.
func (g goRedis) run(ctx context.Context, cmdArgs []any, keyed bool) (any, error) {
	cmd, err := process(ctx, g, func() *redis.Cmd { return redis.NewCmd(ctx, cmdArgs...) }, keyed)
	if err != nil {
		return nil, err
	}
	return normal(cmd.Result())
}

// evalShaInts and evalInts run a script whose reply is an array of
// integers into an IntSliceCmd, which reads the reply straight into
// []int64 (a Redis nil element is 0, an integer in a string is parsed)
// with no boxed []any in between. Store.RunInts uses them when the client
// is of a go-redis type (goRedisInts), never on a wrapper.
func (g goRedisInts) evalShaInts(ctx context.Context, sha string, keys []string, args []any) ([]int64, error) {
	return g.evalIntsCmd(ctx, "evalsha", sha, keys, args)
}

func (g goRedisInts) evalInts(ctx context.Context, src string, keys []string, args []any) ([]int64, error) {
	return g.evalIntsCmd(ctx, "eval", src, keys, args)
}

func (g goRedis) evalIntsCmd(ctx context.Context, name, payload string, keys []string, args []any) ([]int64, error) {
	cmdArgs := evalArgs(name, payload, keys, args, 0)
	cmd, err := process(ctx, g, func() *redis.IntSliceCmd { return redis.NewIntSliceCmd(ctx, cmdArgs...) }, len(keys) > 0)
	if err != nil {
		return nil, err
	}
	return cmd.Val(), nil
}

// evalArgs builds EVALSHA or EVAL (name) as go-redis's own Eval does, the
// first key at position 3, so that a Cluster client routes it by its slot;
// room is left for more arguments to append.
func evalArgs(name, payload string, keys []string, args []any, more int) []any {
	cmdArgs := make([]any, 3+len(keys), 3+len(keys)+len(args)+more)
	cmdArgs[0] = name
	cmdArgs[1] = payload
	cmdArgs[2] = len(keys)
	for i, k := range keys {
		cmdArgs[3+i] = k
	}
	return append(cmdArgs, args...)
}

// process is the one way a command built by evalArgs is sent on a client
// of a go-redis type: build's command goes through the deferred
// autopipeliner when there is one and other calls are under way, else plain
// (waiting on ctx in a helper goroutine when the client ignores deadlines).
// It returns the command that answered and its error, nil for a Redis nil
// reply; when the error is not nil the command's value must not be read
// (after ctx ends, the command may still run and races the read).
//
// A call whose connection turned out to be closed under it (ConnClosed: the
// EOF of a Redis that restarted) is sent once more, while ctx lives, as a
// plain call: a command built anew, on a connection the pool checks before
// use. go-redis resends such a call on its own only while it has retries
// left, and a batch of the autopipeliner in flight when Redis went away, or
// a pool full of connections to the old process, can spend them all. The
// resend is what the Retries section of backend.NewRedis allows: a script
// that already ran answers its own call again, or only denies more.
func process[C redis.Cmder](ctx context.Context, g goRedis, build func() C, keyed bool) (C, error) {
	cmd := build()
	err := g.send(ctx, cmd, keyed, true)
	if ConnClosed(err) && ctx.Err() == nil {
		cmd = build()
		err = g.send(ctx, cmd, keyed, false)
	}
	return cmd, err
}

// send sends cmd once for process; pipelined says that it may go through
// the autopipeliner.
func (g goRedis) send(ctx context.Context, cmd redis.Cmder, keyed, pipelined bool) error {
	if keyed {
		cmd.SetFirstKeyPos(3)
	}
	if pipelined {
		ap, done := g.pipeliner()
		defer done()
		if ap != nil {
			if err := ctx.Err(); err != nil {
				return err // not sent: once queued, a command runs
			}
			_, err := g.followPipelined(normal(nil, ap.Submit(ctx, cmd).WaitContext(ctx)))
			return err
		}
	}
	if !g.guard || ctx.Done() == nil {
		_, err := g.followTopology(normal(nil, g.c.Process(ctx, cmd)))
		return err
	}
	_, err := g.followTopology(g.guarded(ctx, func() (any, error) { return nil, g.c.Process(ctx, cmd) }))
	return err
}

// followTopology asks a Cluster client to reload its slot map when a call
// failed in a way a topology change explains: the node refused or dropped
// the connection, timed out, or answered CLUSTERDOWN or TRYAGAIN. go-redis
// reloads on MOVED by itself but, on its own, only every
// ClusterStateReloadInterval (60 s by default) after a master dies, so its
// slots would stay on the dead node for up to a minute after a replica took
// them over. ReloadState is lazy and coalesced by go-redis (one reload at a
// time, at least 200 ms apart), so a burst of failures costs one CLUSTER
// SLOTS every 200 ms at most, while the failure lasts.
func (g goRedis) followTopology(v any, err error) (any, error) {
	if err == nil {
		return v, nil
	}
	cc, ok := g.c.(*redis.ClusterClient)
	if !ok || !topologyError(err) {
		return v, err
	}
	cc.ReloadState(context.Background())
	return v, err
}

// followPipelined is followTopology for a pipelined call, which also takes
// a deadline reached while waiting as a sign that the node may have changed.
// A pipelined batch runs on go-redis's own context, not the caller's: on a
// dead or hung master it spends its dial retries and redirections there,
// and the callers waiting on it see their deadlines, not the network errors
// that make followTopology reload the slot map. A caller's cancellation
// (context.Canceled) says nothing of the node and reloads nothing.
func (g goRedis) followPipelined(v any, err error) (any, error) {
	if errors.Is(err, context.DeadlineExceeded) {
		if cc, ok := g.c.(*redis.ClusterClient); ok {
			cc.ReloadState(context.Background())
		}
		return v, err
	}
	return g.followTopology(v, err)
}

// topologyError reports whether err may mean that the key's node changed:
// a network error or a Cluster state error, not a script's own error.
func topologyError(err error) bool {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return false // the caller's context: says nothing of the node
	}
	var ne net.Error
	if errors.As(err, &ne) || ConnClosed(err) || errors.Is(err, syscall.ECONNREFUSED) {
		return true
	}
	msg := err.Error()
	return strings.HasPrefix(msg, "CLUSTERDOWN") || strings.HasPrefix(msg, "TRYAGAIN") ||
		strings.Contains(msg, "connection refused") || strings.Contains(msg, "connection reset")
}

// ConnClosed reports whether err says that the connection a call went out
// on was closed under it (by the server: EOF; reset; a broken pipe; closed
// here), not that the call timed out or was refused. Both Redis adapters
// judge failures by it: go-redis's for its Cluster topology, rueidis's to
// resend a call once on a new connection.
func ConnClosed(err error) bool {
	return err != nil && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed))
}

type reply struct {
	v   any
	err error
}

// guarded runs f in a goroutine and returns when it does or when ctx ends.
func (g goRedis) guarded(ctx context.Context, f func() (any, error)) (any, error) {
	done := make(chan reply, 1)
	go func() {
		v, err := f()
		done <- reply{v, err}
	}()
	select {
	case r := <-done:
		return normal(r.v, r.err)
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func strArgs(args []string) []any {
	out := make([]any, len(args))
	for i, a := range args {
		out[i] = a
	}
	return out
}

func normal(v any, err error) (any, error) {
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	return v, err
}
