package sqllock

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-dev/floodgate/lock"
)

// WaitFunc waits on a PostgreSQL connection for the next notification and
// returns its channel and payload. driverConn is the driver's connection, as
// passed by (*sql.Conn).Raw; the Listener has already run LISTEN on it. It
// must return when ctx ends (with an error), leaving the connection usable
// when it can. With github.com/jackc/pgx/v5/stdlib:
//
//	func pgxWait(ctx context.Context, driverConn any) (channel, payload string, err error) {
//		c, ok := driverConn.(*stdlib.Conn)
//		if !ok {
//			return "", "", fmt.Errorf("not a pgx connection: %T", driverConn)
//		}
//		n, err := c.Conn().WaitForNotification(ctx)
//		if err != nil {
//			return "", "", err
//		}
//		return n.Channel, n.Payload, nil
//	}
//
// database/sql has no API for notifications; this function is the only
// driver-specific code a Listener needs, so that sqllock depends on
// database/sql only.
type WaitFunc func(ctx context.Context, driverConn any) (channel, payload string, err error)

// Listener wakes the waiters of PostgreSQL locks with LISTEN/NOTIFY instead
// of only backing off: a release notifies the longest live waiter of the
// lock (see the package documentation), and the Listener hands the
// notification to it. Use one Listener per *sql.DB and make the Lockers with
// Listener.New, Listener.NewRWMutex and Listener.NewSemaphore.
//
// A Lock subscribes once it finds the lock taken, so uncontended locking
// costs no listening. While any of its Lockers is waiting, and for a few
// seconds after, a Listener keeps one connection of db's pool for itself
// (LISTEN is a session setting), whatever the number of waiters and lock
// names; size the pool for it (a pool limited to one connection is left
// alone: its waiters only back off). When that connection fails the
// Listener opens another and wakes every waiter, in case a notification was
// lost; waiters keep their bounded back-off meanwhile, so a broken or
// missing Listener delays waiters but never blocks them.
//
// The zero Listener is not usable; a Listener is safe for concurrent use.
type Listener struct {
	db   *sql.DB
	wait WaitFunc

	mu       sync.Mutex
	subs     map[string]map[*subscription]struct{} // by channel
	listened map[string]bool                       // channels LISTENed on the current connection
	dirty    bool                                  // subs changed since the loop last looked
	kick     context.CancelFunc                    // interrupts the loop's wait, when waiting
	running  bool
	closed   bool
	done     chan struct{} // closed when the running loop exits
}

// listenerLinger is how long the Listener keeps its connection after the
// last waiter left, so that bursts of waiting do not each take a connection
// and LISTEN again.
const listenerLinger = 3 * time.Second

// listenerMaxRetry caps the back-off of the Listener's reconnections.
const listenerMaxRetry = 5 * time.Second

// NewListener returns a Listener for the PostgreSQL database db, which
// receives notifications through wait. It does not touch the database until
// a Locker waits. Close it when done.
func NewListener(db *sql.DB, wait WaitFunc) (*Listener, error) {
	if db == nil {
		return nil, errors.New("sqllock: db is nil")
	}
	if wait == nil {
		return nil, errors.New("sqllock: WaitFunc is nil")
	}
	return &Listener{
		db:       db,
		wait:     wait,
		subs:     make(map[string]map[*subscription]struct{}),
		listened: make(map[string]bool),
	}, nil
}

// New returns a PostgreSQL Locker like New(db, Postgres, name, opts...)
// whose waiters are also woken by the release, through this Listener.
func (l *Listener) New(name string, opts ...lock.Option) (lock.Locker, error) {
	return newLocker(l.db, Postgres, l, name, opts)
}

// Close stops listening and returns the connection to the pool (after
// UNLISTEN *). Lockers of a closed Listener still work; their waiters only
// back off. Close is idempotent.
func (l *Listener) Close() error {
	l.mu.Lock()
	l.closed = true
	if l.kick != nil {
		l.kick()
	}
	running, done := l.running, l.done
	l.mu.Unlock()
	if running {
		<-done
	}
	return nil
}

// subscription is one waiting Acquire: it is woken by notifications on its
// channel whose payload is its waiter id or "" (anyone), and by
// reconnections.
type subscription struct {
	l       *Listener
	channel string
	waiter  string
	c       chan struct{} // wake-ups; buffered 1
	ready   chan struct{} // closed once LISTEN is in effect
	once    sync.Once
	handed  atomic.Bool // a wake-up said the lock was handed to this waiter
}

func (s *subscription) markReady() { s.once.Do(func() { close(s.ready) }) }

func (s *subscription) wake() {
	select {
	case s.c <- struct{}{}:
	default:
	}
}

// subscribe registers a waiter on channel; its ready channel closes once
// the channel is LISTENed (never, if the Listener is closed).
func (l *Listener) subscribe(channel, waiter string) *subscription {
	s := &subscription{l: l, channel: channel, waiter: waiter, c: make(chan struct{}, 1), ready: make(chan struct{})}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed || l.db.Stats().MaxOpenConnections == 1 {
		// Listening would take the pool's only connection.
		return s
	}
	m := l.subs[channel]
	if m == nil {
		m = make(map[*subscription]struct{})
		l.subs[channel] = m
	}
	// A channel without subscribers may be in the middle of its UNLISTEN:
	// only a channel that already had subscribers is surely listened.
	had := len(m) > 0
	m[s] = struct{}{}
	if l.running && had && l.listened[channel] {
		s.markReady()
		return s
	}
	l.dirty = true
	if l.kick != nil {
		l.kick()
	}
	if !l.running {
		l.running = true
		l.done = make(chan struct{})
		go l.run(l.done)
	}
	return s
}

// subscribeListening registers a waiter on channel only if the channel is
// LISTENed and has subscribers already, so that it is surely listened (see
// subscribe): the subscription is ready at once. It returns nil otherwise,
// having changed nothing.
func (l *Listener) subscribeListening(channel, waiter string) *subscription {
	l.mu.Lock()
	defer l.mu.Unlock()
	m := l.subs[channel]
	if l.closed || !l.running || len(m) == 0 || !l.listened[channel] {
		return nil
	}
	s := &subscription{l: l, channel: channel, waiter: waiter, c: make(chan struct{}, 1), ready: make(chan struct{})}
	m[s] = struct{}{}
	s.markReady()
	return s
}

func (s *subscription) close() {
	l := s.l
	l.mu.Lock()
	defer l.mu.Unlock()
	m := l.subs[s.channel]
	if m == nil {
		return
	}
	delete(m, s)
	if len(m) == 0 {
		// UNLISTEN lazily, on the loop's next turn; wake it only when it
		// has nothing left to wait for, so it can linger and stop.
		delete(l.subs, s.channel)
		l.dirty = true
		if len(l.subs) == 0 && l.kick != nil {
			l.kick()
		}
	}
}

// run owns the listening connection: it brings LISTENs in line with the
// subscriptions, waits for notifications and dispatches them, until the
// Listener is closed or has had no subscription for listenerLinger.
func (l *Listener) run(done chan struct{}) {
	defer close(done)
	var conn *sql.Conn
	defer func() {
		if conn != nil {
			l.release(conn)
		}
	}()
	var idleSince time.Time
	lost := false // the connection failed: wake everyone after LISTENing again
	retry := minBackoff
	for {
		l.mu.Lock()
		if l.closed || (len(l.subs) == 0 && !idleSince.IsZero() && time.Since(idleSince) >= listenerLinger) {
			l.running = false
			l.listened = make(map[string]bool)
			l.mu.Unlock()
			return
		}
		if len(l.subs) == 0 {
			if idleSince.IsZero() {
				idleSince = time.Now()
			}
		} else {
			idleSince = time.Time{}
		}
		want := make(map[string]bool, len(l.subs))
		for ch := range l.subs {
			want[ch] = true
		}
		l.dirty = false
		l.mu.Unlock()

		// Failures back off (up to listenerMaxRetry) so that a database
		// that is down, or a WaitFunc that does not fit the driver, does not
		// make this loop spin.
		backoff := func() {
			if l.sleep(retry) {
				retry = min(2*retry, listenerMaxRetry)
			}
		}
		if conn == nil && len(want) > 0 {
			c, err := l.connect()
			if err != nil {
				backoff()
				continue
			}
			conn = c
		}
		if conn != nil {
			if err := l.sync(conn, want); err != nil {
				l.discard(conn)
				conn, lost = nil, true
				backoff()
				continue
			}
		}
		if lost && conn != nil {
			lost = false
			l.wakeAll()
		}

		var ctx context.Context
		var cancel context.CancelFunc
		if len(want) == 0 {
			ctx, cancel = context.WithTimeout(context.Background(), listenerLinger)
		} else {
			ctx, cancel = context.WithCancel(context.Background())
		}
		l.mu.Lock()
		if l.dirty || l.closed {
			l.mu.Unlock()
			cancel()
			continue
		}
		l.kick = cancel
		l.mu.Unlock()

		var channel, payload string
		var err error
		if conn == nil {
			<-ctx.Done()
			err = ctx.Err()
		} else {
			err = conn.Raw(func(dc any) error {
				var werr error
				channel, payload, werr = l.wait(ctx, dc)
				return werr
			})
		}
		l.mu.Lock()
		l.kick = nil
		l.mu.Unlock()
		interrupted := ctx.Err() != nil
		cancel()
		switch {
		case err == nil:
			retry = minBackoff
			l.dispatch(channel, payload)
		case interrupted:
			// Kicked, or idle: go round. If the wait left the connection
			// broken, the next LISTEN or UNLISTEN finds out.
			retry = minBackoff
		default:
			l.discard(conn)
			conn, lost = nil, true
			backoff()
		}
	}
}

// connect takes a connection from the pool for listening.
func (l *Listener) connect() (*sql.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := l.db.Conn(ctx)
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	l.listened = make(map[string]bool)
	l.mu.Unlock()
	return c, nil
}

// sync runs LISTEN for the wanted channels not yet listened and UNLISTEN for
// the others, then marks the subscriptions of listened channels ready.
func (l *Listener) sync(conn *sql.Conn, want map[string]bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	l.mu.Lock()
	var add, drop []string
	for ch := range want {
		if !l.listened[ch] {
			add = append(add, ch)
		}
	}
	for ch := range l.listened {
		if !want[ch] {
			drop = append(drop, ch)
		}
	}
	l.mu.Unlock()
	// Channel names are made by channelName: [a-z0-9_] only.
	for _, ch := range add {
		if _, err := conn.ExecContext(ctx, `LISTEN "`+ch+`"`); err != nil {
			return err
		}
		l.mu.Lock()
		l.listened[ch] = true
		l.mu.Unlock()
	}
	for _, ch := range drop {
		if _, err := conn.ExecContext(ctx, `UNLISTEN "`+ch+`"`); err != nil {
			return err
		}
		l.mu.Lock()
		delete(l.listened, ch)
		if len(l.subs[ch]) > 0 {
			l.dirty = true // subscribed again meanwhile: LISTEN on the next turn
		}
		l.mu.Unlock()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	for ch, m := range l.subs {
		if l.listened[ch] {
			for s := range m {
				s.markReady()
			}
		}
	}
	return nil
}

// dispatch wakes the subscriptions a notification is for: payload is a
// waiter id, followed by "!" when a release handed the lock to that waiter
// (see pgRelease), or "" for every waiter of the channel.
func (l *Listener) dispatch(channel, payload string) {
	waiter, handed := strings.CutSuffix(payload, "!")
	l.mu.Lock()
	defer l.mu.Unlock()
	for s := range l.subs[channel] {
		if waiter == "" || waiter == s.waiter {
			if handed {
				s.handed.Store(true)
			}
			s.wake()
		}
	}
}

func (l *Listener) wakeAll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, m := range l.subs {
		for s := range m {
			s.wake()
		}
	}
}

// sleep waits d or until the Listener changes; it reports whether d passed.
func (l *Listener) sleep(d time.Duration) bool {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return false
	}
	l.kick = cancel
	l.mu.Unlock()
	<-ctx.Done()
	l.mu.Lock()
	l.kick = nil
	l.mu.Unlock()
	return errors.Is(ctx.Err(), context.DeadlineExceeded)
}

// release returns a healthy connection to the pool without its LISTENs.
func (l *Listener) release(conn *sql.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := conn.ExecContext(ctx, "UNLISTEN *"); err != nil {
		l.discard(conn)
		return
	}
	_ = conn.Close()
}

// discard closes a connection that may be broken instead of returning it to
// the pool.
func (l *Listener) discard(conn *sql.Conn) {
	_ = conn.Raw(func(any) error { return driver.ErrBadConn })
	_ = conn.Close()
}
