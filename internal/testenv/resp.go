package testenv

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// ReplyError is a Redis error reply (a RESP "-" line) returned by Do, for
// example "ERR unknown command" or "LOADING Redis is loading the dataset".
type ReplyError string

// Error returns the error text exactly as the server sent it.
func (e ReplyError) Error() string { return string(e) }

// defaultCommandTimeout bounds a command sent by Do when ctx has no deadline.
const defaultCommandTimeout = 5 * time.Second

// do dials addr over TCP (over TLS when addr is a server started WithTLS:
// tlsAddrs), sends one command in RESP2, reads one reply and closes the
// connection. The reply is a string (simple or bulk string), int64, []any,
// nil (null bulk string or array) or, for an error reply, a ReplyError
// returned as the error. dialTimeout, if positive, bounds the dial on its
// own; the whole exchange is bounded by ctx or defaultCommandTimeout.
func do(ctx context.Context, addr string, dialTimeout time.Duration, args ...string) (any, error) {
	var conf *tls.Config
	if c, ok := tlsAddrs.Load(addr); ok {
		conf = c.(*tls.Config)
	}
	return doWith(ctx, addr, conf, dialTimeout, args...)
}

// doWith is do over TLS with conf (plain TCP when conf is nil).
func doWith(ctx context.Context, addr string, conf *tls.Config, dialTimeout time.Duration, args ...string) (any, error) {
	if len(args) == 0 {
		return nil, errors.New("testenv: empty command")
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, defaultCommandTimeout)
		defer cancel()
	}
	nd := &net.Dialer{Timeout: dialTimeout}
	var conn net.Conn
	var err error
	if conf != nil {
		conn, err = (&tls.Dialer{NetDialer: nd, Config: conf}).DialContext(ctx, "tcp", addr)
	} else {
		conn, err = nd.DialContext(ctx, "tcp", addr)
	}
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	deadline, _ := ctx.Deadline()
	if err := conn.SetDeadline(deadline); err != nil {
		return nil, err
	}
	// Unblock the read if ctx is cancelled before its deadline.
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	var b strings.Builder
	fmt.Fprintf(&b, "*%d\r\n", len(args))
	for _, a := range args {
		fmt.Fprintf(&b, "$%d\r\n%s\r\n", len(a), a)
	}
	if _, err := conn.Write([]byte(b.String())); err != nil {
		return nil, err
	}
	v, err := readReply(bufio.NewReader(conn))
	if err != nil && ctx.Err() != nil {
		var re ReplyError
		if !errors.As(err, &re) {
			return nil, fmt.Errorf("%w (%v)", ctx.Err(), err)
		}
	}
	return v, err
}

// readReply parses one RESP2 reply.
func readReply(br *bufio.Reader) (any, error) {
	line, err := br.ReadString('\n')
	if err != nil {
		return nil, err
	}
	line = strings.TrimSuffix(line, "\r\n")
	if line == "" {
		return nil, errors.New("testenv: empty RESP line")
	}
	body := line[1:]
	switch line[0] {
	case '+':
		return body, nil
	case '-':
		return nil, ReplyError(body)
	case ':':
		return strconv.ParseInt(body, 10, 64)
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil {
			return nil, fmt.Errorf("testenv: bad bulk length %q", body)
		}
		if n < 0 {
			return nil, nil
		}
		buf := make([]byte, n+2)
		if _, err := io.ReadFull(br, buf); err != nil {
			return nil, err
		}
		return string(buf[:n]), nil
	case '*':
		n, err := strconv.Atoi(body)
		if err != nil {
			return nil, fmt.Errorf("testenv: bad array length %q", body)
		}
		if n < 0 {
			return nil, nil
		}
		arr := make([]any, n)
		for i := range arr {
			v, err := readReply(br)
			var re ReplyError
			if err != nil && !errors.As(err, &re) {
				return nil, err
			}
			if err != nil {
				v = re
			}
			arr[i] = v
		}
		return arr, nil
	default:
		return nil, fmt.Errorf("testenv: unexpected RESP line %q", line)
	}
}

// doString runs a command whose reply is a string.
func doString(ctx context.Context, addr string, args ...string) (string, error) {
	v, err := do(ctx, addr, 0, args...)
	if err != nil {
		return "", err
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("testenv: %s: unexpected reply %#v", args[0], v)
	}
	return s, nil
}

// parseInfo turns the text of INFO or CLUSTER INFO into a field map.
func parseInfo(s string) map[string]string {
	m := make(map[string]string)
	for line := range strings.SplitSeq(s, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if k, v, ok := strings.Cut(line, ":"); ok {
			m[k] = v
		}
	}
	return m
}

// info runs INFO [section] (or CLUSTER INFO when section is "cluster-info")
// and returns its fields.
func info(ctx context.Context, addr, section string) (map[string]string, error) {
	args := []string{"INFO", section}
	if section == "cluster-info" {
		args = []string{"CLUSTER", "INFO"}
	}
	s, err := doString(ctx, addr, args...)
	if err != nil {
		return nil, err
	}
	return parseInfo(s), nil
}
