package testenv

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// A server whose port is taken must fail with errBind (so StartRedis moves
// to another port), whether the holder is a plain listener or another Redis
// that would answer our PING.
func TestStartDetectsTakenPort(t *testing.T) {
	other := NewRedis(t)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	lport := l.Addr().(*net.TCPAddr).Port
	bin, err := lookBinary("redis-server")
	if err != nil {
		t.Fatal(err)
	}
	for _, port := range []int{other.Port, lport} {
		dir := t.TempDir()
		r := &Redis{Port: port, Addr: "127.0.0.1:" + strconv.Itoa(port), Dir: dir, LogFile: filepath.Join(dir, "redis.log")}
		r.d = r.daemon(bin)
		r.d.addr = r.Addr
		err := r.d.start()
		if err == nil {
			_ = r.Close()
			t.Fatalf("start on taken port %d succeeded", port)
		}
		if !errors.Is(err, errBind) {
			t.Fatalf("start on taken port %d: %v, want errBind", port, err)
		}
	}
	// The other server was not disturbed.
	if _, err := other.Do(t.Context(), "PING"); err != nil {
		t.Fatalf("other server: %v", err)
	}
}

// A server that cannot start explains why (its log tail) and leaves no
// directory behind.
func TestStartReportsLogTail(t *testing.T) {
	_, err := StartRedis(WithArgs("--no-such-option", "1"))
	if errors.Is(err, ErrNotInstalled) {
		NotInstalled(t, err.Error())
	}
	if err == nil {
		t.Fatal("StartRedis with a bad option succeeded")
	}
	if errors.Is(err, errBind) {
		t.Fatalf("bad option reported as a bind error: %v", err)
	}
	if !strings.Contains(err.Error(), "no-such-option") {
		t.Fatalf("error lacks the server's complaint: %v", err)
	}
	m := regexp.MustCompile(`last lines of (\S+)/stdout\.log`).FindStringSubmatch(err.Error())
	if m == nil {
		t.Fatalf("error does not name the log: %v", err)
	}
	if _, serr := os.Stat(m[1]); !os.IsNotExist(serr) {
		t.Fatalf("failed start left %s behind: %v", m[1], serr)
	}
}
