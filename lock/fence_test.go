package lock_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/lock"
)

func TestFence(t *testing.T) {
	var f lock.Fence
	if err := f.Admit("r", 5); err != nil {
		t.Fatal(err)
	}
	if err := f.Admit("r", 5); err != nil {
		t.Fatalf("equal token: %v", err)
	}
	if err := f.Admit("r", 4); !errors.Is(err, lock.ErrStaleToken) {
		t.Fatalf("lower token: %v", err)
	}
	if err := f.Admit("other", 1); err != nil {
		t.Fatalf("another resource: %v", err)
	}
	if f.Highest("r") != 5 {
		t.Fatalf("Highest = %d", f.Highest("r"))
	}
}

// TestFenceStopsPausedHolder: a holder paused past its TTL writes late; the
// fence refuses it because the next holder already wrote with a higher token.
func TestFenceStopsPausedHolder(t *testing.T) {
	m := backend.NewMemory()
	defer m.Close()
	ctx := context.Background()
	slow, _ := lock.NewMutex(m, "account", lock.TTL(50*time.Millisecond))
	fast, _ := lock.NewMutex(m, "account", lock.TTL(time.Second))
	var f lock.Fence
	a, _ := slow.Lock(ctx)
	<-a.Lost() // "paused" past the TTL
	b, err := fast.Lock(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Admit("account", b.Token()); err != nil {
		t.Fatal(err)
	}
	if err := f.Admit("account", a.Token()); !errors.Is(err, lock.ErrStaleToken) {
		t.Fatalf("the paused holder's late write was admitted: %v", err)
	}
}
