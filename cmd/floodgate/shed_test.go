//go:build linux

package main

// Issue 12's acceptance test, "Connections are never shed": 20,200 hostile
// connections exhausted the process's descriptors, and every later accept,
// Redis reconnect and configuration reload failed with EMFILE.

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	rls "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// TestShedHostileConnections starts floodgate with 2,048 descriptors and
// opens 2,500 hostile connections to it: POSTs that withhold their bodies,
// gRPC connections that never send the HTTP/2 preface, and connections that
// send nothing. The server must never run out of descriptors, and once the
// (short) deadlines have passed a new client's /healthz and gRPC decision
// must be answered.
func TestShedHostileConnections(t *testing.T) {
	const (
		nofile  = 2048
		hostile = 2500
	)
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Fatal(err)
	}
	if lim.Max < hostile+500 {
		t.Skipf("needs %d descriptors for its %d connections; the hard RLIMIT_NOFILE (ulimit -Hn) is %d", hostile+500, hostile, lim.Max)
	}
	if lim.Cur < lim.Max { // Go raised it at start already, unless something lowered it since
		lim.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			t.Fatal(err)
		}
	}
	// The deadlines (3s) outlast the flood even when the machine is busy and
	// the server accepts slowly: with 1s, a loaded CI machine closed the
	// first connections before the last were accepted, and the cap was
	// never reached.
	s := startServerWith(t, serveOpts{nofile: nofile}, e2eConfig, "--http-read-timeout", "3s", "--grpc-handshake-timeout", "3s")

	var conns []net.Conn
	t.Cleanup(func() {
		for _, c := range conns {
			c.Close()
		}
	})
	start := time.Now()
	dialErrs := 0
	for i := range hostile {
		addr := s.HTTP
		if i%3 == 1 {
			addr = s.GRPC
		}
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err != nil {
			dialErrs++ // a full accept queue: not the server's descriptors
			continue
		}
		conns = append(conns, c)
		if i%3 == 0 {
			// Errors are expected: the server may have closed it already.
			fmt.Fprintf(c, "POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\n")
		}
	}
	t.Logf("%d hostile connections opened in %v (%d dials failed)", len(conns), time.Since(start).Round(time.Millisecond), dialErrs)

	// Past the deadlines (3s), a new client gets in; 20s is far more than
	// it takes.
	hc := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	var healthErr, rlErr error
	deadline := time.Now().Add(20 * time.Second)
	for {
		healthErr, rlErr = healthz(hc, s.HTTP), decision(s.GRPC)
		if healthErr == nil && rlErr == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if healthErr != nil || rlErr != nil {
		t.Errorf("20s after the flood: /healthz: %v; ShouldRateLimit: %v", healthErr, rlErr)
	}
	t.Logf("answered %v after the flood began", time.Since(start).Round(time.Millisecond))

	if logs := s.Logs(); strings.Contains(logs, "too many open files") {
		t.Errorf("the server ran out of descriptors:\n%s", grep(logs, "too many open files"))
	}
	limit := s.metric("", "floodgate_connections_limit")
	open := s.metric("", "floodgate_connections_open")
	shed := s.metric("", "floodgate_connections_shed_total")
	t.Logf("connection cap %v; open %v; shed %v (idle %v, refused %v)", limit, open, shed,
		s.metric("", "floodgate_connections_shed_total", "reason", "idle"), s.metric("", "floodgate_connections_shed_total", "reason", "refused"))
	if limit <= 0 || limit >= nofile {
		t.Errorf("floodgate_connections_limit %v, want a cap below the descriptor limit %d", limit, nofile)
	}
	if open > limit {
		t.Errorf("floodgate_connections_open %v, over the cap %v", open, limit)
	}
	if shed == 0 {
		t.Errorf("no connection shed with %d hostile ones over a cap of %v", hostile, limit)
	}
}

// healthz asks for /healthz over a connection of its own.
func healthz(hc *http.Client, addr string) error {
	resp, err := hc.Get("http://" + addr + "/healthz")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s", resp.Status)
	}
	return nil
}

// decision asks for a ShouldRateLimit decision over a connection of its own.
func decision(addr string) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	resp, err := rls.NewRateLimitServiceClient(conn).ShouldRateLimit(ctx,
		request("e2e", entries("user", fmt.Sprintf("shed-%d", time.Now().UnixNano()))))
	if err != nil {
		return err
	}
	if resp.GetOverallCode() != rls.RateLimitResponse_OK {
		return fmt.Errorf("overall_code %v, want OK", resp.GetOverallCode())
	}
	return nil
}

func grep(text, sub string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
