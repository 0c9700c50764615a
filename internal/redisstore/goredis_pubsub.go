package redisstore

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

var _ PubSubber = goRedis{}

// errPubSubClosed is returned by the go-redis adapter's Subscribe once Close
// has been called.
var errPubSubClosed = errors.New("redisstore: pub/sub connection closed")

const (
	// barrierRetry is how long Subscribe waits for the answer to its
	// barrier before it sends another, the first time; each later wait is
	// twice the one before, up to barrierRetryMax. A barrier is lost only
	// with its connection, so the normal answer, within a round trip, never
	// waits this long.
	barrierRetry    = 100 * time.Millisecond
	barrierRetryMax = time.Second

	// defaultReadTimeout is go-redis's default ReadTimeout, Subscribe's
	// bound on a client whose options floodgate cannot read.
	defaultReadTimeout = 5 * time.Second
)

// OpenPubSub implements PubSubber with one go-redis PubSub, which reconnects
// and subscribes every channel again by itself when its connection fails.
// Subscribe returns once Redis has run the SUBSCRIBE (see goRedisPubSub). A
// *redis.Ring gets ErrNoPubSub, and its waiters poll: its PubSub sits on
// one shard, while a release publishes on the shard of the lock's key.
func (g goRedis) OpenPubSub(ctx context.Context, deliver func(channel, payload string)) (PubSubConn, error) {
	if _, ok := g.c.(*redis.Ring); ok {
		return nil, ErrNoPubSub // and go-redis's Ring.Subscribe panics without a channel
	}
	p := &goRedisPubSub{
		ps:       g.c.Subscribe(ctx),
		out:      NewDeliveries(deliver),
		wait:     confirmWait(g.c),
		barrier:  fmt.Sprintf("floodgate:barrier:%016x:", rand.Uint64()),
		chans:    map[string]struct{}{},
		barriers: map[string]*barrierWait{},
		done:     make(chan struct{}),
	}
	p.wg.Add(1)
	go p.read(p.ps.ChannelWithSubscriptions())
	return p, nil
}

// confirmWait is how long Subscribe waits for Redis's answer: the client's
// ReadTimeout, as for any reply (go-redis's default for a client of another
// type), or no bound but ctx when the client reads without a time-out.
func confirmWait(c redis.UniversalClient) time.Duration {
	d := defaultReadTimeout
	switch c := c.(type) {
	case *redis.Client:
		d = c.Options().ReadTimeout
	case *redis.ClusterClient:
		d = c.Options().ReadTimeout
	}
	return max(d, 0) // go-redis keeps 0 or -1 for "no time-out"
}

// goRedisPubSub is a PubSubConn over a go-redis PubSub. Two goroutines work
// for it: read takes everything the PubSub receives (messages, and Redis's
// answers to SUBSCRIBE and UNSUBSCRIBE) and never waits for deliver, so that
// the answers Subscribe waits for are read while a deliver call is slow (the
// hub holds its lock while it subscribes, and its deliver takes that lock);
// Deliveries' calls deliver.
//
// Subscribe learns that Redis has run its SUBSCRIBE from a barrier: after
// the SUBSCRIBE it sends UNSUBSCRIBE of a channel of its own, never
// subscribed, which Redis answers after every command sent before it on the
// connection. Waiting for Redis's answer to the SUBSCRIBE itself would not
// do: go-redis subscribes every channel again on each new connection without
// saying so, the answers to that look like those to a Subscribe, and the
// answers lost with the old connection never come.
type goRedisPubSub struct {
	ps      *redis.PubSub
	out     *Deliveries   // calls deliver
	wait    time.Duration // Subscribe's bound on waiting for Redis (confirmWait); 0: ctx's alone
	barrier string        // prefix of this connection's barrier channels, unique to it

	// wmu is held while SUBSCRIBE, UNSUBSCRIBE and barriers are written, so
	// that chans follows go-redis's own set of channels and no Unsubscribe
	// comes between a Subscribe's SUBSCRIBE and its barriers.
	wmu sync.Mutex

	mu       sync.Mutex
	chans    map[string]struct{}     // the channels subscribed (as asked; go-redis's set)
	barriers map[string]*barrierWait // barriers sent and not answered, by channel name
	sent     uint64                  // barriers sent so far, which names them
	closed   bool

	done chan struct{}  // closed by Close
	wg   sync.WaitGroup // read
}

// barrierWait is one Subscribe waiting for the answer to any of its
// barriers. names and ok are guarded by goRedisPubSub.mu.
type barrierWait struct {
	answered chan struct{} // closed by the first answer
	names    []string      // its barriers
	ok       bool          // answered is closed
}

// Subscribe subscribes the connection to channels and returns once Redis has
// run the SUBSCRIBE, so that a message published after it returns is
// delivered; also for the channels among them that an earlier call
// subscribed. It returns ctx's error if ctx ends first; an error matching
// os.ErrDeadlineExceeded if Redis has not answered within the client's
// ReadTimeout (a hung server or connection: ctx may have no deadline, and
// the hub holds its lock meanwhile); the error of writing to the connection
// (go-redis's, when it cannot connect; a write on a connection closed under
// go-redis is made once more, on the one go-redis opens then); and an error
// after Close. The channels it added are then unsubscribed. Channels are a
// set, not counted: one Unsubscribe undoes any number of Subscribes, and a
// Subscribe concurrent with an Unsubscribe of the same channel may return
// either way.
//
// When the connection fails after the SUBSCRIBE went out, go-redis opens
// another and subscribes every channel again, but the answer to the barrier
// sent on the old one never comes: Subscribe sends another barrier after
// barrierRetry, then after twice as long and so on up to barrierRetryMax,
// and returns at the first answer.
func (p *goRedisPubSub) Subscribe(ctx context.Context, channels ...string) error {
	if err := ctx.Err(); err != nil {
		return err // and a write past its deadline would make go-redis reconnect
	}
	var limit <-chan time.Time
	if p.wait > 0 {
		t := time.NewTimer(p.wait)
		defer t.Stop()
		limit = t.C
	}
	w := &barrierWait{answered: make(chan struct{})}
	added, err := p.subscribe(ctx, channels, w)
	if err == nil && len(channels) > 0 {
		err = p.await(ctx, w, limit)
	}
	p.mu.Lock()
	for _, name := range w.names {
		delete(p.barriers, name)
	}
	p.mu.Unlock()
	if err != nil && len(added) > 0 {
		_ = p.Unsubscribe(context.WithoutCancel(ctx), added...)
	}
	return err
}

// subscribe writes SUBSCRIBE of the channels not subscribed yet, which it
// returns, and then w's first barrier.
func (p *goRedisPubSub) subscribe(ctx context.Context, channels []string, w *barrierWait) (added []string, err error) {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, errPubSubClosed
	}
	for _, ch := range channels {
		if _, ok := p.chans[ch]; !ok {
			p.chans[ch] = struct{}{}
			added = append(added, ch)
		}
	}
	p.mu.Unlock()
	if len(channels) == 0 {
		return nil, nil
	}
	if len(added) > 0 {
		err := p.ps.Subscribe(ctx, added...)
		if ConnClosed(err) {
			// Closed under go-redis, which has opened another connection
			// (without these channels): once more, as for a command.
			err = p.ps.Subscribe(ctx, added...)
		}
		if err != nil {
			return added, fmt.Errorf("redisstore: subscribe: %w", err)
		}
	}
	return added, p.sendBarrier(ctx, w)
}

// await waits for the answer to any of w's barriers, sending another from
// time to time, until ctx ends, limit fires or Close is called.
func (p *goRedisPubSub) await(ctx context.Context, w *barrierWait, limit <-chan time.Time) error {
	pause := barrierRetry
	retry := time.NewTimer(pause)
	defer retry.Stop()
	for {
		var err error
		select {
		case <-w.answered:
			return nil
		case <-retry.C:
			p.wmu.Lock()
			err = p.sendBarrier(ctx, w)
			p.wmu.Unlock()
			pause = min(2*pause, barrierRetryMax)
			retry.Reset(pause)
		case <-limit:
			err = fmt.Errorf("redisstore: subscribe: no answer from Redis within %v: %w", p.wait, os.ErrDeadlineExceeded)
		case <-ctx.Done():
			err = ctx.Err()
		case <-p.done:
			err = errPubSubClosed
		}
		if err != nil {
			select {
			case <-w.answered: // answered too: select chose at random
				return nil
			default:
				return err
			}
		}
	}
}

// sendBarrier writes UNSUBSCRIBE of a new barrier channel of w; once w is
// answered, or after Close, it does nothing. It requires that wmu is held.
func (p *goRedisPubSub) sendBarrier(ctx context.Context, w *barrierWait) error {
	p.mu.Lock()
	if p.closed || w.ok {
		p.mu.Unlock()
		return nil // await reports Close
	}
	p.sent++
	name := p.barrier + strconv.FormatUint(p.sent, 10)
	w.names = append(w.names, name)
	p.barriers[name] = w
	p.mu.Unlock()
	err := p.ps.Unsubscribe(ctx, name)
	if ConnClosed(err) {
		// go-redis has opened another connection and subscribed every
		// channel on it: a barrier there answers as well.
		err = p.ps.Unsubscribe(ctx, name)
	}
	if err != nil {
		return fmt.Errorf("redisstore: subscribe: %w", err)
	}
	return nil
}

// Unsubscribe unsubscribes the connection from channels: it writes
// UNSUBSCRIBE of those subscribed, without waiting for Redis's answer, and
// returns the error of writing it. go-redis forgets the channels even then,
// so that its next connection does not subscribe them. After Close it does
// nothing and returns nil.
func (p *goRedisPubSub) Unsubscribe(ctx context.Context, channels ...string) error {
	p.wmu.Lock()
	defer p.wmu.Unlock()
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	var gone []string
	for _, ch := range channels {
		if _, ok := p.chans[ch]; ok {
			delete(p.chans, ch)
			gone = append(gone, ch)
		}
	}
	p.mu.Unlock()
	if len(gone) == 0 {
		return nil // and go-redis would unsubscribe every channel
	}
	if err := p.ps.Unsubscribe(ctx, gone...); err != nil {
		return fmt.Errorf("redisstore: unsubscribe: %w", err)
	}
	return nil
}

// Close closes the PubSub and stops the goroutines; a Subscribe still
// waiting returns an error. It waits for read, which ends when go-redis
// closes its channel, but not for a deliver call under way, which may end
// after Close returns (Deliveries.Close). Close is
// idempotent; it returns go-redis's error of closing the first time, nil
// after.
func (p *goRedisPubSub) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	close(p.done)
	p.mu.Unlock()
	p.out.Close()
	err := p.ps.Close()
	p.wg.Wait()
	return err
}

// read takes what the PubSub receives until go-redis closes its channel,
// which it does after Close: it queues the messages for deliver and
// wakes the Subscribe whose barrier Redis answered. Redis's answers to
// SUBSCRIBE and to the UNSUBSCRIBE of real channels tell nothing more.
func (p *goRedisPubSub) read(in <-chan any) {
	defer p.wg.Done()
	for m := range in {
		switch m := m.(type) {
		case *redis.Message:
			p.out.Add(m.Channel, m.Payload)
		case *redis.Subscription:
			if m.Kind == "unsubscribe" {
				p.answered(m.Channel)
			}
		}
	}
}

// answered wakes the Subscribe waiting for the barrier channel name, if
// any, and forgets its other barriers.
func (p *goRedisPubSub) answered(name string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	w := p.barriers[name]
	if w == nil || w.ok {
		return
	}
	for _, n := range w.names {
		delete(p.barriers, n)
	}
	w.ok = true
	close(w.answered)
}
