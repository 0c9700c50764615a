package lock_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/lock"
)

// Readers share the lock; a writer waits for them and then excludes
// everyone. Every holding has its own fencing token.
func ExampleNewRWMutex() {
	b := backend.NewMemory()
	defer b.Close()
	ctx := context.Background()

	rw, err := lock.NewRWMutex(b, "config", lock.TTL(10*time.Second))
	if err != nil {
		fmt.Println(err)
		return
	}
	r1, _ := rw.RLock(ctx)
	r2, _ := rw.RLock(ctx)
	fmt.Println("two readers, tokens increase:", r2.Token() > r1.Token())
	if _, err := rw.TryLock(ctx); errors.Is(err, lock.ErrLocked) {
		fmt.Println("writer: locked")
	}
	_ = r1.Unlock(ctx)
	_ = r2.Unlock(ctx)

	w, err := rw.Lock(ctx)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("writer holds it, token above the readers':", w.Token() > r2.Token())
	if _, err := rw.TryRLock(ctx); errors.Is(err, lock.ErrLocked) {
		fmt.Println("reader: locked")
	}
	_ = w.Unlock(ctx)
	// Output:
	// two readers, tokens increase: true
	// writer: locked
	// writer holds it, token above the readers': true
	// reader: locked
}

// Each side is a Locker (the RWLocker itself is the write side), so code
// written for a Locker works with either.
func ExampleRWLocker_RLocker() {
	b := backend.NewMemory()
	defer b.Close()
	ctx := context.Background()

	rw, _ := lock.NewRWMutex(b, "catalog")
	withLock := func(l lock.Locker, what string) {
		lease, err := l.Lock(ctx)
		if err != nil {
			fmt.Println(err)
			return
		}
		defer lease.Unlock(ctx)
		fmt.Println(what)
	}
	withLock(rw.RLocker(), "reading the catalog")
	withLock(rw, "rewriting the catalog")
	// Output:
	// reading the catalog
	// rewriting the catalog
}
