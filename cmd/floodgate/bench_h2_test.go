package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"
	gproto "google.golang.org/protobuf/proto"

	"github.com/floodgate-dev/floodgate/server"
)

// h2ConfigYAML has a token bucket of 50 an hour: a run of a second refills
// nothing, so exactly 50 per key are admitted. The "many" key has a limit no
// run reaches.
const h2ConfigYAML = `domain: h2
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 50, algorithm: token_bucket}
  - key: many
    rate_limit: {unit: second, requests_per_unit: 1000000000}
`

// startH2Server runs the real server in process on the memory backend, with
// gRPC only, on grpcAddr (host:0 or unix:PATH). stop shuts it down (GOAWAY,
// then the drain); it runs at the end of the test too.
func startH2Server(tb testing.TB, grpcAddr, token string) (addr string, stop func()) {
	tb.Helper()
	path := filepath.Join(tb.TempDir(), "h2.yaml")
	if err := os.WriteFile(path, []byte(h2ConfigYAML), 0o644); err != nil {
		tb.Fatal(err)
	}
	srv, stop := serveInProcess(tb, server.Config{
		ConfigPath: path, GRPCAddr: grpcAddr, Token: token, ReloadInterval: -1, ShutdownTimeout: 2 * time.Second,
	})
	if strings.HasPrefix(grpcAddr, "unix:") {
		return grpcAddr, stop
	}
	return srv.GRPCAddr(), stop
}

// h2TestConfig is the configuration of a gRPC run of client ("h2" or
// "grpc-go") with one connection per 16 workers.
func h2TestConfig(t testing.TB, client, target string, workers int, requests int64, descs ...string) *benchConfig {
	t.Helper()
	cfg := &benchConfig{
		api: "grpc", client: client, target: target, domain: "h2", args: descs, keys: 1, cost: 1,
		workers: workers, conns: (workers + 15) / 16, requests: requests, timeout: 5 * time.Second, quiet: true,
	}
	for _, a := range descs {
		d, err := parseDescriptor(a)
		if err != nil {
			t.Fatal(err)
		}
		cfg.descs = append(cfg.descs, d)
	}
	return cfg
}

func newTestBenchClient(t testing.TB, cfg *benchConfig) benchClient {
	t.Helper()
	var (
		c   benchClient
		err error
	)
	if cfg.client == "h2" {
		c, err = newBenchH2(cfg)
	} else {
		c, err = newBenchGRPC(cfg)
	}
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// runH2Bench runs the load of cfg on client, without the probe, and
// reports.
func runH2Bench(cfg *benchConfig, client benchClient) *benchReport {
	r := newBenchRun(cfg)
	r.run(context.Background(), client, func() {})
	return r.report()
}

var h2Clients = []string{"h2", "grpc-go"}

// h2Kinds lists a report's error kinds for messages.
func h2Kinds(rep *benchReport) string {
	var b strings.Builder
	for _, k := range rep.ErrorKinds {
		fmt.Fprintf(&b, "\n  %s: %d, such as %s", k.Kind, k.Count, k.Example)
	}
	return b.String()
}

// Both clients get the same answers from the same server, over TCP and over
// a Unix socket.
func TestBenchH2SameCounts(t *testing.T) {
	tcp, _ := startH2Server(t, "127.0.0.1:0", "")
	sock := filepath.Join(t.TempDir(), "fg.sock")
	unix, _ := startH2Server(t, "unix:"+sock, "")
	for _, tc := range []struct {
		name string
		args []string
		want benchWant
	}{
		{"one worker", []string{"--addr", tcp, "--concurrency", "1", "--requests", "200", "user=one-%s"}, benchWant{200, 50, 150, "grpc", "closed"}},
		// Every one of the 4 keys is drawn far more than 50 times in 800
		// requests (the chance that one is not is below 1e-20).
		{"keys", []string{"--addr", tcp, "--concurrency", "8", "--requests", "800", "--keys", "4", "user=keys-%s-{n}"}, benchWant{800, 200, 600, "grpc", "closed"}},
		{"two descriptors", []string{"--addr", tcp, "--concurrency", "8", "--requests", "300", "many=x", "user=two-%s"}, benchWant{300, 50, 250, "grpc", "closed"}},
		{"peek", []string{"--addr", tcp, "--concurrency", "8", "--requests", "300", "--cost", "0", "user=peek-%s"}, benchWant{300, 300, 0, "grpc", "closed"}},
		{"unix:PATH", []string{"--addr", unix, "--concurrency", "4", "--requests", "200", "user=unix-%s"}, benchWant{200, 50, 150, "grpc", "closed"}},
		{"unix:///PATH", []string{"--addr", "unix://" + sock, "--concurrency", "4", "--requests", "200", "user=unix3-%s"}, benchWant{200, 50, 150, "grpc", "closed"}},
	} {
		for _, client := range h2Clients {
			t.Run(tc.name+"/"+client, func(t *testing.T) {
				args := []string{"--domain", "h2", "--client", client}
				for _, a := range tc.args {
					if strings.Contains(a, "%s") {
						a = fmt.Sprintf(a, client)
					}
					args = append(args, a)
				}
				tc.want.check(t, benchJSON(t, args...))
			})
		}
	}
}

// A wrong token fails every request as Unauthenticated, with grpc-go's
// message, and without a token the probe says so.
func TestBenchH2Token(t *testing.T) {
	addr, _ := startH2Server(t, "127.0.0.1:0", "s3cret")
	var examples []string
	for _, client := range h2Clients {
		cfg := h2TestConfig(t, client, addr, 4, 40, "user=token")
		cfg.token = "wrong"
		c := newTestBenchClient(t, cfg)
		rep := runH2Bench(cfg, c)
		c.close()
		if rep.Errors != 40 || rep.OK+rep.OverLimit != 0 || len(rep.ErrorKinds) != 1 || rep.ErrorKinds[0].Kind != "Unauthenticated" {
			t.Errorf("%s: OK %d, OVER_LIMIT %d, errors %d; want 40 errors of kind Unauthenticated%s", client, rep.OK, rep.OverLimit, rep.Errors, h2Kinds(rep))
			continue
		}
		examples = append(examples, rep.ErrorKinds[0].Example)

		code, out, errOut := floodgate(t, "bench", "--client", client, "--addr", addr, "--domain", "h2", "--requests", "10", "user=token")
		if code != 1 || out != "" || !strings.Contains(errOut, "Unauthenticated: missing or wrong bearer token") {
			t.Errorf("%s without a token: exit %d, stdout %q, stderr %q", client, code, out, errOut)
		}
		rep = benchJSON(t, "--client", client, "--addr", addr, "--domain", "h2", "--requests", "10", "--token", "s3cret", "user=token-"+client)
		if rep.OK != 10 {
			t.Errorf("%s with the token: %+v", client, rep)
		}
	}
	if len(examples) == 2 && examples[0] != examples[1] {
		t.Errorf("the clients' messages differ: h2 %q, grpc-go %q", examples[0], examples[1])
	}
}

// h2Proxy forwards TCP connections to a server until cut, which closes the
// listener and every connection at once.
type h2Proxy struct {
	ln    net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func startH2Proxy(t *testing.T, to string) *h2Proxy {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &h2Proxy{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", to)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, s)
			p.mu.Unlock()
			go func() { io.Copy(s, c); s.Close() }()
			go func() { io.Copy(c, s); c.Close() }()
		}
	}()
	t.Cleanup(p.cut)
	return p
}

func (p *h2Proxy) cut() {
	p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
}

// A server that goes away mid-run fails the calls from then on: the run ends,
// with every request counted, and does not hang.
func TestBenchH2ServerGone(t *testing.T) {
	for _, how := range []string{"graceful stop", "connections cut"} {
		for _, client := range h2Clients {
			t.Run(how+"/"+client, func(t *testing.T) {
				addr, stop := startH2Server(t, "127.0.0.1:0", "")
				if how == "connections cut" {
					p := startH2Proxy(t, addr)
					addr, stop = p.ln.Addr().String(), p.cut
				}
				cfg := h2TestConfig(t, client, addr, 32, 20_000, "many={n}")
				cfg.keys, cfg.timeout = 1000, 2*time.Second
				c := newTestBenchClient(t, cfg)
				defer c.close()
				r := newBenchRun(cfg)
				done := make(chan struct{})
				go func() { r.run(context.Background(), c, func() {}); close(done) }()
				for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
					if ok, _, _ := r.counts(); ok >= 500 {
						break
					}
					if time.Now().After(deadline) {
						t.Fatal("no 500 answers in 10s")
					}
				}
				stop()
				select {
				case <-done:
				case <-time.After(30 * time.Second):
					buf := make([]byte, 1<<20)
					t.Fatalf("the run did not end 30s after the server went away:\n%s", buf[:runtime.Stack(buf, true)])
				}
				rep := r.report()
				if rep.Requests != 20_000 || rep.OK < 500 || rep.Errors == 0 {
					t.Errorf("requests %d, OK %d, errors %d; want 20,000 requests, at least 500 OK, some errors%s", rep.Requests, rep.OK, rep.Errors, h2Kinds(rep))
				}
				t.Logf("OK %d, errors %d:%s", rep.OK, rep.Errors, h2Kinds(rep))
			})
		}
	}
}

// Flow control holds over many small calls: the server's window for the
// client's DATA is 64 KiB until it sends WINDOW_UPDATE, and the client's for
// the answers is h2ConnWindow until it does; 150,000 calls on one connection
// move several times both.
func TestBenchH2FlowControl(t *testing.T) {
	addr, _ := startH2Server(t, "127.0.0.1:0", "")
	cfg := h2TestConfig(t, "h2", addr, 64, 150_000, "many={n}")
	// A stall would time every call in flight out (each call may take 10s:
	// a machine busy with other tests and -race slows calls down, and it
	// once timed 70 out at 1s); the duration bounds the run.
	cfg.keys, cfg.conns, cfg.timeout, cfg.duration = 1000, 1, 10*time.Second, 3*time.Minute
	h, err := newBenchH2(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer h.close()
	rep := runH2Bench(cfg, h)
	if rep.OK != 150_000 || rep.Errors != 0 {
		t.Fatalf("OK %d, OVER_LIMIT %d, errors %d; want 150,000 OK%s", rep.OK, rep.OverLimit, rep.Errors, h2Kinds(rep))
	}
	h.mu.Lock()
	conns := h.conns
	h.mu.Unlock()
	if len(conns) != 1 {
		t.Fatalf("%d connections, want 1", len(conns))
	}
	c := conns[0]
	c.mu.Lock()
	s := c.stats
	c.mu.Unlock()
	if s.dataSent < 10*h2DefaultWindow || s.updatesReceived == 0 || s.dataReceived < 2*h2ConnWindow || s.updatesSent == 0 {
		t.Errorf("stats %+v: want more than 10 windows of DATA sent, 2 received, and WINDOW_UPDATEs both ways", s)
	}
	t.Logf("stats %+v", s)
}

// captureRLS is an RLS server that records the requests it gets.
type captureRLS struct {
	rls.UnimplementedRateLimitServiceServer
	mu   sync.Mutex
	reqs []*rls.RateLimitRequest
}

func (c *captureRLS) ShouldRateLimit(_ context.Context, req *rls.RateLimitRequest) (*rls.RateLimitResponse, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reqs = append(c.reqs, req)
	return &rls.RateLimitResponse{OverallCode: rls.RateLimitResponse_OVER_LIMIT}, nil
}

// The h2 client sends the request grpc-go does, byte for byte.
func TestBenchH2Request(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	capture := &captureRLS{}
	rls.RegisterRateLimitServiceServer(srv, capture)
	go srv.Serve(ln)
	defer srv.Stop()
	for _, tc := range []struct {
		domain string
		cost   uint64
		descs  []string
	}{
		{"api", 1, []string{"user=alice"}},
		{"api", 0, []string{"user=u{n}"}},
		{"a{n}", 300, []string{"user=u{n},path=/x/{n}/{n}", "team=t", "{n}x=", "k="}},
		{"", 1 << 40, []string{"user={n}"}},
	} {
		cfg := h2TestConfig(t, "h2", ln.Addr().String(), 1, 0, tc.descs...)
		cfg.domain = tc.domain
		h, err := newBenchH2(cfg)
		if err != nil {
			t.Fatal(err)
		}
		g, err := newBenchGRPC(cfg)
		if err != nil {
			t.Fatal(err)
		}
		hc, gc := h.caller(0, tc.cost), g.caller(0, tc.cost)
		tmpl := newH2Template(h.domain, h.descs, tc.cost)
		for _, n := range []int{0, 7, 1234567} {
			if code, err := gc(n); err != nil || code != rls.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("grpc-go: %v %v", code, err)
			}
			if code, err := hc(n); err != nil || code != rls.RateLimitResponse_OVER_LIMIT {
				t.Fatalf("h2: %v %v", code, err)
			}
			capture.mu.Lock()
			want, got := capture.reqs[len(capture.reqs)-2], capture.reqs[len(capture.reqs)-1]
			capture.mu.Unlock()
			if !gproto.Equal(got, want) {
				t.Errorf("%q %v cost %d, n %d:\n h2      %v\n grpc-go %v", tc.domain, tc.descs, tc.cost, n, got, want)
			}
			wire, _ := gproto.Marshal(want)
			msg := tmpl.appendMessage(nil, []byte(fmt.Sprint(n)))
			if !bytes.Equal(msg[5:], wire) || msg[0] != 0 || int(binary.BigEndian.Uint32(msg[1:5])) != len(wire) {
				t.Errorf("%q %v cost %d, n %d: the h2 message\n % x\nis not the 5-byte prefix and proto.Marshal's\n % x", tc.domain, tc.descs, tc.cost, n, msg, wire)
			}
		}
		h.close()
		g.close()
	}
}

func TestBenchH2Usage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--client", "nghttp2", "user=a"}, `--client "nghttp2": want h2 or grpc-go`},
		{[]string{"--client", "h2", "--tls", "user=a"}, "--client h2 speaks cleartext HTTP/2 only; with --tls use --client grpc-go"},
		{[]string{"--client", "h2", "--http", "http://x", "user=a"}, "--client is for gRPC (--addr)"},
	} {
		code, out, errOut := floodgate(t, append([]string{"bench", "--domain", "d"}, tc.args...)...)
		if code != 2 || out != "" || !strings.Contains(errOut, tc.want) {
			t.Errorf("floodgate bench %v: exit %d, stdout %q, stderr %q, want %q", tc.args, code, out, errOut, tc.want)
		}
	}
	code, _, errOut := floodgate(t, "bench", "--domain", "d", "--addr", "dns:///localhost:1", "user=a")
	if code != 1 || !strings.Contains(errOut, "the h2 client dials host:port, unix:PATH or unix:///PATH; for other gRPC targets use --client grpc-go") {
		t.Errorf("a dns:/// target: exit %d, stderr %q", code, errOut)
	}
	for d, want := range map[time.Duration]string{5 * time.Second: "5000000u", time.Millisecond: "1000000n", 100 * time.Millisecond: "100000u", 2 * time.Hour: "7200000m", 40000 * time.Hour: "2400000M"} {
		if got := h2Timeout(d); got != want {
			t.Errorf("h2Timeout(%v) = %q, want %q", d, got, want)
		}
	}
}

// fakeH2 is an HTTP/2 server built on http2.Framer, for the protocol's
// corners: each dial gets a net.Pipe, served by respond.
type fakeH2 struct {
	t        *testing.T
	settings []http2.Setting
	// respond answers a request (its header fields and gRPC body) on stream
	// id; it runs on the connection's read goroutine.
	respond func(c *fakeH2Conn, id uint32, hdr map[string]string, body []byte)
	// onReset, when set, runs when the client resets a stream.
	onReset func(c *fakeH2Conn, id uint32)

	mu    sync.Mutex
	conns []*fakeH2Conn
}

type fakeH2Conn struct {
	f  *fakeH2
	nc net.Conn

	wmu    sync.Mutex // held while encoding and writing
	wfr    *http2.Framer
	enc    *hpack.Encoder
	encBuf bytes.Buffer

	mu      sync.Mutex
	events  []string // frames of note from the client
	open    map[uint32]bool
	maxOpen int
	streams int
}

func (f *fakeH2) dial(time.Time) (net.Conn, error) {
	client, srv := net.Pipe()
	c := &fakeH2Conn{f: f, nc: srv, open: map[uint32]bool{}}
	c.wfr = http2.NewFramer(srv, nil)
	c.enc = hpack.NewEncoder(&c.encBuf)
	f.mu.Lock()
	f.conns = append(f.conns, c)
	f.mu.Unlock()
	go c.serve()
	f.t.Cleanup(func() { srv.Close() })
	return client, nil
}

func (f *fakeH2) dials() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.conns)
}

func (f *fakeH2) conn(i int) *fakeH2Conn {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.conns[i]
}

func (c *fakeH2Conn) event(format string, a ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.events = append(c.events, fmt.Sprintf(format, a...))
}

// waitEvent waits a second at most for an event.
func (c *fakeH2Conn) waitEvent(want string) bool {
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		c.mu.Lock()
		found := false
		for _, e := range c.events {
			found = found || e == want
		}
		c.mu.Unlock()
		if found {
			return true
		}
	}
	return false
}

func (c *fakeH2Conn) serve() {
	defer c.nc.Close()
	// SETTINGS is the server's first frame: written while the client's
	// handshake is read (net.Pipe does not buffer), before any other.
	c.wmu.Lock()
	go func() {
		defer c.wmu.Unlock()
		c.wfr.WriteSettings(c.f.settings...)
	}()
	br := bufio.NewReader(c.nc)
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(br, preface); err != nil || string(preface) != http2.ClientPreface {
		c.event("bad preface %q %v", preface, err)
		return
	}
	fr := http2.NewFramer(nil, br)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	hdrs := map[uint32]map[string]string{}
	bodies := map[uint32][]byte{}
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			return
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if f.IsAck() {
				c.event("SETTINGS ACK")
				continue
			}
			f.ForeachSetting(func(s http2.Setting) error { c.event("SETTING %v", s); return nil })
			c.wmu.Lock()
			c.wfr.WriteSettingsAck()
			c.wmu.Unlock()
		case *http2.MetaHeadersFrame:
			h := map[string]string{}
			for _, hf := range f.Fields {
				h[hf.Name] = hf.Value
			}
			hdrs[f.StreamID] = h
			c.mu.Lock()
			c.streams++
			c.open[f.StreamID] = true
			c.maxOpen = max(c.maxOpen, len(c.open))
			c.mu.Unlock()
		case *http2.DataFrame:
			bodies[f.StreamID] = append(bodies[f.StreamID], f.Data()...)
			if n := len(f.Data()); n > 0 {
				c.wmu.Lock()
				c.wfr.WriteWindowUpdate(0, uint32(n))
				if !f.StreamEnded() {
					c.wfr.WriteWindowUpdate(f.StreamID, uint32(n))
				}
				c.wmu.Unlock()
			}
			if f.StreamEnded() {
				c.f.respond(c, f.StreamID, hdrs[f.StreamID], bodies[f.StreamID])
			}
		case *http2.RSTStreamFrame:
			c.event("RST_STREAM %d %v", f.StreamID, f.ErrCode)
			c.closeStream(f.StreamID)
			if c.f.onReset != nil {
				c.f.onReset(c, f.StreamID)
			}
		case *http2.PingFrame:
			if f.IsAck() {
				c.event("PING ACK %q", f.Data[:])
			}
		case *http2.WindowUpdateFrame:
			c.event("WINDOW_UPDATE %d", f.StreamID)
		}
	}
}

func (c *fakeH2Conn) closeStream(id uint32) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.open, id)
}

// headers writes a header block of name, value pairs, split over HEADERS
// and a CONTINUATION when split is set. The encoder indexes, so the client
// must keep its dynamic table in step.
func (c *fakeH2Conn) headers(id uint32, end, split bool, kv ...string) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if end {
		c.closeStream(id)
	}
	c.encBuf.Reset()
	for i := 0; i < len(kv); i += 2 {
		c.enc.WriteField(hpack.HeaderField{Name: kv[i], Value: kv[i+1]})
	}
	block := c.encBuf.Bytes()
	if !split {
		c.wfr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block, EndStream: end, EndHeaders: true})
		return
	}
	c.wfr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block[:1], EndStream: end})
	c.wfr.WriteContinuation(id, true, block[1:])
}

func (c *fakeH2Conn) data(id uint32, end bool, b []byte) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.wfr.WriteData(id, end, b)
}

// answer answers a call with overall code code, the message split over two
// DATA frames (in the middle of its prefix) and the trailers over HEADERS
// and CONTINUATION.
func (c *fakeH2Conn) answer(id uint32, code rls.RateLimitResponse_Code) {
	msg, _ := gproto.Marshal(&rls.RateLimitResponse{OverallCode: code, Statuses: []*rls.RateLimitResponse_DescriptorStatus{{Code: code, LimitRemaining: 3}}})
	body := binary.BigEndian.AppendUint32([]byte{0}, uint32(len(msg)))
	body = append(body, msg...)
	c.headers(id, false, false, ":status", "200", "content-type", "application/grpc")
	c.data(id, false, body[:3])
	c.data(id, false, body[3:])
	c.headers(id, true, true, "grpc-status", "0")
}

func (c *fakeH2Conn) control(write func(fr *http2.Framer)) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	write(c.wfr)
}

// newFakeH2Client is an h2 client of f with one connection.
func newFakeH2Client(t *testing.T, f *fakeH2, timeout time.Duration, token string) *benchH2 {
	t.Helper()
	cfg := h2TestConfig(t, "h2", "fake:1", 1, 0, "user=u{n}")
	cfg.timeout, cfg.token = timeout, token
	h, err := newBenchH2(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.dial = f.dial
	t.Cleanup(h.close)
	return h
}

// The frame-level corners, each against a fake server: answers split over
// frames, trailers-only errors, HTTP errors, resets, GOAWAY, PING, timeouts
// and the server's limits.
func TestBenchH2Frames(t *testing.T) {
	ok := func(c *fakeH2Conn, id uint32, _ map[string]string, _ []byte) {
		c.answer(id, rls.RateLimitResponse_OVER_LIMIT)
	}
	trailersOnly := func(kv ...string) func(*fakeH2Conn, uint32, map[string]string, []byte) {
		return func(c *fakeH2Conn, id uint32, _ map[string]string, _ []byte) {
			c.headers(id, true, false, append([]string{":status", "200", "content-type", "application/grpc"}, kv...)...)
		}
	}
	type call struct {
		kind, text string // of the error; "" for the answer OVER_LIMIT
	}
	for _, tc := range []struct {
		name     string
		settings []http2.Setting
		respond  func(c *fakeH2Conn, id uint32, hdr map[string]string, body []byte)
		calls    []call
		dials    int      // connections dialed in the end
		events   []string // the server saw, on its first connection
	}{
		{name: "answer over several frames", respond: ok, calls: []call{{}, {}, {}}, dials: 1,
			events: []string{"SETTINGS ACK", "SETTING [ENABLE_PUSH = 0]", fmt.Sprintf("SETTING [INITIAL_WINDOW_SIZE = %d]", h2StreamWindow), "WINDOW_UPDATE 0"}},
		{name: "trailers-only, percent-encoded message",
			respond: trailersOnly("grpc-status", "8", "grpc-message", "limit%20reached%3A%20100%25 of quota%2"),
			calls:   []call{{"ResourceExhausted", "ResourceExhausted: limit reached: 100% of quota%2"}}, dials: 1},
		{name: "trailers without grpc-status", respond: trailersOnly(),
			calls: []call{{"Unknown", "Unknown: the server's trailers have no grpc-status"}}, dials: 1},
		{name: "non-zero grpc-status after a message",
			respond: func(c *fakeH2Conn, id uint32, _ map[string]string, _ []byte) {
				c.headers(id, false, false, ":status", "200", "content-type", "application/grpc")
				c.data(id, false, []byte{0, 0, 0, 0, 0})
				c.headers(id, true, false, "grpc-status", "14", "grpc-message", "store%20down")
			},
			calls: []call{{"Unavailable", "Unavailable: store down"}}, dials: 1},
		{name: "HTTP 503",
			respond: func(c *fakeH2Conn, id uint32, _ map[string]string, _ []byte) {
				c.headers(id, true, false, ":status", "503", "content-type", "text/plain")
			},
			calls: []call{{"Unavailable", "Unavailable: unexpected HTTP status code received from server: 503 (Service Unavailable)"}}, dials: 1},
		{name: "not gRPC",
			respond: func(c *fakeH2Conn, id uint32, _ map[string]string, _ []byte) {
				c.headers(id, false, false, ":status", "200", "content-type", "text/html")
				c.data(id, true, []byte("<html>"))
			},
			calls: []call{{"Unknown", `Unknown: the server answered HTTP 200 with content-type "text/html", not application/grpc`}}, dials: 1,
			events: []string{"RST_STREAM 1 CANCEL"}},
		{name: "no trailers",
			respond: func(c *fakeH2Conn, id uint32, _ map[string]string, _ []byte) {
				c.headers(id, false, false, ":status", "200", "content-type", "application/grpc")
				c.data(id, true, []byte{0, 0, 0, 0, 0})
			},
			calls: []call{{"Internal", "Internal: the server ended the stream without trailers (no grpc-status)"}}, dials: 1},
		{name: "RST_STREAM",
			respond: func(c *fakeH2Conn, id uint32, _ map[string]string, _ []byte) {
				c.control(func(fr *http2.Framer) { fr.WriteRSTStream(id, http2.ErrCodeInternal) })
			},
			calls: []call{{"Internal", "Internal: the server reset the stream (RST_STREAM INTERNAL_ERROR)"}}, dials: 1},
		{name: "REFUSED_STREAM is retried",
			respond: func(c *fakeH2Conn, id uint32, hdr map[string]string, body []byte) {
				if id == 1 {
					c.control(func(fr *http2.Framer) { fr.WriteRSTStream(id, http2.ErrCodeRefusedStream) })
					return
				}
				c.answer(id, rls.RateLimitResponse_OVER_LIMIT)
			},
			calls: []call{{}}, dials: 1},
		{name: "GOAWAY before taking the call is retried on a new connection",
			respond: func(c *fakeH2Conn, id uint32, hdr map[string]string, body []byte) {
				if c == c.f.conn(0) {
					c.control(func(fr *http2.Framer) { fr.WriteGoAway(0, http2.ErrCodeNo, []byte("restarting")) })
					return
				}
				c.answer(id, rls.RateLimitResponse_OVER_LIMIT)
			},
			calls: []call{{}, {}}, dials: 2},
		{name: "GOAWAY after taking the call",
			respond: func(c *fakeH2Conn, id uint32, hdr map[string]string, body []byte) {
				c.control(func(fr *http2.Framer) { fr.WriteGoAway(id, http2.ErrCodeNo, nil) })
				c.answer(id, rls.RateLimitResponse_OVER_LIMIT)
			},
			calls: []call{{}, {}}, dials: 2},
		{name: "connection closed mid-call",
			respond: func(c *fakeH2Conn, id uint32, hdr map[string]string, body []byte) {
				if c == c.f.conn(0) {
					c.nc.Close()
					return
				}
				c.answer(id, rls.RateLimitResponse_OVER_LIMIT)
			},
			calls: []call{{"connection closed", "the HTTP/2 connection to fake:1 failed: EOF"}, {}}, dials: 2},
		{name: "PING",
			respond: func(c *fakeH2Conn, id uint32, hdr map[string]string, body []byte) {
				c.control(func(fr *http2.Framer) { fr.WritePing(false, [8]byte{'f', 'l', 'o', 'o', 'd', 'g', 'a', 't'}) })
				c.answer(id, rls.RateLimitResponse_OVER_LIMIT)
			},
			calls: []call{{}}, dials: 1, events: []string{`PING ACK "floodgat"`}},
		{name: "a stream window of 7 bytes",
			settings: []http2.Setting{{ID: http2.SettingInitialWindowSize, Val: 7}},
			respond: func(c *fakeH2Conn, id uint32, hdr map[string]string, body []byte) {
				var req rls.RateLimitRequest
				if err := gproto.Unmarshal(body[5:], &req); err != nil || req.Descriptors[0].Entries[0].Value != "u42" {
					c.f.t.Errorf("the body split by the window: %v %v", &req, err)
				}
				c.answer(id, rls.RateLimitResponse_OVER_LIMIT)
			},
			calls: []call{{}, {}}, dials: 1},
		{name: "SETTINGS_HEADER_TABLE_SIZE 0",
			settings: []http2.Setting{{ID: http2.SettingHeaderTableSize, Val: 0}},
			respond:  ok, calls: []call{{}, {}, {}}, dials: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fakeH2{t: t, settings: tc.settings}
			f.respond = func(c *fakeH2Conn, id uint32, hdr map[string]string, body []byte) {
				for k, want := range map[string]string{":method": "POST", ":scheme": "http", ":path": h2Path, ":authority": "fake:1",
					"content-type": "application/grpc", "te": "trailers", "grpc-timeout": "2000000u"} {
					if hdr[k] != want {
						t.Errorf("stream %d: %s %q, want %q (all: %v)", id, k, hdr[k], want, hdr)
					}
				}
				tc.respond(c, id, hdr, body)
			}
			h := newFakeH2Client(t, f, 2*time.Second, "")
			call := h.caller(0, 1)
			for i, want := range tc.calls {
				code, err := call(42)
				switch {
				case want.kind == "" && (err != nil || code != rls.RateLimitResponse_OVER_LIMIT):
					t.Errorf("call %d: %v, %v; want OVER_LIMIT", i+1, code, err)
				case want.kind != "" && err == nil:
					t.Errorf("call %d: %v; want an error of kind %s", i+1, code, want.kind)
				case want.kind != "" && (benchErrKind(err) != want.kind || benchErrText(err) != want.text):
					t.Errorf("call %d: kind %q, %q; want %q, %q", i+1, benchErrKind(err), benchErrText(err), want.kind, want.text)
				}
			}
			if got := f.dials(); got != tc.dials {
				t.Errorf("%d connections, want %d", got, tc.dials)
			}
			for _, e := range tc.events {
				if c := f.conn(0); !c.waitEvent(e) {
					c.mu.Lock()
					t.Errorf("the server saw no %q in %q", e, c.events)
					c.mu.Unlock()
				}
			}
		})
	}
}

// A call with no answer in time fails with DeadlineExceeded and resets its
// stream; the late answer is dropped, and its header block still decoded,
// so the next answer (which refers to the dynamic table) reads right.
func TestBenchH2Timeout(t *testing.T) {
	f := &fakeH2{t: t}
	f.respond = func(c *fakeH2Conn, id uint32, _ map[string]string, _ []byte) {
		if id != 1 {
			c.answer(id, rls.RateLimitResponse_OVER_LIMIT)
		}
	}
	f.onReset = func(c *fakeH2Conn, id uint32) {
		c.headers(id, false, false, ":status", "200", "content-type", "application/grpc", "late", "yes")
		c.data(id, false, []byte{0, 0, 0, 0, 2, 8, 1})
		c.headers(id, true, false, "grpc-status", "0")
	}
	h := newFakeH2Client(t, f, 100*time.Millisecond, "")
	call := h.caller(0, 1)
	start := time.Now()
	_, err := call(1)
	if benchErrKind(err) != "DeadlineExceeded" || benchErrText(err) != "DeadlineExceeded: no answer within 100ms" {
		t.Errorf("got %v, want DeadlineExceeded", err)
	}
	if d := time.Since(start); d < 100*time.Millisecond || d > time.Second {
		t.Errorf("the call took %v, want 100ms", d)
	}
	if c := f.conn(0); !c.waitEvent("RST_STREAM 1 CANCEL") {
		t.Errorf("no RST_STREAM(CANCEL) of stream 1: %q", c.events)
	}
	for i := range 3 {
		if code, err := call(2); err != nil || code != rls.RateLimitResponse_OVER_LIMIT {
			t.Errorf("call %d after the timeout: %v, %v", i+2, code, err)
		}
	}
	if f.dials() != 1 {
		t.Errorf("%d connections, want 1", f.dials())
	}
}

// The client opens no more streams than the server's
// MAX_CONCURRENT_STREAMS; the other calls wait for a free one.
func TestBenchH2MaxStreams(t *testing.T) {
	f := &fakeH2{t: t, settings: []http2.Setting{{ID: http2.SettingMaxConcurrentStreams, Val: 2}}}
	f.respond = func(c *fakeH2Conn, id uint32, _ map[string]string, _ []byte) {
		go func() {
			time.Sleep(2 * time.Millisecond)
			c.answer(id, rls.RateLimitResponse_OK)
		}()
	}
	h := newFakeH2Client(t, f, 5*time.Second, "")
	var wg sync.WaitGroup
	var fails atomic.Int32
	for w := range 8 {
		call := h.caller(w, 1)
		wg.Go(func() {
			for range 20 {
				if code, err := call(w); err != nil || code != rls.RateLimitResponse_OK {
					fails.Add(1)
					t.Errorf("worker %d: %v %v", w, code, err)
					return
				}
			}
		})
	}
	wg.Wait()
	c := f.conn(0)
	c.mu.Lock()
	defer c.mu.Unlock()
	if fails.Load() != 0 || c.maxOpen != 2 || c.streams != 160 || f.dials() != 1 {
		t.Errorf("%d failed; the server saw %d streams at most at once (want 2), %d in all (want 160), on %d connections", fails.Load(), c.maxOpen, c.streams, f.dials())
	}
}

// A header block longer than the server's frame size goes out as HEADERS
// and CONTINUATION; the stream IDs, once used up, move the calls to a new
// connection.
func TestBenchH2Limits(t *testing.T) {
	token := strings.Repeat("t", 40_000)
	f := &fakeH2{t: t}
	f.respond = func(c *fakeH2Conn, id uint32, hdr map[string]string, _ []byte) {
		if hdr["authorization"] != "Bearer "+token {
			t.Errorf("stream %d: authorization of %d bytes, want %d", id, len(hdr["authorization"]), len(token)+7)
		}
		c.answer(id, rls.RateLimitResponse_OK)
	}
	h := newFakeH2Client(t, f, 5*time.Second, token)
	call := h.caller(0, 1)
	for i := range 3 {
		if code, err := call(i); err != nil || code != rls.RateLimitResponse_OK {
			t.Fatalf("call %d: %v %v", i+1, code, err)
		}
	}
	c := h.slots[0].cur.Load()
	c.mu.Lock()
	c.nextID = h2MaxStreamID // the last one
	c.mu.Unlock()
	for i := range 3 {
		if code, err := call(i); err != nil || code != rls.RateLimitResponse_OK {
			t.Fatalf("call %d after the last stream ID: %v %v", i+1, code, err)
		}
	}
	if f.dials() != 2 {
		t.Errorf("%d connections, want 2: one until its stream IDs ran out, then a new one", f.dials())
	}
	if c.usable.Load() {
		t.Error("the connection out of stream IDs still takes calls")
	}
}

func TestBenchH2DecodeMessage(t *testing.T) {
	for in, want := range map[string]string{
		"":                   "",
		"plain":              "plain",
		"100%25":             "100%",
		"a%20b%3A%0Ac":       "a b:\nc",
		"50%":                "50%",
		"%zz%2":              "%zz%2",
		"%E2%9C%93 done":     "✓ done",
		"%25252":             "%252",
		"trailing %4":        "trailing %4",
		"%41%42%43 and %4a!": "ABC and J!",
	} {
		if got := h2DecodeMessage(in); got != want {
			t.Errorf("h2DecodeMessage(%q) = %q, want %q", in, got, want)
		}
	}
	// A non-zero grpc-status becomes a status error, as grpc-go's.
	r := h2Answer(&h2Headers{grpcStatus: "16", hasGRPCStatus: true, grpcMessage: "missing%20token"}, nil)
	if s, ok := grpcstatus.FromError(r.err); !ok || s.Code() != codes.Unauthenticated || s.Message() != "missing token" {
		t.Errorf("got %v, want Unauthenticated: missing token", r.err)
	}
	if benchErrKind(r.err) != "Unauthenticated" {
		t.Errorf("kind %q", benchErrKind(r.err))
	}
}

// BenchmarkBenchClient is the CPU a call costs with each client, against
// the same in-process server: the difference between the two is the
// clients'. Run with -cpu 1 to see the cost on one core.
func BenchmarkBenchClient(b *testing.B) {
	addr, _ := startH2Server(b, "127.0.0.1:0", "")
	for _, client := range h2Clients {
		b.Run(client, func(b *testing.B) {
			const perProc = 16
			workers := perProc * runtime.GOMAXPROCS(0)
			cfg := h2TestConfig(b, client, addr, workers, 0, "many={n}")
			c := newTestBenchClient(b, cfg)
			defer c.close()
			for i := range cfg.conns {
				if _, err := c.caller(i, 0)(0); err != nil {
					b.Fatal(err)
				}
			}
			var next atomic.Int64
			b.SetParallelism(perProc)
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				call := c.caller(int(next.Add(1)-1), 1)
				for n := 0; pb.Next(); n++ {
					if _, err := call(n % 1000); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
