package testenv

import (
	"net"
	"slices"
	"strings"
	"testing"
	"time"
)

// Statsd is a StatsD server of a test's own on a loopback UDP port: it
// collects every line it receives, in order, on Lines. It closes when the
// test ends.
type Statsd struct {
	conn  *net.UDPConn
	Lines chan string
}

// ListenStatsd starts a Statsd.
func ListenStatsd(t testing.TB) *Statsd {
	t.Helper()
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	s := &Statsd{conn: conn, Lines: make(chan string, 4096)}
	t.Cleanup(func() { conn.Close() })
	go func() {
		buf := make([]byte, 65536)
		for {
			n, err := conn.Read(buf)
			if err != nil {
				return
			}
			for _, l := range strings.Split(string(buf[:n]), "\n") {
				if l != "" {
					s.Lines <- l
				}
			}
		}
	}()
	return s
}

// Port returns the UDP port it listens on.
func (s *Statsd) Port() int { return s.conn.LocalAddr().(*net.UDPAddr).Port }

// Expect waits (up to 5 s) for as many lines with prefix as want, then for
// 200 ms of quiet, and fails the test unless the lines received are want,
// in any order.
func (s *Statsd) Expect(t testing.TB, prefix string, want ...string) {
	t.Helper()
	var got []string
	deadline := time.After(5 * time.Second)
	var quiet <-chan time.Time
	for done := false; !done; {
		if len(got) >= len(want) && quiet == nil {
			quiet = time.After(200 * time.Millisecond)
		}
		select {
		case l := <-s.Lines:
			if strings.HasPrefix(l, prefix) {
				got = append(got, l)
			}
		case <-deadline:
			done = true
		case <-quiet:
			done = true
		}
	}
	slices.Sort(got)
	want = slices.Clone(want)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("StatsD lines:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
