package config

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"github.com/floodgate-dev/floodgate/ratelimit"
)

// Config is a set of domains, each from its own file. Create it with Load.
type Config struct {
	Domains map[string]*Domain
}

// Domain is the descriptor tree of one domain. Create it with Parse, or Load.
type Domain struct {
	Name string // the domain: key
	File string // the file it came from, as given to Parse
	Line int    // the line of the domain: key

	root        *level
	limits      []*Limit
	descriptors int

	// Left by parse with deferRefs, for Load: the rate_limit names and the
	// replaces entries.
	names map[string]bool
	refs  []ref
}

// Entry is one key/value pair of a request descriptor, as in Envoy's
// RateLimitDescriptor.Entry.
type Entry struct {
	Key, Value string
}

// Limit is one rate_limit block of a configuration.
//
// Rule is built from RequestsPerUnit (rpu), the limit's period (Window: the
// duration of Unit times UnitMultiplier) and the algorithm's parameters:
//
//	fixed_window    FixedWindow{Limit: rpu, Window: period}
//	sliding_window  SlidingWindow{Limit: rpu, Window: period, Buckets: buckets (0: ratelimit.DefaultBuckets)}
//	sliding_log     SlidingLog{Limit: rpu, Window: period}
//	token_bucket    TokenBucket{Capacity: burst (default rpu), Refill: rpu, Every: period}
//	leaky_bucket    LeakyBucket{Rate: rpu, Per: period, Burst: burst (default 0), Delay: delay (default 0, as nginx; "nodelay": NoDelay)}
//	gcra            GCRA{Rate: rpu, Per: period, Burst: burst (default rpu)}
//
// So "1000 per 10 s" is unit second, unit_multiplier 10 and
// requests_per_unit 1000, whatever the algorithm: requests_per_unit is what
// one whole period allows, as in Envoy's RateLimitOverride.
//
// An unlimited limit has no Rule and no Algorithm. The Rule is not Named; the
// server chooses the name (and so the state) it decides under.
type Limit struct {
	Name string // rate_limit.name; "" when unnamed
	Unit Unit   // UnitUnknown only when Unlimited
	// UnitMultiplier is the number of Units in the limit's period
	// (rate_limit's unit_multiplier, Envoy's RateLimitOverride and
	// RateLimitResponse.RateLimit field of that name): 1 when the file does
	// not give it, 0 when Unlimited. 0 in a Limit made by hand means 1.
	UnitMultiplier  uint32
	RequestsPerUnit uint32 // what one period allows
	Unlimited       bool
	ShadowMode      bool     // descriptor shadow_mode
	DetailedMetric  bool     // descriptor detailed_metric
	QuotaMode       bool     // descriptor quota_mode (not acted upon here)
	Metadata        any      // descriptor metadata as decoded (maps, lists, scalars); nil when absent
	Replaces        []string // names of the limits this one replaces
	Algorithm       string   // fixed_window, sliding_window, sliding_log, token_bucket, leaky_bucket or gcra
	Rule            ratelimit.Rule
	Lease           Lease // rate_limit's lease
	// Charge is the descriptor's charge: always — the usage a request
	// reports for this limit (its cost) is recorded whatever the answer,
	// past the limit as debt (ratelimit.Limiter.Charge), for usage known
	// after the fact: the tokens of an LLM completion.
	Charge bool

	// Path identifies the descriptor this limit belongs to, stably across
	// reloads as long as the descriptor keeps its place in the tree:
	// "domain|key_value|key|...", one element per level, "key_value" for a
	// descriptor with a value (a pattern keeps its '*') and "key" for a
	// default. '%' and '|' inside names are written %25 and %7C. It suits
	// metric labels (bounded) and state keys (with StateKey).
	Path string

	File string // where the rate_limit block is
	Line int

	vary []bool      // per level: the request's value is part of the state key
	stat []statLevel // per level: what envoy's stat names need (statkey.go)
}

// Lease is what a limit says of quota leases (rate_limit's lease, a
// floodgate extension): nothing, and the server's default applies
// (floodgate serve --leases), or on or off. See docs/server/leases.md.
type Lease int8

// The values of Lease.
const (
	LeaseDefault Lease = iota // no lease key: the server's default
	LeaseOn                   // lease: true
	LeaseOff                  // lease: false
)

// Window is the limit's period: the length of Unit times UnitMultiplier (0
// when Unlimited). A fixed window's windows start at multiples of it since
// the Unix epoch, on every backend. A Limit made by hand whose period
// overflows a time.Duration gets the longest one; Parse never makes such a
// Limit (its periods are at most ratelimit.MaxPeriod).
func (l *Limit) Window() time.Duration { return period(l.Unit, l.UnitMultiplier) }

// period is the length of m units u: u.Duration() × m, with m 0 taken as 1,
// and math.MaxInt64 (292 years) when that overflows a time.Duration. It is
// 0 for UnitUnknown and unknown values.
func period(u Unit, m uint32) time.Duration {
	d := u.Duration()
	if m <= 1 || d == 0 {
		return d
	}
	if d > math.MaxInt64/time.Duration(m) {
		return math.MaxInt64
	}
	return d * time.Duration(m)
}

// StateKey returns the key under which a request matched to l is counted:
// Path, plus the request's value at every level that does not fix it (a
// default, or a pattern without share_threshold). entries must be the entries
// Domain.Match matched to l. Like envoyproxy/ratelimit's cache key, it gives
// every distinct value its own counter, and one shared counter to all values
// matching a share_threshold pattern.
func (l *Limit) StateKey(entries []Entry) string {
	var b strings.Builder
	b.WriteString(l.Path)
	for i, v := range l.vary {
		if v && i < len(entries) {
			b.WriteByte('|')
			b.WriteString(EscapePath(entries[i].Value))
		}
	}
	return b.String()
}

// Limits returns the domain's limits in file order. The slice must not be
// changed.
func (d *Domain) Limits() []*Limit { return d.limits }

// Descriptors returns the number of descriptors in the domain, at every level.
func (d *Domain) Descriptors() int { return d.descriptors }

// Unit is a rate limit unit; its values are those of Envoy RLS v3
// RateLimitResponse.RateLimit.Unit.
type Unit int32

// The units of Envoy RLS v3.
const (
	UnitUnknown Unit = 0
	UnitSecond  Unit = 1
	UnitMinute  Unit = 2
	UnitHour    Unit = 3
	UnitDay     Unit = 4
	UnitMonth   Unit = 5
	UnitYear    Unit = 6
	UnitWeek    Unit = 7
)

var unitNames = map[Unit]string{
	UnitUnknown: "UNKNOWN", UnitSecond: "SECOND", UnitMinute: "MINUTE", UnitHour: "HOUR",
	UnitDay: "DAY", UnitMonth: "MONTH", UnitYear: "YEAR", UnitWeek: "WEEK",
}

// String returns the Envoy enum name: "SECOND", "MINUTE", ...
func (u Unit) String() string {
	if s, ok := unitNames[u]; ok {
		return s
	}
	return fmt.Sprintf("Unit(%d)", int32(u))
}

// Duration returns the length of the unit, from envoyproxy/ratelimit's
// UnitToDivider (src/utils/utilities.go): a week is 7 days, a month 30 days
// and a year 365 days, so windows are epoch-aligned multiples of those. (Its
// optional calendar-month mode is not followed.) UnitUnknown and unknown
// values return 0.
func (u Unit) Duration() time.Duration {
	switch u {
	case UnitSecond:
		return time.Second
	case UnitMinute:
		return time.Minute
	case UnitHour:
		return time.Hour
	case UnitDay:
		return 24 * time.Hour
	case UnitWeek:
		return 7 * 24 * time.Hour
	case UnitMonth:
		return 30 * 24 * time.Hour
	case UnitYear:
		return 365 * 24 * time.Hour
	}
	return 0
}

// parseUnit reads a unit as envoyproxy/ratelimit does: the upper-cased name
// looked up in the enum (strings.ToUpper, so "Minute" and "MINUTE" work).
func parseUnit(s string) (Unit, bool) {
	up := strings.ToUpper(s)
	for u, name := range unitNames {
		if u != UnitUnknown && name == up {
			return u, true
		}
	}
	return UnitUnknown, false
}

// Match returns the limit of each descriptor of a request to domain, in
// order: nil where none applies (and for every descriptor when the domain is
// unknown). Pass the result to ApplyReplaces to apply replaces.
func (c *Config) Match(domain string, descriptors ...[]Entry) []*Limit {
	out := make([]*Limit, len(descriptors))
	d := c.Domains[domain]
	if d == nil {
		return out
	}
	for i, entries := range descriptors {
		out[i] = d.Match(entries)
	}
	return out
}

// Load reads the configuration at path: one file, or every *.yaml and *.yml
// file directly in a directory (names starting with '.' are skipped), one
// domain per file. A domain in two files is an error naming both. The error
// is an ErrorList with every problem of every file.
func Load(path string) (*Config, error) { return LoadWith(path, LoadOptions{}) }

// LoadOptions change how LoadWith reads a configuration.
type LoadOptions struct {
	// MergeDomains is envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG: the files
	// of one domain merge, in name order. Their top-level descriptors join
	// (a key and value in two of them is an error, as within one file; their
	// children are not merged), and a replaces entry may name a rate_limit of
	// another file of the domain.
	MergeDomains bool
	// Envoy starts the message of each problem envoyproxy/ratelimit reports
	// with its text (Error.Envoy), floodgate's following in parentheses.
	Envoy bool
	// EmptyDirectory makes a directory without *.yaml or *.yml files a
	// configuration without domains, as envoyproxy/ratelimit reads an empty
	// runtime directory (no limits apply), instead of an error.
	EmptyDirectory bool
}

// LoadWith is Load with options.
func LoadWith(path string, opts LoadOptions) (cfg *Config, err error) {
	if opts.Envoy {
		defer envoyMessages(&err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return nil, ErrorList{{File: path, Msg: errMsg(err)}}
	}
	files := []string{path}
	if fi.IsDir() {
		files, err = configFiles(path)
		if err != nil {
			return nil, ErrorList{{File: path, Msg: errMsg(err)}}
		}
		if len(files) == 0 && !opts.EmptyDirectory {
			return nil, ErrorList{{File: path, Msg: "no *.yaml or *.yml files in the directory"}}
		}
	}
	srcs := make([]Source, 0, len(files))
	var errs ErrorList
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			errs = append(errs, &Error{File: f, Msg: errMsg(err)})
			continue
		}
		srcs = append(srcs, Source{Name: f, Data: data})
	}
	return build(srcs, errs, opts)
}

// Source is one configuration document held in memory: what one file
// holds (one domain), and the name errors and Domain.File give it.
type Source struct {
	Name string
	Data []byte
}

// LoadSources is LoadWith for documents held in memory, in the order given
// (as a directory's files are in name order): the same parsing, checks and
// errors. No sources make a configuration without domains. It is how the
// xDS configuration source loads the resources a management server pushes.
func LoadSources(srcs []Source, opts LoadOptions) (cfg *Config, err error) {
	if opts.Envoy {
		defer envoyMessages(&err)
	}
	return build(srcs, nil, opts)
}

// envoyMessages starts the message of each problem in *err that
// envoyproxy/ratelimit reports with its text (LoadOptions.Envoy).
func envoyMessages(err *error) {
	if l, ok := (*err).(ErrorList); ok {
		for _, e := range l {
			if e.Envoy != "" {
				e.Msg = e.Envoy + " (" + e.Msg + ")"
			}
		}
	}
}

// build parses srcs into a Config; errs holds problems found before (files
// that could not be read), reported with those of srcs.
func build(srcs []Source, errs ErrorList, opts LoadOptions) (*Config, error) {
	cfg := &Config{Domains: make(map[string]*Domain, len(srcs))}
	for _, src := range srcs {
		d, err := parse(src.Name, src.Data, opts.MergeDomains)
		if err != nil {
			errs = append(errs, err.(ErrorList)...)
			continue
		}
		if prev, dup := cfg.Domains[d.Name]; dup {
			if opts.MergeDomains {
				errs = append(errs, prev.merge(d)...)
				continue
			}
			errs = append(errs, &Error{File: d.File, Line: d.Line,
				Msg:   fmt.Sprintf("duplicate domain %q (also in %s:%d)", d.Name, prev.File, prev.Line),
				Envoy: fmt.Sprintf("duplicate domain '%s' in config file", d.Name)})
			continue
		}
		cfg.Domains[d.Name] = d
	}
	if opts.MergeDomains {
		for _, name := range sortedNames(cfg.Domains) {
			d := cfg.Domains[name]
			for _, r := range d.refs {
				if !d.names[r.name] {
					errs = append(errs, &Error{File: r.file, Line: r.line, Msg: unknownNameMsg(r.name, d.Name)})
				}
			}
			d.names, d.refs = nil, nil
		}
	}
	if len(errs) > 0 {
		return nil, errs
	}
	return cfg, nil
}

func sortedNames(m map[string]*Domain) []string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// merge adds the top-level descriptors of o, a later file of d's domain, to
// d, as envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG does. A descriptor d
// already has (by its key and value joined with '_') is an error.
func (d *Domain) merge(o *Domain) ErrorList {
	var errs ErrorList
	nodes := make([]*node, 0, len(o.root.joined))
	joined := make(map[*node]string, len(o.root.joined))
	for j, n := range o.root.joined {
		nodes = append(nodes, n)
		joined[n] = j
	}
	sort.Slice(nodes, func(a, b int) bool { return nodes[a].line < nodes[b].line })
	for _, n := range nodes {
		j := joined[n]
		if prev := d.root.joined[j]; prev != nil {
			errs = append(errs, &Error{File: o.File, Line: n.line,
				Msg:   fmt.Sprintf("duplicate descriptor: key %q value %q is also in an earlier file of domain %q (merging files joins only their top-level descriptors)", n.key, n.value, d.Name),
				Envoy: fmt.Sprintf("duplicate descriptor composite key '%s.%s'", d.Name, j)})
			continue
		}
		d.root.add(j, n)
	}
	d.limits = append(d.limits, o.limits...)
	d.descriptors += o.descriptors
	for name := range o.names {
		d.names[name] = true
	}
	d.refs = append(d.refs, o.refs...)
	return errs
}

// configFiles lists the configuration files of dir in name order.
func configFiles(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var files []string
	for _, e := range ents {
		name := e.Name()
		ext := strings.ToLower(filepath.Ext(name))
		if strings.HasPrefix(name, ".") || ext != ".yaml" && ext != ".yml" {
			continue
		}
		p := filepath.Join(dir, name)
		fi, err := os.Stat(p) // follows symlinks, as Kubernetes ConfigMap mounts use
		if err != nil {
			return nil, err
		}
		if fi.Mode().IsRegular() {
			files = append(files, p)
		}
	}
	sort.Strings(files)
	return files, nil
}

// errMsg drops the path that *fs.PathError repeats.
func errMsg(err error) string {
	if pe, ok := err.(*os.PathError); ok {
		return pe.Op + ": " + pe.Err.Error()
	}
	return err.Error()
}

// EscapePath writes '%' and '|' of a Path element as %25 and %7C, so that a
// name or value with those bytes cannot change how a Path splits.
func EscapePath(s string) string {
	if !strings.ContainsAny(s, "%|") {
		return s
	}
	return strings.NewReplacer("%", "%25", "|", "%7C").Replace(s)
}
