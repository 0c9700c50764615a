package lock

import (
	"testing"
	"time"
)

// TestRunsForgetAbandonedHolders: a run whose holder's lease ended over a
// minute before a later run starts is forgotten (its holder never unlocked),
// and a live one is kept; pass hands out the reserved tokens in order and
// moves the run to the receiver, refusing once its block or window is spent.
func TestRunsForgetAbandonedHolders(t *testing.T) {
	const ttl, window = time.Second, 5 * time.Millisecond
	t0 := time.Now()
	startRun("test-abandoned", 100, t0.Add(-2*time.Minute), ttl, window)
	startRun("test-live", 200, t0, time.Hour, window)
	startRun("test-next", 300, t0, ttl, window)
	defer endRun("test-live")
	defer endRun("test-next")
	runs.Lock()
	_, abandoned := runs.m["test-abandoned"]
	_, live := runs.m["test-live"]
	runs.Unlock()
	if abandoned {
		t.Fatal("a run whose holder's lease ended two minutes ago is still known")
	}
	if !live {
		t.Fatal("a live run was forgotten")
	}
	if got := redisOwner("test-live"); got != "test-live" {
		t.Fatalf("redisOwner of a run's first holder: %q", got)
	}

	// Passes: the next tokens of the block, the run moving with the lock.
	for i, to := range []string{"test-p1", "test-p2"} {
		from := "test-live"
		if i > 0 {
			from = "test-p1"
		}
		if tok := pass(from, to, time.Minute); tok != int64(201+i) {
			t.Fatalf("pass %d: token %d, want %d", i, tok, 201+i)
		}
		if got := redisOwner(to); got != "test-live" {
			t.Fatalf("pass %d: the receiver's Redis owner is %q, want the run's", i, got)
		}
	}
	if got := endRun("test-p2"); got != "test-live" {
		t.Fatalf("endRun: %q", got)
	}
	// A receiver whose TTL would outlast the hash's deadline gets no pass.
	startRun("test-short", 400, time.Now(), ttl, window)
	defer endRun("test-short")
	if tok := pass("test-short", "test-long", 2*ttl); tok != 0 {
		t.Fatalf("a pass whose lease would outlast the run's deadline: token %d", tok)
	}
	// A spent block gives no pass.
	runs.Lock()
	runs.m["test-short"].next = runs.m["test-short"].last + 1
	runs.Unlock()
	if tok := pass("test-short", "test-other", time.Millisecond); tok != 0 {
		t.Fatalf("a pass from a spent block: token %d", tok)
	}
}
