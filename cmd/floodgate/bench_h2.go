package main

// A lean gRPC client for floodgate bench: ShouldRateLimit over cleartext
// HTTP/2 (h2c with prior knowledge), framed with golang.org/x/net/http2's
// Framer and hpack, in the way Envoy's C++ client works: no goroutine per
// call, shared write syscalls, one reader per connection.

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
)

const (
	// h2Path is the gRPC method the client calls.
	h2Path = "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit"
	// h2StreamWindow is the receive window of each stream (the client's
	// SETTINGS_INITIAL_WINDOW_SIZE). Streams are never replenished: an
	// answer is a few bytes, and h2MaxAnswer keeps one below the window.
	h2StreamWindow = 1 << 22
	// h2MaxAnswer bounds the bytes of DATA one answer may carry.
	h2MaxAnswer = h2StreamWindow - 1024
	// h2ConnWindow is the connection's receive window; h2WindowRefill bytes
	// of DATA received are given back in a WINDOW_UPDATE, so the window never
	// runs dry while answers are read.
	h2ConnWindow   = 1 << 20
	h2WindowRefill = 1 << 14
	// h2DefaultWindow is HTTP/2's initial window (RFC 9113 §6.9.2).
	h2DefaultWindow = 65535
	// h2MaxStreamID is the last stream ID a client can use; a connection that
	// has used it takes no more calls and a new one is dialed.
	h2MaxStreamID = 1<<31 - 1
	// h2Attempts bounds the tries of a call the server refused unprocessed
	// (GOAWAY, REFUSED_STREAM, a connection lost before the call was sent).
	h2Attempts = 3
	// h2ReadBuffer is the reader's buffer: many answers per read syscall.
	h2ReadBuffer = 32 << 10
	// h2ControlDelay is how long the control frames the reader queues (PING
	// and SETTINGS ACKs, WINDOW_UPDATE) wait for a worker's write to carry
	// them before they are written on their own. A grpc-go server keeps a ping
	// in flight while data flows, to estimate the bandwidth-delay product:
	// written on their own, the ACKs add a syscall a round trip.
	h2ControlDelay = time.Millisecond
)

// benchH2 sends ShouldRateLimit as gRPC over cleartext HTTP/2 on cfg.conns
// connections, speaking the protocol itself rather than through grpc-go.
// Workers append their frames to their connection's buffer and whichever
// finds no write in progress writes the buffer for all of them; one reader
// goroutine per connection decodes the answers and hands each to its
// worker. A connection that dies or receives GOAWAY is replaced on the next
// call. It is safe for concurrent use, with one caller per worker. The zero
// value is not usable: create it with newBenchH2, and release its connections
// with close.
type benchH2 struct {
	target  string // --addr, for messages
	timeout time.Duration
	domain  string
	descs   []h2Descriptor
	fields  []hpack.HeaderField // the request headers, in order
	dial    func(deadline time.Time) (net.Conn, error)
	slots   []*h2Slot

	mu     sync.Mutex
	conns  []*h2Conn // every connection made, for close
	closed bool
}

// newBenchH2 returns a client of cfg.target: host:port, or a Unix socket as
// unix:PATH or unix:///PATH. It dials nothing: each connection is dialed by
// its first call. It returns an error for any other form of address and for
// TLS, which it does not speak.
func newBenchH2(cfg *benchConfig) (*benchH2, error) {
	if cfg.tlsConf != nil {
		return nil, errors.New("the h2 client speaks cleartext HTTP/2 only; with --tls use --client grpc-go")
	}
	network, address, authority, err := h2Target(cfg.target)
	if err != nil {
		return nil, err
	}
	fields := []hpack.HeaderField{
		{Name: ":method", Value: "POST"},
		{Name: ":scheme", Value: "http"},
		{Name: ":path", Value: h2Path},
		{Name: ":authority", Value: authority},
		{Name: "content-type", Value: "application/grpc"},
		{Name: "user-agent", Value: "floodgate-bench"},
		{Name: "te", Value: "trailers"},
		{Name: "grpc-timeout", Value: h2Timeout(cfg.timeout)},
	}
	if cfg.token != "" {
		fields = append(fields, hpack.HeaderField{Name: "authorization", Value: "Bearer " + cfg.token})
	}
	h := &benchH2{target: cfg.target, timeout: cfg.timeout, domain: cfg.domain, fields: fields}
	for _, d := range cfg.descs {
		var es h2Descriptor
		for _, e := range d.Entries {
			es = append(es, [2]string{e.Key, e.Value})
		}
		h.descs = append(h.descs, es)
	}
	h.dial = func(deadline time.Time) (net.Conn, error) {
		d := net.Dialer{Deadline: deadline, KeepAlive: 30 * time.Second}
		return d.Dial(network, address)
	}
	for range max(cfg.conns, 1) {
		h.slots = append(h.slots, &h2Slot{})
	}
	return h, nil
}

// h2Target splits a gRPC address into what to dial and the :authority.
func h2Target(addr string) (network, address, authority string, err error) {
	if path, ok := strings.CutPrefix(addr, "unix:"); ok {
		path = strings.TrimPrefix(path, "//")
		if path == "" {
			return "", "", "", fmt.Errorf("--addr %q: the Unix socket needs a path (unix:///run/floodgate.sock)", addr)
		}
		return "unix", path, "localhost", nil
	}
	if _, port, err := net.SplitHostPort(addr); err != nil || port == "" {
		return "", "", "", fmt.Errorf("--addr %q: the h2 client dials host:port, unix:PATH or unix:///PATH; for other gRPC targets use --client grpc-go", addr)
	}
	return "tcp", addr, addr, nil
}

// h2Timeout formats d as a grpc-timeout header: at most 8 digits and a unit,
// rounded up.
func h2Timeout(d time.Duration) string {
	for _, u := range []struct {
		d    time.Duration
		unit string
	}{{time.Nanosecond, "n"}, {time.Microsecond, "u"}, {time.Millisecond, "m"}, {time.Second, "S"}, {time.Minute, "M"}, {time.Hour, "H"}} {
		if v := (d + u.d - 1) / u.d; v <= 99_999_999 {
			return strconv.FormatInt(int64(v), 10) + u.unit
		}
	}
	return "99999999H"
}

func (h *benchH2) close() {
	h.mu.Lock()
	h.closed = true
	conns := h.conns
	h.conns = nil
	h.mu.Unlock()
	for _, c := range conns {
		c.close()
	}
}

// connect dials a connection and does the HTTP/2 handshake by deadline.
func (h *benchH2) connect(deadline time.Time) (*h2Conn, error) {
	nc, err := h.dial(deadline)
	if err != nil {
		return nil, err
	}
	c, err := newH2Conn(nc, h.target, h.fields, h.timeout, deadline)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("HTTP/2 handshake with %s: %w", h.target, err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		c.close()
		return nil, errors.New("the h2 client is closed")
	}
	// Forget the connections that are done, so that a run through many
	// reconnections does not keep them all.
	h.conns = slices.DeleteFunc(h.conns, func(c *h2Conn) bool {
		select {
		case <-c.done:
			return true
		default:
			return false
		}
	})
	h.conns = append(h.conns, c)
	return c, nil
}

// h2Slot is one of the client's connections, redialed when it dies.
type h2Slot struct {
	cur       atomic.Pointer[h2Conn]
	mu        sync.Mutex // held while dialing
	dialErr   error      // of the last dial that failed
	dialErrAt time.Time
}

// conn returns the slot's connection, dialing one when it has none that
// takes calls. Callers that were waiting on a dial that failed get its error
// rather than dialing again.
func (h *benchH2) conn(s *h2Slot, deadline time.Time) (*h2Conn, error) {
	if c := s.cur.Load(); c != nil && c.usable.Load() {
		return c, nil
	}
	asked := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.cur.Load(); c != nil && c.usable.Load() {
		return c, nil
	}
	if s.dialErr != nil && s.dialErrAt.After(asked) {
		return nil, s.dialErr
	}
	c, err := h.connect(deadline)
	if err != nil {
		s.dialErr, s.dialErrAt = err, time.Now()
		return nil, err
	}
	s.dialErr = nil
	s.cur.Store(c)
	return c, nil
}

func (h *benchH2) caller(w int, cost uint64) benchCall {
	k := &h2Caller{
		h:     h,
		slot:  h.slots[w%len(h.slots)],
		tmpl:  newH2Template(h.domain, h.descs, cost),
		st:    &h2Stream{ch: make(chan h2Result, 1)},
		timer: time.NewTimer(time.Hour),
	}
	k.timer.Stop()
	return k.call
}

// h2Caller is one worker's state, reused from call to call.
type h2Caller struct {
	h     *benchH2
	slot  *h2Slot
	tmpl  *h2Template
	st    *h2Stream
	body  []byte // the gRPC message of the current call
	num   []byte // the decimal key number
	timer *time.Timer
}

// call sends one request with key number n and waits for its answer, for
// at most the client's timeout: then the stream is cancelled with
// RST_STREAM(CANCEL) and the call fails with DeadlineExceeded. A call the
// server refused without processing it is tried again on a new connection.
func (k *h2Caller) call(n int) (rls.RateLimitResponse_Code, error) {
	k.num = strconv.AppendInt(k.num[:0], int64(n), 10)
	k.body = k.tmpl.appendMessage(k.body[:0], k.num)
	deadline := time.Now().Add(k.h.timeout)
	for attempt := 1; ; attempt++ {
		c, err := k.h.conn(k.slot, deadline)
		if err != nil {
			return 0, err
		}
		k.timer.Reset(time.Until(deadline))
		r := c.roundTrip(k.st, k.body, k.timer)
		k.timer.Stop()
		if !r.retry || attempt == h2Attempts || !time.Now().Before(deadline) {
			return r.code, r.err
		}
	}
}

// h2Result is what a worker receives on its stream's channel: the answer,
// or a grant to open a stream (grant), or an error; retry says the server
// did not process the call.
type h2Result struct {
	code  rls.RateLimitResponse_Code
	err   error
	retry bool
	grant bool
}

// h2Stream is a worker's call, reused from call to call. ch carries exactly
// one h2Result per registration (in the connection's streams or waiters),
// sent by whoever removes it from there under the connection's mu; the
// worker always receives it, so the send never blocks.
type h2Stream struct {
	ch chan h2Result

	// Guarded by the connection's mu while the stream is registered.
	id         uint32
	body       []byte // the DATA to send; body[sent:] waits for window
	sent       int
	sendWindow int64
	gotHeaders bool
	data       []byte // DATA received
}

// h2Conn is one HTTP/2 connection. Its mu guards everything but the
// reader's own state (rfr, dec, hdr): the write buffer, the streams, the
// flow-control windows and the peer's settings.
type h2Conn struct {
	nc      net.Conn
	target  string
	timeout time.Duration
	usable  atomic.Bool   // takes new calls: not failed, draining or out of stream IDs
	done    chan struct{} // closed when the reader has returned
	wg      sync.WaitGroup

	// The reader's own.
	rfr     *http2.Framer
	br      *bufio.Reader
	dec     *hpack.Decoder
	hdr     h2Headers // the header block being decoded
	hdrID   uint32    // its stream
	hdrEnds bool      // it ends the stream

	mu       sync.Mutex
	wfr      *http2.Framer // writes frames to wbuf
	wbuf     []byte        // frames not yet written
	spare    []byte        // the other buffer, written while wbuf fills
	flushing bool          // someone is writing; they write wbuf too before they stop
	ctrl     *time.Timer   // writes the reader's frames when no worker does
	ctrlOn   bool          // ctrl is set to fire
	enc      *hpack.Encoder
	encBuf   bytes.Buffer
	fields   []hpack.HeaderField
	hdrFirst []byte // the request header block that fills the dynamic table
	hdrRest  []byte // the one every later request sends: all indexed
	hdrSent  bool   // hdrFirst has been sent

	streams    map[uint32]*h2Stream
	waiters    []*h2Stream // for a stream slot (MAX_CONCURRENT_STREAMS), in order
	pending    []*h2Stream // with DATA waiting for flow-control window, in order
	active     uint32      // streams open or granted
	nextID     uint32
	sendWindow int64 // the connection's send window
	recvUnack  int   // DATA bytes received and not yet given back

	peerMaxStreams uint32
	peerInitWindow int64
	peerMaxFrame   int
	peerTableSize  uint32

	draining bool   // GOAWAY received or stream IDs used up: no new streams
	goAway   string // the GOAWAY, for messages
	err      error  // the connection is dead

	stats h2Stats
}

// h2Stats counts flow-control traffic and pings, for tests.
type h2Stats struct {
	updatesSent, updatesReceived int   // WINDOW_UPDATE frames
	dataSent, dataReceived       int64 // DATA payload bytes
	pings                        int   // PINGs answered
}

// h2Headers are the fields of a response header block the client reads.
type h2Headers struct {
	status, contentType, grpcStatus, grpcMessage string
	hasGRPCStatus                                bool
}

// h2Appender appends the write Framer's frames to the connection's buffer;
// it requires that c.mu is held.
type h2Appender struct{ c *h2Conn }

func (a h2Appender) Write(p []byte) (int, error) {
	a.c.wbuf = append(a.c.wbuf, p...)
	return len(p), nil
}

// newH2Conn does the client's side of the handshake on nc by deadline: the
// preface, SETTINGS and a connection WINDOW_UPDATE out, the server's SETTINGS
// in (its ACK goes out with the first request). It starts the reader.
func newH2Conn(nc net.Conn, target string, fields []hpack.HeaderField, timeout time.Duration, deadline time.Time) (*h2Conn, error) {
	c := &h2Conn{
		nc: nc, target: target, timeout: timeout, fields: fields,
		done:           make(chan struct{}),
		streams:        map[uint32]*h2Stream{},
		nextID:         1,
		sendWindow:     h2DefaultWindow,
		peerMaxStreams: ^uint32(0),
		peerInitWindow: h2DefaultWindow,
		peerMaxFrame:   16384,
		peerTableSize:  4096,
	}
	c.br = bufio.NewReaderSize(nc, h2ReadBuffer)
	c.rfr = http2.NewFramer(nil, c.br)
	c.rfr.SetReuseFrames()
	c.rfr.SetMaxReadFrameSize(16384) // the default: the client sends no SETTINGS_MAX_FRAME_SIZE
	c.dec = hpack.NewDecoder(4096, c.emit)
	c.dec.SetMaxStringLength(64 << 10)
	c.wfr = http2.NewFramer(h2Appender{c}, nil)
	c.enc = hpack.NewEncoder(&c.encBuf)
	c.ctrl = time.AfterFunc(time.Hour, c.flushControl)
	c.ctrl.Stop()

	c.wbuf = append(c.wbuf, http2.ClientPreface...)
	c.check(c.wfr.WriteSettings(
		http2.Setting{ID: http2.SettingEnablePush, Val: 0},
		http2.Setting{ID: http2.SettingInitialWindowSize, Val: h2StreamWindow},
	))
	c.check(c.wfr.WriteWindowUpdate(0, h2ConnWindow-h2DefaultWindow))
	if err := nc.SetDeadline(deadline); err != nil {
		return nil, err
	}
	if _, err := nc.Write(c.wbuf); err != nil {
		return nil, err
	}
	c.wbuf = c.wbuf[:0]
	f, err := c.rfr.ReadFrame()
	if err != nil {
		return nil, fmt.Errorf("reading the server's SETTINGS: %w (does %s speak HTTP/2 without TLS?)", err, target)
	}
	sf, ok := f.(*http2.SettingsFrame)
	if !ok || sf.IsAck() {
		return nil, fmt.Errorf("the server's first frame is %v, not SETTINGS", f.Header())
	}
	if err := c.applySettingsLocked(sf); err != nil {
		return nil, err
	}
	c.encodeHeadersLocked()
	if err := nc.SetDeadline(time.Time{}); err != nil {
		return nil, err
	}
	c.usable.Store(true)
	c.wg.Add(1)
	go c.readLoop()
	return c, nil
}

// check fails the connection when a frame could not be written to the
// buffer, which only invalid arguments cause. It requires that c.mu is held.
func (c *h2Conn) check(err error) {
	if err != nil {
		c.failLocked(fmt.Errorf("writing a frame: %w", err))
	}
}

// close fails the connection's calls, closes it and waits for its reader.
func (c *h2Conn) close() {
	c.mu.Lock()
	c.failLocked(errors.New("the h2 client is closed"))
	c.mu.Unlock()
	c.wg.Wait()
}

// encodeHeadersLocked encodes the request header block twice with the
// connection's encoder: the first block adds the fields to the dynamic
// table, the second refers to them only, so it leaves the table as it is and
// every later request can send it as it is. When the fields do not all fit
// in the server's table, the encoder uses no dynamic table and both blocks
// are literals. It requires that c.mu is held.
func (c *h2Conn) encodeHeadersLocked() {
	size := uint32(0)
	for _, f := range c.fields {
		size += f.Size()
	}
	limit := min(c.peerTableSize, 4096)
	if size > limit {
		limit = 0
	}
	c.enc.SetMaxDynamicTableSizeLimit(limit)
	c.enc.SetMaxDynamicTableSize(limit)
	encode := func() []byte {
		c.encBuf.Reset()
		for _, f := range c.fields {
			c.enc.WriteField(f) // writes to a bytes.Buffer: no error
		}
		return slices.Clone(c.encBuf.Bytes())
	}
	c.hdrFirst = encode()
	c.hdrRest = encode()
	c.hdrSent = false
}

// applySettingsLocked applies the server's SETTINGS and queues the ACK. It
// requires that c.mu is held.
func (c *h2Conn) applySettingsLocked(sf *http2.SettingsFrame) error {
	table := c.peerTableSize
	err := sf.ForeachSetting(func(s http2.Setting) error {
		if err := s.Valid(); err != nil {
			return err
		}
		switch s.ID {
		case http2.SettingMaxConcurrentStreams:
			c.peerMaxStreams = s.Val
		case http2.SettingInitialWindowSize:
			delta := int64(s.Val) - c.peerInitWindow
			c.peerInitWindow = int64(s.Val)
			for _, st := range c.pending {
				st.sendWindow += delta
			}
		case http2.SettingMaxFrameSize:
			c.peerMaxFrame = int(s.Val)
		case http2.SettingHeaderTableSize:
			c.peerTableSize = s.Val
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("the server's SETTINGS: %w", err)
	}
	c.check(c.wfr.WriteSettingsAck())
	if c.peerTableSize != table && c.hdrFirst != nil {
		c.encodeHeadersLocked()
	}
	c.grantLocked()
	c.writePendingLocked()
	return nil
}

// roundTrip sends one call on the connection and waits for its answer until
// timer fires; then it cancels the stream. body is the gRPC message with its
// 5-byte prefix; it must not change until roundTrip returns.
func (c *h2Conn) roundTrip(st *h2Stream, body []byte, timer *time.Timer) h2Result {
	c.mu.Lock()
	if r, ok := c.admitLocked(); !ok {
		c.mu.Unlock()
		return r
	}
	if c.active >= c.peerMaxStreams {
		c.waiters = append(c.waiters, st)
		c.mu.Unlock()
		select {
		case r := <-st.ch:
			if !r.grant {
				return r
			}
		case <-timer.C:
			c.mu.Lock()
			if i := slices.Index(c.waiters, st); i >= 0 {
				c.waiters = slices.Delete(c.waiters, i, i+1)
				c.mu.Unlock()
				return c.timedOut()
			}
			c.mu.Unlock()
			if r := <-st.ch; r.grant { // granted as the timer fired
				c.mu.Lock()
				c.releaseLocked()
				c.mu.Unlock()
			}
			return c.timedOut()
		}
		c.mu.Lock()
		if r, ok := c.admitLocked(); !ok {
			c.releaseLocked()
			c.mu.Unlock()
			return r
		}
	} else {
		c.active++
	}
	c.startLocked(st, body)
	c.flushLocked()
	c.mu.Unlock()

	select {
	case r := <-st.ch:
		return r
	case <-timer.C:
		c.mu.Lock()
		if c.streams[st.id] == st {
			c.removeLocked(st, true)
			c.flushLocked()
			c.mu.Unlock()
			return c.timedOut()
		}
		c.mu.Unlock()
		return <-st.ch // answered as the timer fired
	}
}

func (c *h2Conn) timedOut() h2Result {
	return h2Result{err: grpcstatus.Errorf(codes.DeadlineExceeded, "no answer within %v", c.timeout)}
}

// admitLocked reports whether the connection takes a new stream, and when
// not, the result to give the call. It requires that c.mu is held.
func (c *h2Conn) admitLocked() (h2Result, bool) {
	switch {
	case c.err != nil:
		return h2Result{err: c.err, retry: true}, false
	case c.draining:
		return h2Result{err: grpcstatus.Errorf(codes.Unavailable, "the connection to %s is closing: %s", c.target, c.goAway), retry: true}, false
	case c.nextID > h2MaxStreamID:
		c.goAway = "its stream IDs are used up"
		c.drainLocked()
		return h2Result{err: grpcstatus.Errorf(codes.Unavailable, "the connection to %s has used up its stream IDs", c.target), retry: true}, false
	}
	return h2Result{}, true
}

// startLocked registers st under the next stream ID and queues its HEADERS
// and as much of its DATA as the windows allow. It requires that c.mu is
// held and that st holds a stream slot (c.active counts it).
func (c *h2Conn) startLocked(st *h2Stream, body []byte) {
	st.id = c.nextID
	c.nextID += 2
	st.body, st.sent, st.sendWindow = body, 0, c.peerInitWindow
	st.gotHeaders, st.data = false, st.data[:0]
	c.streams[st.id] = st

	block := c.hdrRest
	if !c.hdrSent {
		block, c.hdrSent = c.hdrFirst, true
	}
	first, rest := block, []byte(nil)
	if len(block) > c.peerMaxFrame {
		first, rest = block[:c.peerMaxFrame], block[c.peerMaxFrame:]
	}
	c.check(c.wfr.WriteHeaders(http2.HeadersFrameParam{StreamID: st.id, BlockFragment: first, EndHeaders: len(rest) == 0}))
	for len(rest) > 0 {
		frag := rest[:min(len(rest), c.peerMaxFrame)]
		rest = rest[len(frag):]
		c.check(c.wfr.WriteContinuation(st.id, len(rest) == 0, frag))
	}
	if len(c.pending) == 0 {
		c.sendDataLocked(st)
	}
	if st.sent < len(st.body) {
		c.pending = append(c.pending, st)
	}
}

// sendDataLocked queues as much of st's DATA as the windows and the maximum
// frame size allow, ending the stream with the last of it. It requires that
// c.mu is held.
func (c *h2Conn) sendDataLocked(st *h2Stream) {
	for st.sent < len(st.body) {
		n := min(int64(len(st.body)-st.sent), c.sendWindow, st.sendWindow, int64(c.peerMaxFrame))
		if n <= 0 {
			return
		}
		end := st.sent+int(n) == len(st.body)
		c.check(c.wfr.WriteData(st.id, end, st.body[st.sent:st.sent+int(n)]))
		st.sent += int(n)
		c.sendWindow -= n
		st.sendWindow -= n
		c.stats.dataSent += n
	}
}

// writePendingLocked sends the DATA that waited for window, in order. It
// requires that c.mu is held.
func (c *h2Conn) writePendingLocked() {
	if c.err != nil {
		return
	}
	c.pending = slices.DeleteFunc(c.pending, func(st *h2Stream) bool {
		if c.sendWindow > 0 {
			c.sendDataLocked(st)
		}
		return st.sent == len(st.body)
	})
}

// flushLocked writes the buffer, unless a write is in progress: its writer
// writes what was added meanwhile before it stops. Before the first write it
// yields the processor once, so that the workers ready to run (woken by the
// same batch of answers or timers) add their frames and share the syscall:
// without it, on one core every call costs a write of its own. It requires
// that c.mu is held; it releases it while yielding and writing.
func (c *h2Conn) flushLocked() {
	if c.flushing {
		return
	}
	c.flushing = true
	c.mu.Unlock()
	runtime.Gosched()
	c.mu.Lock()
	c.writeLoopLocked()
}

// writeLoopLocked writes the buffer until it stays empty. It requires that
// c.mu is held and that the caller set c.flushing.
func (c *h2Conn) writeLoopLocked() {
	for len(c.wbuf) > 0 && c.err == nil {
		buf := c.wbuf
		c.wbuf = c.spare[:0]
		c.mu.Unlock()
		err := c.nc.SetWriteDeadline(time.Now().Add(c.timeout))
		if err == nil {
			_, err = c.nc.Write(buf)
		}
		c.mu.Lock()
		c.spare = buf[:0]
		if err != nil {
			c.failLocked(fmt.Errorf("the HTTP/2 connection to %s failed: writing: %w", c.target, err))
		}
		if c.ctrlOn { // the reader's frames went out with this write
			c.ctrlOn = false
			c.ctrl.Stop()
		}
	}
	c.flushing = false
}

// flushControl writes the frames the reader queued when no worker's write
// has carried them within h2ControlDelay.
func (c *h2Conn) flushControl() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ctrlOn = false
	if !c.flushing && len(c.wbuf) > 0 && c.err == nil {
		c.flushing = true
		c.writeLoopLocked()
	}
}

// removeLocked unregisters st, frees its stream slot and, when reset is set
// or its DATA is not all sent, sends RST_STREAM(CANCEL). It requires that
// c.mu is held.
func (c *h2Conn) removeLocked(st *h2Stream, reset bool) {
	delete(c.streams, st.id)
	if st.sent < len(st.body) {
		reset = true
		c.pending = slices.DeleteFunc(c.pending, func(p *h2Stream) bool { return p == st })
	}
	st.body = nil
	if reset && c.err == nil {
		c.check(c.wfr.WriteRSTStream(st.id, http2.ErrCodeCancel))
	}
	c.releaseLocked()
}

// endLocked removes st (see removeLocked) and gives its worker r. It
// requires that c.mu is held.
func (c *h2Conn) endLocked(st *h2Stream, reset bool, r h2Result) {
	c.removeLocked(st, reset)
	st.ch <- r
}

// releaseLocked frees a stream slot, grants free slots to waiters and
// closes a draining connection that has no stream left. It requires that
// c.mu is held.
func (c *h2Conn) releaseLocked() {
	c.active--
	c.grantLocked()
	if c.draining && c.active == 0 {
		c.failLocked(grpcstatus.Errorf(codes.Unavailable, "the connection to %s closed: %s", c.target, c.goAway))
	}
}

// grantLocked gives free stream slots to waiters, first come first served.
// It requires that c.mu is held.
func (c *h2Conn) grantLocked() {
	for len(c.waiters) > 0 && c.active < c.peerMaxStreams {
		st := c.waiters[0]
		c.waiters = c.waiters[1:]
		c.active++
		st.ch <- h2Result{grant: true}
	}
}

// drainLocked stops the connection from taking new streams; it closes once
// its streams are done. It requires that c.mu is held.
func (c *h2Conn) drainLocked() {
	c.draining = true
	c.usable.Store(false)
	for _, st := range c.waiters {
		st.ch <- h2Result{err: grpcstatus.Errorf(codes.Unavailable, "the connection to %s is closing: %s", c.target, c.goAway), retry: true}
	}
	c.waiters = nil
	if c.active == 0 {
		c.failLocked(grpcstatus.Errorf(codes.Unavailable, "the connection to %s closed: %s", c.target, c.goAway))
	}
}

// failLocked ends the connection: its calls in flight fail with err, those
// waiting for a stream are told to retry elsewhere, and the socket is
// closed (which ends the reader). Later calls see err. It requires that c.mu
// is held.
func (c *h2Conn) failLocked(err error) {
	if c.err != nil {
		return
	}
	c.err = err
	c.usable.Store(false)
	for id, st := range c.streams {
		delete(c.streams, id)
		st.body = nil
		st.ch <- h2Result{err: err}
	}
	for _, st := range c.waiters {
		st.ch <- h2Result{err: err, retry: true}
	}
	c.waiters, c.pending = nil, nil
	c.wbuf = c.wbuf[:0]
	c.ctrl.Stop()
	c.nc.Close()
}

// readLoop reads the server's frames until the connection fails. The
// frames it queues (SETTINGS and PING ACKs, WINDOW_UPDATE, RST_STREAM) go out
// with the next worker's write, or after h2ControlDelay from the ctrl timer's
// goroutine; the reader itself never writes, so it never blocks on a peer
// that is not reading.
func (c *h2Conn) readLoop() {
	defer c.wg.Done()
	defer close(c.done)
	for {
		if c.br.Buffered() == 0 {
			c.mu.Lock()
			if !c.flushing && len(c.wbuf) > 0 && c.err == nil && !c.ctrlOn {
				c.ctrlOn = true
				c.ctrl.Reset(h2ControlDelay)
			}
			c.mu.Unlock()
		}
		f, err := c.rfr.ReadFrame()
		if err == nil {
			err = c.handle(f)
		}
		if err != nil {
			var se http2.StreamError
			if errors.As(err, &se) {
				c.mu.Lock()
				if st := c.streams[se.StreamID]; st != nil {
					c.endLocked(st, true, h2Result{err: grpcstatus.Errorf(codes.Internal, "a malformed frame from the server: %v", se)})
				}
				c.mu.Unlock()
				continue
			}
			c.mu.Lock()
			if c.err == nil && c.goAway != "" {
				err = fmt.Errorf("%w (after GOAWAY: %s)", err, c.goAway)
			}
			c.failLocked(fmt.Errorf("the HTTP/2 connection to %s failed: %w", c.target, err))
			c.mu.Unlock()
			return
		}
	}
}

// handle acts on one frame from the server. An error is the connection's.
func (c *h2Conn) handle(f http2.Frame) error {
	switch f := f.(type) {
	case *http2.HeadersFrame:
		c.hdr, c.hdrID, c.hdrEnds = h2Headers{}, f.StreamID, f.StreamEnded()
		return c.headerFragment(f.HeaderBlockFragment(), f.HeadersEnded())
	case *http2.ContinuationFrame:
		return c.headerFragment(f.HeaderBlockFragment(), f.HeadersEnded())
	case *http2.DataFrame:
		c.mu.Lock()
		defer c.mu.Unlock()
		c.onDataLocked(f)
	case *http2.RSTStreamFrame:
		c.mu.Lock()
		defer c.mu.Unlock()
		if st := c.streams[f.StreamID]; st != nil {
			code, ok := h2ResetCodes[f.ErrCode]
			if !ok {
				code = codes.Internal
			}
			c.endLocked(st, false, h2Result{
				err:   grpcstatus.Errorf(code, "the server reset the stream (RST_STREAM %v)", f.ErrCode),
				retry: f.ErrCode == http2.ErrCodeRefusedStream,
			})
		}
	case *http2.SettingsFrame:
		if f.IsAck() {
			return nil
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.applySettingsLocked(f)
	case *http2.PingFrame:
		if !f.IsAck() {
			c.mu.Lock()
			defer c.mu.Unlock()
			c.stats.pings++
			c.check(c.wfr.WritePing(true, f.Data))
		}
	case *http2.WindowUpdateFrame:
		c.mu.Lock()
		defer c.mu.Unlock()
		c.stats.updatesReceived++
		if f.StreamID == 0 {
			c.sendWindow += int64(f.Increment)
		} else if st := c.streams[f.StreamID]; st != nil {
			st.sendWindow += int64(f.Increment)
		}
		c.writePendingLocked()
	case *http2.GoAwayFrame:
		c.mu.Lock()
		defer c.mu.Unlock()
		c.onGoAwayLocked(f)
	case *http2.PushPromiseFrame:
		return errors.New("the server sent PUSH_PROMISE, which the client disabled")
	}
	return nil // PRIORITY and unknown frames are ignored
}

// headerFragment decodes a piece of a header block. Every block is decoded,
// also of streams already ended, to keep the dynamic table in step with the
// server's encoder; the end of a block acts on its stream.
func (c *h2Conn) headerFragment(frag []byte, end bool) error {
	if _, err := c.dec.Write(frag); err != nil {
		return fmt.Errorf("decoding the server's headers: %w", err)
	}
	if !end {
		return nil
	}
	if err := c.dec.Close(); err != nil {
		return fmt.Errorf("decoding the server's headers: %w", err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.onHeadersLocked()
	return nil
}

// emit records the fields of a response header block the client reads.
func (c *h2Conn) emit(f hpack.HeaderField) {
	switch f.Name {
	case ":status":
		c.hdr.status = f.Value
	case "content-type":
		c.hdr.contentType = f.Value
	case "grpc-status":
		c.hdr.grpcStatus, c.hdr.hasGRPCStatus = f.Value, true
	case "grpc-message":
		c.hdr.grpcMessage = f.Value
	}
}

// onHeadersLocked acts on a decoded header block: response headers,
// trailers, or both at once (a trailers-only response). It requires that
// c.mu is held.
func (c *h2Conn) onHeadersLocked() {
	st := c.streams[c.hdrID]
	if st == nil {
		return // cancelled, or not the client's
	}
	h := &c.hdr
	if !st.gotHeaders {
		if len(h.status) == 3 && h.status[0] == '1' && !c.hdrEnds {
			return // informational; the response headers follow
		}
		st.gotHeaders = true
		if h.status != "200" {
			c.endLocked(st, !c.hdrEnds, h2Result{err: h2HTTPStatusError(h.status)})
			return
		}
		if ct := h.contentType; ct != "application/grpc" && !strings.HasPrefix(ct, "application/grpc+") && !strings.HasPrefix(ct, "application/grpc;") {
			c.endLocked(st, !c.hdrEnds, h2Result{err: grpcstatus.Errorf(codes.Unknown, "the server answered HTTP 200 with content-type %q, not application/grpc", ct)})
			return
		}
		if !c.hdrEnds {
			return // the message and the trailers follow
		}
	} else if !c.hdrEnds {
		c.endLocked(st, true, h2Result{err: grpcstatus.Error(codes.Internal, "the server sent a second header block that does not end the stream")})
		return
	}
	c.endLocked(st, false, h2Answer(h, st.data))
}

// onDataLocked takes a DATA frame: its bytes count against the connection's
// window whatever its stream, and are added to its stream's answer. It
// requires that c.mu is held.
func (c *h2Conn) onDataLocked(f *http2.DataFrame) {
	c.stats.dataReceived += int64(f.Length)
	c.recvUnack += int(f.Length) // with the padding
	if c.recvUnack >= h2WindowRefill && c.err == nil {
		c.check(c.wfr.WriteWindowUpdate(0, uint32(c.recvUnack)))
		c.recvUnack = 0
		c.stats.updatesSent++
	}
	st := c.streams[f.StreamID]
	if st == nil {
		return
	}
	data := f.Data()
	switch {
	case !st.gotHeaders:
		c.endLocked(st, true, h2Result{err: grpcstatus.Error(codes.Internal, "the server sent DATA before the response headers")})
	case len(st.data)+len(data) > h2MaxAnswer:
		c.endLocked(st, true, h2Result{err: grpcstatus.Errorf(codes.ResourceExhausted, "the answer is larger than %d bytes", h2MaxAnswer)})
	default:
		st.data = append(st.data, data...)
		if f.StreamEnded() {
			c.endLocked(st, false, h2Result{err: grpcstatus.Error(codes.Internal, "the server ended the stream without trailers (no grpc-status)")})
		}
	}
}

// onGoAwayLocked stops new streams on the connection; the calls the server
// did not take (stream ID above its last) are retried elsewhere, the others
// finish here. It requires that c.mu is held.
func (c *h2Conn) onGoAwayLocked(f *http2.GoAwayFrame) {
	c.goAway = "the server sent GOAWAY " + f.ErrCode.String()
	if d := f.DebugData(); len(d) > 0 {
		c.goAway += " " + strconv.Quote(string(d))
	}
	for id, st := range c.streams {
		if id > f.LastStreamID {
			c.endLocked(st, false, h2Result{
				err:   grpcstatus.Errorf(codes.Unavailable, "%s before taking the call", c.goAway),
				retry: true,
			})
		}
	}
	c.drainLocked()
}

// h2Answer is the result of a stream the server ended with trailers h,
// after the DATA in data.
func h2Answer(h *h2Headers, data []byte) h2Result {
	if !h.hasGRPCStatus {
		return h2Result{err: grpcstatus.Error(codes.Unknown, "the server's trailers have no grpc-status")}
	}
	n, err := strconv.ParseUint(h.grpcStatus, 10, 32)
	if err != nil {
		return h2Result{err: grpcstatus.Errorf(codes.Unknown, "the server's grpc-status %q is not a number", h.grpcStatus)}
	}
	if n != 0 {
		return h2Result{err: grpcstatus.Error(codes.Code(n), h2DecodeMessage(h.grpcMessage))}
	}
	code, err := h2OverallCode(data)
	return h2Result{code: code, err: err}
}

// h2OverallCode decodes the overall_code (field 1) of the one gRPC message
// in data, a RateLimitResponse with its 5-byte prefix.
func h2OverallCode(data []byte) (rls.RateLimitResponse_Code, error) {
	if len(data) < 5 {
		return 0, grpcstatus.Errorf(codes.Internal, "the answer has grpc-status 0 but %d bytes of message, not a gRPC message", len(data))
	}
	if data[0] != 0 {
		return 0, grpcstatus.Errorf(codes.Internal, "the answer is compressed (flag %d), though the client accepts no compression", data[0])
	}
	if n := binary.BigEndian.Uint32(data[1:5]); int64(n) != int64(len(data)-5) {
		return 0, grpcstatus.Errorf(codes.Internal, "the answer's gRPC prefix gives %d bytes, but %d came", n, len(data)-5)
	}
	var code uint64
	for msg := data[5:]; len(msg) > 0; {
		num, typ, n := protowire.ConsumeTag(msg)
		if n < 0 {
			return 0, grpcstatus.Errorf(codes.Internal, "a malformed RateLimitResponse: %v", protowire.ParseError(n))
		}
		msg = msg[n:]
		if num == 1 && typ == protowire.VarintType {
			code, n = protowire.ConsumeVarint(msg)
		} else {
			n = protowire.ConsumeFieldValue(num, typ, msg)
		}
		if n < 0 {
			return 0, grpcstatus.Errorf(codes.Internal, "a malformed RateLimitResponse: field %d: %v", num, protowire.ParseError(n))
		}
		msg = msg[n:]
	}
	return rls.RateLimitResponse_Code(int32(code)), nil
}

// h2DecodeMessage percent-decodes a grpc-message as grpc-go does: a % not
// followed by two hex digits stays as it is.
func h2DecodeMessage(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil {
				b.WriteByte(byte(v))
				i += 2
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// h2HTTPStatusError is the error of an HTTP status other than 200, with
// grpc-go's mapping to a gRPC code.
func h2HTTPStatusError(status string) error {
	if status == "" {
		return grpcstatus.Error(codes.Internal, "the server's response has no :status")
	}
	n, err := strconv.Atoi(status)
	if err != nil {
		return grpcstatus.Errorf(codes.Internal, "the server's :status %q is not a number", status)
	}
	code, ok := map[int]codes.Code{
		http.StatusBadRequest:         codes.Internal,
		http.StatusUnauthorized:       codes.Unauthenticated,
		http.StatusForbidden:          codes.PermissionDenied,
		http.StatusNotFound:           codes.Unimplemented,
		http.StatusTooManyRequests:    codes.Unavailable,
		http.StatusBadGateway:         codes.Unavailable,
		http.StatusServiceUnavailable: codes.Unavailable,
		http.StatusGatewayTimeout:     codes.Unavailable,
	}[n]
	if !ok {
		code = codes.Unknown
	}
	return grpcstatus.Errorf(code, "unexpected HTTP status code received from server: %d (%s)", n, http.StatusText(n))
}

// h2ResetCodes maps RST_STREAM error codes to gRPC codes, as grpc-go does.
var h2ResetCodes = map[http2.ErrCode]codes.Code{
	http2.ErrCodeNo:                 codes.Internal,
	http2.ErrCodeProtocol:           codes.Internal,
	http2.ErrCodeInternal:           codes.Internal,
	http2.ErrCodeFlowControl:        codes.ResourceExhausted,
	http2.ErrCodeSettingsTimeout:    codes.Internal,
	http2.ErrCodeStreamClosed:       codes.Internal,
	http2.ErrCodeFrameSize:          codes.Internal,
	http2.ErrCodeRefusedStream:      codes.Unavailable,
	http2.ErrCodeCancel:             codes.Canceled,
	http2.ErrCodeCompression:        codes.Internal,
	http2.ErrCodeConnect:            codes.Internal,
	http2.ErrCodeEnhanceYourCalm:    codes.ResourceExhausted,
	http2.ErrCodeInadequateSecurity: codes.PermissionDenied,
	http2.ErrCodeHTTP11Required:     codes.Internal,
}

// h2Template encodes a worker's RateLimitRequest with protowire, putting
// the key number in place of {n} in the entries' keys and values: the same
// message, byte for byte, as proto.Marshal of what benchGRPC sends.
type h2Template struct {
	domain string
	descs  [][]h2Entry
	cost   uint64
}

// h2Entry is a descriptor entry with its key and value split at {n}.
type h2Entry struct{ key, value []string }

func newH2Template(domain string, descs []h2Descriptor, cost uint64) *h2Template {
	t := &h2Template{domain: domain, cost: cost}
	for _, d := range descs {
		var es []h2Entry
		for _, e := range d {
			es = append(es, h2Entry{strings.Split(e[0], "{n}"), strings.Split(e[1], "{n}")})
		}
		t.descs = append(t.descs, es)
	}
	return t
}

// h2Descriptor is a descriptor's entries as {key, value} pairs.
type h2Descriptor [][2]string

// partsLen is the length of parts joined with n.
func partsLen(parts []string, n []byte) int {
	l := (len(parts) - 1) * len(n)
	for _, p := range parts {
		l += len(p)
	}
	return l
}

func appendParts(b []byte, parts []string, n []byte) []byte {
	for i, p := range parts {
		if i > 0 {
			b = append(b, n...)
		}
		b = append(b, p...)
	}
	return b
}

// appendString appends field num as a string of length l made of parts
// joined with n; proto3 leaves an empty string out.
func appendString(b []byte, num protowire.Number, parts []string, n []byte, l int) []byte {
	if l == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(l))
	return appendParts(b, parts, n)
}

// stringSize is the encoded size of a string field of length l.
func stringSize(l int) int {
	if l == 0 {
		return 0
	}
	return 1 + protowire.SizeBytes(l) // field numbers below 16 take one byte
}

// appendMessage appends the gRPC message of the request with key number n
// (in decimal): the 5-byte prefix (uncompressed, length) and the
// RateLimitRequest {domain 1, descriptors 2 {entries 1 {key 1, value 2},
// hits_addend 3 {value 1}}}.
func (t *h2Template) appendMessage(b []byte, n []byte) []byte {
	start := len(b)
	b = append(b, 0, 0, 0, 0, 0)
	if t.domain != "" {
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendString(b, t.domain)
	}
	hits := 0 // the UInt64Value's size; present even when 0, since 0 peeks
	if t.cost != 0 {
		hits = 1 + protowire.SizeVarint(t.cost)
	}
	for _, d := range t.descs {
		size := 1 + protowire.SizeBytes(hits)
		for _, e := range d {
			size += 1 + protowire.SizeBytes(stringSize(partsLen(e.key, n))+stringSize(partsLen(e.value, n)))
		}
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(size))
		for _, e := range d {
			kl, vl := partsLen(e.key, n), partsLen(e.value, n)
			b = protowire.AppendTag(b, 1, protowire.BytesType)
			b = protowire.AppendVarint(b, uint64(stringSize(kl)+stringSize(vl)))
			b = appendString(b, 1, e.key, n, kl)
			b = appendString(b, 2, e.value, n, vl)
		}
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(hits))
		if t.cost != 0 {
			b = protowire.AppendTag(b, 1, protowire.VarintType)
			b = protowire.AppendVarint(b, t.cost)
		}
	}
	binary.BigEndian.PutUint32(b[start+1:start+5], uint32(len(b)-start-5))
	return b
}
