package faillog

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestLimiter: five lines in an interval are one; the next, after it,
// counts the four left out and names the last of their errors.
func TestLimiter(t *testing.T) {
	var buf bytes.Buffer
	now := time.Unix(0, 0)
	l := New(slog.New(slog.NewTextHandler(&buf, nil)), time.Second)
	l.now = func() time.Time { return now }
	for i := range 5 {
		l.Warn("timeout", "store failed", "error", fmt.Sprint("e", i))
	}
	l.Warn("error", "store failed")
	now = now.Add(time.Second)
	l.Warn("timeout", "store failed")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines, want 3:\n%s", len(lines), buf.String())
	}
	if !strings.Contains(lines[2], "suppressed=4") || !strings.Contains(lines[2], "last_suppressed_error=e4") {
		t.Fatalf("the line after the interval does not count the 4 left out, with the last error: %s", lines[2])
	}
}

// TestNode: the node an error names, and labels past the cap.
func TestNode(t *testing.T) {
	for msg, want := range map[string]string{
		"write tcp 127.0.0.1:44872->127.0.0.1:27001: write: broken pipe":  "127.0.0.1:27001",
		"dial tcp 127.0.0.1:27001: connect: connection refused":           "127.0.0.1:27001",
		"read tcp [::1]:5000->[::1]:6380: read: connection reset by peer": "[::1]:6380",
		"dial tcp redis-2.internal:6379: i/o timeout":                     "redis-2.internal:6379",
		"the store had not answered after 50ms (the timeout)":             "unknown",
	} {
		if got := Node(errors.New(msg)); got != want {
			t.Errorf("Node(%q) = %q, want %q", msg, got, want)
		}
	}
	var n Labels
	for i := range MaxLabels + 5 {
		n.Label(fmt.Sprint("h:", i))
	}
	if got := n.Label("h:new"); got != "other" {
		t.Errorf("label past the cap = %q, want other", got)
	}
	if got := n.Label("h:3"); got != "h:3" {
		t.Errorf("a known node's label = %q", got)
	}
}
