package simulate

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/clock"
	"github.com/floodgate-dev/floodgate/ratelimit"
)

// Rule is a rule to simulate and the name of its panel.
type Rule struct {
	Name string
	Rule ratelimit.Rule // FixedWindow, SlidingWindow, SlidingLog, TokenBucket, LeakyBucket or GCRA
}

// Algorithms are the names of the six rules, as the server's configuration
// spells them, in the order charts show them.
var Algorithms = []string{"fixed_window", "sliding_window", "sliding_log", "token_bucket", "leaky_bucket", "gcra"}

// Report is the outcome of a simulation.
type Report struct {
	Traffic *Traffic
	Rules   []*RuleReport
	// NotLeased names the rules that cannot lease, with the reason, when
	// Options.Leased asked for leases.
	NotLeased []string
}

// Held reports whether every rule kept every documented bound.
func (r *Report) Held() bool {
	for _, rr := range r.Rules {
		if !rr.Held() {
			return false
		}
	}
	return true
}

// RuleReport is what one rule did with the traffic.
type RuleReport struct {
	Name      string
	Algorithm string        // one of Algorithms
	Params    string        // the rule's type and fields: "GCRA{Rate: 10, Per: 1s, Burst: 5}"
	Limit     int64         // requests per Window: Limit, Refill or Rate
	Window    time.Duration // Window, Every or Per

	Offered, Admitted, Rejected int64

	// MostInWindow is the most requests of one key admitted in any span of
	// length Window (half-open, so a request at t and one at t+Window are in
	// no span together); MostKey, MostFrom and MostTo say where: the key and
	// the span's first and last request (µs since the epoch).
	MostInWindow     int64
	MostKey          int
	MostFrom, MostTo int64

	MeanDelay, MaxDelay time.Duration // Result.Delay of admitted requests (LeakyBucket shapes; the rest never delay)

	// Checks are the rule's documented bounds, checked per key; each is the
	// key and span where the bound is tightest.
	Checks []Check

	// Processes, for a rule run through quota leases (Options.Leased): the
	// number of processes the requests were dealt to, round robin, each
	// with its own ratelimit.Leased over one shared store; PerProcess is
	// what each admitted, and Exact what the rule admits without leases
	// (the report of the same rule before it). 0 for an exact rule.
	Processes  int
	PerProcess []int64
	Exact      int64

	admitted []int64   // admitted request times of every key, ascending
	served   []int64   // admitted + Result.Delay, ascending; nil when nothing was delayed
	byProc   [][]int64 // leased: admitted request times of each process, ascending
}

// Held reports whether the rule kept every documented bound.
func (r *RuleReport) Held() bool {
	for _, c := range r.Checks {
		if !c.Held {
			return false
		}
	}
	return true
}

// Options tune Run.
type Options struct {
	// Progress, when set, is called now and then with the requests decided
	// so far (over all rules) and the total, from Run's goroutines one at a
	// time.
	Progress func(done, total int64)
	// Leased, when > 0, also runs every rule that can lease through quota
	// leases (ratelimit.NewLeased) in that many processes, each request
	// dealt to the next process in turn, with leases of LeaseTarget (0:
	// ratelimit's default); its report follows the rule's own, and the
	// rules that cannot lease are named in Report.NotLeased.
	Leased      int
	LeaseTarget time.Duration
}

// Run decides every request of tr against every rule, each rule on its own
// memory backend whose fake clock is set to the request's time, and checks
// the rules' documented bounds. Rules run in parallel; the result does not
// depend on it. Run returns ctx's error when ctx ends first, and an error
// naming the rule when a rule is invalid.
func Run(ctx context.Context, tr *Traffic, rules []Rule, opt Options) (*Report, error) {
	if tr == nil || tr.Len() == 0 {
		return nil, fmt.Errorf("simulate: %w", errNoRequests)
	}
	if len(rules) == 0 {
		return nil, fmt.Errorf("simulate: no rules")
	}
	rep := &Report{Traffic: tr, Rules: make([]*RuleReport, len(rules))}
	infos := make([]info, len(rules))
	check := backend.NewMemory(backend.WithShards(1))
	defer check.Close()
	for i, r := range rules {
		in, err := describe(r.Rule)
		if err == nil {
			_, err = ratelimit.New(check, r.Rule) // fail before any work
		}
		if err != nil {
			return nil, fmt.Errorf("simulate: rule %q: %w", r.Name, err)
		}
		infos[i] = in
	}
	keys := make([]string, len(tr.Keys))
	for i := range keys {
		keys[i] = "k" + strconv.Itoa(i)
	}

	var (
		done     atomic.Int64
		total    = int64(tr.Len()) * int64(len(rules))
		progMu   sync.Mutex
		wg       sync.WaitGroup
		errs     = make([]error, len(rules))
		sem      = make(chan struct{}, runtime.GOMAXPROCS(0))
		progress = func(n int64) {
			if opt.Progress == nil {
				done.Add(n)
				return
			}
			// Counted under the lock, so that the calls see done grow.
			progMu.Lock()
			opt.Progress(done.Add(n), total)
			progMu.Unlock()
		}
	)
	type job struct {
		rule  int
		procs int // 0: exact
	}
	var jobs []job
	for i, r := range rules {
		jobs = append(jobs, job{rule: i})
		if opt.Leased <= 0 {
			continue
		}
		if err := leasable(r.Rule); err != nil {
			rep.NotLeased = append(rep.NotLeased, fmt.Sprintf("%s: %v", r.Name, err))
			continue
		}
		jobs = append(jobs, job{rule: i, procs: opt.Leased})
	}
	total = int64(tr.Len()) * int64(len(jobs))
	rep.Rules = make([]*RuleReport, len(jobs))
	errs = make([]error, len(jobs))
	for j, jb := range jobs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			rep.Rules[j], errs[j] = runRule(ctx, tr, keys, rules[jb.rule], infos[jb.rule], jb.procs, opt.LeaseTarget, progress)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	for j, rr := range rep.Rules {
		if rr.Processes > 0 {
			rr.Exact = rep.Rules[j-1].Admitted
		}
	}
	return rep, nil
}

// leasable reports why r cannot run through quota leases, or nil.
func leasable(r ratelimit.Rule) error {
	mem := backend.NewMemory()
	defer mem.Close()
	lim, err := ratelimit.New(mem, r)
	if err == nil {
		_, err = ratelimit.NewLeased(lim)
	}
	return err
}

// runRule decides tr against one rule.
// With procs > 0 the requests are dealt round robin to procs processes,
// each deciding through its own ratelimit.Leased over the one memory store
// (leases of leaseTarget; 0: the default), and every process ends its
// leases that are due (Leased.Flush) every 32 of its requests.
func runRule(ctx context.Context, tr *Traffic, keys []string, r Rule, in info, procs int, leaseTarget time.Duration, progress func(int64)) (*RuleReport, error) {
	clk := clock.NewFake(time.UnixMicro(tr.Times[0]))
	// The janitor only collects garbage; sweeping at fixed requests instead
	// keeps even that independent of the machine's speed.
	mem := backend.NewMemory(backend.WithClock(clk), backend.WithSweepInterval(24*time.Hour))
	defer mem.Close()
	lim, err := ratelimit.New(mem, r.Rule)
	if err != nil {
		return nil, fmt.Errorf("simulate: rule %q: %w", r.Name, err)
	}
	rr := &RuleReport{
		Name: r.Name, Algorithm: in.algorithm, Params: in.params, Limit: in.limit, Window: in.window,
		Offered: int64(tr.Len()),
	}
	allow := lim.Allow
	var leased []*ratelimit.Leased
	if procs > 0 {
		// Flushed below, on the simulated clock: no background flush on
		// the real one, so that a run is the same every time.
		opts := []ratelimit.LeaseOption{ratelimit.LeaseFlushEvery(-1)}
		if leaseTarget > 0 {
			opts = append(opts, ratelimit.LeaseTarget(leaseTarget))
		}
		for range procs {
			l, err := ratelimit.NewLeased(lim, opts...)
			if err != nil {
				return nil, fmt.Errorf("simulate: rule %q: %w", r.Name, err)
			}
			leased = append(leased, l)
		}
		rr.Name = fmt.Sprintf("%s, leased in %d processes", r.Name, procs)
		rr.Processes = procs
		rr.PerProcess = make([]int64, procs)
		rr.byProc = make([][]int64, procs)
	}
	perKey := make([][]int64, len(tr.Keys))
	var servedPerKey [][]int64
	var delays []int64 // per admitted request, µs
	var admKey []int32 // per admitted request, its key
	var sumDelay, maxDelay int64
	const batch = 1 << 14
	for i, t := range tr.Times {
		if i%batch == batch-1 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			progress(batch)
			if i%(16*batch) == 16*batch-1 {
				mem.Sweep()
			}
		}
		clk.Set(time.UnixMicro(t))
		k := tr.keyOf(i)
		proc := 0
		if procs > 0 {
			proc = i % procs
			allow = leased[proc].Allow
			if (i/procs)%32 == 31 {
				if err := leased[proc].Flush(ctx); err != nil {
					return nil, fmt.Errorf("simulate: rule %q: %w", r.Name, err)
				}
			}
		}
		res, err := allow(ctx, keys[k])
		if err != nil {
			return nil, fmt.Errorf("simulate: rule %q: %w", r.Name, err)
		}
		if !res.Allowed {
			continue
		}
		if procs > 0 {
			rr.PerProcess[proc]++
			rr.byProc[proc] = append(rr.byProc[proc], t)
		}
		rr.admitted = append(rr.admitted, t)
		perKey[k] = append(perKey[k], t)
		d := int64(res.Delay / time.Microsecond)
		delays = append(delays, d)
		admKey = append(admKey, int32(k))
		sumDelay += d
		maxDelay = max(maxDelay, d)
	}
	progress(int64(tr.Len() % batch))
	rr.Admitted = int64(len(rr.admitted))
	rr.Rejected = rr.Offered - rr.Admitted
	if rr.Admitted > 0 {
		rr.MeanDelay = time.Duration(sumDelay/rr.Admitted) * time.Microsecond
		rr.MaxDelay = time.Duration(maxDelay) * time.Microsecond
	}
	if maxDelay > 0 {
		// Served times: ascending per key and overall once sorted.
		rr.served = make([]int64, len(rr.admitted))
		servedPerKey = make([][]int64, len(tr.Keys))
		for a, t := range rr.admitted {
			rr.served[a] = t + delays[a]
			k := admKey[a]
			servedPerKey[k] = append(servedPerKey[k], t+delays[a])
		}
		slices.Sort(rr.served)
		for _, ts := range servedPerKey {
			slices.Sort(ts)
		}
	}

	// The most in any window span, over keys.
	for k, ts := range perKey {
		most, from, to := int64(0), int64(0), int64(0)
		if len(ts) > 0 {
			most, from, to = mostInSpan(ts, int64(rr.Window/time.Microsecond), true)
		}
		if most > rr.MostInWindow {
			rr.MostInWindow, rr.MostKey, rr.MostFrom, rr.MostTo = most, k, from, to
		}
	}
	for _, b := range in.bounds {
		src := perKey
		if b.Served && servedPerKey != nil {
			src = servedPerKey
		}
		var worst Check
		for k, ts := range src {
			c := CheckBound(b, ts)
			c.Key = k
			if k == 0 || c.Observed-c.Allowed > worst.Observed-worst.Allowed {
				worst = c
			}
		}
		rr.Checks = append(rr.Checks, worst)
	}
	return rr, nil
}
