package config

import (
	"slices"
	"strings"
)

// node is one descriptor of the tree.
type node struct {
	key, value string
	line       int
	pattern    bool // value has a '*'
	limit      *Limit
	children   *level // nil when the descriptor has no children
}

// level is the descriptors of one list, indexed for Match.
type level struct {
	exact    map[Entry]*node    // descriptors with a value, patterns included (by their text)
	patterns map[string][]*node // by key, in file order
	defaults map[string]*node   // descriptors without a value, by key
	joined   map[string]*node   // by "key_value" or "key": how envoyproxy/ratelimit detects duplicates
}

func newLevel() *level {
	return &level{joined: map[string]*node{}}
}

func (l *level) empty() bool { return l == nil || len(l.joined) == 0 }

// add puts n in the level; the maps other than joined are made on first use.
func (l *level) add(joined string, n *node) {
	l.joined[joined] = n
	switch {
	case n.value == "":
		if l.defaults == nil {
			l.defaults = map[string]*node{}
		}
		l.defaults[n.key] = n
	default:
		if l.exact == nil {
			l.exact = map[Entry]*node{}
		}
		l.exact[Entry{n.key, n.value}] = n
		if n.pattern {
			if l.patterns == nil {
				l.patterns = map[string][]*node{}
			}
			l.patterns[n.key] = append(l.patterns[n.key], n)
		}
	}
}

// lookup finds the descriptor of this level for e: the same key and value,
// else the first pattern of that key matching the value, else the key's
// default.
func (l *level) lookup(e Entry) *node {
	if e.Value != "" {
		if n := l.exact[e]; n != nil {
			return n
		}
	}
	for _, n := range l.patterns[e.Key] {
		if globMatch(n.value, e.Value) {
			return n
		}
	}
	return l.defaults[e.Key]
}

// Match returns the limit for one request descriptor, or nil when none
// applies. It follows envoyproxy/ratelimit's GetLimit (see the package
// documentation): one descriptor per entry, the limit only at the last entry,
// no backing up.
func (d *Domain) Match(entries []Entry) *Limit {
	if d == nil {
		return nil
	}
	lvl := d.root
	for i, e := range entries {
		if lvl.empty() {
			return nil
		}
		n := lvl.lookup(e)
		if n == nil {
			return nil
		}
		if i == len(entries)-1 {
			return n.limit
		}
		lvl = n.children
	}
	return nil
}

// ApplyReplaces returns limits (one per request descriptor, as Config.Match
// returns them) with every limit whose Name appears in the Replaces of any
// limit in the list set to nil, as envoyproxy/ratelimit does for one request.
// Unlimited limits still replace others but are never replaced themselves
// (envoyproxy/ratelimit answers them as unlimited either way). The input is
// not changed.
func ApplyReplaces(limits []*Limit) []*Limit {
	out := append([]*Limit(nil), limits...)
	var replaced map[string]bool
	for _, l := range limits {
		if l == nil {
			continue
		}
		for _, name := range l.Replaces {
			if replaced == nil {
				replaced = make(map[string]bool)
			}
			replaced[name] = true
		}
	}
	if replaced == nil {
		return out
	}
	for i, l := range out {
		if l != nil && !l.Unlimited && l.Name != "" && replaced[l.Name] {
			out[i] = nil
		}
	}
	return out
}

// globMatch reports whether s matches pattern, where each '*' matches any
// run of bytes (empty too) and every other byte itself. It backtracks only to
// the last '*', so it runs in O(len(pattern)·len(s)) at worst.
func globMatch(pattern, s string) bool {
	p, i := 0, 0
	star, mark := -1, 0
	for i < len(s) {
		switch {
		case p < len(pattern) && pattern[p] == '*':
			star, mark = p, i
			p++
		case p < len(pattern) && pattern[p] == s[i]:
			p++
			i++
		case star >= 0:
			mark++
			p, i = star+1, mark
		default:
			return false
		}
	}
	for p < len(pattern) && pattern[p] == '*' {
		p++
	}
	return p == len(pattern)
}

// MatchSet returns the limit for a descriptor given as an unordered set of
// key/value pairs, such as an Envoy RLQS BucketId (whose keys have no order),
// and its entries in the order Match took them (for Limit.StateKey); nil when
// no limit applies. It orders the set by the descriptor tree and leaves the
// matching to Match: at each level, the first entry, by key, for which the
// level has a descriptor (an exact value, a pattern or a default) comes next.
// Every entry must be used, as Match demands of a request's entries: a set
// the tree cannot take whole matches nothing.
func (d *Domain) MatchSet(set []Entry) (*Limit, []Entry) {
	if d == nil || len(set) == 0 {
		return nil, nil
	}
	left := slices.Clone(set)
	slices.SortFunc(left, func(a, b Entry) int {
		if c := strings.Compare(a.Key, b.Key); c != 0 {
			return c
		}
		return strings.Compare(a.Value, b.Value)
	})
	ordered := make([]Entry, 0, len(left))
	lvl := d.root
	for len(left) > 0 {
		if lvl.empty() {
			return nil, nil
		}
		i := slices.IndexFunc(left, func(e Entry) bool { return lvl.lookup(e) != nil })
		if i < 0 {
			return nil, nil
		}
		ordered = append(ordered, left[i])
		lvl = lvl.lookup(left[i]).children
		left = slices.Delete(left, i, i+1)
	}
	l := d.Match(ordered)
	if l == nil {
		return nil, nil
	}
	return l, ordered
}
