package breaker

import (
	"errors"
	"testing"
	"time"
)

func TestBreaker(t *testing.T) {
	now := time.Unix(0, 0)
	b := newBreaker(Options{Failures: 2, Cooldown: time.Second})
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
	off := newBreaker(Options{Failures: -1})
	for range 10 {
		off.record(fail)
	}
	if !off.allow() || off.isOpen() {
		t.Fatal("a disabled breaker opened")
	}
}
