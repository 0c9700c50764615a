package config

import "strings"

// statLevel is what envoyproxy/ratelimit's stat names need of one descriptor
// on a limit's path.
type statLevel struct {
	key      string
	value    string // the descriptor's value; "" for a default
	share    bool   // share_threshold (on a value with '*')
	toMetric bool   // value_to_metric
}

// EnvoyStatKey returns envoyproxy/ratelimit's stats key (commit f2fb157,
// its config.GetLimit) for a request descriptor of domain whose entries
// Domain.Match matched to l: the part of
// ratelimit.service.rate_limit.KEY.total_hits between the scope and the stat,
// before envoy's sanitizing of ':', '|' and IPv4 addresses.
//
// It is the domain and one element per level, joined with '.': "key_value"
// for a descriptor with a value (a pattern's text, '*' included), "key" for
// a default; value_to_metric puts the request's value in place of a
// default's nothing or a pattern's text (not of a share_threshold pattern's).
// With detailed_metric it is the domain and every entry's "key_value" (the
// request's values), except that an entry matched by a share_threshold
// pattern keeps the pattern's text, and then entries with an empty value are
// "key".
//
// With entries nil, it is the key of the configuration's own keys and values:
// the key of every request when EnvoyStatKeyVaries is false.
func (l *Limit) EnvoyStatKey(domain string, entries []Entry) string {
	if entries == nil {
		entries = make([]Entry, len(l.stat))
		for i, lv := range l.stat {
			entries[i] = Entry{Key: lv.key, Value: lv.value}
		}
	}
	var b strings.Builder
	b.WriteString(domain)
	if l.DetailedMetric {
		shared := false
		for i, e := range entries {
			if i < len(l.stat) && l.stat[i].share && l.stat[i].value != e.Value {
				shared = true
			}
		}
		for i, e := range entries {
			b.WriteByte('.')
			b.WriteString(e.Key)
			switch {
			case shared && i < len(l.stat) && l.stat[i].share && l.stat[i].value != e.Value:
				b.WriteByte('_')
				b.WriteString(l.stat[i].value)
			case shared && e.Value == "":
			default:
				b.WriteByte('_')
				b.WriteString(e.Value)
			}
		}
		return b.String()
	}
	for i, e := range entries {
		b.WriteByte('.')
		b.WriteString(e.Key)
		if i >= len(l.stat) {
			continue
		}
		lv := l.stat[i]
		v := lv.value
		switch {
		case lv.value == "": // a default
			if lv.toMetric {
				v = e.Value
			}
		case lv.value == e.Value: // the descriptor's own value
		case lv.share: // a share_threshold pattern keeps its text
		case lv.toMetric: // a pattern
			v = e.Value
		}
		if v != "" {
			b.WriteByte('_')
			b.WriteString(v)
		}
	}
	return b.String()
}

// EnvoyStatKeyVaries reports whether EnvoyStatKey may differ between two
// requests matched to l (detailed_metric, or value_to_metric on a default or
// a pattern); when false, it is the same for every request.
func (l *Limit) EnvoyStatKeyVaries() bool {
	if l.DetailedMetric {
		return true
	}
	for _, lv := range l.stat {
		if lv.toMetric && (lv.value == "" || strings.Contains(lv.value, "*") && !lv.share) {
			return true
		}
	}
	return false
}
