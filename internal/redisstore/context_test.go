package redisstore

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"
)

// lateContext is a context whose deadline has passed while its timer has
// not fired yet: Err is still nil.
type lateContext struct {
	context.Context
	dl time.Time
}

func (c lateContext) Deadline() (time.Time, bool) { return c.dl, true }

// TestContextCause: an error is also the context's when the context
// explains it — ended, past its deadline, or a socket time-out just before
// the deadline — and only then.
func TestContextCause(t *testing.T) {
	timeout := os.ErrDeadlineExceeded // a net.Error whose Timeout is true
	other := errors.New("connection refused")
	soon, cancelSoon := context.WithTimeout(context.Background(), 5*time.Millisecond)
	defer cancelSoon()
	later, cancelLater := context.WithTimeout(context.Background(), time.Minute)
	defer cancelLater()
	canceled, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		err  error
		want error
	}{
		{"canceled", canceled, other, context.Canceled},
		{"past its deadline, timer not fired", lateContext{context.Background(), time.Now().Add(-time.Millisecond)}, other, context.DeadlineExceeded},
		{"socket time-out at the deadline", soon, timeout, context.DeadlineExceeded},
		{"other error before the deadline", later, other, nil},
		{"socket time-out long before the deadline", later, timeout, nil},
		{"no deadline", context.Background(), timeout, nil},
	} {
		if got := contextCause(tc.ctx, tc.err); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
	s := &Store{}
	err := s.wrap(lateContext{context.Background(), time.Now().Add(-time.Millisecond)}, timeout)
	if !errors.Is(err, context.DeadlineExceeded) || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("wrap: %v, want it to match both the context's and the client's error", err)
	}
}
