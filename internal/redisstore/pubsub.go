package redisstore

import (
	"context"
	"errors"
	"sync"
)

// PubSubber is implemented by Scripters that can also receive Redis pub/sub
// messages on one connection. Primitives use it to wake waiters on release;
// without it they fall back to bounded polling.
type PubSubber interface {
	// OpenPubSub opens a connection for pub/sub. deliver is called, from one
	// goroutine, for every message, until Close.
	OpenPubSub(ctx context.Context, deliver func(channel, payload string)) (PubSubConn, error)
}

// PubSubConn is an open pub/sub connection.
type PubSubConn interface {
	Subscribe(ctx context.Context, channels ...string) error
	Unsubscribe(ctx context.Context, channels ...string) error
	Close() error
}

// ErrNoPubSub is returned by Subscribe when the client cannot subscribe.
var ErrNoPubSub = errors.New("backend: the Redis client does not support pub/sub")

// Subscription receives the messages of one channel. C is buffered; when it
// is full, messages are dropped: they are hints to retry, not data.
type Subscription struct {
	C       <-chan string
	c       chan string
	hub     *hub
	channel string
	once    sync.Once
}

// Close ends the subscription. It is idempotent.
func (s *Subscription) Close() {
	s.once.Do(func() { s.hub.remove(s) })
}

// hub multiplexes the subscriptions of a Redis backend over one connection.
type hub struct {
	ps   PubSubber
	mu   sync.Mutex
	conn PubSubConn
	subs map[string]map[*Subscription]struct{}
}

// Subscribe subscribes to a channel. All subscriptions of a backend share one
// connection, opened on first use; a channel is subscribed on Redis while at
// least one Subscription of it is open. It returns ErrNoPubSub when the client
// has no pub/sub.
func (r *Store) Subscribe(ctx context.Context, channel string) (*Subscription, error) {
	r.hubOnce.Do(func() {
		if ps, ok := r.s.(PubSubber); ok {
			r.hub = &hub{ps: ps, subs: map[string]map[*Subscription]struct{}{}}
		}
	})
	if r.hub == nil {
		return nil, ErrNoPubSub
	}
	sub, err := r.hub.add(ctx, channel)
	if err != nil {
		return nil, r.wrap(ctx, err)
	}
	return sub, nil
}

// Publish runs PUBLISH through a script, so that it works with any Scripter.
func (r *Store) Publish(ctx context.Context, channel, payload string) error {
	_, err := r.Run(ctx, publishScript, nil, []string{channel, payload})
	return err
}

var publishScript = NewScript("return redis.call('PUBLISH', ARGV[1], ARGV[2])")

func (h *hub) add(ctx context.Context, channel string) (*Subscription, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.conn == nil {
		conn, err := h.ps.OpenPubSub(context.WithoutCancel(ctx), h.deliver)
		if err != nil {
			return nil, err
		}
		h.conn = conn
	}
	c := make(chan string, 4)
	s := &Subscription{C: c, c: c, hub: h, channel: channel}
	set := h.subs[channel]
	if set == nil {
		if err := h.conn.Subscribe(ctx, channel); err != nil {
			return nil, err
		}
		set = map[*Subscription]struct{}{}
		h.subs[channel] = set
	}
	set[s] = struct{}{}
	return s, nil
}

func (h *hub) remove(s *Subscription) {
	h.mu.Lock()
	defer h.mu.Unlock()
	set := h.subs[s.channel]
	delete(set, s)
	if len(set) == 0 {
		delete(h.subs, s.channel)
		if h.conn != nil {
			_ = h.conn.Unsubscribe(context.Background(), s.channel)
		}
	}
}

func (h *hub) deliver(channel, payload string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for s := range h.subs[channel] {
		select {
		case s.c <- payload:
		default:
		}
	}
}

// Close closes the backend's pub/sub connection, if one was opened; open
// Subscriptions stop receiving. It does not close the Redis client, which
// stays the caller's. Close is idempotent; the backend stays usable for
// scripts.
func (r *Store) Close() error {
	if r.hub == nil {
		return nil
	}
	r.hub.mu.Lock()
	defer r.hub.mu.Unlock()
	if r.hub.conn == nil {
		return nil
	}
	err := r.hub.conn.Close()
	r.hub.conn = nil
	r.hub.subs = map[string]map[*Subscription]struct{}{}
	return err
}
