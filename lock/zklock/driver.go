package zklock

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/floodgate-dev/floodgate/lock"
	"github.com/floodgate-dev/floodgate/lock/internal/lockdriver"
)

// driver is one side of a ZooKeeper lock (the mutex, a side of the RWMutex,
// the semaphore): a lockdriver.Driver whose state is the queue of ephemeral
// sequential nodes under dir. Every Acquire that is not a re-entry creates
// one node, and the recipe decides when it is admitted.
//
// The driver keeps, per owner it holds for, the node and the lease deadline
// on the local monotonic clock. At the deadline it deletes the node, so a
// lease that is not extended frees the lock for others (the local clock
// stands in for a store clock, which ZooKeeper does not offer); a holder that
// dies or is cut off frees it when ZooKeeper expires its session. A watch on
// the held node notices a deletion or the end of the session at once, so the
// next Extend fails without a round trip.
type driver struct {
	conn *zk.Conn
	dir  string
	r    recipe
	o    lockdriver.Options
	acl  []zk.ACL

	mu   sync.Mutex
	held map[string]*holding // by owner; guarded by mu
}

// holding is a node that the driver holds for an owner. Its fields are
// guarded by driver.mu; the holding is current while it is in driver.held.
type holding struct {
	node     string // full path
	token    int64
	version  int32       // the node's data version when this driver made it, or -1: unknown
	deadline time.Time   // local monotonic clock
	timer    *time.Timer // fires at deadline: the node is deleted
}

func newDriver(conn *zk.Conn, dir string, r recipe, o lockdriver.Options) *driver {
	return &driver{
		conn: conn,
		dir:  dir,
		r:    r,
		o:    o,
		acl:  zk.WorldACL(zk.PermAll),
		held: make(map[string]*holding),
	}
}

// call runs f, a blocking go-zookeeper call, and gives up waiting for it when
// ctx ends. go-zookeeper has no context; a call that is given up finishes on
// its own (the client fails requests when the connection drops).
func call[T any](ctx context.Context, f func() (T, error)) (T, error) {
	if ctx.Done() == nil {
		return f()
	}
	type result struct {
		v   T
		err error
	}
	ch := make(chan result, 1)
	go func() {
		v, err := f()
		ch <- result{v, err}
	}()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, ctx.Err()
	}
}

func wrap(err error) error {
	if err == nil || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return fmt.Errorf("zklock: %w", err)
}

// children returns the queue of the lock path, empty when it does not exist.
func (d *driver) children(ctx context.Context) ([]child, error) {
	names, err := call(ctx, func() ([]string, error) {
		names, _, err := d.conn.Children(d.dir)
		return names, err
	})
	if errors.Is(err, zk.ErrNoNode) {
		return nil, nil
	}
	if err != nil {
		return nil, wrap(err)
	}
	return parseChildren(names), nil
}

// Acquire takes the lock for owner. A call that creates a node protects it
// (see createProtected): every create of the call carries the call's GUID,
// so a create whose reply was lost is found by it instead of being made
// twice, and a call that fails deletes whatever node it may have made —
// the one it knows, or the one its GUID names — so that a failed Acquire
// never leaves a node that later becomes the holder.
func (d *driver) Acquire(ctx context.Context, owner string, ttl time.Duration, wait bool) (g lockdriver.Grant, err error) {
	if g, ok, err := d.reenter(ctx, owner, ttl); err != nil || ok {
		return g, err
	}
	data := holdData{count: 1, owner: owner}.encode()
	pc := &protectedCreate{guid: newGUID()}
	var node string // our node in the queue, "" before it is made
	defer func() {
		if err != nil {
			d.giveUp(ctx, node, pc)
		}
	}()
	r := retrier{wait: wait, conn: d.conn}
	var watch <-chan watched // the watch on node, set beside the first listing
	for {
		if node == "" {
			n, err := d.create(ctx, pc, data)
			if err != nil {
				if err = r.retry(ctx, err); err != nil {
					return lockdriver.Grant{}, err
				}
				continue
			}
			node = n
			if !d.r.poke() {
				// Most first listings admit the node (an uncontended
				// lock): set the holder's watch in the same round trip.
				watch = d.watchAsync(node)
			}
		}
		nodes, err := d.children(ctx)
		if err != nil {
			if err = r.retry(ctx, err); err != nil {
				return lockdriver.Grant{}, err
			}
			continue
		}
		i := indexOf(nodes, node[len(d.dir)+1:])
		if i < 0 {
			// Our node is gone: the session expired (the client has a new
			// one by now) or someone deleted it. Queue again.
			node = ""
			continue
		}
		if d.r.admitted(nodes, i) {
			g, ok, err := d.grant(ctx, owner, node, data, ttl, watch)
			watch = nil
			if err != nil {
				if err = r.retry(ctx, err); err != nil {
					return lockdriver.Grant{}, err
				}
				continue
			}
			if !ok {
				node = "" // deleted meanwhile: queue again
				continue
			}
			return g, nil
		}
		if !wait {
			return lockdriver.Grant{}, lock.ErrLocked
		}
		watch = nil // set again when the node is admitted
		if err := d.wait(ctx, nodes, i); err != nil {
			if err = r.retry(ctx, err); err != nil {
				return lockdriver.Grant{}, err
			}
			continue
		}
		r.ok()
	}
}

// giveUp deletes the node of an Acquire that fails: node when it is known,
// and the node a create of the call may have made without a reply (found by
// the call's GUID).
func (d *driver) giveUp(ctx context.Context, node string, pc *protectedCreate) {
	if node != "" {
		d.abandon(ctx, node)
	}
	if pc.uncertain {
		d.cleanupGUID(pc.guid)
	}
}

// retryFor bounds how long a waiting Acquire keeps retrying ZooKeeper errors
// that a reconnection may cure, when its context allows longer.
const retryFor = time.Minute

// retrier paces the retries of a waiting Acquire. While the client is
// disconnected a waiter keeps its place: its node lives as long as the
// session, and the client reconnects on its own.
type retrier struct {
	wait    bool
	conn    *zk.Conn
	failing time.Time // start of the current run of failures
	backoff time.Duration
	down    downClock
}

// closedAfter is how long a client must stay in zk.StateDisconnected to be
// taken as closed. go-zookeeper fails the requests of a closed client and
// of a dropped connection alike, but a live client moves on to
// zk.StateConnecting at once, while a closed one stays disconnected.
const closedAfter = 2 * time.Second

// errClosed reports a client found closed (see closedAfter).
var errClosed = errors.New("zk client closed")

// downClock tells a closed client from a disconnected one.
type downClock struct {
	since time.Time // first of consecutive checks that found it disconnected
}

// closed reports whether conn has been found disconnected at every check
// for longer than closedAfter.
func (c *downClock) closed(conn *zk.Conn) bool {
	if conn.State() != zk.StateDisconnected {
		c.since = time.Time{}
		return false
	}
	if c.since.IsZero() {
		c.since = time.Now()
	}
	return time.Since(c.since) > closedAfter
}

// retry returns nil after a pause when err may pass with a reconnection,
// and err when the Acquire must give up: TryLock, a permanent error, ctx's
// end (its error), or failures for longer than retryFor.
func (r *retrier) retry(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if !r.wait || permanent(err) {
		return err
	}
	if r.failing.IsZero() {
		r.failing, r.backoff = time.Now(), 50*time.Millisecond
	} else if time.Since(r.failing) > retryFor {
		return err
	}
	if r.down.closed(r.conn) {
		return fmt.Errorf("%w: %w", errClosed, err)
	}
	t := time.NewTimer(r.backoff)
	defer t.Stop()
	r.backoff = min(2*r.backoff, time.Second)
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// ok ends a run of failures.
func (r *retrier) ok() { r.failing, r.down = time.Time{}, downClock{} }

// permanent reports whether err cannot pass by retrying: a context's end,
// a closed client, or a request ZooKeeper refuses.
func permanent(err error) bool {
	for _, e := range []error{
		context.Canceled, context.DeadlineExceeded, zk.ErrClosing, errClosed,
		zk.ErrNoAuth, zk.ErrAuthFailed, zk.ErrInvalidACL, zk.ErrBadArguments,
		zk.ErrInvalidPath, zk.ErrInvalidFlags, zk.ErrAPIError,
	} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

// wait blocks until one of the nodes that nodes[i] must watch changes, ctx
// ends (its error is returned) or MaxPoll passes, whichever is first. It
// returns nil at once when the queue has already moved on.
func (d *driver) wait(ctx context.Context, nodes []child, i int) error {
	watch := d.r.watch(nodes, i)
	cases := make([]reflect.SelectCase, 0, len(watch)+2)
	for _, c := range watch {
		type res struct {
			ok      bool
			version int32
			ev      <-chan zk.Event
		}
		r, err := call(ctx, func() (res, error) {
			ok, st, ev, err := d.conn.ExistsW(d.dir + "/" + c.name)
			if err != nil {
				return res{}, err
			}
			return res{ok, st.Version, ev}, nil
		})
		if err != nil {
			return wrap(err)
		}
		// A semaphore waiter watching a waiter: a changed version means
		// that waiter has been admitted since we listed the queue, so we
		// may be the first waiter now.
		if !r.ok || (d.r.poke() && len(watch) == 1 && r.version != 0) {
			return nil
		}
		cases = append(cases, reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(r.ev)})
	}
	poll := time.NewTimer(d.o.MaxPoll)
	defer poll.Stop()
	cases = append(cases,
		reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(ctx.Done())},
		reflect.SelectCase{Dir: reflect.SelectRecv, Chan: reflect.ValueOf(poll.C)},
	)
	if chosen, _, _ := reflect.Select(cases); chosen == len(cases)-2 {
		return ctx.Err()
	}
	return nil
}

// grant completes the acquisition of node, which the queue has admitted:
// it wakes the next semaphore waiter, reads the fencing token, watches the
// node and records the holding. ok is false when the node is gone.
func (d *driver) grant(ctx context.Context, owner, node string, data []byte, ttl time.Duration, watch <-chan watched) (lockdriver.Grant, bool, error) {
	if d.r.poke() {
		// Best effort: a waiter that misses it looks again within MaxPoll.
		_, _ = call(ctx, func() (*zk.Stat, error) { return d.conn.Set(node, data, -1) })
	}
	if watch == nil {
		watch = d.watchAsync(node)
	}
	var r watched
	select {
	case r = <-watch:
	case <-ctx.Done():
		return lockdriver.Grant{}, false, ctx.Err()
	}
	if r.err != nil {
		return lockdriver.Grant{}, false, wrap(r.err)
	}
	if !r.ok {
		return lockdriver.Grant{}, false, nil
	}
	h := &holding{node: node, token: r.st.Czxid, version: r.st.Version}
	d.hold(owner, h, ttl)
	go d.watchHeld(owner, h, r.ev)
	return lockdriver.Grant{Token: h.token}, true, nil
}

// watched is the answer of an ExistsW on a node: whether it exists, its
// stat (the czxid is the holder's fencing token) and the watch.
type watched struct {
	ok  bool
	st  *zk.Stat
	ev  <-chan zk.Event
	err error
}

// watchAsync sends ExistsW on node and returns where its answer arrives:
// go-zookeeper pipelines requests on one connection, so it travels beside
// whatever the caller sends next.
func (d *driver) watchAsync(node string) <-chan watched {
	ch := make(chan watched, 1)
	go func() {
		ok, st, ev, err := d.conn.ExistsW(node)
		ch <- watched{ok, st, ev, err}
	}()
	return ch
}

// hold records h as owner's holding, or pushes its deadline to at least
// ttl from now. The deadline never moves earlier: every lease of the owner
// ends no later than it on the local clock.
func (d *driver) hold(owner string, h *holding, ttl time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	deadline := time.Now().Add(ttl)
	if h.timer == nil {
		h.deadline = deadline
		h.timer = time.AfterFunc(ttl, func() { d.expire(owner, h) })
		d.held[owner] = h
		return
	}
	if deadline.After(h.deadline) {
		h.deadline = deadline
		h.timer.Reset(ttl)
	}
}

// current returns owner's holding, or nil.
func (d *driver) current(owner string) *holding {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.held[owner]
}

// forget drops h if it is still owner's holding, and reports whether it was.
func (d *driver) forget(owner string, h *holding) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.held[owner] != h {
		return false
	}
	delete(d.held, owner)
	h.timer.Stop()
	return true
}

// expire ends a holding whose deadline passed without Extend: the node is
// deleted, so that others may acquire.
func (d *driver) expire(owner string, h *holding) {
	d.mu.Lock()
	if d.held[owner] != h || time.Now().Before(h.deadline) {
		d.mu.Unlock() // released, lost, or extended meanwhile
		return
	}
	delete(d.held, owner)
	d.mu.Unlock()
	d.deleteNode(h.node)
}

// watchHeld follows a held node through ev, a watch set by ExistsW, and
// forgets the holding when the node is deleted or the watch ends with the
// session, so that the next Extend or Release fails at once with
// lock.ErrNotHeld. Data changes (hold counts) re-arm the watch. It returns
// when the holding ends.
func (d *driver) watchHeld(owner string, h *holding, ev <-chan zk.Event) {
	for {
		e, ok := <-ev
		if !ok || e.Type == zk.EventNodeDeleted || e.Type == zk.EventNotWatching {
			d.forget(owner, h)
			return
		}
		var down downClock
		for {
			if d.current(owner) != h {
				return
			}
			exists, _, next, err := d.conn.ExistsW(h.node)
			if err == nil && !exists {
				d.forget(owner, h)
				return
			}
			if err == nil {
				ev = next
				break
			}
			if errors.Is(err, zk.ErrSessionExpired) || errors.Is(err, zk.ErrClosing) || down.closed(d.conn) {
				d.forget(owner, h)
				return
			}
			time.Sleep(100 * time.Millisecond) // disconnected: try again
		}
	}
}

// reenter makes owner's Acquire a re-entry when owner holds the lock: its
// holding here, or, for a fixed Owner, a holder node of another client with
// the same owner id. The hold count in the node goes up by one.
func (d *driver) reenter(ctx context.Context, owner string, ttl time.Duration) (lockdriver.Grant, bool, error) {
	h := d.current(owner)
	node := ""
	if h != nil {
		node = h.node
	} else if d.o.Owner != "" {
		var err error
		if node, err = d.findHolder(ctx, owner); err != nil || node == "" {
			return lockdriver.Grant{}, false, err
		}
	} else {
		return lockdriver.Grant{}, false, nil
	}
	for {
		hd, st, err := d.get(ctx, node)
		if errors.Is(err, zk.ErrNoNode) || (err == nil && hd.owner != owner) {
			if h != nil {
				d.forget(owner, h)
			}
			return lockdriver.Grant{}, false, nil // not held any more: acquire afresh
		}
		if err != nil {
			return lockdriver.Grant{}, false, err
		}
		hd.count++
		_, err = call(ctx, func() (*zk.Stat, error) { return d.conn.Set(node, hd.encode(), st.Version) })
		if errors.Is(err, zk.ErrBadVersion) {
			continue // another level came or went meanwhile
		}
		if errors.Is(err, zk.ErrNoNode) {
			continue // reported by get above
		}
		if err != nil {
			return lockdriver.Grant{}, false, wrap(err)
		}
		if h == nil {
			h = &holding{node: node, token: st.Czxid, version: -1}
			type res struct {
				ok bool
				ev <-chan zk.Event
			}
			r, err := call(ctx, func() (res, error) {
				ok, _, ev, err := d.conn.ExistsW(node)
				return res{ok, ev}, err
			})
			d.hold(owner, h, ttl)
			if err == nil && r.ok {
				go d.watchHeld(owner, h, r.ev)
			} else if err == nil {
				d.forget(owner, h) // released by the other client meanwhile
				return lockdriver.Grant{}, false, nil
			}
		} else {
			d.hold(owner, h, ttl)
		}
		return lockdriver.Grant{Token: h.token}, true, nil
	}
}

// findHolder returns the path of an admitted node of this side whose owner
// is owner, or "".
func (d *driver) findHolder(ctx context.Context, owner string) (string, error) {
	nodes, err := d.children(ctx)
	if err != nil {
		return "", err
	}
	for i, c := range nodes {
		if !d.r.admitted(nodes, i) {
			break // nodes after a waiting one wait too
		}
		if c.kind != d.r.kind {
			continue
		}
		node := d.dir + "/" + c.name
		hd, _, err := d.get(ctx, node)
		if errors.Is(err, zk.ErrNoNode) || errors.Is(err, errBadData) {
			continue
		}
		if err != nil {
			return "", err
		}
		if hd.owner == owner {
			return node, nil
		}
	}
	return "", nil
}

// get reads and decodes a node. Errors other than zk.ErrNoNode and
// errBadData are wrapped.
func (d *driver) get(ctx context.Context, node string) (holdData, *zk.Stat, error) {
	type res struct {
		data []byte
		st   *zk.Stat
	}
	r, err := call(ctx, func() (res, error) {
		data, st, err := d.conn.Get(node)
		return res{data, st}, err
	})
	if errors.Is(err, zk.ErrNoNode) {
		return holdData{}, nil, err
	}
	if err != nil {
		return holdData{}, nil, wrap(err)
	}
	hd, err := decodeHold(r.data)
	return hd, r.st, err
}

func (d *driver) Extend(ctx context.Context, owner string, ttl time.Duration) error {
	h := d.current(owner)
	if h == nil {
		return lock.ErrNotHeld // released, expired, deleted or session ended
	}
	// Sync first, so that a follower answers with the leader's state.
	if _, err := call(ctx, func() (string, error) { return d.conn.Sync(h.node) }); err != nil && !errors.Is(err, zk.ErrNoNode) {
		return wrap(err)
	}
	hd, _, err := d.get(ctx, h.node)
	if errors.Is(err, zk.ErrNoNode) || errors.Is(err, errBadData) || (err == nil && hd.owner != owner) {
		d.forget(owner, h)
		return lock.ErrNotHeld
	}
	if err != nil {
		return err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.held[owner] != h {
		return lock.ErrNotHeld // expired or lost while we asked
	}
	if deadline := time.Now().Add(ttl); deadline.After(h.deadline) {
		h.deadline = deadline
		h.timer.Reset(ttl)
	}
	return nil
}

func (d *driver) Release(ctx context.Context, owner string) error {
	h := d.current(owner)
	if h == nil {
		return lock.ErrNotHeld
	}
	if d.o.Owner == "" {
		// Without Owner no one else re-enters this holding: it has one
		// level, and while its data version is the one this driver made,
		// nobody changed it. One delete of that version releases it, as
		// Curator's does; a changed version takes the careful way below.
		d.mu.Lock()
		version := h.version
		d.mu.Unlock()
		if version >= 0 {
			_, err := call(ctx, func() (struct{}, error) { return struct{}{}, d.conn.Delete(h.node, version) })
			switch {
			case err == nil:
				d.forget(owner, h)
				return nil
			case errors.Is(err, zk.ErrNoNode):
				d.forget(owner, h)
				return lock.ErrNotHeld
			case !errors.Is(err, zk.ErrBadVersion):
				return wrap(err)
			}
		}
	}
	for {
		hd, st, err := d.get(ctx, h.node)
		if errors.Is(err, zk.ErrNoNode) || errors.Is(err, errBadData) || (err == nil && hd.owner != owner) {
			d.forget(owner, h)
			return lock.ErrNotHeld
		}
		if err != nil {
			return err
		}
		if d.current(owner) != h {
			return lock.ErrNotHeld // expired meanwhile
		}
		last := hd.count == 1
		if !last {
			hd.count--
			_, err = call(ctx, func() (*zk.Stat, error) { return d.conn.Set(h.node, hd.encode(), st.Version) })
		} else {
			_, err = call(ctx, func() (struct{}, error) { return struct{}{}, d.conn.Delete(h.node, st.Version) })
		}
		switch {
		case errors.Is(err, zk.ErrBadVersion), errors.Is(err, zk.ErrNoNode):
			continue // changed meanwhile: look again
		case err != nil:
			return wrap(err)
		}
		if last {
			d.forget(owner, h)
		}
		return nil
	}
}

// protectedCreate is the node creation of one Acquire call. Every create of
// the call, retries included, names the node with the call's GUID; uncertain
// records that a create may have made a node the call has not seen (its
// reply was lost), so that the next create looks for that node first and
// the call, if it fails, deletes it.
type protectedCreate struct {
	guid      string
	uncertain bool
}

// create makes this call's node in the queue, creating the lock path as
// persistent nodes if needed. When ctx ends first, the outcome is awaited
// in the background and the node, if it was made, is deleted there: the
// call then owns nothing, and pc is no longer uncertain.
func (d *driver) create(ctx context.Context, pc *protectedCreate, data []byte) (string, error) {
	type res struct {
		node      string
		uncertain bool
		err       error
	}
	ch := make(chan res, 1)
	guid, uncertain := pc.guid, pc.uncertain
	go func() {
		node, uncertain, err := createProtected(d.conn, d.dir, guid, d.r.kind, data, d.acl, uncertain)
		ch <- res{node, uncertain, err}
	}()
	select {
	case r := <-ch:
		pc.uncertain = r.uncertain
		if r.err != nil {
			return "", wrap(r.err)
		}
		return r.node, nil
	case <-ctx.Done():
		pc.uncertain = false // handed over to the goroutine below
		go func() {
			if r := <-ch; r.err == nil {
				d.deleteNode(r.node)
			} else if r.uncertain {
				d.cleanupGUID(guid)
			}
		}()
		return "", ctx.Err()
	}
}

// Errors after which a create certainly made no node.
var definiteCreateErrors = []error{
	zk.ErrNoAuth, zk.ErrInvalidACL, zk.ErrBadArguments, zk.ErrInvalidFlags,
	zk.ErrInvalidPath, zk.ErrNoChildrenForEphemerals, zk.ErrNodeExists,
	zk.ErrClosing, zk.ErrAuthFailed,
}

// createProtected creates an ephemeral sequential node "<dir>/_c_<guid>-
// <kind>-<seq>" and returns its path; it is Curator's protected mode. When
// the reply of a create is lost with the connection, the node may or may not
// exist: before creating again, the client lists dir (once reconnected) and
// takes the node that carries guid, and creates only when the listing shows
// none, so that one guid never names two nodes. uncertain says that an
// earlier create with guid may have made a node; the result says whether
// that is still so when an error is returned.
//
// ZooKeeper makes the listing conclusive: a session's requests are applied
// in order, and when the client reconnects the server closes the session's
// old connection (a request still in it is dropped, and one that reached
// another server fails as the session moved), so a create sent before the
// listing cannot be applied after it.
//
// go-zookeeper's Conn.CreateProtectedEphemeralSequential does not do the
// job: it draws the GUID itself and does not return it with an error, so a
// call that fails cannot find and delete the node it may have made; after a
// lost reply it gives up at the first failed listing (most often the client
// has not reconnected yet); and it slices every "_c_" child to 35 bytes,
// which panics on a shorter foreign node.
func createProtected(conn *zk.Conn, dir, guid, kind string, data []byte, acl []zk.ACL, uncertain bool) (string, bool, error) {
	name := dir + "/" + protectedName(guid, kind)
	var err error
	var down downClock
	for attempt := 0; attempt < 10 && !down.closed(conn); attempt++ {
		if attempt > 0 {
			time.Sleep(time.Duration(attempt) * 50 * time.Millisecond)
		}
		if uncertain {
			var children []string
			children, _, err = conn.Children(dir)
			switch {
			case errors.Is(err, zk.ErrNoNode):
				uncertain = false // no lock path, no node
			case err != nil:
				continue // still disconnected; the next round looks again
			default:
				if c, ok := findProtected(children, guid); ok {
					return dir + "/" + c, false, nil
				}
				uncertain = false
			}
		}
		var node string
		node, err = conn.Create(name, data, zk.FlagEphemeralSequential, acl)
		switch {
		case err == nil:
			return node, false, nil
		case errors.Is(err, zk.ErrNoNode):
			if err = ensurePath(conn, dir, acl); err != nil {
				return "", false, err
			}
			continue
		case errors.Is(err, zk.ErrSessionExpired):
			continue // a node of the expired session is gone with it
		}
		for _, e := range definiteCreateErrors {
			if errors.Is(err, e) {
				return "", false, err
			}
		}
		uncertain = true // the reply was lost: look for the node first
	}
	if down.closed(conn) {
		return "", uncertain, fmt.Errorf("%w: %w", errClosed, err)
	}
	return "", uncertain, err
}

// ensurePath creates dir and its parents as persistent nodes.
func ensurePath(conn *zk.Conn, dir string, acl []zk.ACL) error {
	p := ""
	for _, el := range strings.Split(dir[1:], "/") {
		p += "/" + el
		if _, err := conn.Create(p, nil, zk.FlagPersistent, acl); err != nil && !errors.Is(err, zk.ErrNodeExists) {
			return err
		}
	}
	return nil
}

// abandon deletes the node of an Acquire that gives up. It tries for up to
// a second, then goes on in the background: a waiter node left behind in a
// live session would block the queue.
func (d *driver) abandon(ctx context.Context, node string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
	defer cancel()
	_, err := call(ctx, func() (struct{}, error) { return struct{}{}, d.conn.Delete(node, -1) })
	if err != nil && !errors.Is(err, zk.ErrNoNode) {
		d.deleteNode(node)
	}
}

// Retries of background clean-ups: together about a minute, longer than any
// reasonable session timeout, after which an ephemeral node of a broken
// session is gone anyway.
const cleanupTries = 30

// deleteNode deletes node in the background, retrying while the connection
// is down.
func (d *driver) deleteNode(node string) {
	go func() {
		var down downClock
		for i := range cleanupTries {
			err := d.conn.Delete(node, -1)
			if err == nil || errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrClosing) || down.closed(d.conn) {
				return
			}
			time.Sleep(time.Duration(min(i+1, 10)) * 200 * time.Millisecond)
		}
	}()
}

// cleanupGUID deletes, in the background, the node of a create that failed
// in a way that leaves unknown whether the node was made.
func (d *driver) cleanupGUID(guid string) {
	go func() {
		var down downClock
		for i := range cleanupTries {
			children, _, err := d.conn.Children(d.dir)
			if errors.Is(err, zk.ErrNoNode) || errors.Is(err, zk.ErrClosing) || (err != nil && down.closed(d.conn)) {
				return
			}
			if err == nil {
				if c, ok := findProtected(children, guid); ok {
					d.deleteNode(d.dir + "/" + c)
				}
				return
			}
			time.Sleep(time.Duration(min(i+1, 10)) * 200 * time.Millisecond)
		}
	}()
}
