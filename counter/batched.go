package counter

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-dev/floodgate/internal/callid"
)

// ErrClosed is returned by Batched.Add after Close.
var ErrClosed = errors.New("counter: Batched is closed")

// Batched adds to a Counter through a local buffer, for keys too hot for a
// round trip per increment (page views, bytes served). Add only adds to an
// in-process sum per key; a background goroutine sends each key's sum to the
// Counter with one Add every flush interval, and Close sends what is left.
// It is safe for concurrent use; create it with NewBatched.
//
// Durability: a graceful shutdown (Close returning nil) loses nothing. A
// crash of the process loses the increments added since the last successful
// flush of their key — at most about one flush interval's worth (plus the
// sums of keys whose flush was failing at the time). A sum that would
// overflow the stored value (ErrOverflow) can never be applied: it is
// dropped and reported.
//
// Each sum counts once. A flush of a key that fails with a store or context
// error may still have been applied: the request can reach Redis and run
// after the caller gave up on it (a stalled server, a lost reply, a command
// still queued in the client when the server comes back). Such a sum is kept
// in doubt, apart from the key's newer Adds, and resent as the same call —
// same delta, same replay ID — at every flush until one send succeeds; the
// Counter's replay record (see ReplayWindow) makes the sends after the first
// that ran count nothing. Newer Adds of that key wait for it. The bound: a
// sum is counted twice only when the Counter has ReplayWindow(0), or when
// the resend that succeeds reaches Redis more than the replay window (one
// minute by default) after an earlier send of it ran.
//
// What readers see: Counter.Get returns the stored value, which lags the
// Adds made through a Batched by up to one flush interval. Window and TTL
// counters take the time of the flush, not of the Add: an increment made just
// before a window ends may be counted in the next one.
type Batched struct {
	c       *Counter
	every   time.Duration
	timeout time.Duration
	maxKeys int
	onError func(error)

	// mu guards pending, doubt and closed. Add holds it for reading while it
	// adds to a key's sum, so a flush, which swaps pending under the write
	// lock, sees every sum complete.
	mu      sync.RWMutex
	pending map[string]*atomic.Int64
	doubt   map[string]sent // sums sent whose outcome is unknown: resent as they were
	closed  bool

	kick     chan struct{} // early flush: pending reached maxKeys
	stop     chan struct{}
	life     context.Context // cancelled by Close when its ctx ends: aborts a background flush
	cancel   context.CancelFunc
	done     chan struct{}
	stopOnce sync.Once
}

// sent is one Add of a flush: a key's sum and the replay ID it was sent with.
type sent struct {
	delta int64
	id    string
}

// BatchOption configures a Batched.
type BatchOption func(*batchConfig)

type batchConfig struct {
	timeout time.Duration
	maxKeys int
	onError func(error)
}

// FlushTimeout bounds each background flush (default 5s). Keys not stored
// when it expires stay pending for the next flush. d must be > 0.
func FlushTimeout(d time.Duration) BatchOption { return func(c *batchConfig) { c.timeout = d } }

// MaxKeys starts a flush early when this many distinct keys are pending,
// which bounds the buffer when keys are many (default 10000; 0 disables the
// early flush). After a failed flush, early flushes wait for the next
// interval, so a store outage is not retried in a tight loop. n must be >= 0.
func MaxKeys(n int) BatchOption { return func(c *batchConfig) { c.maxKeys = n } }

// OnError receives the errors of background flushes (default: none; the
// sums are retried regardless). It is called from the flushing goroutine and
// must not call Close.
func OnError(f func(error)) BatchOption { return func(c *batchConfig) { c.onError = f } }

// NewBatched returns a Batched that flushes into c every flushEvery. It
// starts one goroutine, which Close stops. It fails when c is nil, when
// flushEvery <= 0, and on an invalid option, with an error naming it.
func NewBatched(c *Counter, flushEvery time.Duration, opts ...BatchOption) (*Batched, error) {
	if c == nil {
		return nil, errors.New("counter: NewBatched: counter is nil")
	}
	if flushEvery <= 0 {
		return nil, fmt.Errorf("counter: NewBatched: flushEvery must be > 0, got %v", flushEvery)
	}
	cfg := batchConfig{timeout: 5 * time.Second, maxKeys: 10000}
	for _, o := range opts {
		if o != nil {
			o(&cfg)
		}
	}
	if cfg.timeout <= 0 {
		return nil, fmt.Errorf("counter: FlushTimeout must be > 0, got %v", cfg.timeout)
	}
	if cfg.maxKeys < 0 {
		return nil, fmt.Errorf("counter: MaxKeys must be >= 0, got %d", cfg.maxKeys)
	}
	b := &Batched{
		c:       c,
		every:   flushEvery,
		timeout: cfg.timeout,
		maxKeys: cfg.maxKeys,
		onError: cfg.onError,
		pending: make(map[string]*atomic.Int64),
		doubt:   make(map[string]sent),
		kick:    make(chan struct{}, 1),
		stop:    make(chan struct{}),
		done:    make(chan struct{}),
	}
	b.life, b.cancel = context.WithCancel(context.Background())
	go b.run()
	return b, nil
}

// Add adds delta to the local sum of key; it never blocks on the network.
// A key of any length is summed and flushed into the counter Counter.Add
// counts it in (see Keys in the package doc). Errors: backend.ErrEmptyKey
// for the empty key, ErrOverflow when the pending sum of key would leave
// ±MaxValue (nothing is added), and ErrClosed after Close. An Add that
// returns nil is flushed by the next flush or by Close.
func (b *Batched) Add(key string, delta int64) error {
	key, err := storeKey(key) // a long key is pending, and flushed, as its digest
	if err != nil {
		return err
	}
	if delta > MaxValue || delta < -MaxValue {
		return fmt.Errorf("%w: delta %d", ErrOverflow, delta)
	}
	b.mu.RLock()
	if b.closed {
		b.mu.RUnlock()
		return ErrClosed
	}
	p := b.pending[key]
	if p == nil {
		b.mu.RUnlock()
		return b.addNew(key, delta)
	}
	err = addSum(p, delta)
	b.mu.RUnlock()
	return err
}

// addNew is Add for a key that was not pending when Add looked.
func (b *Batched) addNew(key string, delta int64) error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return ErrClosed
	}
	p := b.pending[key]
	if p == nil {
		p = new(atomic.Int64)
		b.pending[key] = p
	}
	err := addSum(p, delta)
	full := b.maxKeys > 0 && len(b.pending) >= b.maxKeys
	b.mu.Unlock()
	if full {
		select {
		case b.kick <- struct{}{}:
		default:
		}
	}
	return err
}

// addSum adds delta to *p unless the sum would leave ±MaxValue.
func addSum(p *atomic.Int64, delta int64) error {
	if v := p.Add(delta); !inRange(v) {
		p.Add(-delta)
		return fmt.Errorf("%w: pending sum %d%+d", ErrOverflow, v-delta, delta)
	}
	return nil
}

// Flush sends every pending sum to the Counter now, one Add per key (up to 8
// at a time), and returns when all are sent or ctx ends. A sum in doubt
// (see Batched) is resent first, as it was sent before; the key's newer sum
// goes in the same flush once that resend succeeds. Sums that fail with a
// store or context error stay pending, in doubt; the error says how many
// keys did not make it. Flush may be called at any time, also after Close.
func (b *Batched) Flush(ctx context.Context) error {
	b.mu.Lock()
	snap, doubt := b.pending, b.doubt
	if len(snap) == 0 && len(doubt) == 0 {
		b.mu.Unlock()
		return nil
	}
	b.pending = make(map[string]*atomic.Int64, len(snap))
	b.doubt = make(map[string]sent, len(doubt))
	b.mu.Unlock()

	type item struct {
		key   string
		again sent  // the sum in doubt, resent first; delta 0 if none
		delta int64 // the newer sum, sent with a new ID
	}
	work := make(chan item)
	var (
		mu       sync.Mutex
		failed   int
		dropped  int
		firstErr error
		wg       sync.WaitGroup
	)
	report := func(key string, err error) {
		mu.Lock()
		defer mu.Unlock()
		if errors.Is(err, ErrOverflow) {
			dropped++
			err = fmt.Errorf("dropped the sum of %q: %w", key, err)
		} else {
			failed++
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	keys := len(snap)
	for k := range doubt {
		if snap[k] == nil {
			keys++
		}
	}
	for range min(8, keys) {
		wg.Go(func() {
			for it := range work {
				if it.again.delta != 0 {
					if err := b.send(ctx, it.key, it.again); err != nil {
						report(it.key, err)
						if !errors.Is(err, ErrOverflow) {
							b.putBack(it.key, it.delta, it.again)
							continue
						}
					}
				}
				if it.delta == 0 {
					continue
				}
				s := sent{it.delta, callid.New()}
				if err := b.send(ctx, it.key, s); err != nil {
					report(it.key, err)
					if !errors.Is(err, ErrOverflow) {
						b.putBack(it.key, 0, s)
					}
				}
			}
		})
	}
	for k, d := range doubt {
		var delta int64
		if p := snap[k]; p != nil {
			delta = p.Load()
			delete(snap, k)
		}
		work <- item{key: k, again: d, delta: delta}
	}
	for k, p := range snap {
		if d := p.Load(); d != 0 {
			work <- item{key: k, delta: d}
		}
	}
	close(work)
	wg.Wait()
	if firstErr == nil {
		return nil
	}
	return fmt.Errorf("counter: flush: %d of %d keys kept pending for the next flush, %d dropped: %w", failed, keys, dropped, firstErr)
}

// send makes one Add of a flush. A failed send that may have been applied is
// what the caller keeps in doubt: any error but ErrOverflow, which the script
// returns having changed nothing.
func (b *Batched) send(ctx context.Context, key string, s sent) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	_, err := b.c.do(ctx, key, s.delta, s.id)
	return err
}

// putBack returns what a flush could not store, also after Close: delta to
// the key's pending sum, and the sum in doubt.
func (b *Batched) putBack(key string, delta int64, doubt sent) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.doubt[key] = doubt
	if delta == 0 {
		return
	}
	p := b.pending[key]
	if p == nil {
		p = new(atomic.Int64)
		b.pending[key] = p
	}
	p.Add(delta)
}

// Pending returns the number of keys with a sum not yet flushed (in doubt
// included), not counting the sums of a flush in progress.
func (b *Batched) Pending() int {
	b.mu.RLock()
	defer b.mu.RUnlock()
	n := len(b.pending)
	for k := range b.doubt {
		if b.pending[k] == nil {
			n++
		}
	}
	return n
}

func (b *Batched) run() {
	defer close(b.done)
	t := time.NewTicker(b.every)
	defer t.Stop()
	kick := b.kick
	for {
		select {
		case <-b.stop:
			return
		case <-t.C:
		case <-kick:
		}
		ctx, cancel := context.WithTimeout(b.life, b.timeout)
		err := b.Flush(ctx)
		cancel()
		kick = b.kick
		if err != nil {
			kick = nil // no early flushes until the next tick
			if b.onError != nil {
				b.onError(err)
			}
		}
	}
}

// Close stops accepting Adds (they return ErrClosed), stops the background
// flushes (waiting for one in progress) and sends every pending sum,
// retrying failed ones with back-off until all are stored or ctx ends; give
// ctx a deadline. It returns nil when nothing is left pending; otherwise an
// error that matches ctx's error, and the sums stay pending: calling Close
// (or Flush) again retries them. When ctx ends during a background flush,
// that flush is cancelled, and its sums are kept in doubt (they count once,
// see Batched). Close is idempotent: once everything is flushed it returns
// nil.
func (b *Batched) Close(ctx context.Context) error {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.stopOnce.Do(func() { close(b.stop) })
	select {
	case <-b.done:
	case <-ctx.Done():
		b.cancel()
		<-b.done
		return fmt.Errorf("counter: Close: %d keys still pending: %w", b.Pending(), ctx.Err())
	}
	backoff := 10 * time.Millisecond
	for {
		err := b.Flush(ctx)
		if err == nil {
			return nil
		}
		if b.Pending() == 0 { // only dropped sums: nothing to retry
			return err
		}
		select {
		case <-ctx.Done():
			return errors.Join(err, ctx.Err())
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, time.Second)
	}
}
