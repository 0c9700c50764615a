package zklock_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/go-zookeeper/zk"

	"github.com/floodgate-dev/floodgate/lock"
	"github.com/floodgate-dev/floodgate/lock/zklock"
)

// The example needs a ZooKeeper server on 127.0.0.1:2181, so it is compiled
// but not run by go test.
func Example() {
	conn, _, err := zk.Connect([]string{"127.0.0.1:2181"}, 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close() // ends the session: every lease held through it is released

	// A TTL no longer than the session timeout: Lost then closes before
	// ZooKeeper could give the lock to another client.
	mu, err := zklock.New(conn, "/locks/invoice-42", lock.TTL(10*time.Second), lock.AutoRenew())
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lease, err := mu.Lock(ctx) // waits, woken when the node before ours goes
	if err != nil {
		log.Fatal(err)
	}
	defer lease.Unlock(context.Background())

	// Pass the fencing token with every write; the resource refuses tokens
	// lower than the highest it has seen (see lock.Fence).
	fmt.Println("holding /locks/invoice-42 with token", lease.Token())
	select {
	case <-lease.Lost():
		log.Print("lock lost: stop touching the invoice")
	case <-time.After(time.Second): // the work
	}
}

// A semaphore of three permits: at most three workers export at once, and a
// crashed worker's permit comes back when ZooKeeper expires its session.
func ExampleNewSemaphore() {
	conn, _, err := zk.Connect([]string{"127.0.0.1:2181"}, 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	sem, err := zklock.NewSemaphore(conn, "/locks/exporters", 3, lock.TTL(10*time.Second), lock.AutoRenew())
	if err != nil {
		log.Fatal(err)
	}
	permit, err := sem.Lock(context.Background())
	if err != nil {
		log.Fatal(err)
	}
	defer permit.Unlock(context.Background())
	fmt.Println("exporting")
}

// Readers share the lock; a writer waits for the readers before it, and
// readers that come after a waiting writer wait for it.
func ExampleNewRWMutex() {
	conn, _, err := zk.Connect([]string{"127.0.0.1:2181"}, 10*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer conn.Close()
	rw, err := zklock.NewRWMutex(conn, "/locks/catalog")
	if err != nil {
		log.Fatal(err)
	}
	ctx := context.Background()
	r, err := rw.RLock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("reading the catalog")
	_ = r.Unlock(ctx)

	w, err := rw.Lock(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("rewriting the catalog")
	_ = w.Unlock(ctx)
}
