package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// Proxy is a TCP proxy on 127.0.0.1 between clients and one server, which can
// delay, stall, cut and lose replies. Safe for concurrent use.
//
// Every accepted connection gets its own connection to the target; bytes are
// copied both ways in order by a reader and a writer per direction, with a
// small queue between them where delays and stalls hold chunks. Faults are
// decided as the server's bytes arrive at the proxy, and carried out in order
// with the bytes before them: a lost reply closes the connection only once
// the replies before it have been written to the client.
//
// Most tests want NewProxy and then LoseNextRepliesTo, WaitLost and a look
// at the server, to show what a command whose reply never came did:
//
//	r := testenv.NewRedis(t)
//	p := testenv.NewProxy(t, r.Addr)
//	rdb := redis.NewClient(&redis.Options{Addr: p.Addr(), MaxRetries: -1})
//	p.LoseNextRepliesTo(1, "INCR")
//	err := rdb.Incr(ctx, "n").Err() // EOF: INCR ran, its reply was lost
//
// There is no zero value: start one with StartProxy or NewProxy.
type Proxy struct {
	target string
	ln     net.Listener
	ctx    context.Context // cancelled by Close: ends dials to the target
	cancel context.CancelFunc
	wg     sync.WaitGroup // every goroutine of the proxy

	mu          sync.Mutex
	closed      bool
	conns       map[*proxyConn]struct{}
	delay       time.Duration
	stalled     bool
	resumed     chan struct{} // closed by Resume; replaced by Stall
	refuse      bool
	loseReplies int
	loseTo      map[string]bool // commands whose replies LoseNextRepliesTo loses; nil: any
	loseChunks  int
	lost        int
	lostChanged chan struct{} // closed and replaced whenever lost grows
}

// proxyDialTimeout bounds the dial to the target for one client connection.
const proxyDialTimeout = 5 * time.Second

// proxyChunk is the most one read takes from either side.
const proxyChunk = 32 << 10

// StartProxy listens on 127.0.0.1:0 and forwards every connection to target
// (host:port). It does not dial target until a client connects; a client
// whose dial to target fails is disconnected. The caller must Close the
// proxy (NewProxy does it for you).
func StartProxy(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("testenv: proxy: %w", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	p := &Proxy{
		target:      target,
		ln:          ln,
		ctx:         ctx,
		cancel:      cancel,
		conns:       make(map[*proxyConn]struct{}),
		resumed:     make(chan struct{}),
		lostChanged: make(chan struct{}),
	}
	close(p.resumed)
	p.wg.Add(1)
	go p.accept()
	return p, nil
}

// NewProxy is StartProxy for one test: it fails the test with t.Fatalf on
// error and closes the proxy with t.Cleanup.
func NewProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	p, err := StartProxy(target)
	if err != nil {
		t.Fatalf("%v", err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return p
}

// Addr returns the address clients dial instead of the target,
// "127.0.0.1:<port>".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Target returns the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// SetDelay delays every server→client chunk by d from when it reached the
// proxy (0: none). It is latency, not a throttle: a reply of many chunks
// arrives d late, not d times the number of chunks late. It applies to
// chunks read after the call. Client→server traffic is never delayed.
func (p *Proxy) SetDelay(d time.Duration) {
	p.mu.Lock()
	p.delay = max(d, 0)
	p.mu.Unlock()
}

// Stall holds all traffic in both directions until Resume: what either side
// sends is buffered (in the proxy, then in the kernel), not lost. New
// connections are accepted and connected to the target, but their traffic
// is held too. Faults already decided (a lost reply, a cut) wait as well.
// Stall while stalled does nothing.
func (p *Proxy) Stall() {
	p.mu.Lock()
	if !p.stalled {
		p.stalled = true
		p.resumed = make(chan struct{})
	}
	p.mu.Unlock()
}

// Resume releases what Stall held, in order in each direction, and lets
// traffic flow again. Resume without Stall does nothing.
func (p *Proxy) Resume() {
	p.mu.Lock()
	if p.stalled {
		p.stalled = false
		close(p.resumed)
	}
	p.mu.Unlock()
}

// LoseNextReplies makes the proxy drop the next n replies the server sends
// (on any connection), each with the rest of its connection: the reply is
// buffered whole, however many TCP chunks it spans, then dropped, and the
// connection is closed on both sides. The command ran; its reply never
// arrives, and the client sees EOF or a reset. Replies before the lost one
// on that connection are delivered; replies after it (pipelined) are lost
// with the connection and not counted.
//
// A reply is one complete RESP2 or RESP3 value, found by scanning the
// server→client stream. Every reply counts, including those to a client's
// connection handshake (HELLO, AUTH, SELECT, CLIENT SETINFO), and a client
// pool may open a new connection for any command: prefer LoseNextRepliesTo,
// or run a command such as PING on the connection first.
// RESP3 push messages ('>') are never lost on their own; in RESP2 a pub/sub
// message is an ordinary array and counts as a reply. For a server that does
// not speak RESP (SQL, ZooKeeper) no reply is ever found: use
// LoseNextChunks.
//
// n replaces any count still pending (and any commands named by
// LoseNextRepliesTo); 0 cancels.
func (p *Proxy) LoseNextReplies(n int) { p.LoseNextRepliesTo(n) }

// LoseNextRepliesTo is LoseNextReplies for the replies to the named commands
// only (the first word, any case: "EVALSHA", "incr"); other replies pass.
// With no names it is LoseNextReplies. It needs no warm-up: the handshake of
// a client's new connection is not matched.
//
// The proxy pairs replies with commands by order, reading the commands as
// the client sends them, as RESP arrays. That holds on command connections;
// on a connection in pub/sub mode (RESP2), after CLIENT REPLY OFF or SKIP,
// or under MONITOR, replies may be paired with the wrong command. n
// replaces any count still pending; 0 cancels.
func (p *Proxy) LoseNextRepliesTo(n int, commands ...string) {
	var to map[string]bool
	if len(commands) > 0 {
		to = make(map[string]bool, len(commands))
		for _, c := range commands {
			to[strings.ToUpper(c)] = true
		}
	}
	p.mu.Lock()
	p.loseReplies = max(n, 0)
	p.loseTo = to
	p.mu.Unlock()
}

// LoseNextChunks is the protocol-agnostic LoseNextReplies: the next n reads
// from the server (on any connection; each at most 32 KiB, whatever the
// server's write happened to deliver) are dropped and that connection is
// closed on both sides. n replaces any count still pending; 0 cancels.
func (p *Proxy) LoseNextChunks(n int) {
	p.mu.Lock()
	p.loseChunks = max(n, 0)
	p.mu.Unlock()
}

// CutAll closes every open connection now, on both sides, dropping whatever
// the proxy still held for them. New connections are served as usual.
func (p *Proxy) CutAll() {
	for _, c := range p.snapshot() {
		c.close()
	}
}

// Refuse, while on, makes the proxy accept new connections and close them at
// once (the client sees EOF or a reset on its first read or write).
// Connections already open are left alone.
func (p *Proxy) Refuse(on bool) {
	p.mu.Lock()
	p.refuse = on
	p.mu.Unlock()
}

// Lost returns how many replies and chunks the proxy has dropped so far. A
// loss counts once its connection has been closed.
func (p *Proxy) Lost() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lost
}

// WaitLost waits until Lost() >= n or timeout has passed, and reports
// whether Lost() >= n.
func (p *Proxy) WaitLost(n int, timeout time.Duration) bool {
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	for {
		p.mu.Lock()
		lost, changed := p.lost, p.lostChanged
		p.mu.Unlock()
		if lost >= n {
			return true
		}
		select {
		case <-changed:
		case <-timer.C:
			return p.Lost() >= n
		}
	}
}

// Close stops listening, closes every connection and returns once every
// goroutine of the proxy has ended. Later calls return nil.
func (p *Proxy) Close() error {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil
	}
	p.closed = true
	p.mu.Unlock()
	err := p.ln.Close()
	p.cancel()
	p.CutAll()
	p.wg.Wait()
	if errors.Is(err, net.ErrClosed) {
		err = nil
	}
	return err
}

func (p *Proxy) snapshot() []*proxyConn {
	p.mu.Lock()
	defer p.mu.Unlock()
	cs := make([]*proxyConn, 0, len(p.conns))
	for c := range p.conns {
		cs = append(cs, c)
	}
	return cs
}

// accept runs until the listener is closed.
func (p *Proxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// A transient error (out of descriptors): try again shortly.
			select {
			case <-p.ctx.Done():
				return
			case <-time.After(10 * time.Millisecond):
			}
			continue
		}
		p.mu.Lock()
		refuse := p.refuse || p.closed
		var c *proxyConn
		if !refuse {
			c = &proxyConn{p: p, client: client, done: make(chan struct{})}
			p.conns[c] = struct{}{}
			p.wg.Add(1)
		}
		p.mu.Unlock()
		if refuse {
			_ = client.Close()
			continue
		}
		go c.serve()
	}
}

// takeChunk uses up one of loseChunks if any is left.
func (p *Proxy) takeChunk() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.loseChunks == 0 {
		return false
	}
	p.loseChunks--
	return true
}

// takeReply uses up one of loseReplies, if any is left and the reply, to the
// command named cmd ("" if unknown), is one to lose.
func (p *Proxy) takeReply(cmd string) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.loseReplies == 0 || (p.loseTo != nil && !p.loseTo[cmd]) {
		return false
	}
	p.loseReplies--
	return true
}

func (p *Proxy) addLost() {
	p.mu.Lock()
	p.lost++
	close(p.lostChanged)
	p.lostChanged = make(chan struct{})
	p.mu.Unlock()
}

// proxyConn is one client connection and its connection to the target.
type proxyConn struct {
	p      *Proxy
	client net.Conn
	server net.Conn // set by serve under p.mu; nil until dialled

	done      chan struct{} // closed by close
	closeOnce sync.Once
	halves    atomic.Int32 // directions that ended with EOF passed on

	cmdMu sync.Mutex
	cmds  []string // names of the commands sent and not yet answered, oldest first
}

// maxPendingCommands caps proxyConn.cmds for a client that sends without
// reading replies (CLIENT REPLY OFF); past it the oldest names are dropped.
const maxPendingCommands = 4096

// maxCommandPrefix is how much of a command is kept to find its name.
const maxCommandPrefix = 64

// sent records that the client sent the command name. Subscription commands
// are not recorded: in RESP3 they are answered by pushes, not replies.
func (c *proxyConn) sent(name string) {
	switch name {
	case "SUBSCRIBE", "PSUBSCRIBE", "SSUBSCRIBE", "UNSUBSCRIBE", "PUNSUBSCRIBE", "SUNSUBSCRIBE":
		return
	}
	c.cmdMu.Lock()
	if len(c.cmds) >= maxPendingCommands {
		c.cmds = c.cmds[1:]
	}
	c.cmds = append(c.cmds, name)
	c.cmdMu.Unlock()
}

// answered returns the name of the oldest command not yet answered and
// forgets it, or "" if there is none.
func (c *proxyConn) answered() string {
	c.cmdMu.Lock()
	defer c.cmdMu.Unlock()
	if len(c.cmds) == 0 {
		return ""
	}
	name := c.cmds[0]
	c.cmds = c.cmds[1:]
	return name
}

// commandName returns the upper-cased first word of a RESP command from the
// start of its encoding ("*2\r\n$3\r\nGET\r\n..."), or "" if b does not
// hold it whole.
func commandName(b []byte) string {
	line := func() ([]byte, bool) {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			return nil, false
		}
		l := bytes.TrimSuffix(b[:i], []byte("\r"))
		b = b[i+1:]
		return l, true
	}
	if h, ok := line(); !ok || len(h) == 0 || h[0] != '*' {
		return ""
	}
	h, ok := line()
	if !ok || len(h) == 0 || h[0] != '$' {
		return ""
	}
	n, ok := atoiRESP(h[1:])
	if !ok || n < 0 || len(b) < n {
		return ""
	}
	return strings.ToUpper(string(b[:n]))
}

// chunk is what a reader hands its writer: data to write no earlier than at,
// then possibly the end of the direction.
type chunk struct {
	data []byte
	at   time.Time
	eof  bool // the source ended: half-close the destination
	cut  bool // a lost reply or chunk: close the connection and count it
}

// close closes both sides at once (idempotent) and forgets the connection.
func (c *proxyConn) close() {
	c.closeOnce.Do(func() {
		p := c.p
		p.mu.Lock()
		delete(p.conns, c)
		server := c.server
		close(c.done)
		p.mu.Unlock()
		_ = c.client.Close()
		if server != nil {
			_ = server.Close()
		}
	})
}

// serve dials the target and runs the four pumps. It ends when they have
// started; each pump ends when the connection is closed or its direction is
// done.
func (c *proxyConn) serve() {
	p := c.p
	defer p.wg.Done()
	ctx, cancel := context.WithTimeout(p.ctx, proxyDialTimeout)
	d := net.Dialer{}
	server, err := d.DialContext(ctx, "tcp", p.target)
	cancel()
	if err != nil {
		c.close()
		return
	}
	p.mu.Lock()
	select {
	case <-c.done: // cut or closed while dialling
		p.mu.Unlock()
		_ = server.Close()
		return
	default:
	}
	c.server = server
	p.wg.Add(4)
	p.mu.Unlock()

	up := make(chan chunk, 64)
	down := make(chan chunk, 64)
	go c.readUp(up)
	go c.write(c.server, up)
	go c.readDown(down)
	go c.write(c.client, down)
}

// send queues ch for the writer, or reports false if the connection closed.
func (c *proxyConn) send(q chan<- chunk, ch chunk) bool {
	select {
	case q <- ch:
		return true
	case <-c.done:
		return false
	}
}

// readUp copies client→server bytes into q, recording the name of each
// command before any of its bytes can reach the server.
func (c *proxyConn) readUp(q chan<- chunk) {
	defer c.p.wg.Done()
	buf := make([]byte, proxyChunk)
	var sc respScanner
	var prefix []byte // the start of the current command, up to maxCommandPrefix bytes
	inCommand := false
	for {
		n, err := c.client.Read(buf)
		for pos := 0; pos < n && !sc.bad; {
			k, ev := sc.step(buf[pos:n])
			if inCommand {
				prefix = append(prefix, buf[pos:pos+min(k, maxCommandPrefix-len(prefix))]...)
			}
			pos += k
			switch ev {
			case scanStart:
				inCommand, prefix = true, prefix[:0]
			case scanEnd:
				if inCommand {
					c.sent(commandName(prefix))
					inCommand = false
				}
			}
			if inCommand && len(prefix) == maxCommandPrefix {
				c.sent(commandName(prefix))
				inCommand = false
			}
		}
		if n > 0 && !c.send(q, chunk{data: append([]byte(nil), buf[:n]...)}) {
			return
		}
		if err != nil {
			c.ended(q, err)
			return
		}
	}
}

// ended passes on the end of a direction: EOF is forwarded as a
// half-close after the queued data; any other error closes the connection.
func (c *proxyConn) ended(q chan<- chunk, err error) {
	if isEOF(err) {
		c.send(q, chunk{eof: true})
		return
	}
	c.close()
}

// readDown copies server→client bytes into q, stamping each chunk with the
// delay and deciding which replies or chunks are lost.
func (c *proxyConn) readDown(q chan<- chunk) {
	p := c.p
	defer p.wg.Done()
	buf := make([]byte, proxyChunk)
	var sc respScanner
	losing := false // a reply is being lost: drop everything until it ends
	for {
		n, err := c.server.Read(buf)
		if n > 0 {
			p.mu.Lock()
			at := time.Now().Add(p.delay)
			p.mu.Unlock()
			data := buf[:n]
			var keep []byte
			var cut bool
			if !losing && p.takeChunk() {
				cut = true
			} else {
				keep, losing, cut = c.splitReply(&sc, data, losing)
			}
			if len(keep) > 0 || cut {
				ch := chunk{data: append([]byte(nil), keep...), at: at, cut: cut}
				if !c.send(q, ch) || cut {
					return
				}
			}
		}
		if err != nil {
			if losing {
				// The server ended in the middle of the lost reply: the
				// client gets none of it all the same.
				c.send(q, chunk{at: time.Now(), cut: true})
				return
			}
			c.ended(q, err)
			return
		}
	}
}

// splitReply scans data, the next bytes from the server, for reply
// boundaries. It returns the bytes to forward, whether a lost reply is still
// being read (losing, as passed in for the start of data), and whether the
// lost reply is complete so the connection is to be cut after keep.
func (c *proxyConn) splitReply(sc *respScanner, data []byte, losing bool) (keep []byte, stillLosing, cut bool) {
	keepN := len(data)
	if losing {
		keepN = 0
	}
	for pos := 0; pos < len(data); {
		k, ev := sc.step(data[pos:])
		pos += k
		switch ev {
		case scanStart:
			if losing || data[pos] == '>' || !isRESPType(data[pos]) {
				break // a push is not a reply; not RESP is not a reply either
			}
			if c.p.takeReply(c.answered()) {
				losing, keepN = true, pos
			}
		case scanEnd:
			if losing {
				return data[:keepN], false, true
			}
		}
	}
	if losing && sc.bad {
		// Not RESP after all: the reply's end cannot be found, so cut now.
		return data[:keepN], false, true
	}
	return data[:keepN], losing, false
}

// write writes what q brings to dst, each chunk when it is due and the proxy
// is not stalled.
func (c *proxyConn) write(dst net.Conn, q <-chan chunk) {
	p := c.p
	defer p.wg.Done()
	for {
		var ch chunk
		select {
		case ch = <-q:
		case <-c.done:
			return
		}
		if !c.wait(ch.at) {
			return
		}
		if len(ch.data) > 0 {
			if _, err := dst.Write(ch.data); err != nil {
				c.close()
				return
			}
		}
		switch {
		case ch.cut:
			c.close()
			p.addLost()
			return
		case ch.eof:
			if tc, ok := dst.(*net.TCPConn); ok {
				_ = tc.CloseWrite()
			}
			if c.halves.Add(1) == 2 {
				c.close()
			}
			return
		}
	}
}

// wait blocks until at has passed and the proxy is not stalled, and reports
// false if the connection was closed meanwhile.
func (c *proxyConn) wait(at time.Time) bool {
	if d := time.Until(at); d > 0 {
		t := time.NewTimer(d)
		select {
		case <-t.C:
		case <-c.done:
			t.Stop()
			return false
		}
	}
	for {
		c.p.mu.Lock()
		stalled, resumed := c.p.stalled, c.p.resumed
		c.p.mu.Unlock()
		if !stalled {
			return true
		}
		select {
		case <-resumed:
		case <-c.done:
			return false
		}
	}
}

func isEOF(err error) bool {
	return errors.Is(err, io.EOF)
}
