// Package faillog is how the decision server reports store failures
// without flooding its log or its metrics: a Limiter writes at most one
// line per key and interval, counting the lines it left out, and Labels
// bounds the store node names that label metrics.
package faillog

import (
	"context"
	"log/slog"
	"regexp"
	"sync"
	"time"
)

// Limiter writes at most one line per key and interval; the next line
// written for that key says how many were left out in between and the last
// of their errors, so a flood of failures (one per request while the store
// is down) costs one line a second, and nothing is hidden without a count.
type Limiter struct {
	log   *slog.Logger
	every time.Duration
	now   func() time.Time // time.Now; tests set it

	mu   sync.Mutex
	keys map[string]*logState
}

type logState struct {
	last       time.Time
	suppressed int64
	lastErr    any // the "error" argument of the last line left out
}

// New returns a Limiter writing to log at most one line per key every
// interval.
func New(log *slog.Logger, every time.Duration) *Limiter {
	return &Limiter{log: log, every: every, now: time.Now, keys: map[string]*logState{}}
}

// Warn logs msg with args at WARN level unless a line for key was written
// less than the interval ago. key must come from a small fixed set.
func (l *Limiter) Warn(key, msg string, args ...any) { l.Log(slog.LevelWarn, key, msg, args...) }

// Log is Warn at level.
func (l *Limiter) Log(level slog.Level, key, msg string, args ...any) {
	now := l.now()
	l.mu.Lock()
	st := l.keys[key]
	if st == nil {
		st = &logState{}
		l.keys[key] = st
	}
	if !st.last.IsZero() && now.Sub(st.last) < l.every {
		st.suppressed++
		for i := 0; i+1 < len(args); i += 2 {
			if args[i] == "error" {
				st.lastErr = args[i+1]
			}
		}
		l.mu.Unlock()
		return
	}
	n, lastErr := st.suppressed, st.lastErr
	st.last, st.suppressed, st.lastErr = now, 0, nil
	l.mu.Unlock()
	if n > 0 {
		args = append(args, "suppressed", n)
		if lastErr != nil {
			args = append(args, "last_suppressed_error", lastErr)
		}
	}
	l.log.Log(context.Background(), level, msg, args...)
}

// nodeAddr finds the store node a client error names: the remote end of
// "write tcp A->B: …" or "read tcp A->B", or the address of "dial tcp B: …".
var nodeAddr = regexp.MustCompile(`(?:->|dial tcp )(\[[0-9A-Fa-f:.]+\]:\d+|[A-Za-z0-9.-]+:\d+)`)

// Node returns the node a store error names, or "unknown" (a timeout
// names none). For the operator's metrics and logs only: callers never see it.
func Node(err error) string {
	if m := nodeAddr.FindStringSubmatch(err.Error()); m != nil {
		return m[1]
	}
	return "unknown"
}

// MaxLabels bounds the node label of floodgate_backend_node_errors_total:
// a Cluster has a handful of nodes, but an error text could name anything.
const MaxLabels = 64

// Labels hands out node label values, at most MaxLabels of them;
// the rest count as "other". The zero value is ready; safe for
// concurrent use.
type Labels struct {
	mu   sync.Mutex
	seen map[string]bool
}

// Label returns the label of node: node itself, or "other" once
// MaxLabels others were handed out.
func (n *Labels) Label(node string) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.seen == nil {
		n.seen = map[string]bool{}
	}
	if !n.seen[node] {
		if len(n.seen) >= MaxLabels {
			return "other"
		}
		n.seen[node] = true
	}
	return node
}
