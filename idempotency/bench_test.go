package idempotency_test

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/idempotency"
)

// Memory-backend costs of the three calls; run with -bench . -benchmem.

func BenchmarkDoReplay(b *testing.B) {
	mem := backend.NewMemory()
	defer mem.Close()
	s, _ := idempotency.New(mem)
	ctx := context.Background()
	fn := func(context.Context) ([]byte, error) { return []byte("result"), nil }
	s.Do(ctx, "k", fn)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, replayed, _ := s.Do(ctx, "k", fn); !replayed {
				b.Fatal("not replayed")
			}
		}
	})
}

func BenchmarkDoFirst(b *testing.B) {
	mem := backend.NewMemory()
	defer mem.Close()
	s, _ := idempotency.New(mem)
	ctx := context.Background()
	fn := func(context.Context) ([]byte, error) { return []byte("result"), nil }
	var n atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			s.Do(ctx, strconv.FormatInt(n.Add(1), 10), fn)
		}
	})
}

func BenchmarkIssueConsumeToken(b *testing.B) {
	mem := backend.NewMemory()
	defer mem.Close()
	s, _ := idempotency.New(mem)
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			tok, _ := s.IssueToken(ctx)
			if ok, _ := s.ConsumeToken(ctx, tok); !ok {
				b.Fatal("token not consumed")
			}
		}
	})
}
