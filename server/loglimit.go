package server

import (
	"log/slog"
	"sync"
	"time"
)

// logLimiter writes at most one line per key and interval; the next line
// written for that key says how many were left out in between and the last
// of their errors, so a flood of failures (one per request while the store
// is down) costs one line a second, and nothing is hidden without a count.
type logLimiter struct {
	log   *slog.Logger
	every time.Duration
	now   func() time.Time

	mu   sync.Mutex
	keys map[string]*logState
}

type logState struct {
	last       time.Time
	suppressed int64
	lastErr    any // the "error" argument of the last line left out
}

func newLogLimiter(log *slog.Logger, every time.Duration) *logLimiter {
	return &logLimiter{log: log, every: every, now: time.Now, keys: map[string]*logState{}}
}

// warn logs msg with args at WARN level unless a line for key was written
// less than the interval ago. key must come from a small fixed set.
func (l *logLimiter) warn(key, msg string, args ...any) {
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
	l.log.Warn(msg, args...)
}
