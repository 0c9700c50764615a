package backend

import (
	"context"
	"errors"

	"github.com/redis/go-redis/v9"
)

// NewRedis returns a Redis backend over a go-redis client: *redis.Client,
// *redis.ClusterClient, a Sentinel failover client or a *redis.Ring. It panics
// on nothing; invalid options (a prefix with braces) and a nil client make it
// return a backend whose every call fails — use NewRedisE to see the error at
// construction.
func NewRedis(c redis.UniversalClient, opts ...Option) *Redis {
	r, err := NewRedisE(c, opts...)
	if err != nil {
		return &Redis{s: errScripter{err}}
	}
	return r
}

// NewRedisE is NewRedis that reports invalid options and a nil client.
func NewRedisE(c redis.UniversalClient, opts ...Option) (*Redis, error) {
	if c == nil {
		return nil, errors.New("backend: Redis client is nil")
	}
	return NewRedisScripter(goRedis{c}, opts...)
}

type goRedis struct{ c redis.UniversalClient }

func (g goRedis) EvalSha(ctx context.Context, sha string, keys []string, args []string) (any, error) {
	return normal(g.c.EvalSha(ctx, sha, keys, strArgs(args)...).Result())
}

func (g goRedis) Eval(ctx context.Context, src string, keys []string, args []string) (any, error) {
	return normal(g.c.Eval(ctx, src, keys, strArgs(args)...).Result())
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

type errScripter struct{ err error }

func (e errScripter) EvalSha(context.Context, string, []string, []string) (any, error) {
	return nil, e.err
}
func (e errScripter) Eval(context.Context, string, []string, []string) (any, error) {
	return nil, e.err
}
