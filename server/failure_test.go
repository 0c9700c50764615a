package server

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/internal/backendtest"
	"github.com/floodgate-dev/floodgate/internal/testenv"
)

// TestFailureModes pauses a private Redis (SIGSTOP) and checks that every
// answer follows the failure mode, comes within the timeout (not the client's
// own, longer one), that the breaker then fails calls fast, and that service
// comes back by itself once Redis does.
func TestFailureModes(t *testing.T) {
	r, err := testenv.StartRedis()
	if err != nil {
		t.Fatalf("redis-server: %v", err)
	}
	t.Cleanup(func() { r.Close() })

	for _, mode := range []FailureMode{FailOpen, FailClosed, FailError} {
		t.Run(mode.String(), func(t *testing.T) {
			b, c, err := OpenStore("redis://"+r.Addr, backendtest.UniquePrefix(), time.Second)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			s := newService(t, b, Options{
				FailureMode: mode,
				Timeout:     50 * time.Millisecond,
				Breaker:     BreakerOptions{Failures: 3, Cooldown: 200 * time.Millisecond},
				Metrics:     NewMetrics(),
			})
			if got := decide(t, s, desc(1, "user", "u1")); got.Code != CodeOK || got.Failed {
				t.Fatalf("healthy: %+v", got)
			}
			if err := r.Pause(); err != nil {
				t.Fatal(err)
			}
			resumed := false
			defer func() {
				if !resumed {
					r.Resume()
				}
			}()
			for i := range 6 {
				start := time.Now()
				got, err := s.Decide(context.Background(), &Request{Domain: "api", Descriptors: []Descriptor{desc(1, "user", "u1"), desc(1, "nomatch", "x")}})
				if took := time.Since(start); took > time.Second {
					t.Fatalf("request %d took %v with Redis paused", i, took)
				}
				switch mode {
				case FailError:
					if !errors.Is(err, ErrUnavailable) {
						t.Fatalf("request %d: err %v, want ErrUnavailable", i, err)
					}
				case FailOpen:
					if err != nil || !got.Failed || got.Code != CodeOK {
						t.Fatalf("request %d: %+v %v", i, got, err)
					}
				case FailClosed:
					if err != nil || !got.Failed || got.Code != CodeOverLimit || got.Statuses[0].Code != CodeOverLimit || got.Statuses[1].Code != CodeOK {
						t.Fatalf("request %d: %+v %v", i, got, err)
					}
				}
			}
			if !s.breaker.isOpen() || s.Ready() {
				t.Fatal("breaker still closed after repeated failures")
			}
			if err := r.Resume(); err != nil {
				t.Fatal(err)
			}
			resumed = true
			deadline := time.Now().Add(10 * time.Second)
			for {
				got, err := s.Decide(context.Background(), &Request{Domain: "api", Descriptors: []Descriptor{desc(1, "user", "u2")}})
				if err == nil && !got.Failed && got.Code == CodeOK {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("no recovery after Redis resumed: %+v %v", got, err)
				}
				time.Sleep(50 * time.Millisecond)
			}
			if !s.Ready() {
				t.Fatal("not ready after recovery")
			}
		})
	}
}

func TestBreaker(t *testing.T) {
	now := time.Unix(0, 0)
	b := newBreaker(BreakerOptions{Failures: 2, Cooldown: time.Second})
	b.now = func() time.Time { return now }
	fail := errors.New("down")
	b.record(fail)
	if !b.allow() || b.isOpen() {
		t.Fatal("opened after one failure")
	}
	b.record(fail)
	if b.allow() || !b.isOpen() {
		t.Fatal("still closed after two failures")
	}
	now = now.Add(time.Second)
	if !b.allow() {
		t.Fatal("no probe after the cooldown")
	}
	if b.allow() {
		t.Fatal("a second probe while the first is out")
	}
	b.record(fail)
	if b.allow() {
		t.Fatal("closed after a failed probe")
	}
	now = now.Add(time.Second)
	if !b.allow() {
		t.Fatal("no probe after the second cooldown")
	}
	b.record(nil)
	if !b.allow() || b.isOpen() {
		t.Fatal("still open after a successful probe")
	}
	// A success resets the count of consecutive failures.
	b.record(fail)
	b.record(nil)
	b.record(fail)
	if b.isOpen() {
		t.Fatal("opened on failures that were not consecutive")
	}
	off := newBreaker(BreakerOptions{Failures: -1})
	for range 10 {
		off.record(fail)
	}
	if !off.allow() || off.isOpen() {
		t.Fatal("a disabled breaker opened")
	}
}
