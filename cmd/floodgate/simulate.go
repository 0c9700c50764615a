package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/floodgate-dev/floodgate/internal/simulate"
	"github.com/floodgate-dev/floodgate/ratelimit"
	"github.com/floodgate-dev/floodgate/server/config"
)

const simulateUsage = `Usage: floodgate simulate [rules] [traffic] [output]

Runs requests through rate limiting rules on a simulated clock and shows what
each rule lets through: a table here, and a chart (requests offered and
admitted over time, one panel per rule, the rule's window edges dashed) in an
SVG or PNG file. The rules run on the in-process memory backend, which decides
exactly as Redis does, so there is no server and no Redis to start, an hour of
traffic takes a moment, and the same command line always gives the same result.

Rules (without any: --all):
  --algorithm NAME[,NAME...] --limit N --per D   one rule per algorithm, N requests per D
  --all                                          the six algorithms, same limit and period
  --rules FILE|DIR                               the server's configuration: each rate_limit
                                                 is a rule, named by its name or descriptor path
Algorithms are fixed_window, sliding_window, sliding_log, token_bucket,
leaky_bucket and gcra; --limit, --per, --burst, --delay and --buckets mean
what requests_per_unit, the unit, burst, delay and buckets mean in the
configuration (token_bucket and gcra: burst defaults to --limit;
leaky_bucket: burst 0 and delay 0, as nginx).

Traffic (defaults come from the first rule: its limit L per window W):
  --traffic boundary   L requests in the --spread (W/10) before a window edge
                       and L just after it: fixed window's double spend (default)
  --traffic steady     --rate requests per second (default 2·L/W)
  --traffic bursty     --rate while --on (W), silence for --off (W), repeated
  --traffic ramp       a rate rising from --from (0) to --rate
  --traffic poisson    random arrivals at a mean --rate, from --seed
  --traffic-file FILE  one request per line: a timestamp (RFC3339, or Unix seconds
                       such as 1735689600.25), or CSV timestamp,key, in any order
                       ('#' comments and a header line are skipped); each key has
                       its own state in every rule (keys are not matched against
                       descriptors: every rule sees every request)
Patterns last --duration (boundary: 2·W, others: 5·W) from an instant aligned
to the first rule's window.

For each rule the table shows the requests offered, admitted and rejected,
the most admitted for one key in any span of the rule's window, the mean and
longest delay (leaky_bucket shaping), and whether the bound documented in
docs/algorithms.md held; below it, each bound and the span where it is
tightest.

Quota leases (--leased N): each rule that can lease also runs through
ratelimit.NewLeased in N processes sharing its store, the requests dealt to
them in turn; its panel shows what each process admitted, and the table what
the leases under-admitted against the exact rule. A leased rule is held to
the rule's own bounds: leases never admit more.

Exit status: 0 when every rule kept its documented bound, 1 when one did not
(a bug: please report it with the command line) or an input cannot be read,
2 on a usage error.

Flags:
%s
Examples:
  floodgate simulate                                   # six algorithms, boundary attack, simulate.svg
  floodgate simulate --all --limit 100 --per 1m --traffic poisson --rate 3 --seed 7 --out poisson.png
  floodgate simulate --algorithm gcra --limit 10 --per 1s --burst 5 --traffic bursty --rate 40 --on 500ms --off 2s
  floodgate simulate --algorithm leaky_bucket --limit 5 --burst 10 --delay 4 --traffic steady --rate 12 --png
  floodgate simulate --rules examples/floodgate.yaml --only 'api|user' --traffic-file access.csv --out day.svg
  floodgate simulate --algorithm fixed_window,sliding_log --traffic ramp --rate 40 --duration 10s --json
  floodgate simulate --algorithm gcra,fixed_window --limit 1000 --per 1s --traffic steady --rate 1500 --leased 4 --out leases.svg
`

// simRuleFlags are the flags that describe rules on the command line.
var simRuleFlags = []string{"algorithm", "all", "limit", "per", "burst", "delay", "buckets"}

// simPatternFlags are the flags of built-in traffic.
var simPatternFlags = []string{"traffic", "rate", "duration", "on", "off", "from", "count", "spread", "edge", "seed"}

// simStart is the instant built-in traffic starts from (then aligned to the first rule's window).
var simStart = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func runSimulate(args []string, stdout, stderr io.Writer) int {
	const cmd = "floodgate simulate"
	fs := newFlagSet(cmd)
	var (
		rulesPath = fs.String("rules", "", "rules from the server's configuration `file or directory`")
		only      = fs.String("only", "", "with --rules: comma-separated `names` (or descriptor paths, globs allowed) of the limits to simulate")
		algorithm = fs.String("algorithm", "", "comma-separated `algorithms` of the rules to simulate")
		all       = fs.Bool("all", false, "simulate all six algorithms")
		limit     = fs.Int64("limit", 10, "requests per --per (requests_per_unit)")
		per       = fs.Duration("per", time.Second, "the rules' `period`: window, refill or drain period (unit)")
		burst     = fs.Int64("burst", 0, "token_bucket capacity, gcra burst (default --limit), leaky_bucket burst (default 0)")
		delay     = fs.String("delay", "0", "leaky_bucket: requests of a burst served at once, or nodelay")
		buckets   = fs.Int("buckets", 0, "sliding_window sub-windows (0 for 10)")

		traffic  = fs.String("traffic", simulate.Boundary, "built-in traffic `pattern`: "+strings.Join(simulate.Patterns, ", "))
		file     = fs.String("traffic-file", "", "read requests from `file` instead")
		rate     = fs.Float64("rate", 0, "requests per second (default twice the first rule's rate)")
		duration = fs.Duration("duration", 0, "how long the pattern lasts (default boundary 2 windows, others 5)")
		on       = fs.Duration("on", 0, "bursty: how long each burst lasts (default a window)")
		off      = fs.Duration("off", 0, "bursty: the pause after each burst (default a window)")
		from     = fs.Float64("from", 0, "ramp: requests per second at the start")
		count    = fs.Int64("count", 0, "boundary: requests on each side of the edge (default the first rule's limit)")
		spread   = fs.Duration("spread", 0, "boundary: the span before and after the edge that each burst fills (default a tenth of --edge)")
		edge     = fs.Duration("edge", 0, "boundary: the window whose edge is attacked (default the first rule's window)")
		seed     = fs.Uint64("seed", 1, "poisson: random seed")

		out     = fs.String("out", "simulate.svg", "chart `file`, .svg or .png; empty for none")
		withPNG = fs.Bool("png", false, "also write a PNG beside the SVG")
		bin     = fs.Duration("bin", 0, "chart bar `width` (default a round tenth of the shortest window)")
		title   = fs.String("title", "", "chart title (default: the traffic)")
		asJSON  = fs.Bool("json", false, "print the report as JSON instead of tables")

		leased      = fs.Int("leased", 0, "also run each rule through quota leases (ratelimit.NewLeased) in `N` processes sharing its store, requests dealt to them in turn, beside the exact rule")
		leaseTarget = fs.Duration("lease-target", 0, "with --leased: how long a lease should last at a process's rate (default ratelimit's, 50ms)")
	)
	help := fmt.Sprintf(simulateUsage, flagDefaults(fs))
	rest, code, done := parse(fs, args, true, help, stdout, stderr)
	if done {
		return code
	}
	usage := func(format string, a ...any) int { return usageError(stderr, cmd, fmt.Sprintf(format, a...)) }
	if len(rest) > 0 {
		return usage("unexpected argument %q (every option is a flag, such as --traffic %s)", rest[0], rest[0])
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })

	// Rules.
	var rules []simulate.Rule
	if *rulesPath != "" {
		for _, f := range simRuleFlags {
			if set[f] {
				return usage("--%s describes rules on the command line; with --rules the configuration has them", f)
			}
		}
		var status int
		rules, status = simRulesFromConfig(*rulesPath, *only, cmd, stderr)
		if status != exitOK {
			return status
		}
	} else {
		if set["only"] {
			return usage("--only selects limits of --rules")
		}
		names := simulate.Algorithms
		if *algorithm != "" {
			if *all {
				return usage("use --algorithm or --all, not both")
			}
			names = nil
			for _, a := range strings.Split(*algorithm, ",") {
				a = strings.ReplaceAll(strings.ToLower(strings.TrimSpace(a)), "-", "_")
				if !slices.Contains(simulate.Algorithms, a) {
					return usage("--algorithm: unknown algorithm %q (want %s)", a, strings.Join(simulate.Algorithms, ", "))
				}
				if slices.Contains(names, a) {
					return usage("--algorithm names %s twice", a)
				}
				names = append(names, a)
			}
		}
		var opt simulate.RuleOptions
		opt.Burst, opt.HasBurst, opt.Buckets = *burst, set["burst"], *buckets
		if strings.EqualFold(*delay, "nodelay") {
			opt.Delay = ratelimit.NoDelay
		} else if d, err := strconv.ParseInt(*delay, 10, 64); err != nil || d < 0 {
			return usage("--delay %q: want a number of requests >= 0, or nodelay", *delay)
		} else {
			opt.Delay = d
		}
		for f, takers := range map[string][]string{
			"burst":   {"token_bucket", "leaky_bucket", "gcra"},
			"delay":   {"leaky_bucket"},
			"buckets": {"sliding_window"},
		} {
			if set[f] && !simAnyOf(names, takers) {
				return usage("--%s does not apply to %s; %s take it", f, strings.Join(names, ", "), strings.Join(takers, ", "))
			}
		}
		for _, a := range names {
			r, err := simulate.NewRule(a, *limit, *per, opt)
			if err != nil {
				return usage("%v", err)
			}
			rules = append(rules, simulate.Rule{Name: a, Rule: r})
		}
	}

	// Traffic.
	var tr *simulate.Traffic
	if *file != "" {
		for _, f := range simPatternFlags {
			if set[f] {
				return usage("--%s shapes built-in traffic; --traffic-file gives the requests", f)
			}
		}
		f, err := os.Open(*file)
		if err != nil {
			fmt.Fprintf(stderr, "%s: --traffic-file: %v\n", cmd, err)
			return exitFailure
		}
		tr, err = simulate.ParseTraffic(*file, f)
		f.Close()
		if err != nil {
			fmt.Fprintf(stderr, "%v\n%s: fix the traffic file: one request per line, a timestamp or timestamp,key\n", err, cmd)
			return exitFailure
		}
	} else {
		_, l, w, err := simulate.Describe(rules[0].Rule)
		if err != nil {
			fmt.Fprintf(stderr, "%s: rule %q: %v\n", cmd, rules[0].Name, err)
			return exitFailure
		}
		p := simulate.Pattern{Kind: *traffic, Duration: *duration, Rate: *rate, From: *from,
			On: *on, Off: *off, Window: *edge, Count: *count, Spread: *spread, Seed: *seed}
		if !slices.Contains(simulate.Patterns, p.Kind) {
			return usage("--traffic: unknown pattern %q (want %s, or --traffic-file FILE)", p.Kind, strings.Join(simulate.Patterns, ", "))
		}
		if w <= 0 {
			w = time.Second
		}
		l = max(l, 1)
		if !set["rate"] {
			p.Rate = 2 * float64(l) / w.Seconds()
		}
		if !set["edge"] {
			p.Window = w
		}
		if !set["count"] {
			p.Count = l
		}
		if !set["spread"] {
			p.Spread = p.Window / 10
		}
		if !set["on"] {
			p.On = w
		}
		if !set["off"] {
			p.Off = w
		}
		if !set["duration"] {
			p.Duration = 5 * w
			if p.Kind == simulate.Boundary {
				p.Duration = 2 * p.Window
			}
		}
		align := w
		if p.Kind == simulate.Boundary {
			align = p.Window
		}
		p.Start = simulate.AlignedStart(simStart, align)
		tr, err = p.Generate()
		if err != nil {
			return usage("--traffic %s: %s", p.Kind, strings.TrimPrefix(err.Error(), "simulate: "+p.Kind+" traffic: "))
		}
	}

	// Chart files, checked before the work.
	var svgPath, pngPath string
	if *out != "" {
		switch strings.ToLower(filepath.Ext(*out)) {
		case ".svg":
			svgPath = *out
			if *withPNG {
				pngPath = strings.TrimSuffix(*out, filepath.Ext(*out)) + ".png"
			}
		case ".png":
			pngPath = *out
		default:
			return usage("--out %q: name a .svg or .png file (or --out '' for no chart)", *out)
		}
	} else if *withPNG {
		return usage("--png writes a PNG beside the --out SVG; give --out FILE.svg or --out FILE.png")
	}

	if *leased < 0 || *leased > 1000 {
		return usage("--leased %d: want a number of processes from 1 to 1000", *leased)
	}
	if set["lease-target"] && *leased == 0 {
		return usage("--lease-target goes with --leased")
	}
	if set["lease-target"] && *leaseTarget <= 0 {
		return usage("--lease-target %v: want a positive duration", *leaseTarget)
	}
	rep, err := simulate.Run(context.Background(), tr, rules, simulate.Options{Progress: simProgress(stderr), Leased: *leased, LeaseTarget: *leaseTarget})
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", cmd, strings.TrimPrefix(err.Error(), "simulate: "))
		if *rulesPath == "" {
			fmt.Fprintf(stderr, "Check --limit, --per, --burst, --delay and --buckets; 'floodgate simulate --help' says what each means.\n")
		}
		return exitFailure
	}

	info := stdout
	if *asJSON {
		info = stderr
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(simJSONReport(rep)); err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", cmd, err)
			return exitFailure
		}
	} else {
		simPrintReport(stdout, rep)
	}
	for _, c := range []struct{ path, format string }{{svgPath, simulate.SVG}, {pngPath, simulate.PNG}} {
		if c.path == "" {
			continue
		}
		if err := simWriteChart(c.path, rep, c.format, simulate.ChartOptions{Bin: *bin, Title: *title}); err != nil {
			fmt.Fprintf(stderr, "%s: %v\n", cmd, err)
			return exitFailure
		}
		fmt.Fprintf(info, "wrote %s (%s)\n", c.path, plural(len(rep.Rules), "panel"))
	}
	if !rep.Held() {
		for _, rr := range rep.Rules {
			for _, c := range rr.Checks {
				if !c.Held {
					fmt.Fprintf(stderr, "%s: rule %q broke its documented bound, %s: %d admitted where %d are allowed\n", cmd, rr.Name, c.Bound, c.Observed, c.Allowed)
				}
			}
		}
		fmt.Fprintf(stderr, "That is a bug in floodgate: please report it with this command line and its traffic.\n")
		return exitFailure
	}
	return exitOK
}

// simRulesFromConfig returns the limits of a configuration as rules: named by
// their name, or else by their descriptor path, in file order (files by name).
// only, when set, keeps the limits whose name or path matches one of its
// comma-separated globs.
func simRulesFromConfig(p, only, cmd string, stderr io.Writer) ([]simulate.Rule, int) {
	cfg, err := config.Load(p)
	if err != nil {
		var list config.ErrorList
		if errors.As(err, &list) {
			for _, e := range list {
				fmt.Fprintln(stderr, e)
			}
			fmt.Fprintf(stderr, "%s: the configuration is invalid (%s); fix it and run 'floodgate config check %s'\n", cmd, plural(len(list), "problem"), p)
		} else {
			fmt.Fprintf(stderr, "%s: %v\n", cmd, err)
		}
		return nil, exitFailure
	}
	domains := make([]*config.Domain, 0, len(cfg.Domains))
	for _, d := range cfg.Domains {
		domains = append(domains, d)
	}
	sort.Slice(domains, func(i, j int) bool { return domains[i].File < domains[j].File })
	var globs []string
	for _, g := range strings.Split(only, ",") {
		if g = strings.TrimSpace(g); g != "" {
			if _, err := path.Match(g, ""); err != nil {
				fmt.Fprintf(stderr, "%s: --only %q: %v\n", cmd, g, err)
				return nil, exitUsage
			}
			globs = append(globs, g)
		}
	}
	var rules []simulate.Rule
	var names []string
	for _, d := range domains {
		for _, l := range d.Limits() {
			if l.Rule == nil {
				continue // unlimited
			}
			name := l.Name
			if name == "" {
				name = l.Path
			}
			names = append(names, name)
			if len(globs) > 0 && !simMatchAny(globs, name, l.Path) {
				continue
			}
			rules = append(rules, simulate.Rule{Name: name, Rule: l.Rule})
		}
	}
	if len(rules) == 0 {
		if len(names) == 0 {
			fmt.Fprintf(stderr, "%s: %s has no rate limits to simulate (unlimited ones have no rule)\n", cmd, p)
		} else {
			fmt.Fprintf(stderr, "%s: --only %q matches none of the limits of %s: %s\n", cmd, only, p, strings.Join(names, ", "))
		}
		return nil, exitFailure
	}
	return rules, exitOK
}

func simMatchAny(globs []string, names ...string) bool {
	for _, g := range globs {
		for _, n := range names {
			if ok, _ := path.Match(g, n); ok {
				return true
			}
		}
	}
	return false
}

func simAnyOf(list, want []string) bool {
	for _, x := range want {
		if slices.Contains(list, x) {
			return true
		}
	}
	return false
}

// simWriteChart writes rep's chart to file p.
func simWriteChart(p string, rep *simulate.Report, format string, opt simulate.ChartOptions) error {
	f, err := os.Create(p)
	if err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	if err := simulate.WriteChart(f, rep, format, opt); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// simProgress returns a progress printer for long simulations when w is a
// terminal, else nil.
func simProgress(w io.Writer) func(done, total int64) {
	f, ok := w.(*os.File)
	if !ok {
		return nil
	}
	if fi, err := f.Stat(); err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return nil
	}
	last := -1
	return func(done, total int64) {
		if total < 2_000_000 {
			return
		}
		pct := int(100 * done / total)
		if pct == last {
			return
		}
		last = pct
		fmt.Fprintf(f, "\rsimulating: %3d%% of %d decisions", pct, total)
		if done == total {
			fmt.Fprint(f, "\r\033[K")
		}
	}
}

// simPrintReport writes the tables of a report.
func simPrintReport(w io.Writer, rep *simulate.Report) {
	tr := rep.Traffic
	start := tr.Start.UnixMicro()
	fmt.Fprintf(w, "%s\n%s, %s, %s to %s\n\n", tr.Name, plural(tr.Len(), "request"), plural(len(tr.Keys), "key"),
		tr.Start.UTC().Format(time.RFC3339Nano), tr.End.UTC().Format(time.RFC3339Nano))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RULE\tPARAMETERS\tOFFERED\tADMITTED\tREJECTED\tMOST/WINDOW\tMEAN DELAY\tMAX DELAY\tBOUND")
	for _, rr := range rep.Rules {
		held := "held"
		if !rr.Held() {
			held = "BROKEN"
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d/%v\t%v\t%v\t%s\n", rr.Name, rr.Params, rr.Offered, rr.Admitted, rr.Rejected,
			rr.MostInWindow, simulate.FormatDuration(rr.Window), rr.MeanDelay, rr.MaxDelay, held)
	}
	tw.Flush()
	for _, rr := range rep.Rules {
		if rr.Processes == 0 {
			continue
		}
		under := "none"
		if rr.Exact > 0 {
			under = fmt.Sprintf("%d (%.1f%%)", rr.Exact-rr.Admitted, 100*float64(rr.Exact-rr.Admitted)/float64(rr.Exact))
		}
		fmt.Fprintf(w, "\n%s: admitted %d, exactly %d without leases; under-admitted %s; never more than the rule (its bound below); per process %v\n",
			rr.Name, rr.Admitted, rr.Exact, under, rr.PerProcess)
	}
	for _, n := range rep.NotLeased {
		fmt.Fprintf(w, "\nnot leased: %s\n", n)
	}
	fmt.Fprintf(w, "\nBounds (docs/algorithms.md), each where it is tightest, times from the start:\n")
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, rr := range rep.Rules {
		name := rr.Name
		for _, c := range rr.Checks {
			verdict := "held"
			if !c.Held {
				verdict = "BROKEN"
			}
			where := "nothing admitted"
			if c.Observed > 0 {
				where = fmt.Sprintf("%d (of %d allowed) in [%v, %v]", c.Observed, c.Allowed,
					time.Duration(c.From-start)*time.Microsecond, time.Duration(c.To-start)*time.Microsecond)
				if len(tr.Keys) > 1 {
					where += fmt.Sprintf(" for key %q", tr.Keys[c.Key])
				}
			}
			fmt.Fprintf(tw, "  %s\t%s\t%s: %s\n", name, c.Bound, verdict, where)
			name = ""
		}
	}
	tw.Flush()
}

// The JSON form of a report; durations in seconds, times in RFC3339.
type (
	simJSONOut struct {
		Traffic  string        `json:"traffic"`
		Start    string        `json:"start"`
		End      string        `json:"end"`
		Requests int           `json:"requests"`
		Keys     int           `json:"keys"`
		Held     bool          `json:"held"`
		Rules    []simJSONRule `json:"rules"`
	}
	simJSONRule struct {
		Name          string         `json:"name"`
		Algorithm     string         `json:"algorithm"`
		Params        string         `json:"parameters"`
		Limit         int64          `json:"limit"`
		WindowSeconds float64        `json:"window_seconds"`
		Offered       int64          `json:"offered"`
		Admitted      int64          `json:"admitted"`
		Rejected      int64          `json:"rejected"`
		MostInWindow  simJSONSpan    `json:"most_in_window"`
		MeanDelay     float64        `json:"mean_delay_seconds"`
		MaxDelay      float64        `json:"max_delay_seconds"`
		Held          bool           `json:"held"`
		Bounds        []simJSONBound `json:"bounds"`
		// With --leased: the processes, what each admitted, and what the
		// rule admits without leases.
		Processes  int     `json:"processes,omitempty"`
		PerProcess []int64 `json:"per_process,omitempty"`
		Exact      *int64  `json:"exact_admitted,omitempty"`
	}
	simJSONSpan struct {
		Count int64   `json:"count"`
		Key   string  `json:"key"`
		From  *string `json:"from"`
		To    *string `json:"to"`
	}
	simJSONBound struct {
		Bound    string  `json:"bound"`
		Source   string  `json:"source"`
		Held     bool    `json:"held"`
		Observed int64   `json:"observed"`
		Allowed  int64   `json:"allowed"`
		Key      string  `json:"key"`
		From     *string `json:"from"`
		To       *string `json:"to"`
	}
)

func simJSONReport(rep *simulate.Report) simJSONOut {
	tr := rep.Traffic
	ts := func(n int64, us int64) *string {
		if n == 0 {
			return nil
		}
		s := time.UnixMicro(us).UTC().Format(time.RFC3339Nano)
		return &s
	}
	o := simJSONOut{Traffic: tr.Name, Start: tr.Start.UTC().Format(time.RFC3339Nano), End: tr.End.UTC().Format(time.RFC3339Nano),
		Requests: tr.Len(), Keys: len(tr.Keys), Held: rep.Held(), Rules: []simJSONRule{}}
	for _, rr := range rep.Rules {
		jr := simJSONRule{Name: rr.Name, Algorithm: rr.Algorithm, Params: rr.Params, Limit: rr.Limit, WindowSeconds: rr.Window.Seconds(),
			Offered: rr.Offered, Admitted: rr.Admitted, Rejected: rr.Rejected,
			MostInWindow: simJSONSpan{Count: rr.MostInWindow, Key: tr.Keys[rr.MostKey], From: ts(rr.MostInWindow, rr.MostFrom), To: ts(rr.MostInWindow, rr.MostTo)},
			MeanDelay:    rr.MeanDelay.Seconds(), MaxDelay: rr.MaxDelay.Seconds(), Held: rr.Held(), Bounds: []simJSONBound{}}
		if rr.Processes > 0 {
			exact := rr.Exact
			jr.Processes, jr.PerProcess, jr.Exact = rr.Processes, rr.PerProcess, &exact
		}
		for _, c := range rr.Checks {
			allowed := c.Allowed
			if allowed == math.MaxInt64 {
				allowed = -1
			}
			jr.Bounds = append(jr.Bounds, simJSONBound{Bound: c.Bound.String(), Source: c.Bound.Doc, Held: c.Held,
				Observed: c.Observed, Allowed: allowed, Key: tr.Keys[c.Key], From: ts(c.Observed, c.From), To: ts(c.Observed, c.To)})
		}
		o.Rules = append(o.Rules, jr)
	}
	return o
}
