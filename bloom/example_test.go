package bloom_test

import (
	"context"
	"fmt"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/bloom"
)

// A Filter remembers which items it has seen: here, which URLs a crawler has
// already queued. Add reports which items are new in the same call.
func ExampleFilter() {
	ctx := context.Background()
	mem := backend.NewMemory() // or backend.NewRedis(client): same behaviour
	defer mem.Close()

	seen, err := bloom.New(mem, "crawler:seen", 10_000, 0.01)
	if err != nil {
		fmt.Println(err)
		return
	}
	isNew, err := seen.Add(ctx, "https://a.example/", "https://b.example/", "https://a.example/")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("new:", isNew)

	has, err := seen.Contains(ctx, "https://b.example/", "https://c.example/")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("contains:", has)

	info := seen.Info()
	fmt.Printf("m=%d bits, k=%d, %d bytes in %d key(s)\n", info.Cells, info.Hashes, info.Bytes, info.Shards)
	// Output:
	// new: [true true false]
	// contains: [true false]
	// m=95851 bits, k=7, 11982 bytes in 1 key(s)
}

// A CountingFilter supports Remove: here, the set of sessions currently
// open. Remove only items that were added.
func ExampleCountingFilter() {
	ctx := context.Background()
	mem := backend.NewMemory()
	defer mem.Close()

	open, err := bloom.NewCounting(mem, "sessions:open", 100_000, 0.001)
	if err != nil {
		fmt.Println(err)
		return
	}
	if _, err := open.Add(ctx, "s1", "s2", "s3"); err != nil {
		fmt.Println(err)
		return
	}
	if err := open.Remove(ctx, "s2"); err != nil {
		fmt.Println(err)
		return
	}
	has, err := open.Contains(ctx, "s1", "s2", "s3")
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(has)
	// Output:
	// [true false true]
}
