package breaker

import (
	"errors"
	"testing"
	"time"
)

// TestBreaker: consecutive failure events open it; calls that failed
// together are one event; probes come after Probe, then twice as long
// while they fail, up to Cooldown; a success closes it and resets the
// count.
func TestBreaker(t *testing.T) {
	now := time.Unix(0, 0)
	b := newBreaker(Options{Failures: 2, Probe: 100 * time.Millisecond, Cooldown: 300 * time.Millisecond})
	b.now = func() time.Time { return now }
	fail := errors.New("down")
	tick := func() time.Time { now = now.Add(time.Millisecond); return now }

	// Ten calls in flight together time out together: one event.
	start := tick()
	tick()
	for range 10 {
		b.record(fail, start)
	}
	if !b.allow() || b.isOpen() {
		t.Fatal("opened after one stall's concurrent timeouts")
	}
	b.record(fail, tick())
	if b.allow() || !b.isOpen() {
		t.Fatal("still closed after two failure events")
	}
	// A call that was in flight fails too: nothing changes.
	b.record(fail, start)

	now = now.Add(99 * time.Millisecond)
	if b.allow() {
		t.Fatal("a probe before Probe passed")
	}
	now = now.Add(time.Millisecond)
	if !b.allow() {
		t.Fatal("no probe after Probe")
	}
	if b.allow() {
		t.Fatal("a second probe while the first is out")
	}
	b.record(fail, now)
	// Failed: the next waits 200 ms, then 300 (the cooldown), then 300.
	for _, wait := range []time.Duration{200 * time.Millisecond, 300 * time.Millisecond, 300 * time.Millisecond} {
		now = now.Add(wait - time.Millisecond)
		if b.allow() {
			t.Fatalf("a probe before %v", wait)
		}
		now = now.Add(time.Millisecond)
		if !b.allow() {
			t.Fatalf("no probe after %v", wait)
		}
		b.record(fail, now)
	}
	now = now.Add(300 * time.Millisecond)
	if !b.allow() {
		t.Fatal("no probe after the cooldown")
	}
	b.record(nil, now)
	if !b.allow() || b.isOpen() {
		t.Fatal("still open after a successful probe")
	}
	// A success resets the count of consecutive events.
	b.record(fail, tick())
	b.record(nil, tick())
	b.record(fail, tick())
	if b.isOpen() {
		t.Fatal("opened on failure events that were not consecutive")
	}
	// Opened again, it first probes after Probe again.
	b.record(fail, tick())
	if !b.isOpen() {
		t.Fatal("not open after two consecutive events")
	}
	now = now.Add(100 * time.Millisecond)
	if !b.allow() {
		t.Fatal("reopened: no probe after Probe")
	}
	// A call in flight since before it opened succeeds: closed at once.
	b.record(nil, start)
	if b.isOpen() {
		t.Fatal("a success did not close it")
	}

	off := newBreaker(Options{Failures: -1})
	for range 10 {
		off.record(fail, tick())
	}
	if !off.allow() || off.isOpen() {
		t.Fatal("a disabled breaker opened")
	}
}
