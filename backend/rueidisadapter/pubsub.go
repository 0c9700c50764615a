package rueidisadapter

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/floodgate-dev/floodgate/internal/redisstore"
)

var _ redisstore.PubSubber = scripter{}

// retryPause is how long a pub/sub connection that failed waits before it
// connects again.
const retryPause = 100 * time.Millisecond

// errClosed is returned by Subscribe once Close has been called.
var errClosed = errors.New("rueidisadapter: pub/sub connection closed")

// OpenPubSub implements redisstore.PubSubber on one connection taken from the
// client with Client.Dedicate, opened at the first Subscribe. SUBSCRIBE and
// UNSUBSCRIBE go out on it in the order of the calls, and rueidis's
// PubSubHooks report its messages and Redis's confirmations: Subscribe
// returns once Redis has confirmed every channel, so that a message published
// after it returns is delivered. When the connection fails, a new one is
// opened after a short pause and subscribes every channel again, until Close.
func (s scripter) OpenPubSub(_ context.Context, deliver func(channel, payload string)) (redisstore.PubSubConn, error) {
	p := &pubsub{
		c:     s.c,
		out:   redisstore.NewDeliveries(deliver),
		chans: map[string]chan struct{}{},
		conn:  newConn(),
		done:  make(chan struct{}),
	}
	p.wg.Add(1)
	go p.run()
	return p, nil
}

// pubsub is a redisstore.PubSubConn over dedicated rueidis connections, one
// at a time. Goroutines work for it: run opens each connection and waits
// for its end, write sends the commands of the open one, and
// redisstore.Deliveries' calls deliver, so that a slow deliver never holds
// up rueidis's reader of the connection (which also reads the
// confirmations Subscribe waits for).
type pubsub struct {
	c   rueidis.Client
	out *redisstore.Deliveries // calls deliver

	mu sync.Mutex
	// chans holds the subscribed channels, each with the confirmation of its
	// latest SUBSCRIBE on conn (closed once Redis confirmed it). A new conn
	// gets fresh ones, as it subscribes again.
	chans  map[string]chan struct{}
	conn   *conn // the connection in use, or the next one; never nil
	closed bool

	done chan struct{} // closed by Close
	wg   sync.WaitGroup
}

// conn is one dedicated connection: before it is open, what it will do; then
// what went out on it. Its fields are guarded by pubsub.mu; write reads dc
// without it (dc is set before write starts), and err is final once lost is
// closed.
type conn struct {
	dc     rueidis.DedicatedClient    // nil until open
	want   chan struct{}              // closed when there is a channel to subscribe: run opens the connection then
	wanted bool                       // want is closed
	ops    []op                       // commands waiting for write
	more   chan struct{}              // one token: ops has commands
	expect map[string][]chan struct{} // per channel, the confirmations of the SUBSCRIBEs sent, in order
	lost   chan struct{}              // closed when the connection has failed or been closed
	err    error                      // why it was lost
}

// op is a command for write: SUBSCRIBE or UNSUBSCRIBE of channels.
type op struct {
	unsubscribe bool
	channels    []string
}

func newConn() *conn {
	return &conn{
		want:   make(chan struct{}),
		more:   make(chan struct{}, 1),
		expect: map[string][]chan struct{}{},
		lost:   make(chan struct{}),
	}
}

// send queues o for write. It requires that pubsub.mu is held.
func (c *conn) send(o op) {
	c.ops = append(c.ops, o)
	select {
	case c.more <- struct{}{}:
	default:
	}
}

// wantOpen asks run to open c. It requires that pubsub.mu is held.
func (c *conn) wantOpen() {
	if !c.wanted {
		c.wanted = true
		close(c.want)
	}
}

// Subscribe subscribes the connection to channels and returns once Redis has
// confirmed each of them (also those subscribed by an earlier call). It
// opens the connection when none is open, waiting for the pause after a
// failure if one is under way. It returns the connection's error if the
// connection fails first, ctx's error if ctx ends first, and an error after
// Close; the channels it added are then unsubscribed. Channels are a set, not
// counted: one Unsubscribe undoes any number of Subscribes.
func (p *pubsub) Subscribe(ctx context.Context, channels ...string) error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return errClosed
	}
	c := p.conn
	var added []string
	confirmed := make([]chan struct{}, 0, len(channels))
	for _, ch := range channels {
		conf, ok := p.chans[ch]
		if !ok {
			conf = make(chan struct{})
			p.chans[ch] = conf
			added = append(added, ch)
			if c.dc != nil {
				c.expect[ch] = append(c.expect[ch], conf)
			} // else the connection subscribes to every channel when it opens
		}
		confirmed = append(confirmed, conf)
	}
	if len(added) > 0 {
		if c.dc != nil {
			c.send(op{channels: added})
		} else {
			c.wantOpen()
		}
	}
	p.mu.Unlock()

	for _, conf := range confirmed {
		var err error
		select {
		case <-conf:
			continue
		case <-c.lost:
			err = fmt.Errorf("rueidisadapter: subscribe: %w", c.err)
		case <-ctx.Done():
			err = ctx.Err()
		}
		_ = p.Unsubscribe(context.WithoutCancel(ctx), added...)
		return err
	}
	return nil
}

// Unsubscribe unsubscribes the connection from channels. It does not wait
// for Redis's confirmation and returns nil.
func (p *pubsub) Unsubscribe(_ context.Context, channels ...string) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var gone []string
	for _, ch := range channels {
		if _, ok := p.chans[ch]; ok {
			delete(p.chans, ch)
			gone = append(gone, ch)
		}
	}
	if len(gone) > 0 && p.conn.dc != nil {
		p.conn.send(op{unsubscribe: true, channels: gone})
	}
	return nil
}

// Close closes the connection and stops its goroutines; a Subscribe still
// waiting returns an error. It does not wait for a deliver call under way,
// which may end after Close returns: the hub's deliver takes the lock that
// Store.Close holds while it calls Close. The goroutine that calls deliver
// ends after that call. Close is idempotent and returns nil.
func (p *pubsub) Close() error {
	p.mu.Lock()
	if !p.closed {
		p.closed = true
		close(p.done)
	}
	p.mu.Unlock()
	p.out.Close()
	p.wg.Wait()
	return nil
}

// run opens connections one after another, until Close: each when a channel
// is wanted, and again retryPause after the previous one failed.
func (p *pubsub) run() {
	defer p.wg.Done()
	for {
		p.mu.Lock()
		c := p.conn
		p.mu.Unlock()
		err := p.serve(c)

		p.mu.Lock()
		if c.err == nil {
			c.err = err
		}
		close(c.lost)
		closed := p.closed
		if !closed {
			// The next connection subscribes to every channel again.
			p.conn = newConn()
			for ch := range p.chans {
				p.chans[ch] = make(chan struct{})
			}
			if len(p.chans) > 0 {
				p.conn.wantOpen()
			}
		}
		p.mu.Unlock()
		if closed {
			return
		}
		select {
		case <-time.After(retryPause):
		case <-p.done:
		}
	}
}

// serve opens c once a channel is wanted, subscribes it to every channel,
// and returns why it ended: the error rueidis reports for it, or errClosed.
func (p *pubsub) serve(c *conn) error {
	select {
	case <-p.done: // first, as select picks at random
		return errClosed
	default:
	}
	select {
	case <-c.want:
	case <-p.done:
		return errClosed
	}
	dc, _ := p.c.Dedicate() // dc.Close releases it too
	defer dc.Close()
	lost := dc.SetPubSubHooks(rueidis.PubSubHooks{
		OnMessage: p.received,
		OnSubscription: func(s rueidis.PubSubSubscription) {
			if s.Kind == "subscribe" {
				p.confirmed(c, s.Channel)
			}
		},
	})

	p.mu.Lock()
	c.dc = dc
	if len(p.chans) > 0 {
		chans := slices.Sorted(maps.Keys(p.chans))
		for _, ch := range chans {
			c.expect[ch] = append(c.expect[ch], p.chans[ch])
		}
		c.send(op{channels: chans})
	}
	p.mu.Unlock()
	p.wg.Add(1)
	go p.write(c)

	select {
	case err := <-lost:
		if err == nil {
			err = errors.New("rueidisadapter: pub/sub connection lost")
		}
		return err
	case <-p.done:
		return errClosed
	}
}

// write sends c's commands in order, one at a time, until c is lost. A
// command that fails (a Redis error reply among them) closes c, so that run
// opens another.
func (p *pubsub) write(c *conn) {
	defer p.wg.Done()
	for {
		select {
		case <-c.more:
		case <-c.lost:
			return
		}
		for {
			p.mu.Lock()
			if len(c.ops) == 0 {
				p.mu.Unlock()
				break
			}
			o := c.ops[0]
			c.ops = c.ops[1:]
			p.mu.Unlock()

			cmd := c.dc.B().Subscribe().Channel(o.channels...).Build()
			if o.unsubscribe {
				cmd = c.dc.B().Unsubscribe().Channel(o.channels...).Build()
			}
			if err := c.dc.Do(context.Background(), cmd).Error(); err != nil {
				p.mu.Lock()
				if c.err == nil {
					c.err = err
				}
				p.mu.Unlock()
				c.dc.Close()
				return
			}
		}
	}
}

// confirmed is rueidis's report that Redis confirmed a SUBSCRIBE of channel
// on c: the oldest one sent, since Redis answers in order.
func (p *pubsub) confirmed(c *conn, channel string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if q := c.expect[channel]; len(q) > 0 {
		close(q[0])
		if len(q) == 1 {
			delete(c.expect, channel)
		} else {
			c.expect[channel] = q[1:]
		}
	}
}

// received queues a message for deliver.
func (p *pubsub) received(m rueidis.PubSubMessage) { p.out.Add(m.Channel, m.Message) }
