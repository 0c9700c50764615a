// Command libload is the library side of serve.sh's comparison: it decides
// with ratelimit.Limiter.Allow, from --concurrency goroutines for
// --duration, against a Redis through the same client the decision server
// uses (rueidis, opened by storeurl.Open), with the rule of serve.sh's
// configuration, and prints one JSON object shaped like floodgate bench
// --json's (decisions_per_s, requests, latency_us), so that the library and
// the server are measured on the same Redis in the same run.
//
//	go run ./cmd/libload --redis redis://127.0.0.1:6379 --keys 10000
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-dev/floodgate/ratelimit"
	"github.com/floodgate-dev/floodgate/server/storeurl"
)

func main() {
	var (
		url         = flag.String("redis", "", "Redis `URL` (required)")
		prefix      = flag.String("prefix", "fglib", "key prefix")
		keys        = flag.Int("keys", 1, "keys to spread the load over")
		concurrency = flag.Int("concurrency", 64, "goroutines, each with one decision in flight")
		duration    = flag.Duration("duration", 10*time.Second, "how long to decide")
	)
	flag.Parse()
	if *url == "" || *keys < 1 || *concurrency < 1 || *duration <= 0 {
		fmt.Fprintln(os.Stderr, "usage: libload --redis URL [--keys N] [--concurrency N] [--duration D]")
		os.Exit(2)
	}
	be, closer, err := storeurl.Open(*url, *prefix, 2*time.Second)
	if err != nil {
		fmt.Fprintln(os.Stderr, "libload:", err)
		os.Exit(1)
	}
	defer closer.Close()
	// serve.sh's bench.yaml: 1e9 a second, so every decision is admitted.
	lim, err := ratelimit.New(be, ratelimit.FixedWindow{Limit: 1_000_000_000, Window: time.Second})
	if err != nil {
		fmt.Fprintln(os.Stderr, "libload:", err)
		os.Exit(1)
	}
	names := make([]string, *keys)
	for i := range names {
		names[i] = "user_" + strconv.Itoa(i)
	}

	var (
		wg      sync.WaitGroup
		stop    atomic.Bool
		errs    atomic.Int64
		lats    = make([][]time.Duration, *concurrency)
		ctx     = context.Background()
		started = time.Now()
	)
	for w := range *concurrency {
		wg.Go(func() {
			for !stop.Load() {
				k := names[0]
				if len(names) > 1 {
					k = names[rand.IntN(len(names))]
				}
				t := time.Now()
				if _, err := lim.Allow(ctx, k); err != nil {
					errs.Add(1)
					continue
				}
				lats[w] = append(lats[w], time.Since(t))
			}
		})
	}
	time.Sleep(*duration)
	stop.Store(true)
	wg.Wait()
	elapsed := time.Since(started)

	all := slices.Concat(lats...)
	slices.Sort(all)
	q := func(p float64) float64 {
		if len(all) == 0 {
			return 0
		}
		return float64(all[min(len(all)-1, int(p*float64(len(all))))].Microseconds())
	}
	out := map[string]any{
		"api": "library", "keys": *keys, "concurrency": *concurrency, "loop": "closed",
		"elapsed_s": elapsed.Seconds(), "requests": int64(len(all)) + errs.Load(), "errors": errs.Load(),
		"decisions_per_s": float64(len(all)) / elapsed.Seconds(),
		"latency_us":      map[string]float64{"p50": q(0.5), "p90": q(0.9), "p99": q(0.99), "p999": q(0.999), "max": q(1)},
	}
	if err := json.NewEncoder(os.Stdout).Encode(out); err != nil {
		fmt.Fprintln(os.Stderr, "libload:", err)
		os.Exit(1)
	}
}
