package rueidisadapter

import (
	"context"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-dev/floodgate/internal/redisstore"
)

var _ redisstore.PubSubber = scripter{}

// OpenPubSub implements redisstore.PubSubber. Each subscribed channel runs
// Client.Receive in its own goroutine (over RESP3 rueidis multiplexes pub/sub
// on its shared connection); a Receive that ends with an error (a
// disconnection) is started again after a short pause, until Unsubscribe or
// Close.
func (s scripter) OpenPubSub(_ context.Context, deliver func(channel, payload string)) (redisstore.PubSubConn, error) {
	return &pubsub{c: s.c, deliver: deliver, subs: map[string]context.CancelFunc{}}, nil
}

type pubsub struct {
	c       rueidis.Client
	deliver func(channel, payload string)
	mu      sync.Mutex
	subs    map[string]context.CancelFunc
	wg      sync.WaitGroup
	closed  bool
}

func (p *pubsub) Subscribe(_ context.Context, channels ...string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, ch := range channels {
		if _, ok := p.subs[ch]; ok || p.closed {
			continue
		}
		ctx, cancel := context.WithCancel(context.Background())
		p.subs[ch] = cancel
		p.wg.Add(1)
		go p.receive(ctx, ch)
	}
	return nil
}

func (p *pubsub) receive(ctx context.Context, ch string) {
	defer p.wg.Done()
	for ctx.Err() == nil {
		_ = p.c.Receive(ctx, p.c.B().Subscribe().Channel(ch).Build(), func(m rueidis.PubSubMessage) {
			p.deliver(m.Channel, m.Message)
		})
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func (p *pubsub) Unsubscribe(_ context.Context, channels ...string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, ch := range channels {
		if cancel, ok := p.subs[ch]; ok {
			cancel()
			delete(p.subs, ch)
		}
	}
	return nil
}

func (p *pubsub) Close() error {
	p.mu.Lock()
	p.closed = true
	for ch, cancel := range p.subs {
		cancel()
		delete(p.subs, ch)
	}
	p.mu.Unlock()
	p.wg.Wait()
	return nil
}
