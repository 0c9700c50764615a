//go:build linux

package main

// Helpers of the end-to-end tests (e2e_test.go): they build the floodgate
// binary once per test run, start it as a child process on free ports, and
// talk to it over gRPC (go-control-plane's Envoy RLS v3 client) and HTTP.
// Redis comes from internal/testenv: real redis-server processes only.

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"go/build"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	rlscommon "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/floodgate-dev/floodgate/internal/testenv"
)

func TestMain(m *testing.M) {
	code := testenv.Main(m)
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

var (
	binOnce sync.Once
	binDir  string
	binPath string
	binErr  error
)

// floodgateBinary builds ./cmd/floodgate once per test run (with -race when
// the tests run with it) and returns the executable's path. End-to-end tests
// are skipped with -short.
func floodgateBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test: builds and runs the floodgate binary (skipped with -short)")
	}
	binOnce.Do(func() {
		binDir, binErr = os.MkdirTemp("", "floodgate-e2e-")
		if binErr != nil {
			return
		}
		goTool, err := exec.LookPath("go")
		if err != nil {
			goTool = filepath.Join(build.Default.GOROOT, "bin", "go")
		}
		binPath = filepath.Join(binDir, "floodgate")
		args := []string{"build", "-o", binPath}
		if raceEnabled {
			args = append(args, "-race")
		}
		cmd := exec.Command(goTool, append(args, ".")...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		t.Fatalf("cannot build the floodgate binary: %v", binErr)
	}
	return binPath
}

// Children are forked from one goroutine locked to its OS thread for the
// life of the test binary, so that Pdeathsig (delivered when the forking
// thread exits) kills them only when the test binary dies. testenv does the
// same for its servers.
var (
	spawnOnce sync.Once
	spawnCh   chan spawnReq
)

type spawnReq struct {
	cmd  *exec.Cmd
	errc chan error
}

func startChild(cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	spawnOnce.Do(func() {
		spawnCh = make(chan spawnReq)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread lives as long as the binary
			for req := range spawnCh {
				req.errc <- req.cmd.Start()
			}
		}()
	})
	errc := make(chan error, 1)
	spawnCh <- spawnReq{cmd, errc}
	return <-errc
}

// fgServer is one `floodgate serve` process.
type fgServer struct {
	t    *testing.T
	cmd  *exec.Cmd
	HTTP string // "127.0.0.1:port" of the HTTP API
	GRPC string // "127.0.0.1:port" of the gRPC API

	conn   *grpc.ClientConn
	client rls.RateLimitServiceClient

	logMu sync.Mutex
	logs  bytes.Buffer // stdout and stderr: JSON log lines

	done     chan struct{} // closed when the process has exited
	exitCode int           // valid after done
}

// startServer runs `floodgate serve --config cfg args...` on free
// 127.0.0.1 ports and returns once it serves and /readyz answers 200. The
// process is stopped (SIGTERM, then SIGKILL) by t.Cleanup, and its log is
// printed when the test failed. env adds environment variables
// (FLOODGATE_TOKEN is never inherited).
func startServer(t *testing.T, cfg string, args ...string) *fgServer {
	t.Helper()
	return startServerEnv(t, nil, cfg, args...)
}

func startServerEnv(t *testing.T, env []string, cfg string, args ...string) *fgServer {
	t.Helper()
	return startServerWith(t, serveOpts{env: env}, cfg, args...)
}

// serveOpts are startServerWith's settings of the server process.
type serveOpts struct {
	env    []string // added to the environment
	nofile int      // > 0: the process's descriptor limit (ulimit -n), set by a shell
	// bare leaves out the --config, address and log format flags (cfg is
	// ignored; the environment gives them) and the wait for /readyz.
	bare bool
	// onLog, when set, sees each line the process writes, as it comes
	// (before startServerWith returns too), on the goroutine reading them.
	onLog func(line string)
}

// generousTimeout returns the flags that give a server on Redis a store
// timeout of 5s when args set none: serve's default (server.DefaultTimeout,
// 50ms) is for production, and a test machine busy with other tests can
// take longer to answer, which would make the failure mode decide instead of
// the store. Tests about timeouts set --timeout themselves.
func generousTimeout(args []string) []string {
	store := false
	for _, a := range args {
		if a == "--timeout" || strings.HasPrefix(a, "--timeout=") {
			return nil
		}
		if a == "--redis" || strings.HasPrefix(a, "--redis=") {
			store = true
		}
	}
	if !store {
		return nil
	}
	return []string{"--timeout", "5s"}
}

func startServerWith(t *testing.T, o serveOpts, cfg string, args ...string) *fgServer {
	t.Helper()
	bin := floodgateBinary(t)
	argv := append([]string{"serve", "--config", cfg,
		"--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:0", "--log-format", "json"}, args...)
	if o.bare {
		argv = append([]string{"serve"}, args...)
	}
	argv = append(argv, generousTimeout(args)...)
	cmd := exec.Command(bin, argv...)
	if o.nofile > 0 {
		cmd = exec.Command("/bin/sh", append([]string{"-c", fmt.Sprintf(`ulimit -n %d && exec "$@"`, o.nofile), "sh", bin}, argv...)...)
	}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "FLOODGATE_TOKEN=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, o.env...)
	s := &fgServer{t: t, cmd: cmd, done: make(chan struct{})}
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := startChild(cmd); err != nil {
		pr.Close()
		pw.Close()
		t.Fatalf("starting %s: %v", bin, err)
	}
	pw.Close()

	serving := make(chan [2]string, 1)
	var readerDone sync.WaitGroup
	readerDone.Add(1)
	go func() {
		defer readerDone.Done()
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := sc.Text()
			s.logMu.Lock()
			s.logs.WriteString(line)
			s.logs.WriteByte('\n')
			s.logMu.Unlock()
			if o.onLog != nil {
				o.onLog(line)
			}
			var rec struct{ Msg, HTTP, GRPC string }
			if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == "serving" {
				select {
				case serving <- [2]string{rec.HTTP, rec.GRPC}:
				default:
				}
			}
		}
		pr.Close()
	}()
	go func() {
		err := cmd.Wait()
		readerDone.Wait()
		s.exitCode = cmd.ProcessState.ExitCode()
		if err != nil && s.exitCode == 0 {
			s.exitCode = -1
		}
		close(s.done)
	}()
	t.Cleanup(func() {
		if s.stop() && s.exitCode != 0 {
			t.Errorf("floodgate serve exited with %d after SIGTERM, want 0", s.exitCode)
		}
		if strings.Contains(s.Logs(), "WARNING: DATA RACE") {
			t.Errorf("the race detector reported a data race in floodgate serve")
		}
		if t.Failed() {
			t.Logf("floodgate %s (ulimit -n %d, 0: inherited): exit %d; log:\n%s", strings.Join(argv, " "), o.nofile, s.exitCode, s.Logs())
		}
	})

	select {
	case addrs := <-serving:
		s.HTTP, s.GRPC = addrs[0], addrs[1]
	case <-s.done:
		t.Fatalf("floodgate serve exited with %d before serving; log:\n%s", s.exitCode, s.Logs())
	case <-time.After(30 * time.Second):
		t.Fatalf("floodgate serve did not log \"serving\" within 30s; log:\n%s", s.Logs())
	}
	s.conn, err = grpc.NewClient(s.GRPC, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.conn.Close() })
	s.client = rls.NewRateLimitServiceClient(s.conn)
	if !o.bare {
		s.waitReady(10 * time.Second)
	}
	return s
}

// waitReady waits until /readyz answers 200.
func (s *fgServer) waitReady(timeout time.Duration) {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		code, body := s.get("/readyz", "")
		if code == http.StatusOK {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("/readyz still answers %d %q after %v", code, body, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stop ends the process: SIGTERM, then SIGKILL after 15s. It reports
// whether it was running and exited on SIGTERM.
func (s *fgServer) stop() bool {
	select {
	case <-s.done:
		return false
	default:
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
		return true
	case <-time.After(15 * time.Second):
		s.cmd.Process.Kill()
		<-s.done
		return false
	}
}

// signal sends sig to the process.
func (s *fgServer) signal(sig os.Signal) {
	s.t.Helper()
	if err := s.cmd.Process.Signal(sig); err != nil {
		s.t.Fatalf("signal %v: %v", sig, err)
	}
}

// wait waits for the process to exit and returns its exit code.
func (s *fgServer) wait(timeout time.Duration) int {
	s.t.Helper()
	select {
	case <-s.done:
		return s.exitCode
	case <-time.After(timeout):
		s.t.Fatalf("floodgate did not exit within %v", timeout)
		return 0
	}
}

// Logs returns everything the process wrote so far.
func (s *fgServer) Logs() string {
	s.logMu.Lock()
	defer s.logMu.Unlock()
	return s.logs.String()
}

// waitLog waits until a log line contains every one of parts and returns it.
func (s *fgServer) waitLog(timeout time.Duration, parts ...string) string {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
	lines:
		for _, line := range strings.Split(s.Logs(), "\n") {
			for _, p := range parts {
				if !strings.Contains(line, p) {
					continue lines
				}
			}
			return line
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("no log line with %q within %v; log:\n%s", parts, timeout, s.Logs())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// rl sends req over gRPC with a 10s deadline.
func (s *fgServer) rl(req *rls.RateLimitRequest) (*rls.RateLimitResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return s.client.ShouldRateLimit(ctx, req)
}

// mustRL is rl that fails the test on an error.
func (s *fgServer) mustRL(req *rls.RateLimitRequest) *rls.RateLimitResponse {
	s.t.Helper()
	resp, err := s.rl(req)
	if err != nil {
		s.t.Fatalf("ShouldRateLimit(%v): %v", req, err)
	}
	return resp
}

var e2eHTTP = &http.Client{Timeout: 10 * time.Second}

// do sends an HTTP request; token, when set, goes in Authorization.
func (s *fgServer) do(method, path, token, body string) (int, string) {
	s.t.Helper()
	var r io.Reader
	if body != "" {
		r = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, "http://"+s.HTTP+path, r)
	if err != nil {
		s.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := e2eHTTP.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		s.t.Fatalf("%s %s: reading the body: %v", method, path, err)
	}
	return resp.StatusCode, string(data)
}

func (s *fgServer) get(path, token string) (int, string) {
	s.t.Helper()
	return s.do(http.MethodGet, path, token, "")
}

func (s *fgServer) post(path, token, body string) (int, string) {
	s.t.Helper()
	return s.do(http.MethodPost, path, token, body)
}

// metric returns the sum of the samples of the metric name whose labels
// include every pair of labels ("key", "value", ...), from /metrics.
func (s *fgServer) metric(token, name string, labels ...string) float64 {
	s.t.Helper()
	code, body := s.get("/metrics", token)
	if code != http.StatusOK {
		s.t.Fatalf("/metrics: %d %s", code, body)
	}
	sum, err := sumSamples(body, name, labels...)
	if err != nil {
		s.t.Fatal(err)
	}
	return sum
}

// sumSamples reads the Prometheus text format.
func sumSamples(text, name string, labels ...string) (float64, error) {
	var sum float64
	for _, line := range strings.Split(text, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		n, ls, v, err := parseSample(line)
		if err != nil {
			return 0, fmt.Errorf("/metrics line %q: %v", line, err)
		}
		if n != name {
			continue
		}
		match := true
		for i := 0; i+1 < len(labels); i += 2 {
			if ls[labels[i]] != labels[i+1] {
				match = false
				break
			}
		}
		if match {
			sum += v
		}
	}
	return sum, nil
}

// parseSample splits `name{k="v",...} value` (with \" \\ \n escapes).
func parseSample(line string) (name string, labels map[string]string, value float64, err error) {
	labels = map[string]string{}
	i := strings.IndexAny(line, "{ ")
	if i < 0 {
		return "", nil, 0, errors.New("no value")
	}
	name, rest := line[:i], line[i:]
	if rest[0] == '{' {
		rest = rest[1:]
		for {
			rest = strings.TrimLeft(rest, ",")
			if strings.HasPrefix(rest, "}") {
				rest = rest[1:]
				break
			}
			eq := strings.Index(rest, `="`)
			if eq < 0 {
				return "", nil, 0, errors.New("bad labels")
			}
			key := rest[:eq]
			rest = rest[eq+2:]
			var val strings.Builder
			for {
				if rest == "" {
					return "", nil, 0, errors.New("unterminated label value")
				}
				c := rest[0]
				rest = rest[1:]
				if c == '"' {
					break
				}
				if c == '\\' && rest != "" {
					switch rest[0] {
					case 'n':
						val.WriteByte('\n')
					default:
						val.WriteByte(rest[0])
					}
					rest = rest[1:]
					continue
				}
				val.WriteByte(c)
			}
			labels[key] = val.String()
		}
	}
	f := strings.Fields(rest)
	if len(f) == 0 {
		return "", nil, 0, errors.New("no value")
	}
	value, err = strconv.ParseFloat(f[0], 64)
	return name, labels, value, err
}

// --- requests

// entries builds a descriptor from "key", "value", "key", "value", ...
func entries(kv ...string) *rlscommon.RateLimitDescriptor {
	d := &rlscommon.RateLimitDescriptor{}
	for i := 0; i+1 < len(kv); i += 2 {
		d.Entries = append(d.Entries, &rlscommon.RateLimitDescriptor_Entry{Key: kv[i], Value: kv[i+1]})
	}
	return d
}

// withHits sets a descriptor's own hits_addend.
func withHits(d *rlscommon.RateLimitDescriptor, n uint64) *rlscommon.RateLimitDescriptor {
	d.HitsAddend = wrapperspb.UInt64(n)
	return d
}

func request(domain string, ds ...*rlscommon.RateLimitDescriptor) *rls.RateLimitRequest {
	return &rls.RateLimitRequest{Domain: domain, Descriptors: ds}
}

// --- expected statuses

// wantStatus is the expected DescriptorStatus of one descriptor.
type wantStatus struct {
	code      rls.RateLimitResponse_Code
	limit     bool // a current_limit is expected
	rpu       uint32
	unit      rls.RateLimitResponse_RateLimit_Unit
	name      string // "*": not checked
	remaining uint32
}

const (
	second = rls.RateLimitResponse_RateLimit_SECOND
	minute = rls.RateLimitResponse_RateLimit_MINUTE
	hour   = rls.RateLimitResponse_RateLimit_HOUR
	day    = rls.RateLimitResponse_RateLimit_DAY
	week   = rls.RateLimitResponse_RateLimit_WEEK
	month  = rls.RateLimitResponse_RateLimit_MONTH
	year   = rls.RateLimitResponse_RateLimit_YEAR

	codeOK   = rls.RateLimitResponse_OK
	codeOver = rls.RateLimitResponse_OVER_LIMIT
)

// ok is an admitted descriptor under rpu per unit with remaining left.
func ok(rpu uint32, unit rls.RateLimitResponse_RateLimit_Unit, remaining uint32) wantStatus {
	return wantStatus{code: codeOK, limit: true, rpu: rpu, unit: unit, remaining: remaining}
}

// over is a descriptor over its limit, with remaining left (0 unless the
// request asked for more than what is left).
func over(rpu uint32, unit rls.RateLimitResponse_RateLimit_Unit, remaining uint32) wantStatus {
	return wantStatus{code: codeOver, limit: true, rpu: rpu, unit: unit, remaining: remaining}
}

// named sets the expected limit name.
func (s wantStatus) named(n string) wantStatus { s.name = n; return s }

// noLimit is a descriptor no limit matches: OK, no current_limit.
var noLimit = wantStatus{code: codeOK}

// unlimited is a descriptor under an unlimited limit.
var unlimited = wantStatus{code: codeOK, remaining: 1<<32 - 1}

var unitLen = map[rls.RateLimitResponse_RateLimit_Unit]time.Duration{
	second: time.Second, minute: time.Minute, hour: time.Hour, day: 24 * time.Hour,
	week: 7 * 24 * time.Hour, month: 30 * 24 * time.Hour, year: 365 * 24 * time.Hour,
}

// checkResponse compares a response with the expected statuses, in order.
// The overall code is OVER_LIMIT when any status is. duration_until_reset,
// when present, must lie within the limit's unit and, for fixed windows
// (the default algorithm), end at the next epoch-aligned multiple of the
// unit, give or take a few seconds.
func checkResponse(t *testing.T, what string, resp *rls.RateLimitResponse, want ...wantStatus) {
	t.Helper()
	wantCode := codeOK
	for _, w := range want {
		if w.code == codeOver {
			wantCode = codeOver
		}
	}
	if resp.GetOverallCode() != wantCode {
		t.Errorf("%s: overall_code %v, want %v (response %v)", what, resp.GetOverallCode(), wantCode, resp)
	}
	if len(resp.GetStatuses()) != len(want) {
		t.Fatalf("%s: %d statuses, want %d (response %v)", what, len(resp.GetStatuses()), len(want), resp)
	}
	now := time.Now()
	for i, st := range resp.GetStatuses() {
		w := want[i]
		l := st.GetCurrentLimit()
		bad := st.GetCode() != w.code || st.GetLimitRemaining() != w.remaining || (l != nil) != w.limit
		if l != nil && w.limit {
			bad = bad || l.GetRequestsPerUnit() != w.rpu || l.GetUnit() != w.unit || (w.name != "*" && l.GetName() != w.name)
		}
		if bad {
			t.Errorf("%s: statuses[%d] = %v,\nwant code %v, current_limit %v (%d/%v name %q), limit_remaining %d",
				what, i, st, w.code, w.limit, w.rpu, w.unit, w.name, w.remaining)
			continue
		}
		d := st.GetDurationUntilReset()
		if d == nil {
			continue
		}
		if l == nil {
			t.Errorf("%s: statuses[%d] has duration_until_reset but no current_limit: %v", what, i, st)
			continue
		}
		unit := unitLen[l.GetUnit()]
		got := d.AsDuration()
		if got <= 0 || got > unit {
			t.Errorf("%s: statuses[%d].duration_until_reset %v, want within (0, %v]", what, i, got, unit)
		}
		if unit >= time.Hour {
			exp := unit - time.Duration(now.UnixNano()%int64(unit))
			if diff := (got - exp).Abs(); diff > 5*time.Second && diff < unit-5*time.Second {
				t.Errorf("%s: statuses[%d].duration_until_reset %v, want about %v (the epoch-aligned window's end)", what, i, got, exp)
			}
		}
	}
}

// avoidWindowEdge sleeps past the end of the current epoch-aligned window of
// length unit when it ends within margin, so that a short sequence of
// requests stays in one fixed window.
func avoidWindowEdge(unit, margin time.Duration) {
	left := unit - time.Duration(time.Now().UnixNano()%int64(unit))
	if left < margin {
		time.Sleep(left + 50*time.Millisecond)
	}
}

// writeConfig writes body to path atomically (a rename), so that a reload
// never sees half a file.
func writeConfig(t *testing.T, path, body string) {
	t.Helper()
	// The temporary file is made next to the directory, not in it: the
	// server watches every file of a configuration directory.
	f, err := os.CreateTemp(filepath.Dir(filepath.Dir(path)), "config-*.tmp")
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.WriteString(body)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(f.Name(), 0o644)
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(f.Name(), path); err != nil {
		t.Fatal(err)
	}
}

// redisURL is the floodgate --redis URL of a testenv server.
func redisURL(r *testenv.Redis) string { return "redis://" + r.Addr }

// uniquePrefix is a Redis key prefix of the test's own.
func uniquePrefix(t *testing.T) string {
	name := strings.NewReplacer("/", "-", " ", "_").Replace(t.Name())
	return fmt.Sprintf("e2e-%s-%d", name, time.Now().UnixNano())
}

// socketBacklog returns the bytes waiting in the receive queues of the
// TCP sockets bound to 127.0.0.1:port (a paused redis-server's accepted
// connections), from /proc/net/tcp: > 0 once a client's command reached the
// server that cannot read it.
func socketBacklog(t *testing.T, port int) int {
	t.Helper()
	data, err := os.ReadFile("/proc/net/tcp")
	if err != nil {
		t.Fatal(err)
	}
	local := fmt.Sprintf("0100007F:%04X", port)
	total := 0
	for _, line := range strings.Split(string(data), "\n")[1:] {
		f := strings.Fields(line)
		if len(f) < 5 || f[1] != local {
			continue
		}
		_, rx, _ := strings.Cut(f[4], ":")
		n, err := strconv.ParseInt(rx, 16, 64)
		if err == nil {
			total += int(n)
		}
	}
	return total
}
