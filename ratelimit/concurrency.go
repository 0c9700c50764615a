package ratelimit

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"
	"time"
	"unsafe"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/internal/memstore"
	"github.com/floodgate-dev/floodgate/internal/redisstore"
	"github.com/floodgate-dev/floodgate/internal/unwrap"
)

// Concurrency limits how many holders of a key may be active at once: nginx's
// limit_conn, Stripe's concurrent-requests limiter. Each admitted holder gets a
// lease of length Lease; a holder that dies without releasing stops counting
// when its lease ends, so Lease should exceed the longest expected hold.
// Limit 0 denies everything.
type Concurrency struct {
	Limit int64
	Lease time.Duration
}

// ConcurrencyLimiter admits at most Limit concurrent holders per key. Create
// it with NewConcurrency; it is safe for concurrent use.
//
// The leases of a key are what is counted, whatever Limit and Lease: every
// ConcurrencyLimiter of one backend sees the same leases of a key, so one
// rebuilt with a new Limit (a config reload) keeps the live leases, and a
// lowered Limit admits nobody until enough of them end.
//
// On the Memory backend its leases are never evicted to respect the memory
// bound (backend.WithMaxBytes): forgetting a held lease would admit more than
// Limit holders. They count towards the bound, and a key's state goes when its
// last lease has ended and the janitor sweeps it.
type ConcurrencyLimiter struct {
	limit int64
	lease int64 // µs
	id    string

	mem   *memstore.Table
	redis *redisstore.Store
}

//go:embed lua/concurrency.lua
var luaConcurrency string

var concurrencyScript = redisstore.NewScript(luaConcurrency)

// NewConcurrency returns a ConcurrencyLimiter; it fails with an error naming
// the field when Limit < 0 or Lease is not a positive whole number of
// microseconds.
func NewConcurrency(b backend.Backend, c Concurrency) (*ConcurrencyLimiter, error) {
	if b == nil {
		return nil, errors.New("ratelimit: backend is nil")
	}
	if err := nonNegative("Concurrency", "Limit", c.Limit); err != nil {
		return nil, err
	}
	lease, err := micros("Concurrency", "Lease", c.Lease)
	if err != nil {
		return nil, err
	}
	cl := &ConcurrencyLimiter{limit: c.Limit, lease: lease}
	cl.id = "c"
	switch b := b.(type) {
	case *backend.Memory:
		cl.mem = unwrap.Memory(b).Table("concurrency")
	case *backend.Redis:
		cl.redis = unwrap.Redis(b)
	default:
		return nil, fmt.Errorf("ratelimit: unsupported backend %T", b)
	}
	return cl, nil
}

// Acquire takes a slot for key when fewer than Limit leases are live. When
// admitted, release gives the slot back; it is idempotent and safe to call
// after the lease expired (it then does nothing). When denied, release is a
// no-op and r.RetryAfter is the time until the earliest live lease expires (an
// upper bound: holders usually release sooner), or < 0 when Limit is 0.
// r.Remaining counts the free slots after the call; r.ResetAfter is the time
// until every live lease has expired. A key of any length is limited (see
// Keys in the package doc); the empty key is refused with
// backend.ErrEmptyKey.
func (c *ConcurrencyLimiter) Acquire(ctx context.Context, key string) (release func(context.Context) error, r Result, err error) {
	noop := func(context.Context) error { return nil }
	key, err = storeKey(key)
	if err != nil {
		return noop, Result{}, err
	}
	if err := ctx.Err(); err != nil {
		return noop, Result{}, err
	}
	id := newLeaseID()
	var v verdict
	if c.mem != nil {
		v = c.acquireMemory(key, id)
	} else {
		reply, err := c.redis.Run(ctx, concurrencyScript, []string{c.redis.Key(key, c.id)},
			[]string{c.redis.NowArg(), "a", id, strconv.FormatInt(c.limit, 10), strconv.FormatInt(c.lease, 10)})
		if err != nil {
			return noop, Result{}, fmt.Errorf("ratelimit: %w", err)
		}
		ints, err := redisstore.ReplyInts(reply, 4)
		if err != nil {
			return noop, Result{}, fmt.Errorf("ratelimit: %w", err)
		}
		v = verdict{status: ints[0], remaining: ints[1], retry: ints[2], reset: ints[3]}
	}
	r = Result{
		Allowed:    v.status == statusAllowed,
		Limit:      c.limit,
		Remaining:  v.remaining,
		ResetAfter: time.Duration(v.reset) * time.Microsecond,
	}
	switch v.status {
	case statusNever:
		r.RetryAfter = -1
	case statusDenied:
		r.RetryAfter = time.Duration(v.retry) * time.Microsecond
	}
	if !r.Allowed {
		return noop, r, nil
	}
	var once sync.Once
	var relErr error
	release = func(ctx context.Context) error {
		once.Do(func() { relErr = c.release(ctx, key, id) })
		return relErr
	}
	return release, r, nil
}

func (c *ConcurrencyLimiter) release(ctx context.Context, key, id string) error {
	if c.mem != nil {
		sh := c.mem.Shard(key)
		sh.Lock()
		defer sh.Unlock()
		if e := sh.Get(key); e != nil {
			st := e.Value.(*leaseSet)
			st.remove(id)
		}
		return nil
	}
	_, err := c.redis.Run(ctx, concurrencyScript, []string{c.redis.Key(key, c.id)}, []string{"", "r", id})
	if err != nil {
		return fmt.Errorf("ratelimit: release: %w", err)
	}
	return nil
}

// leaseSet is the memory form of the lease sorted set.
type leaseSet struct {
	ids       []string
	deadlines []int64 // ascending, parallel to ids
}

// MemSize implements memstore.Sizer, so that the memory backend's statistics
// count the leases.
func (s *leaseSet) MemSize() int {
	n := memstore.AllocBytes(int(unsafe.Sizeof(*s))) +
		memstore.AllocBytes(cap(s.ids)*int(unsafe.Sizeof(""))) +
		memstore.AllocBytes(cap(s.deadlines)*8)
	for _, id := range s.ids {
		n += memstore.AllocBytes(len(id))
	}
	return n
}

func (s *leaseSet) remove(id string) {
	for i, x := range s.ids {
		if x == id {
			s.ids = append(s.ids[:i], s.ids[i+1:]...)
			s.deadlines = append(s.deadlines[:i], s.deadlines[i+1:]...)
			return
		}
	}
}

func (c *ConcurrencyLimiter) acquireMemory(key, id string) verdict {
	sh := c.mem.Shard(key)
	sh.Lock()
	defer sh.Unlock()
	now := sh.Now()
	e := sh.Get(key)
	if e == nil {
		e = &memstore.Entry{Value: &leaseSet{}}
		sh.Put(key, e)
	}
	st := e.Value.(*leaseSet)
	first := sort.Search(len(st.deadlines), func(i int) bool { return st.deadlines[i] > now })
	live := int64(len(st.deadlines) - first)
	var reset int64
	if live > 0 {
		reset = st.deadlines[len(st.deadlines)-1] - now
	}
	if c.limit < 1 {
		return verdict{status: statusNever, retry: -1, reset: reset}
	}
	if live >= c.limit {
		return verdict{statusDenied, c.limit - live, st.deadlines[first] - now, reset, 0}
	}
	st.ids = append(st.ids[:0], st.ids[first:]...)
	st.deadlines = append(st.deadlines[:0], st.deadlines[first:]...)
	deadline := now + c.lease
	i := sort.Search(len(st.deadlines), func(i int) bool { return st.deadlines[i] > deadline })
	st.ids = append(st.ids, "")
	st.deadlines = append(st.deadlines, 0)
	copy(st.ids[i+1:], st.ids[i:])
	copy(st.deadlines[i+1:], st.deadlines[i:])
	st.ids[i], st.deadlines[i] = id, deadline
	reset = max(reset, c.lease)
	e.Expires = max(e.Expires, deadline)
	return verdict{statusAllowed, c.limit - live - 1, 0, reset, 0}
}

func newLeaseID() string {
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
