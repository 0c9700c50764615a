package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/floodgate-dev/floodgate/backend"
	"github.com/floodgate-dev/floodgate/ratelimit"
)

// maxNodes bounds the YAML nodes one file may have once aliases are
// expanded, so that a few aliases cannot make a small file cost gigabytes
// (a variable for tests).
var maxNodes = 1_000_000

// maxDepth bounds how deep descriptors nest (a request descriptor has one
// entry per level); it also stops an alias that contains itself.
const maxDepth = 64

// Parse reads one configuration file: one domain. filename is used in error
// messages and Domain.File. The error is an ErrorList with every problem
// found.
func Parse(filename string, data []byte) (*Domain, error) {
	return parse(filename, data, false)
}

// parse is Parse; with deferRefs, the replaces names are not checked but
// kept in the Domain, for Load to check once files of one domain are merged.
func parse(filename string, data []byte, deferRefs bool) (*Domain, error) {
	p := &parser{file: filename, budget: maxNodes, names: map[string]bool{}, deferRefs: deferRefs}
	defer p.close()
	d := p.parse(data)
	if len(p.errs) > 0 {
		sort.SliceStable(p.errs, func(i, j int) bool { return p.errs[i].Line < p.errs[j].Line })
		if p.tooMany {
			p.errs = append(p.errs, &Error{File: filename, Msg: "too many errors"})
		}
		return nil, p.errs
	}
	return d, nil
}

type parser struct {
	file      string
	errs      ErrorList
	tooMany   bool
	budget    int  // nodes left to visit
	exhausted bool // budget ran out: stop
	d         *Domain
	names     map[string]bool // rate_limit names of the domain
	refs      []ref           // replaces entries, checked against names at the end
	mem       *backend.Memory // for ratelimit.New, which validates rules
	stat      []statLevel     // the descriptors being read, root first: for envoy's stat names
	deferRefs bool            // leave refs to Load (see parse)
}

type ref struct {
	name string
	line int
	file string
}

func (p *parser) close() {
	if p.mem != nil {
		p.mem.Close()
	}
}

func (p *parser) errorf(line int, format string, args ...any) {
	p.envoyErrorf(line, "", format, args...)
}

// envoyErrorf is errorf for a problem envoyproxy/ratelimit reports with the
// text envoy (Error.Envoy).
func (p *parser) envoyErrorf(line int, envoy, format string, args ...any) {
	if len(p.errs) >= maxErrors {
		p.tooMany = true
		return
	}
	p.errs = append(p.errs, &Error{File: p.file, Line: line, Msg: fmt.Sprintf(format, args...), Envoy: envoy})
}

var yamlLineErr = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// yamlError reports an error of the YAML parser at its line.
func (p *parser) yamlError(err error) {
	msg := err.Error()
	envoy := "error loading config file: " + msg
	if m := yamlLineErr.FindStringSubmatch(msg); m != nil {
		line, _ := strconv.Atoi(m[1])
		p.envoyErrorf(line, envoy, "%s", m[2])
		return
	}
	p.envoyErrorf(0, envoy, "%s", strings.TrimPrefix(msg, "yaml: "))
}

// visit resolves aliases and charges the node to the budget. It returns nil
// when the budget is spent.
func (p *parser) visit(n *yaml.Node) *yaml.Node {
	for n != nil && n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	if p.exhausted {
		return nil
	}
	p.budget--
	if p.budget < 0 {
		p.exhausted = true
		p.errorf(0, "too large: more than %d YAML nodes once aliases are expanded", maxNodes)
		return nil
	}
	return n
}

func (p *parser) parse(data []byte) *Domain {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			p.errorf(1, "missing domain: the file is empty")
		} else {
			p.yamlError(err)
		}
		return nil
	}
	var next yaml.Node
	if err := dec.Decode(&next); err == nil {
		p.errorf(next.Line, "a second YAML document: a file holds one domain")
		return nil
	} else if !errors.Is(err, io.EOF) {
		p.yamlError(err)
		return nil
	}
	if len(doc.Content) == 0 {
		p.errorf(1, "missing domain: the file is empty")
		return nil
	}
	root := p.visit(doc.Content[0])
	if root == nil {
		return nil
	}
	if isNull(root) {
		p.errorf(root.Line, "missing domain: the file is empty")
		return nil
	}
	if root.Kind != yaml.MappingNode {
		p.errorf(root.Line, "the file must be a mapping with domain and descriptors, got %s", kindOf(root))
		return nil
	}
	p.d = &Domain{File: p.file, Line: root.Line, root: newLevel()}
	var descs *yaml.Node
	domainSeen, domainOK := false, false
	p.fields(root, secTop, func(key string, k, v *yaml.Node) {
		switch key {
		case "domain":
			domainSeen = true
			p.d.Line = k.Line
			p.d.Name, domainOK = p.str(v, "domain")
		case "descriptors":
			descs = v
		}
	})
	switch {
	case !domainSeen:
		p.envoyErrorf(root.Line, envoyEmptyDomain, "missing domain")
	case domainOK && p.d.Name == "":
		p.envoyErrorf(p.d.Line, envoyEmptyDomain, "domain is empty")
	}
	p.descriptorList(descs, p.d.root, EscapePath(p.d.Name), nil)
	if p.deferRefs {
		p.d.names, p.d.refs = p.names, p.refs
		return p.d
	}
	for _, r := range p.refs {
		if !p.names[r.name] {
			p.errorf(r.line, "%s", unknownNameMsg(r.name, p.d.Name))
		}
	}
	return p.d
}

// A section is a kind of mapping and the keys it takes.
type section struct {
	name string
	keys []string
}

var (
	secTop        = section{"at the top level", []string{"domain", "descriptors"}}
	secDescriptor = section{"in descriptor", []string{"key", "value", "rate_limit", "descriptors", "shadow_mode",
		"detailed_metric", "quota_mode", "value_to_metric", "share_threshold", "metadata", "charge"}}
	secRateLimit = section{"in rate_limit", []string{"unit", "requests_per_unit", "unlimited", "name", "replaces",
		"unit_multiplier", "algorithm", "burst", "delay", "buckets", "lease"}}
	secReplaces = section{"in replaces entry", []string{"name"}}

	// home says where each key belongs, for the hint on a misplaced key.
	home = map[string]string{}
)

func init() {
	for _, c := range []struct {
		sec   section
		where string
	}{{secTop, "at the top level"}, {secDescriptor, "in a descriptor"}, {secRateLimit, "in rate_limit"}} {
		for _, k := range c.sec.keys {
			if _, ok := home[k]; !ok {
				home[k] = c.where
			}
		}
	}
}

// fields walks mapping m: it reports non-string, duplicate and unknown keys,
// and calls f with every known key in order. YAML merge keys (<<: *anchor)
// work as in yaml.v2, which envoyproxy/ratelimit uses: the merged mappings'
// keys count unless m sets them itself (or an earlier merged mapping does).
func (p *parser) fields(m *yaml.Node, sec section, f func(key string, k, v *yaml.Node)) {
	type pair struct{ k, v *yaml.Node }
	var own, merged []pair
	var merge func(v *yaml.Node, depth int)
	merge = func(v *yaml.Node, depth int) {
		v = p.visit(v)
		switch {
		case v == nil:
		case v.Kind == yaml.MappingNode && depth < maxDepth:
			for i := 0; i+1 < len(v.Content); i += 2 {
				if k := p.visit(v.Content[i]); k != nil && k.ShortTag() == "!!merge" {
					merge(v.Content[i+1], depth+1)
				} else if k != nil {
					merged = append(merged, pair{k, v.Content[i+1]})
				}
			}
		case v.Kind == yaml.SequenceNode && depth == 0:
			for _, item := range v.Content {
				merge(item, depth+1)
			}
		default:
			p.errorf(v.Line, "<< must merge a mapping or a list of mappings, got %s", kindOf(v))
		}
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		k := p.visit(m.Content[i])
		if k == nil {
			return
		}
		if k.Kind == yaml.ScalarNode && k.ShortTag() == "!!merge" {
			merge(m.Content[i+1], 0)
			continue
		}
		own = append(own, pair{k, m.Content[i+1]})
	}
	first := map[string]int{}
	for _, kv := range own {
		k := kv.k
		if k.Kind != yaml.ScalarNode {
			p.errorf(k.Line, "a key must be a string, got %s %s", kindOf(k), sec.name)
			continue
		}
		if line, dup := first[k.Value]; dup {
			p.errorf(k.Line, "duplicate key %q %s (first at line %d)", k.Value, sec.name, line)
			continue
		}
		first[k.Value] = k.Line
	}
	for _, kv := range merged {
		if kv.k.Kind != yaml.ScalarNode {
			p.errorf(kv.k.Line, "a key must be a string, got %s %s", kindOf(kv.k), sec.name)
			continue
		}
		if _, set := first[kv.k.Value]; !set {
			first[kv.k.Value] = kv.k.Line
			own = append(own, kv)
		}
	}
	seen := map[string]bool{}
	for _, kv := range own {
		k, name := kv.k, kv.k.Value
		if k.Kind != yaml.ScalarNode || seen[name] {
			continue // reported above
		}
		seen[name] = true
		if !contains(sec.keys, name) {
			envoy := ""
			switch {
			case k.ShortTag() != "!!str":
				envoy = "config error, key is not of type string: " + name
			case !envoyKeys[name]:
				envoy = fmt.Sprintf("config error, unknown key '%s'", name)
			}
			p.envoyErrorf(k.Line, envoy, "unknown key %q %s%s", name, sec.name, hint(name, sec))
			continue
		}
		f(name, k, kv.v)
	}
}

// hint says where a misplaced key belongs, or which key a misspelt one means.
func hint(name string, sec section) string {
	if where, ok := home[name]; ok {
		return fmt.Sprintf(" (it belongs %s)", where)
	}
	best, bestDist := "", 3
	for _, k := range sec.keys {
		if d := editDistance(name, k); d < bestDist {
			best, bestDist = k, d
		}
	}
	if best != "" {
		return fmt.Sprintf(" (did you mean %q?)", best)
	}
	return ""
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// editDistance is the Levenshtein distance of a and b, in bytes.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return math.MaxInt32
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

func isNull(n *yaml.Node) bool {
	return n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null"
}

func kindOf(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return "nothing"
		case "!!int", "!!float":
			return "a number"
		case "!!bool":
			return "a boolean"
		}
		if len(n.Value) > 40 {
			return fmt.Sprintf("%q...", n.Value[:40])
		}
		return fmt.Sprintf("%q", n.Value)
	}
	return "a document"
}

// str reads a string. Like envoyproxy/ratelimit (yaml.v2), any scalar is
// taken as its text, so value: 200 is "200"; null is "".
func (p *parser) str(n *yaml.Node, what string) (string, bool) {
	n = p.visit(n)
	if n == nil {
		return "", false
	}
	if n.Kind != yaml.ScalarNode {
		p.errorf(n.Line, "%s must be a string, got %s", what, kindOf(n))
		return "", false
	}
	if isNull(n) {
		return "", true
	}
	return n.Value, true
}

// YAML 1.1 booleans, which envoyproxy/ratelimit's yaml.v2 accepts unquoted.
var yaml11Bools = map[string]bool{
	"y": true, "Y": true, "yes": true, "Yes": true, "YES": true, "on": true, "On": true, "ON": true,
	"n": false, "N": false, "no": false, "No": false, "NO": false, "off": false, "Off": false, "OFF": false,
}

// boolean reads true or false (or a YAML 1.1 form); null is false.
func (p *parser) boolean(n *yaml.Node, what string) bool {
	n = p.visit(n)
	if n == nil {
		return false
	}
	if n.Kind == yaml.ScalarNode {
		switch {
		case isNull(n):
			return false
		case n.ShortTag() == "!!bool":
			var b bool
			if n.Decode(&b) == nil {
				return b
			}
		case n.Style&(yaml.SingleQuotedStyle|yaml.DoubleQuotedStyle|yaml.LiteralStyle|yaml.FoldedStyle) == 0:
			if b, ok := yaml11Bools[n.Value]; ok {
				return b
			}
		}
	}
	p.errorf(n.Line, "%s must be true or false, got %s", what, kindOf(n))
	return false
}

// integer reads a whole number (null is absent). It reports an error and
// returns ok false for anything else.
func (p *parser) integer(n *yaml.Node, what string) (v int64, present, ok bool) {
	n = p.visit(n)
	if n == nil {
		return 0, false, false
	}
	if n.Kind == yaml.ScalarNode {
		switch n.ShortTag() {
		case "!!null":
			return 0, false, true
		case "!!int":
			if n.Decode(&v) == nil {
				return v, true, true
			}
			p.errorf(n.Line, "%s %s is out of range", what, n.Value)
			return 0, false, false
		case "!!float":
			var f float64
			if n.Decode(&f) == nil && f == math.Trunc(f) && math.Abs(f) < 1<<53 {
				return int64(f), true, true
			}
		}
	}
	p.errorf(n.Line, "%s must be a whole number, got %s", what, kindOf(n))
	return 0, false, false
}

// descriptorList reads the list under a descriptors: key into lvl.
func (p *parser) descriptorList(n *yaml.Node, lvl *level, path string, vary []bool) {
	if n == nil {
		return
	}
	n = p.visit(n)
	if n == nil || isNull(n) {
		return
	}
	if n.Kind != yaml.SequenceNode {
		p.errorf(n.Line, "descriptors must be a list, got %s", kindOf(n))
		return
	}
	if len(vary) >= maxDepth {
		p.errorf(n.Line, "descriptors nested more than %d levels deep (an alias that contains itself?)", maxDepth)
		return
	}
	for _, item := range n.Content {
		item = p.visit(item)
		if item == nil {
			return
		}
		if item.Kind != yaml.MappingNode {
			p.envoyErrorf(item.Line, envoyNonMap(item), "a descriptor must be a mapping with a key, got %s", kindOf(item))
			continue
		}
		p.descriptor(item, lvl, path, vary)
	}
}

// descriptor reads one descriptor into lvl.
func (p *parser) descriptor(m *yaml.Node, lvl *level, parentPath string, vary []bool) {
	var (
		key, value                     string
		rl, rlKey, children, meta      *yaml.Node
		shareLine                      int
		shadow, detailed, quota, share bool
		toMetric, charge               bool
		chargeLine                     int
	)
	p.fields(m, secDescriptor, func(name string, k, v *yaml.Node) {
		switch name {
		case "key":
			key, _ = p.str(v, "key")
		case "value":
			value, _ = p.str(v, "value")
		case "rate_limit":
			rl, rlKey = v, k
		case "descriptors":
			children = v
		case "shadow_mode":
			shadow = p.boolean(v, name)
		case "detailed_metric":
			detailed = p.boolean(v, name)
		case "quota_mode":
			quota = p.boolean(v, name)
		case "value_to_metric":
			toMetric = p.boolean(v, name)
		case "share_threshold":
			share, shareLine = p.boolean(v, name), k.Line
		case "metadata":
			meta = v
		case "charge":
			chargeLine = k.Line
			if c, ok := p.str(v, name); ok && c != "always" {
				p.errorf(v.Line, "charge must be always (usage reported for this limit is recorded whatever the answer), got %q", c)
			} else {
				charge = ok
			}
		}
	})
	p.d.descriptors++
	if key == "" {
		p.envoyErrorf(m.Line, "descriptor has empty key", "descriptor has no key")
		return
	}
	joined := key
	if value != "" {
		joined += "_" + value
	}
	if prev := lvl.joined[joined]; prev != nil {
		p.envoyErrorf(m.Line, envoyDuplicateKey(parentPath, joined), "%s", duplicateMsg(key, value, prev))
		return
	}
	nd := &node{key: key, value: value, line: m.Line, pattern: strings.Contains(value, "*")}
	lvl.add(joined, nd)
	if share && !nd.pattern {
		p.envoyErrorf(shareLine, fmt.Sprintf("share_threshold can only be used with wildcard values (containing '*'), but found key '%s'", joined),
			"share_threshold needs a value with '*', got %q", value)
	}
	path := parentPath + "|" + EscapePath(key)
	if value != "" {
		path += "_" + EscapePath(value)
	}
	vary = append(vary[:len(vary):len(vary)], value == "" || nd.pattern && !share)
	p.stat = append(p.stat, statLevel{key: key, value: value, share: share && nd.pattern, toMetric: toMetric})
	defer func() { p.stat = p.stat[:len(p.stat)-1] }()
	if rl != nil {
		var metadata any
		if meta != nil {
			metadata = p.metadata(meta)
		}
		nd.limit = p.rateLimit(rl, rlKey.Line, &Limit{
			ShadowMode: shadow, DetailedMetric: detailed, QuotaMode: quota, Metadata: metadata, Charge: charge,
			Path: path, File: p.file, Line: rlKey.Line, vary: vary, stat: slices.Clone(p.stat),
		})
		switch {
		case !charge || nd.limit == nil:
		case nd.limit.Unlimited:
			p.errorf(chargeLine, "charge: always on an unlimited limit: there is nothing to charge")
		case nd.limit.Lease == LeaseOn:
			p.errorf(chargeLine, "charge: always and lease: true: a limit that charges usage is not leased (a lease would go on admitting while the key is in debt)")
		}
		if nd.limit != nil {
			p.d.limits = append(p.d.limits, nd.limit)
		}
	} else {
		if meta != nil {
			p.metadata(meta)
		}
		if charge {
			p.errorf(chargeLine, "charge: always needs a rate_limit in the same descriptor")
		}
	}
	if children != nil {
		nd.children = newLevel()
		p.descriptorList(children, nd.children, path, vary)
	}
}

func duplicateMsg(key, value string, prev *node) string {
	if key == prev.key && value == prev.value {
		if value == "" {
			return fmt.Sprintf("duplicate descriptor: key %q without value again at this level (first at line %d)", key, prev.line)
		}
		return fmt.Sprintf("duplicate descriptor: key %q value %q again at this level (first at line %d)", key, value, prev.line)
	}
	return fmt.Sprintf("duplicate descriptor: key %q value %q is key %q value %q of line %d once joined with '_', as envoyproxy/ratelimit does",
		key, value, prev.key, prev.value, prev.line)
}

// metadata decodes a metadata mapping, which may hold any keys.
func (p *parser) metadata(n *yaml.Node) any {
	n = p.visit(n)
	if n == nil || isNull(n) {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		p.errorf(n.Line, "metadata must be a mapping, got %s", kindOf(n))
		return nil
	}
	var v map[string]any
	if err := n.Decode(&v); err != nil {
		p.errorf(n.Line, "metadata: %s", strings.TrimPrefix(err.Error(), "yaml: "))
		return nil
	}
	return v
}

// The floodgate algorithms and the parameters each takes.
var algorithms = map[string][]string{
	"fixed_window":   nil,
	"sliding_window": {"buckets"},
	"sliding_log":    nil,
	"token_bucket":   {"burst"},
	"leaky_bucket":   {"burst", "delay"},
	"gcra":           {"burst"},
}

const algorithmList = "fixed_window, sliding_window, sliding_log, token_bucket, leaky_bucket or gcra"

var paramTakers = map[string]string{
	"burst":   "token_bucket, leaky_bucket and gcra take it",
	"delay":   "leaky_bucket takes it",
	"buckets": "sliding_window takes it",
}

// rateLimit reads a rate_limit mapping into lim, which carries what the
// descriptor set. line is the line of the rate_limit key.
func (p *parser) rateLimit(n *yaml.Node, line int, lim *Limit) *Limit {
	n = p.visit(n)
	if n == nil || isNull(n) {
		return nil
	}
	if n.Kind != yaml.MappingNode {
		p.errorf(n.Line, "rate_limit must be a mapping, got %s", kindOf(n))
		return nil
	}
	errs := len(p.errs)
	var (
		unit                       string
		rpu, burst, delay, buckets int64
		mult                       int64 = 1
		hasBurst                   bool
		nodes                      = map[string]*yaml.Node{} // key nodes
		algo                       = "fixed_window"
		replaces                   *yaml.Node
	)
	p.fields(n, secRateLimit, func(name string, k, v *yaml.Node) {
		nodes[name] = k
		switch name {
		case "unit":
			unit, _ = p.str(v, name)
		case "requests_per_unit":
			if x, present, ok := p.integer(v, name); ok && present {
				if x < 0 || x > math.MaxUint32 {
					p.errorf(k.Line, "requests_per_unit must be between 0 and %d, got %d", uint32(math.MaxUint32), x)
				}
				rpu = x
			}
		case "unit_multiplier":
			if x, present, ok := p.integer(v, name); ok && present {
				mult = x
				if x < 1 {
					p.errorf(k.Line, "unit_multiplier must be a whole number >= 1 (the units in the period), got %d", x)
				}
			}
		case "unlimited":
			lim.Unlimited = p.boolean(v, name)
		case "name":
			lim.Name, _ = p.str(v, name)
		case "replaces":
			replaces = v
		case "algorithm":
			if s, ok := p.str(v, name); ok {
				algo = strings.ToLower(s)
				if _, known := algorithms[algo]; !known {
					p.errorf(k.Line, "unknown algorithm %q (want %s)", s, algorithmList)
				}
			}
		case "burst":
			if x, present, ok := p.integer(v, name); ok && present {
				burst, hasBurst = x, true
				if x < 0 {
					p.errorf(k.Line, "burst must be >= 0, got %d", x)
				}
			}
		case "delay":
			if s := p.visit(v); s != nil && s.Kind == yaml.ScalarNode && strings.EqualFold(s.Value, "nodelay") {
				delay = ratelimit.NoDelay
			} else if x, present, ok := p.integer(v, name); ok && present {
				delay = x
				if x < 0 {
					p.errorf(k.Line, `delay must be a number of requests >= 0 or "nodelay", got %d`, x)
				}
			}
		case "lease":
			lim.Lease = LeaseOff
			if p.boolean(v, name) {
				lim.Lease = LeaseOn
			}
		case "buckets":
			if x, present, ok := p.integer(v, name); ok && present {
				buckets = x
				if x < 0 || x > ratelimit.MaxBuckets {
					p.errorf(k.Line, "buckets must be between 1 and %d (0 or absent for %d), got %d",
						ratelimit.MaxBuckets, ratelimit.DefaultBuckets, x)
				}
			}
		}
	})
	lim.RequestsPerUnit = uint32(rpu)
	p.replaces(replaces, lim)
	if lim.Name != "" {
		p.names[lim.Name] = true
	}

	u, valid := parseUnit(unit)
	switch {
	case lim.Unlimited:
		// As envoyproxy/ratelimit: a valid unit is a mistake, an invalid one is ignored.
		if valid {
			p.envoyErrorf(nodes["unit"].Line, "should not specify rate limit unit when unlimited", "unit must not be set when unlimited is true")
		}
		for _, k := range []string{"unit_multiplier", "algorithm", "burst", "delay", "buckets", "lease"} {
			if nodes[k] != nil {
				p.errorf(nodes[k].Line, "%s does not apply to an unlimited rate_limit", k)
			}
		}
		return lim
	case nodes["unit"] == nil:
		p.envoyErrorf(line, "invalid rate limit unit ''", "rate_limit has no unit (want second, minute, hour, day, week, month or year)")
	case !valid:
		p.envoyErrorf(nodes["unit"].Line, fmt.Sprintf("invalid rate limit unit '%s'", unit), "invalid unit %q (want second, minute, hour, day, week, month or year)", unit)
	}
	lim.Unit = u
	if valid && mult >= 1 {
		// The period is checked here rather than by ratelimit.New: unit ×
		// unit_multiplier must not overflow on the way, and the message
		// names the key to change.
		if maxMult := int64(ratelimit.MaxPeriod / u.Duration()); mult > maxMult {
			p.errorf(nodes["unit_multiplier"].Line, "unit_multiplier %d makes a period of %d %ss, longer than ratelimit.MaxPeriod (%v, ten years); with unit %s it must be at most %d",
				mult, mult, strings.ToLower(u.String()), ratelimit.MaxPeriod, strings.ToLower(u.String()), maxMult)
		} else {
			lim.UnitMultiplier = uint32(mult)
		}
	}
	if params, known := algorithms[algo]; known {
		for _, k := range []string{"burst", "delay", "buckets"} {
			if nodes[k] != nil && !contains(params, k) {
				def := ""
				if nodes["algorithm"] == nil {
					def = " (the default)"
				}
				p.errorf(nodes[k].Line, "%s does not apply to algorithm %s%s; %s", k, algo, def, paramTakers[k])
			}
		}
	}
	if len(p.errs) > errs || p.tooMany {
		return lim // the rule would only repeat the problems found
	}
	lim.Algorithm = algo
	r, fields := rule(algo, int64(lim.RequestsPerUnit), lim.Window(), nodes["unit_multiplier"] != nil, burst, hasBurst, delay, int(buckets))
	if err := p.validate(r); err != nil {
		msg := strings.TrimSuffix(err.Error(), " (rules[0])")
		errLine := line
		for _, f := range fields {
			if strings.Contains(msg, "."+f.name+" ") {
				msg += fmt.Sprintf(" (%s is %s)", f.name, f.key)
				if k := strings.Fields(f.key)[0]; nodes[k] != nil {
					errLine = nodes[k].Line
				}
				break
			}
		}
		p.errorf(errLine, "invalid rate_limit for algorithm %s: %s", algo, msg)
		return lim
	}
	if lim.Lease == LeaseOn {
		if why := p.leasable(r); why != "" {
			p.errorf(nodes["lease"].Line, "lease does not apply to algorithm %s: %s", algo, why)
			return lim
		}
	}
	lim.Rule = r
	return lim
}

// leasable returns why r cannot be decided through quota leases, or "".
func (p *parser) leasable(r ratelimit.Rule) string {
	lim, err := ratelimit.New(p.mem, r) // p.mem: made by validate
	if err != nil {
		return err.Error()
	}
	_, err = ratelimit.NewLeased(lim, ratelimit.LeaseFlushEvery(-1))
	if err == nil {
		return ""
	}
	msg := err.Error()
	if _, why, ok := strings.Cut(msg, "rules[0]: "); ok {
		return why
	}
	return msg
}

// replaces reads a replaces list into lim.Replaces.
func (p *parser) replaces(n *yaml.Node, lim *Limit) {
	if n == nil {
		return
	}
	n = p.visit(n)
	if n == nil || isNull(n) {
		return
	}
	if n.Kind != yaml.SequenceNode {
		p.errorf(n.Line, "replaces must be a list of {name: ...}, got %s", kindOf(n))
		return
	}
	for _, item := range n.Content {
		item = p.visit(item)
		if item == nil {
			return
		}
		if item.Kind != yaml.MappingNode {
			p.envoyErrorf(item.Line, envoyNonMap(item), "a replaces entry must be a mapping with a name, got %s", kindOf(item))
			continue
		}
		var name string
		p.fields(item, secReplaces, func(_ string, _, v *yaml.Node) {
			name, _ = p.str(v, "name")
		})
		switch {
		case name == "":
			p.envoyErrorf(item.Line, "should not have an empty replaces entry", "replaces entry has no name")
		case name == lim.Name:
			p.envoyErrorf(item.Line, "replaces should not contain name of same descriptor", "replaces names the rate_limit's own name %q", name)
		default:
			lim.Replaces = append(lim.Replaces, name)
			p.refs = append(p.refs, ref{name, item.Line, p.file})
		}
	}
}

// field says which YAML key a field of a ratelimit rule comes from.
type field struct{ name, key string }

// rule builds the ratelimit.Rule of a limit (see Limit) whose period is w
// and names the YAML key behind each of its fields; hasMult says the period
// comes from unit and unit_multiplier, not unit alone.
func rule(algo string, rpu int64, w time.Duration, hasMult bool, burst int64, hasBurst bool, delay int64, buckets int) (ratelimit.Rule, []field) {
	capacity, capKey := rpu, "requests_per_unit (there is no burst)"
	if hasBurst {
		capacity, capKey = burst, "burst"
	}
	per := "unit"
	if hasMult {
		per = "unit × unit_multiplier"
	}
	switch algo {
	case "sliding_window":
		return ratelimit.SlidingWindow{Limit: rpu, Window: w, Buckets: buckets},
			[]field{{"Limit", "requests_per_unit"}, {"Window", per}, {"Buckets", "buckets"}}
	case "sliding_log":
		return ratelimit.SlidingLog{Limit: rpu, Window: w},
			[]field{{"Limit", "requests_per_unit"}, {"Window", per}}
	case "token_bucket":
		return ratelimit.TokenBucket{Capacity: capacity, Refill: rpu, Every: w},
			[]field{{"Capacity", capKey}, {"Refill", "requests_per_unit"}, {"Every", per}}
	case "leaky_bucket":
		return ratelimit.LeakyBucket{Rate: rpu, Per: w, Burst: burst, Delay: delay},
			[]field{{"Rate", "requests_per_unit"}, {"Per", per}, {"Burst", "burst"}, {"Delay", "delay"}}
	case "gcra":
		return ratelimit.GCRA{Rate: rpu, Per: w, Burst: capacity},
			[]field{{"Rate", "requests_per_unit"}, {"Per", per}, {"Burst", capKey}}
	}
	return ratelimit.FixedWindow{Limit: rpu, Window: w},
		[]field{{"Limit", "requests_per_unit"}, {"Window", per}}
}

// validate checks r as ratelimit.New does, on a throwaway memory backend.
func (p *parser) validate(r ratelimit.Rule) error {
	if p.mem == nil {
		p.mem = backend.NewMemory(backend.WithShards(1))
	}
	_, err := ratelimit.New(p.mem, r)
	return err
}

// envoyproxy/ratelimit's texts for the problems it reports (its
// config_impl.go), kept in Error.Envoy.
const envoyEmptyDomain = "config file cannot have empty domain"

// envoyKeys are the keys envoyproxy/ratelimit accepts anywhere in a file
// (its validKeys); others are its "unknown key".
var envoyKeys = map[string]bool{
	"domain": true, "key": true, "value": true, "descriptors": true, "rate_limit": true, "unit": true,
	"requests_per_unit": true, "unlimited": true, "shadow_mode": true, "quota_mode": true, "name": true,
	"replaces": true, "detailed_metric": true, "value_to_metric": true, "share_threshold": true, "metadata": true,
}

// envoyNonMap is envoyproxy/ratelimit's text for item, a list element that
// is not a mapping.
func envoyNonMap(item *yaml.Node) string {
	v := item.Value
	if item.Kind != yaml.ScalarNode {
		v = kindOf(item)
	}
	return "config error, yaml file contains list of type other than map: " + v
}

// envoyDuplicateKey is envoyproxy/ratelimit's text for a descriptor joined
// (key_value) given twice under parentPath (a Limit.Path): its composite key
// is the domain and the joined keys, separated by '.'.
func envoyDuplicateKey(parentPath, joined string) string {
	return fmt.Sprintf("duplicate descriptor composite key '%s'", envoyCompositeKey(parentPath)+"."+joined)
}

// envoyCompositeKey turns a Path into envoyproxy/ratelimit's form:
// "domain.key_value.key".
func envoyCompositeKey(path string) string {
	parts := strings.Split(path, "|")
	for i, s := range parts {
		if strings.Contains(s, "%") {
			parts[i] = strings.NewReplacer("%7C", "|", "%25", "%").Replace(s)
		}
	}
	return strings.Join(parts, ".")
}

func unknownNameMsg(name, domain string) string {
	return fmt.Sprintf("replaces names %q, but no rate_limit of domain %q has that name", name, domain)
}
