package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/delayqueue"
	"github.com/floodgate-dev/floodgate/internal/testenv"
)

// BenchmarkDelayQueue compares floodgate's delayqueue with
// github.com/hibiken/asynq's scheduled tasks (ProcessAt / ProcessIn) on one
// private Redis, both consuming with 8 handlers:
//
//   - enqueue: b.N scheduled enqueues from 8 goroutines (ns/op).
//   - drain: b.N jobs all due at one instant T, enqueued beforehand; jobs/s
//     from the first delivery to the last, and first-ms, the delay from T to
//     the first delivery (asynq moves due tasks on a poll interval).
//   - lateness: 1,000 enqueues/s, each due 0-200ms later; p50-ms and p99-ms
//     of delivery time minus due time, and early-%, the share of jobs
//     delivered before their due time (asynq keeps due times in whole
//     seconds and forwards a task once its second has begun, up to 1s
//     early). b.N jobs (e.g. -benchtime=3000x).
//
// asynq runs twice: with its defaults (tasks checked every 1s when idle,
// scheduled tasks forwarded every 5s) and "tuned" to 10ms for both, which
// polls Redis 200 times a second per server. floodgate uses its defaults
// (it sleeps until the next due time or an enqueue's pub/sub wake-up).
//
//	go test -run '^$' -bench BenchmarkDelayQueue -benchtime=3000x
func BenchmarkDelayQueue(b *testing.B) {
	srv := testenv.NewRedis(b)
	rc := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	defer rc.Close()
	libs := []dqLib{
		{"floodgate", newFloodgateDQ},
		{"asynq", func(b *testing.B, rc *redis.Client) dqImpl { return newAsynqDQ(b, rc, 0) }},
		{"asynq-tuned", func(b *testing.B, rc *redis.Client) dqImpl { return newAsynqDQ(b, rc, 10*time.Millisecond) }},
	}
	b.Run("enqueue", func(b *testing.B) {
		for _, lib := range libs[:2] {
			b.Run(lib.name, func(b *testing.B) {
				q := lib.make(b, rc)
				defer q.close()
				b.ReportAllocs()
				b.SetParallelism(4) // 8 goroutines on 2 cores
				b.RunParallel(func(pb *testing.PB) {
					for pb.Next() {
						if err := q.enqueue(time.Now().Add(time.Hour), nil); err != nil {
							b.Error(err)
							return
						}
					}
				})
			})
		}
	})
	b.Run("drain", func(b *testing.B) {
		for _, lib := range libs {
			b.Run(lib.name, func(b *testing.B) {
				q := lib.make(b, rc)
				defer q.close()
				b.StopTimer()
				due := time.Now().Add(300*time.Millisecond + time.Duration(b.N)*200*time.Microsecond)
				for range b.N {
					if err := q.enqueue(due, nil); err != nil {
						b.Fatal(err)
					}
				}
				if time.Now().After(due) {
					b.Fatal("enqueueing took longer than the margin before the due time")
				}
				var (
					n           atomic.Int64
					first, last atomic.Int64
					all         = make(chan struct{})
				)
				q.run(b, func([]byte) {
					now := time.Now().UnixNano()
					first.CompareAndSwap(0, now)
					if n.Add(1) == int64(b.N) {
						last.Store(now)
						close(all)
					}
				})
				<-all
				f, l := time.Unix(0, first.Load()), time.Unix(0, last.Load())
				b.ReportMetric(float64(b.N)/max(l.Sub(f).Seconds(), 1e-9), "jobs/s")
				b.ReportMetric(float64(f.Sub(due))/float64(time.Millisecond), "first-ms")
			})
		}
	})
	b.Run("lateness", func(b *testing.B) {
		for _, lib := range libs {
			b.Run(lib.name, func(b *testing.B) {
				q := lib.make(b, rc)
				defer q.close()
				var (
					mu   sync.Mutex
					late []time.Duration
					n    atomic.Int64
				)
				q.run(b, func(payload []byte) {
					ns, _ := strconv.ParseInt(string(payload), 10, 64)
					l := time.Since(time.Unix(0, ns))
					mu.Lock()
					late = append(late, l)
					mu.Unlock()
					n.Add(1)
				})
				rng := rand.New(rand.NewPCG(7, 8))
				time.Sleep(50 * time.Millisecond)
				b.ResetTimer()
				start := time.Now()
				for i := range b.N {
					if d := time.Until(start.Add(time.Duration(i) * time.Millisecond)); d > 0 {
						time.Sleep(d)
					}
					due := time.Now().Add(time.Duration(rng.Int64N(int64(200 * time.Millisecond))))
					if err := q.enqueue(due, []byte(strconv.FormatInt(due.UnixNano(), 10))); err != nil {
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
				early, _ := slices.BinarySearch(late, 0)
				b.ReportMetric(100*float64(early)/float64(len(late)), "early-%")
			})
		}
	})
}

type dqLib struct {
	name string
	make func(b *testing.B, rc *redis.Client) dqImpl
}

// dqImpl is one delay queue under test; every make gets a fresh queue.
type dqImpl interface {
	enqueue(at time.Time, payload []byte) error
	// run starts consuming with 8 handlers calling h; close stops.
	run(b *testing.B, h func(payload []byte))
	close()
}

var dqSeq atomic.Int64

func dqName() string { return fmt.Sprintf("bench%d", dqSeq.Add(1)) }

type floodgateDQ struct {
	q      *delayqueue.Queue
	cancel context.CancelFunc
	done   chan struct{}
}

func newFloodgateDQ(b *testing.B, rc *redis.Client) dqImpl {
	be, err := backend.NewRedis(rc)
	if err != nil {
		b.Fatal(err)
	}
	q, err := delayqueue.New(be, dqName(), delayqueue.Concurrency(8))
	if err != nil {
		b.Fatal(err)
	}
	return &floodgateDQ{q: q}
}

func (f *floodgateDQ) enqueue(at time.Time, payload []byte) error {
	_, err := f.q.Enqueue(context.Background(), payload, delayqueue.At(at))
	return err
}

func (f *floodgateDQ) run(b *testing.B, h func([]byte)) {
	ctx, cancel := context.WithCancel(context.Background())
	f.cancel, f.done = cancel, make(chan struct{})
	go func() {
		defer close(f.done)
		_ = f.q.Run(ctx, func(_ context.Context, j *delayqueue.Job) error {
			h(j.Payload)
			return nil
		})
	}()
}

func (f *floodgateDQ) close() {
	if f.cancel != nil {
		f.cancel()
		<-f.done
	}
}

type asynqDQ struct {
	c     *asynq.Client
	srv   *asynq.Server
	queue string
	poll  time.Duration
	rc    *redis.Client
}

func newAsynqDQ(b *testing.B, rc *redis.Client, poll time.Duration) dqImpl {
	return &asynqDQ{c: asynq.NewClientFromRedisClient(rc), queue: dqName(), poll: poll, rc: rc}
}

func (a *asynqDQ) enqueue(at time.Time, payload []byte) error {
	_, err := a.c.Enqueue(asynq.NewTask("job", payload), asynq.ProcessAt(at), asynq.Queue(a.queue), asynq.MaxRetry(0))
	return err
}

func (a *asynqDQ) run(b *testing.B, h func([]byte)) {
	a.srv = asynq.NewServerFromRedisClient(a.rc, asynq.Config{
		Concurrency:              8,
		Queues:                   map[string]int{a.queue: 1},
		TaskCheckInterval:        a.poll,
		DelayedTaskCheckInterval: a.poll,
		Logger:                   nopLogger{},
		LogLevel:                 asynq.FatalLevel,
	})
	err := a.srv.Start(asynq.HandlerFunc(func(_ context.Context, t *asynq.Task) error {
		h(t.Payload())
		return nil
	}))
	if err != nil {
		b.Fatal(err)
	}
}

func (a *asynqDQ) close() {
	if a.srv != nil {
		a.srv.Shutdown()
	}
}

type nopLogger struct{}

func (nopLogger) Debug(...any) {}
func (nopLogger) Info(...any)  {}
func (nopLogger) Warn(...any)  {}
func (nopLogger) Error(...any) {}
func (nopLogger) Fatal(...any) {}
