package delayqueue_test

import (
	"context"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/delayqueue"
)

// BenchmarkLateness measures lateness — delivery time minus DueAt — at a
// steady 1,000 enqueues per second, each job due 0-200ms after its Enqueue
// (so due order differs from enqueue order), one Run with Concurrency 8.
// b.N is the number of jobs (run with e.g. -benchtime=5000x: at 1,000/s
// that is five seconds). It reports p50-ms, p99-ms and max-ms; ns/op is
// the wall time per job and means little. On Redis DueAt comes from the
// server's clock, on the same machine as the benchmark.
func BenchmarkLateness(b *testing.B) {
	for _, bk := range threeBackends() {
		b.Run(bk.name, func(b *testing.B) {
			q, err := delayqueue.New(bk.make(b, nil)(), "lateness", delayqueue.Concurrency(8))
			if err != nil {
				b.Fatal(err)
			}
			var (
				mu   sync.Mutex
				late = make([]time.Duration, 0, b.N)
				n    atomic.Int64
			)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() {
				defer close(done)
				_ = q.Run(ctx, func(_ context.Context, j *delayqueue.Job) error {
					l := time.Since(j.DueAt)
					mu.Lock()
					late = append(late, l)
					mu.Unlock()
					n.Add(1)
					return nil
				})
			}()
			defer func() { cancel(); <-done }()
			rng := rand.New(rand.NewPCG(5, 6))
			time.Sleep(50 * time.Millisecond)
			b.ResetTimer()
			start := time.Now()
			for i := range b.N {
				if d := time.Until(start.Add(time.Duration(i) * time.Millisecond)); d > 0 {
					time.Sleep(d)
				}
				delay := time.Duration(rng.Int64N(int64(200 * time.Millisecond)))
				if _, err := q.Enqueue(ctx, nil, delayqueue.Delay(delay)); err != nil {
					b.Fatal(err)
				}
			}
			for n.Load() < int64(b.N) {
				time.Sleep(time.Millisecond)
			}
			b.StopTimer()
			mu.Lock()
			defer mu.Unlock()
			slices.Sort(late)
			ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
			b.ReportMetric(ms(late[len(late)/2]), "p50-ms")
			b.ReportMetric(ms(late[len(late)*99/100]), "p99-ms")
			b.ReportMetric(ms(late[len(late)-1]), "max-ms")
		})
	}
}

// BenchmarkThroughput measures jobs/s through a queue: b.N jobs, all due,
// enqueued beforehand (untimed), then drained by one Run with Concurrency 8
// and a no-op handler (per job: a claim, an ack and a share of a pump).
func BenchmarkThroughput(b *testing.B) {
	for _, bk := range threeBackends() {
		b.Run(bk.name, func(b *testing.B) {
			q, err := delayqueue.New(bk.make(b, nil)(), "throughput", delayqueue.Concurrency(8))
			if err != nil {
				b.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			b.StopTimer()
			past := time.Now().Add(-time.Second)
			for range b.N {
				if _, err := q.Enqueue(ctx, nil, delayqueue.At(past)); err != nil {
					b.Fatal(err)
				}
			}
			var n atomic.Int64
			all, done := make(chan struct{}), make(chan struct{})
			b.StartTimer()
			go func() {
				defer close(done)
				_ = q.Run(ctx, func(context.Context, *delayqueue.Job) error {
					if n.Add(1) == int64(b.N) {
						close(all)
					}
					return nil
				})
			}()
			<-all
			b.StopTimer()
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "jobs/s")
			cancel()
			<-done
		})
	}
}

// BenchmarkEnqueue measures Enqueue of delayed jobs from 8 goroutines.
func BenchmarkEnqueue(b *testing.B) {
	for _, bk := range threeBackends() {
		b.Run(bk.name, func(b *testing.B) {
			q, err := delayqueue.New(bk.make(b, nil)(), "enqueue")
			if err != nil {
				b.Fatal(err)
			}
			ctx := context.Background()
			payload := make([]byte, 64)
			b.ReportAllocs()
			b.SetParallelism(8)
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					if _, err := q.Enqueue(ctx, payload, delayqueue.Delay(time.Hour)); err != nil {
						b.Error(err)
						return
					}
				}
			})
		})
	}
}
