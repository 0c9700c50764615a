package redisstore

import "sync"

// Deliveries calls a PubSubConn's deliver for the messages its reader
// hands to Add, in order, from a goroutine of its own, so that a slow
// deliver never holds up the connection's reader, which also reads the
// confirmations a Subscribe waits for: the hub calls Subscribe holding
// the lock its deliver takes. Both Redis clients' adapters use it.
type Deliveries struct {
	deliver func(channel, payload string)

	mu     sync.Mutex
	msgs   []delivery // added, waiting for run
	closed bool
	wake   chan struct{} // one token: msgs has messages
	done   chan struct{} // closed by Close
}

type delivery struct{ channel, payload string }

// NewDeliveries returns the Deliveries of deliver, running.
func NewDeliveries(deliver func(channel, payload string)) *Deliveries {
	d := &Deliveries{deliver: deliver, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go d.run()
	return d
}

// Add queues a message for deliver; after Close it is dropped.
func (d *Deliveries) Add(channel, payload string) {
	d.mu.Lock()
	if !d.closed {
		d.msgs = append(d.msgs, delivery{channel, payload})
	}
	d.mu.Unlock()
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// Close drops the messages queued and stops the goroutine. It does not
// wait for a deliver call under way, which may end after Close returns
// (the hub's deliver takes the lock that Store.Close holds while it closes
// the connection); the goroutine ends after that call. Idempotent.
func (d *Deliveries) Close() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.closed {
		d.closed = true
		d.msgs = nil
		close(d.done)
	}
}

// run calls deliver for every message added, in order, until Close.
func (d *Deliveries) run() {
	for {
		select {
		case <-d.wake:
		case <-d.done:
			return
		}
		d.mu.Lock()
		msgs := d.msgs
		d.msgs = nil
		d.mu.Unlock()
		for _, m := range msgs {
			select {
			case <-d.done:
				return
			default:
			}
			d.deliver(m.channel, m.payload)
		}
	}
}
