package bench

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/redis/rueidis"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/backend/rueidisadapter"
	"github.com/floodgate-dev/floodgate/delayqueue"
	"github.com/floodgate-dev/floodgate/internal/testenv"
)

// BenchmarkDelayQueue compares floodgate's delayqueue with
// github.com/hibiken/asynq's scheduled tasks (issue 30) on one private Redis.
// Every sub-benchmark runs one case of a fixed size, whatever b.N: run it with
// -benchtime=1x (bench/delayqueue.sh does, in interleaved rounds). ns/op is
// then the wall time of the case, from the first consumer's start to the last
// delivery.
//
// Libraries (the last element of each name):
//
//   - floodgate-goredis: delayqueue on backend.NewRedis over a go-redis client
//     (redis.NewClient, ContextTimeoutEnabled), everything else default.
//   - floodgate-rueidis: the same on rueidisadapter over a rueidis client
//     (its defaults, client-side cache off).
//   - asynq: asynq.Client and asynq.Server on asynq.RedisClientOpt, defaults:
//     an empty queue is checked every 1s (TaskCheckInterval, ±50% jitter),
//     due scheduled tasks are moved to the queue every 5s
//     (DelayedTaskCheckInterval).
//   - asynq-tuned: the same with both intervals at 100ms.
//
// asynq tasks have MaxRetry(0) and a queue of their own per case. Every case
// starts on an emptied Redis (FLUSHALL), with new clients.
//
// A consumer "process" is modelled as its own Redis client (go-redis or
// rueidis: its own connections), its own floodgate backend and Queue, or its
// own asynq.Server; the producer is one more such process, enqueueing from 64
// goroutines. consumers=PxC is P consumer processes of concurrency C each.
// Handlers only record the time.
//
// Cases:
//
//   - lateness/rate=R/consumers=1x16 and 4x4: DQ_JOBS jobs (20,000; 2,000
//     with -short) whose due times are drawn uniformly over a span of
//     DQ_JOBS/R seconds that starts DQ_LEAD (1.5s) after the consumers
//     started, so that R jobs come due per second; enqueued at once, in random
//     due order. Lateness is the first delivery's local time minus the due
//     time (one machine, one clock): p50-ms, p99-ms, max-ms and early-%, the
//     share delivered before their due time (asynq keeps due times in whole
//     seconds, so its early deliveries are real: up to 1s early). enq-over-ms
//     is how long after the first due time the last Enqueue returned (0 when
//     enqueueing finished before any job came due).
//   - drain/consumers=1x16: DQ_DRAIN_JOBS jobs (50,000; 5,000 with -short)
//     due one second in the past, enqueued before the consumer starts;
//     jobs/s from the consumer's start to the last delivery; enq/s is the
//     producer's rate. (asynq puts a task whose time has come straight on its
//     pending list, not in its scheduled set; floodgate enqueues it as
//     scheduled and a pump moves it.)
//
// Both report dup (jobs delivered more than once) and lost (jobs not
// delivered by the deadline: DQ_DEADLINE, 15s, after the last due time; for
// the drain, after the consumer's start plus 1ms per job; neither fails the
// benchmark, which would hide its metrics), and, over the whole case
// (connecting, enqueueing, delivery, shutting down), per job: scripts/job (INFO commandstats calls of EVALSHA, EVAL, FCALL and
// their _RO forms), cmds/job (the sum of calls of every command in INFO
// commandstats but INFO, which the benchmark sends; Redis counts the
// commands that scripts run there too), cpu-µs/job (Redis's main-thread
// CPU, INFO cpu, user + sys) and client-cpu-µs/job (this process's CPU,
// user + sys from /proc/self/stat: the producer, every consumer and the
// harness; 10ms resolution; absent off Linux). DQ_CMDSTATS=1 logs the
// calls per job of every command in INFO commandstats.
//
//	go test -run '^$' -bench '^BenchmarkDelayQueue$' -benchtime=1x -short .
//	DQ_JOBS=50000 DQ_RATES=2000,5000,10000 go test -run '^$' -bench 'DelayQueue/lateness/rate=10000' -benchtime=1x .
func BenchmarkDelayQueue(b *testing.B) {
	p := dqParamsFromEnv(b)
	srv := testenv.NewRedis(b)
	mc := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true})
	defer mc.Close()
	env := &dqEnv{addr: srv.Addr, mc: mc, p: p}
	libs := dqLibs()
	b.Run("lateness", func(b *testing.B) {
		for _, rate := range p.rates {
			b.Run(fmt.Sprintf("rate=%d", rate), func(b *testing.B) {
				for _, sh := range []dqShape{{1, 16}, {4, 4}} {
					b.Run("consumers="+sh.String(), func(b *testing.B) {
						for _, lib := range libs {
							b.Run("lib="+lib.name, func(b *testing.B) { env.lateness(b, lib, rate, sh) })
						}
					})
				}
			})
		}
	})
	b.Run("enqueue", func(b *testing.B) {
		for _, lib := range libs[:3] {
			b.Run("lib="+lib.name, func(b *testing.B) {
				env.enqueue(b, func(b *testing.B, queue string, due []time.Time) {
					prod := lib.producer(b, env.addr, queue)
					defer prod.close()
					enqueueAll(b, prod, due)
				})
			})
		}
		b.Run("lib=floodgate-goredis-batch100", func(b *testing.B) {
			env.enqueue(b, func(b *testing.B, queue string, due []time.Time) { fgEnqueueBatches(b, env.addr, queue, due, 100) })
		})
	})
	b.Run("drain", func(b *testing.B) {
		sh := dqShape{1, 16}
		b.Run("consumers="+sh.String(), func(b *testing.B) {
			for _, lib := range libs {
				b.Run("lib="+lib.name, func(b *testing.B) { env.drain(b, lib, sh) })
			}
		})
	})
}

// dqProducers is the number of goroutines that enqueue.
const dqProducers = 64

// dqParams are the sizes of the cases: the defaults, -short's, or the DQ_*
// environment variables.
type dqParams struct {
	jobs      int           // DQ_JOBS: jobs of a lateness case
	drainJobs int           // DQ_DRAIN_JOBS: jobs of a drain case
	rates     []int         // DQ_RATES: jobs coming due per second, comma-separated
	lead      time.Duration // DQ_LEAD: consumers' start to the first due time
	deadline  time.Duration // DQ_DEADLINE: after the last due time, when undelivered jobs count as lost
}

func dqParamsFromEnv(b *testing.B) dqParams {
	p := dqParams{jobs: 20_000, drainJobs: 50_000, rates: []int{2000, 5000},
		lead: 1500 * time.Millisecond, deadline: 15 * time.Second}
	if testing.Short() {
		p.jobs, p.drainJobs = 2_000, 5_000
	}
	posInt := func(name string, dst *int) {
		if v := os.Getenv(name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 {
				b.Fatalf("%s=%q: want a positive integer", name, v)
			}
			*dst = n
		}
	}
	dur := func(name string, dst *time.Duration) {
		if v := os.Getenv(name); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil || d < 0 {
				b.Fatalf("%s=%q: want a duration such as 1.5s", name, v)
			}
			*dst = d
		}
	}
	posInt("DQ_JOBS", &p.jobs)
	posInt("DQ_DRAIN_JOBS", &p.drainJobs)
	dur("DQ_LEAD", &p.lead)
	dur("DQ_DEADLINE", &p.deadline)
	if v := os.Getenv("DQ_RATES"); v != "" {
		p.rates = nil
		for f := range strings.SplitSeq(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 {
				b.Fatalf("DQ_RATES=%q: want positive integers separated by commas", v)
			}
			p.rates = append(p.rates, n)
		}
	}
	return p
}

// dqShape is the consumers of a case: procs processes of concurrency conc.
type dqShape struct{ procs, conc int }

func (s dqShape) String() string { return fmt.Sprintf("%dx%d", s.procs, s.conc) }

// dqLib is one library and configuration. Every call opens a new "process":
// its own Redis client and everything on it.
type dqLib struct {
	name string
	// producer opens a producer of queue.
	producer func(b *testing.B, addr, queue string) dqProducer
	// consumer opens a consumer of queue with concurrency conc and starts it;
	// h is called with the payload of every delivery.
	consumer func(b *testing.B, addr, queue string, conc int, h func(payload []byte)) dqConsumer
}

type dqProducer interface {
	enqueue(ctx context.Context, at time.Time, payload []byte) error
	close()
}

// dqConsumer stops consuming and closes its client on close.
type dqConsumer interface{ close() }

func dqLibs() []dqLib {
	return []dqLib{
		{"floodgate-goredis", fgProducer(false), fgConsumer(false)},
		{"floodgate-rueidis", fgProducer(true), fgConsumer(true)},
		{"asynq", asynqProducer, asynqConsumer(0)},
		{"asynq-tuned", asynqProducer, asynqConsumer(100 * time.Millisecond)},
	}
}

// fgOpen opens a floodgate backend on a new client of its own: go-redis as
// the other benchmarks make it, or rueidis. closeAll closes both.
func fgOpen(b *testing.B, addr string, useRueidis bool) (be *backend.Redis, closeAll func()) {
	if useRueidis {
		rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true})
		if err != nil {
			b.Fatal(err)
		}
		be, err := rueidisadapter.New(rc)
		if err != nil {
			rc.Close()
			b.Fatal(err)
		}
		return be, func() { be.Close(); rc.Close() }
	}
	rc := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
	be, err := backend.NewRedis(rc)
	if err != nil {
		rc.Close()
		b.Fatal(err)
	}
	return be, func() { be.Close(); rc.Close() }
}

type fgProd struct {
	q        *delayqueue.Queue
	closeAll func()
}

func fgProducer(useRueidis bool) func(b *testing.B, addr, queue string) dqProducer {
	return func(b *testing.B, addr, queue string) dqProducer {
		be, closeAll := fgOpen(b, addr, useRueidis)
		q, err := delayqueue.New(be, queue)
		if err != nil {
			closeAll()
			b.Fatal(err)
		}
		return &fgProd{q: q, closeAll: closeAll}
	}
}

func (f *fgProd) enqueue(ctx context.Context, at time.Time, payload []byte) error {
	_, err := f.q.Enqueue(ctx, payload, delayqueue.At(at))
	return err
}

func (f *fgProd) close() { f.closeAll() }

type fgCons struct {
	cancel   context.CancelFunc
	done     chan struct{}
	closeAll func()
}

func fgConsumer(useRueidis bool) func(b *testing.B, addr, queue string, conc int, h func([]byte)) dqConsumer {
	return func(b *testing.B, addr, queue string, conc int, h func([]byte)) dqConsumer {
		be, closeAll := fgOpen(b, addr, useRueidis)
		q, err := delayqueue.New(be, queue, delayqueue.Concurrency(conc))
		if err != nil {
			closeAll()
			b.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		c := &fgCons{cancel: cancel, done: make(chan struct{}), closeAll: closeAll}
		go func() {
			defer close(c.done)
			err := q.Run(ctx, func(_ context.Context, j *delayqueue.Job) error {
				h(j.Payload)
				return nil
			})
			if err != nil {
				b.Errorf("delayqueue Run: %v", err)
			}
		}()
		return c
	}
}

func (f *fgCons) close() {
	f.cancel()
	<-f.done
	f.closeAll()
}

type asynqProd struct {
	c     *asynq.Client
	queue string
}

// asynqProducer is an asynq.Client on a connection pool of its own
// (asynq.RedisClientOpt: asynq's way of connecting, go-redis's defaults).
func asynqProducer(_ *testing.B, addr, queue string) dqProducer {
	return &asynqProd{c: asynq.NewClient(asynq.RedisClientOpt{Addr: addr}), queue: queue}
}

func (a *asynqProd) enqueue(ctx context.Context, at time.Time, payload []byte) error {
	_, err := a.c.EnqueueContext(ctx, asynq.NewTask("job", payload), asynq.ProcessAt(at), asynq.Queue(a.queue), asynq.MaxRetry(0))
	return err
}

func (a *asynqProd) close() { a.c.Close() }

type asynqCons struct{ srv *asynq.Server }

// asynqConsumer is an asynq.Server on a connection pool of its own, with
// TaskCheckInterval and DelayedTaskCheckInterval poll (0: asynq's defaults).
func asynqConsumer(poll time.Duration) func(b *testing.B, addr, queue string, conc int, h func([]byte)) dqConsumer {
	return func(b *testing.B, addr, queue string, conc int, h func([]byte)) dqConsumer {
		srv := asynq.NewServer(asynq.RedisClientOpt{Addr: addr}, asynq.Config{
			Concurrency:              conc,
			Queues:                   map[string]int{queue: 1},
			TaskCheckInterval:        poll,
			DelayedTaskCheckInterval: poll,
			Logger:                   nopLogger{},
			LogLevel:                 asynq.FatalLevel,
		})
		err := srv.Start(asynq.HandlerFunc(func(_ context.Context, t *asynq.Task) error {
			h(t.Payload())
			return nil
		}))
		if err != nil {
			b.Fatal(err)
		}
		return &asynqCons{srv: srv}
	}
}

func (a *asynqCons) close() { a.srv.Shutdown() }

type nopLogger struct{}

func (nopLogger) Debug(...any) {}
func (nopLogger) Info(...any)  {}
func (nopLogger) Warn(...any)  {}
func (nopLogger) Error(...any) {}
func (nopLogger) Fatal(...any) {}

// dqEnv is what the cases share: the private Redis and a client of the
// benchmark's own for FLUSHALL and INFO.
type dqEnv struct {
	addr string
	mc   *redis.Client
	p    dqParams
}

var dqSeq atomic.Int64

// begin empties Redis and returns a new queue name and the counters at the
// start of the case.
func (e *dqEnv) begin(b *testing.B, kind string) (queue string, before dqSnap) {
	if err := e.mc.FlushAll(context.Background()).Err(); err != nil {
		b.Fatalf("FLUSHALL: %v", err)
	}
	return fmt.Sprintf("dq-%s-%d", kind, dqSeq.Add(1)), e.snap(b)
}

// dqRecorder records the first delivery of each job, and how many.
type dqRecorder struct {
	first []atomic.Int64 // Unix ns of the first delivery; 0: none yet
	count []atomic.Int32
	got   atomic.Int64 // jobs delivered at least once
	bad   atomic.Int64 // deliveries with a payload that names no job
	all   chan struct{}
}

func newDQRecorder(n int) *dqRecorder {
	return &dqRecorder{first: make([]atomic.Int64, n), count: make([]atomic.Int32, n), all: make(chan struct{})}
}

func (r *dqRecorder) deliver(payload []byte) {
	now := time.Now().UnixNano()
	i, err := strconv.Atoi(string(payload))
	if err != nil || i < 0 || i >= len(r.first) {
		r.bad.Add(1)
		return
	}
	if r.count[i].Add(1) == 1 {
		r.first[i].Store(now)
		if r.got.Add(1) == int64(len(r.first)) {
			close(r.all)
		}
	}
}

// wait waits for every job's delivery or the deadline.
func (r *dqRecorder) wait(deadline time.Time) {
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case <-r.all:
	case <-t.C:
	}
}

// tally counts the jobs delivered more than once and never, and returns the
// last first delivery.
func (r *dqRecorder) tally() (dup, lost int, last int64) {
	for i := range r.count {
		switch c := r.count[i].Load(); {
		case c == 0:
			lost++
		case c > 1:
			dup++
		}
		last = max(last, r.first[i].Load())
	}
	return dup, lost, last
}

// enqueueAll enqueues job i due at due[i], payload i, from dqProducers
// goroutines taking the jobs in order, and returns when the last returned.
func enqueueAll(b *testing.B, p dqProducer, due []time.Time) time.Time {
	var (
		next, errs atomic.Int64
		wg         sync.WaitGroup
	)
	ctx := context.Background()
	for range dqProducers {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(due) {
					return
				}
				if err := p.enqueue(ctx, due[i], []byte(strconv.Itoa(i))); err != nil && errs.Add(1) == 1 {
					b.Errorf("enqueue: %v", err)
				}
			}
		})
	}
	wg.Wait()
	if n := errs.Load(); n > 0 {
		b.Errorf("%d enqueues failed", n)
	}
	return time.Now()
}

func (e *dqEnv) startConsumers(b *testing.B, lib dqLib, queue string, sh dqShape, r *dqRecorder) []dqConsumer {
	cs := make([]dqConsumer, sh.procs)
	for i := range cs {
		cs[i] = lib.consumer(b, e.addr, queue, sh.conc, r.deliver)
	}
	return cs
}

func stopConsumers(cs []dqConsumer) {
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Go(c.close)
	}
	wg.Wait()
}

func (e *dqEnv) lateness(b *testing.B, lib dqLib, rate int, sh dqShape) {
	n := e.p.jobs
	span := time.Duration(float64(n) / float64(rate) * float64(time.Second))
	queue, before := e.begin(b, "lat")
	cpu0 := processCPU()
	r := newDQRecorder(n)
	b.ResetTimer()
	cs := e.startConsumers(b, lib, queue, sh, r)
	prod := lib.producer(b, e.addr, queue)

	start := time.Now()
	rng := rand.New(rand.NewPCG(30, uint64(n)))
	due := make([]time.Time, n)
	firstDue, lastDue := start.Add(e.p.lead+span), start
	for i := range due {
		due[i] = start.Add(e.p.lead + time.Duration(rng.Int64N(int64(span)+1)))
		if due[i].Before(firstDue) {
			firstDue = due[i]
		}
		if due[i].After(lastDue) {
			lastDue = due[i]
		}
	}
	enqDone := enqueueAll(b, prod, due)
	over := max(enqDone.Sub(firstDue), 0)
	if over > 0 {
		b.Logf("enqueueing ended %v after the first due time (%v after the start)", over.Round(time.Millisecond), enqDone.Sub(start).Round(time.Millisecond))
	}
	r.wait(lastDue.Add(e.p.deadline))
	b.StopTimer()
	prod.close()
	stopConsumers(cs)
	after := e.snap(b)
	cpu1 := processCPU()

	late := make([]time.Duration, 0, n)
	for i := range r.first {
		if t := r.first[i].Load(); t != 0 {
			late = append(late, time.Duration(t-due[i].UnixNano()))
		}
	}
	slices.Sort(late)
	dup, lost, _ := r.tally()
	if len(late) > 0 {
		ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
		b.ReportMetric(ms(quantile(late, 0.50)), "p50-ms")
		b.ReportMetric(ms(quantile(late, 0.99)), "p99-ms")
		b.ReportMetric(ms(late[len(late)-1]), "max-ms")
		early, _ := slices.BinarySearch(late, 0)
		b.ReportMetric(100*float64(early)/float64(len(late)), "early-%")
	}
	b.ReportMetric(float64(dup), "dup")
	b.ReportMetric(float64(lost), "lost")
	b.ReportMetric(float64(over)/float64(time.Millisecond), "enq-over-ms")
	e.reportCost(b, n, before, after, cpu0, cpu1)
	// Lost and duplicated jobs are results, not failures: a failed
	// benchmark prints no metrics.
	if lost > 0 || dup > 0 {
		b.Logf("%d of %d jobs not delivered within %v of the last due time; %d delivered more than once", lost, n, e.p.deadline, dup)
	}
	if r.bad.Load() > 0 {
		b.Errorf("%d deliveries of unknown jobs", r.bad.Load())
	}
}

func (e *dqEnv) drain(b *testing.B, lib dqLib, sh dqShape) {
	n := e.p.drainJobs
	queue, before := e.begin(b, "drain")
	cpu0 := processCPU()
	r := newDQRecorder(n)
	prod := lib.producer(b, e.addr, queue)
	past := time.Now().Add(-time.Second)
	due := make([]time.Time, n)
	for i := range due {
		due[i] = past
	}
	enqStart := time.Now()
	enqDone := enqueueAll(b, prod, due)
	prod.close()

	b.ResetTimer()
	start := time.Now()
	cs := e.startConsumers(b, lib, queue, sh, r)
	r.wait(start.Add(e.p.deadline + time.Duration(n)*time.Millisecond))
	b.StopTimer()
	stopConsumers(cs)
	after := e.snap(b)
	cpu1 := processCPU()

	dup, lost, last := r.tally()
	if got := n - lost; got > 0 {
		b.ReportMetric(float64(got)/time.Unix(0, last).Sub(start).Seconds(), "jobs/s")
	}
	b.ReportMetric(float64(n)/enqDone.Sub(enqStart).Seconds(), "enq/s")
	b.ReportMetric(float64(dup), "dup")
	b.ReportMetric(float64(lost), "lost")
	e.reportCost(b, n, before, after, cpu0, cpu1)
	if lost > 0 || dup > 0 {
		b.Logf("%d of %d jobs not delivered by the deadline; %d delivered more than once", lost, n, dup)
	}
	if r.bad.Load() > 0 {
		b.Errorf("%d deliveries of unknown jobs", r.bad.Load())
	}
}

// enqueue measures producers alone: DQ_JOBS jobs due in an hour, enqueued
// by dqProducers goroutines through enqueueAll.
func (e *dqEnv) enqueue(b *testing.B, enqueueAll func(b *testing.B, queue string, due []time.Time)) {
	n := e.p.jobs
	queue, before := e.begin(b, "enqueue")
	cpu0 := processCPU()
	at := time.Now().Add(time.Hour)
	due := make([]time.Time, n)
	for i := range due {
		due[i] = at.Add(time.Duration(i) * time.Microsecond)
	}
	b.ResetTimer()
	start := time.Now()
	enqueueAll(b, queue, due)
	elapsed := time.Since(start)
	b.StopTimer()
	after := e.snap(b)
	cpu1 := processCPU()
	b.ReportMetric(float64(n)/elapsed.Seconds(), "enq/s")
	e.reportCost(b, n, before, after, cpu0, cpu1)
}

// fgEnqueueBatches enqueues due from dqProducers goroutines on one go-redis
// backend, in EnqueueBatch calls of size jobs.
func fgEnqueueBatches(b *testing.B, addr, queue string, due []time.Time, size int) {
	be, closeAll := fgOpen(b, addr, false)
	defer closeAll()
	q, err := delayqueue.New(be, queue)
	if err != nil {
		b.Fatal(err)
	}
	var (
		next atomic.Int64
		wg   sync.WaitGroup
	)
	for range dqProducers {
		wg.Go(func() {
			items := make([]delayqueue.Item, 0, size)
			for {
				i := int(next.Add(int64(size)) - int64(size))
				if i >= len(due) {
					return
				}
				items = items[:0]
				for j := i; j < min(i+size, len(due)); j++ {
					items = append(items, delayqueue.Item{Payload: []byte(strconv.Itoa(j)),
						Options: []delayqueue.EnqueueOption{delayqueue.At(due[j])}})
				}
				if _, err := q.EnqueueBatch(context.Background(), items); err != nil {
					b.Errorf("EnqueueBatch: %v", err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// quantile is the nearest-rank q-quantile of sorted s.
func quantile[T cmp.Ordered](s []T, q float64) T {
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func (e *dqEnv) reportCost(b *testing.B, n int, before, after dqSnap, cpu0, cpu1 float64) {
	var scripts, cmds int64
	for name, c := range after.calls {
		d := c - before.calls[name]
		switch name {
		case "info":
			continue // the benchmark's own
		case "evalsha", "eval", "fcall", "evalsha_ro", "eval_ro", "fcall_ro":
			scripts += d
		}
		cmds += d
	}
	if os.Getenv("DQ_CMDSTATS") != "" {
		var per []string
		for name, c := range after.calls {
			if d := c - before.calls[name]; d != 0 && name != "info" {
				per = append(per, fmt.Sprintf("%s %.3f (%.1fµs)", name, float64(d)/float64(n),
					float64(after.usec[name]-before.usec[name])/float64(n)))
			}
		}
		slices.Sort(per)
		b.Logf("commands per job (Redis µs per job, in scripts too): %s", strings.Join(per, ", "))
	}
	b.ReportMetric(float64(scripts)/float64(n), "scripts/job")
	b.ReportMetric(float64(cmds)/float64(n), "cmds/job")
	b.ReportMetric((after.cpu-before.cpu)*1e6/float64(n), "cpu-µs/job")
	if cpu0 >= 0 && cpu1 >= 0 {
		b.ReportMetric((cpu1-cpu0)*1e6/float64(n), "client-cpu-µs/job")
	}
}

// dqSnap is Redis's counters at one instant.
type dqSnap struct {
	cpu   float64          // seconds of CPU: the main thread's when INFO has it, else the process's
	calls map[string]int64 // INFO commandstats calls by command (subcommands as "config|get")
	usec  map[string]int64 // INFO commandstats µs by command
}

func (e *dqEnv) snap(b *testing.B) dqSnap {
	s, err := e.mc.Info(context.Background(), "cpu", "commandstats").Result()
	if err != nil {
		b.Fatalf("INFO: %v", err)
	}
	sn := dqSnap{calls: map[string]int64{}, usec: map[string]int64{}}
	cpu := map[string]float64{}
	for line := range strings.Lines(s) {
		line = strings.TrimSpace(line)
		if rest, ok := strings.CutPrefix(line, "cmdstat_"); ok {
			name, fields, _ := strings.Cut(rest, ":")
			for f := range strings.SplitSeq(fields, ",") {
				if v, ok := strings.CutPrefix(f, "calls="); ok {
					c, err := strconv.ParseInt(v, 10, 64)
					if err != nil {
						b.Fatalf("INFO commandstats: %q: %v", line, err)
					}
					sn.calls[name] = c
				}
				if v, ok := strings.CutPrefix(f, "usec="); ok {
					c, err := strconv.ParseInt(v, 10, 64)
					if err != nil {
						b.Fatalf("INFO commandstats: %q: %v", line, err)
					}
					sn.usec[name] = c
				}
			}
			continue
		}
		if k, v, ok := strings.Cut(line, ":"); ok && strings.HasPrefix(k, "used_cpu_") {
			if f, err := strconv.ParseFloat(v, 64); err == nil {
				cpu[k] = f
			}
		}
	}
	if u, ok := cpu["used_cpu_user_main_thread"]; ok {
		sn.cpu = u + cpu["used_cpu_sys_main_thread"]
	} else {
		sn.cpu = cpu["used_cpu_user"] + cpu["used_cpu_sys"]
	}
	return sn
}

// processCPU returns the user + system CPU seconds this process has used, from
// /proc/self/stat (clock ticks of 1/100 s, the USER_HZ of every Linux ABI),
// or -1 where there is none.
func processCPU() float64 {
	s, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return -1
	}
	// Fields after the command name (which may hold spaces) start at the
	// state, field 3; utime and stime are fields 14 and 15.
	i := strings.LastIndexByte(string(s), ')')
	if i < 0 {
		return -1
	}
	f := strings.Fields(string(s[i+1:]))
	if len(f) < 13 {
		return -1
	}
	u, err1 := strconv.ParseFloat(f[11], 64)
	k, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return -1
	}
	return (u + k) / 100
}
