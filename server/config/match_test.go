package config

import (
	"os"
	"testing"
)

func mustParse(t *testing.T, file string) *Domain {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	d, err := Parse(file, data)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// e builds a request descriptor from key, value pairs.
func e(kv ...string) []Entry {
	var entries []Entry
	for i := 0; i+1 < len(kv); i += 2 {
		entries = append(entries, Entry{kv[i], kv[i+1]})
	}
	return entries
}

// TestMatch runs request descriptors against the testdata configurations;
// want is the Path of the limit that applies, "" for none.
func TestMatch(t *testing.T) {
	for _, tc := range []struct {
		file    string
		entries []Entry
		want    string
	}{
		// Nested descriptors and defaults (envoyproxy/ratelimit README examples 2-4).
		{"messaging", e("message_type", "marketing", "to_number", "2061111111"), "messaging|message_type_marketing|to_number"},
		{"messaging", e("to_number", "2061111111"), "messaging|to_number"},
		{"messaging", e("message_type", "marketing"), ""},                              // the first level has no limit
		{"messaging", e("message_type", "transactional", "to_number", "1"), ""},        // no such value and no default
		{"messaging", e("remote_address", "198.51.100.1"), "messaging|remote_address"}, // the default
		{"messaging", e("remote_address", "198.51.100.7"), "messaging|remote_address_198.51.100.7"},
		{"messaging", e("remote_address", ""), "messaging|remote_address"}, // an empty value finds the default
		{"messaging", e("remote_address", "198.51.100.7", "x", "y"), ""},   // deeper than the configuration
		{"messaging", e("tenant", "acme", "user", "bob"), "messaging|tenant_acme|user"},
		{"messaging", e("tenant", "acme", "user", "batch-job"), "messaging|tenant_acme|user_batch-job"},
		{"messaging", e("tenant", "other", "user", "bob"), ""},
		{"messaging", e("api", "v1"), "messaging|api"}, // a limit at the first level, with children
		{"messaging", e("api", "v1", "method", "POST"), "messaging|api|method_POST"},
		{"messaging", e("api", "v1", "method", "GET"), ""}, // no backing up to the first level
		{"messaging", e("internal", "x"), ""},              // a descriptor without limit
		{"messaging", e("TO_NUMBER", "1"), ""},             // keys are case-sensitive
		{"messaging", nil, ""},
		{"messaging", e("to_number"), ""},

		// Wildcards: exact value first, then patterns in file order, then the default.
		{"wildcard", e("path", "/files/a.txt"), "wildcards|path_/files/*"},
		{"wildcard", e("path", "/files/"), "wildcards|path_/files/*"}, // '*' matches nothing too
		{"wildcard", e("path", "/files/private"), "wildcards|path_/files/private"},
		{"wildcard", e("path", "/files/private/x"), "wildcards|path_/files/*"},
		{"wildcard", e("path", "/files/*"), "wildcards|path_/files/*"}, // the pattern's own text, exactly
		{"wildcard", e("path", "/api/v1/users"), "wildcards|path_/api/*/users"},
		{"wildcard", e("path", "/api/v1/users/7"), "wildcards|path_/api/*"},
		{"wildcard", e("path", "/api//users"), "wildcards|path_/api/*/users"},
		{"wildcard", e("path", "/api/a/users/b/users"), "wildcards|path_/api/*/users"},
		{"wildcard", e("path", "/other"), "wildcards|path"},
		{"wildcard", e("path", "/file"), "wildcards|path"},
		{"wildcard", e("host", "www.example.com"), "wildcards|host_*.example.com"},
		{"wildcard", e("host", "example.com"), ""},
		{"wildcard", e("host", "www.example.com.evil"), ""},
		{"wildcard", e("rpc", "svc.users.get.v2"), "wildcards|rpc_svc*get*v2"},
		{"wildcard", e("rpc", "svcgetv2"), "wildcards|rpc_svc*get*v2"},
		{"wildcard", e("rpc", "svc.put.v2"), ""},
		{"wildcard", e("rpc", "svc.get.v2.get.v3"), ""},
		{"wildcard", e("any", "whatever"), "wildcards|any_*"},
		{"wildcard", e("any", ""), "wildcards|any_*"},
		{"wildcard", e("tenant", "t-1", "user", "u"), "wildcards|tenant_t-*|user"},
		{"wildcard", e("region", "eu-west", "bucket", "logs-2026"), "wildcards|region_eu-*|bucket_logs-*"},
		{"wildcard", e("region", "us-east", "bucket", "logs-2026"), ""},
		{"wildcard", e("region", "eu-west", "bucket", "data"), ""},

		// Shadow mode and unlimited come back as limits.
		{"features", e("ldap", "x"), "features|ldap"},
		{"features", e("service", "s", "user", "user-a"), "features|service|user_user-a"},
		{"features", e("status", "429"), "features|status_429"},
	} {
		d := mustParse(t, "testdata/"+tc.file+".yaml")
		got := ""
		if l := d.Match(tc.entries); l != nil {
			got = l.Path
		}
		if got != tc.want {
			t.Errorf("%s: Match(%v) = %q, want %q", tc.file, tc.entries, got, tc.want)
		}
	}
	var nilDomain *Domain
	if l := nilDomain.Match(e("a", "b")); l != nil {
		t.Errorf("nil Domain matched %v", l)
	}
}

func TestStateKey(t *testing.T) {
	for _, tc := range []struct {
		file    string
		entries []Entry
		want    string
	}{
		{"messaging", e("to_number", "555"), "messaging|to_number|555"},
		{"messaging", e("remote_address", "198.51.100.7"), "messaging|remote_address_198.51.100.7"},
		{"messaging", e("message_type", "marketing", "to_number", "555"), "messaging|message_type_marketing|to_number|555"},
		{"messaging", e("tenant", "acme", "user", "a|b%c"), "messaging|tenant_acme|user|a%7Cb%25c"},
		{"wildcard", e("path", "/files/a"), "wildcards|path_/files/*|/files/a"},
		// share_threshold: all t-* tenants share one counter per user.
		{"wildcard", e("tenant", "t-1", "user", "u"), "wildcards|tenant_t-*|user|u"},
		{"wildcard", e("tenant", "t-2", "user", "u"), "wildcards|tenant_t-*|user|u"},
		{"wildcard", e("region", "eu-1", "bucket", "logs-a"), "wildcards|region_eu-*|bucket_logs-*|eu-1|logs-a"},
	} {
		d := mustParse(t, "testdata/"+tc.file+".yaml")
		l := d.Match(tc.entries)
		if l == nil {
			t.Errorf("%s: Match(%v) = nil", tc.file, tc.entries)
			continue
		}
		if got := l.StateKey(tc.entries); got != tc.want {
			t.Errorf("%s: StateKey(%v) = %q, want %q", tc.file, tc.entries, got, tc.want)
		}
	}
}

// TestApplyReplaces follows envoyproxy/ratelimit's README example 7.
func TestApplyReplaces(t *testing.T) {
	d := mustParse(t, "testdata/replaces.yaml")
	cfg := &Config{Domains: map[string]*Domain{d.Name: d}}
	read := e("category", "read", "user", "alice")
	report := e("endpoint", "/reports", "user", "alice")
	global := e("global", "x")

	limits := cfg.Match("replaces", read, report)
	got := ApplyReplaces(limits)
	if got[0] != nil || got[1] == nil || got[1].RequestsPerUnit != 50 {
		t.Errorf("read + report: %v, want [nil, 50/s]", paths(got))
	}
	if limits[0] == nil {
		t.Error("ApplyReplaces changed its input")
	}
	if got := ApplyReplaces(cfg.Match("replaces", read)); got[0] == nil || got[0].RequestsPerUnit != 5 {
		t.Errorf("read alone: %v, want the 5/s limit", paths(got))
	}
	// An unlimited limit replaces others too, and is itself kept.
	if got := ApplyReplaces(cfg.Match("replaces", read, global)); got[0] != nil || got[1] == nil || !got[1].Unlimited {
		t.Errorf("read + global: %v, want [nil, unlimited]", paths(got))
	}
	if got := ApplyReplaces(nil); len(got) != 0 {
		t.Errorf("ApplyReplaces(nil) = %v", got)
	}
}

func paths(ls []*Limit) []string {
	out := make([]string, len(ls))
	for i, l := range ls {
		if l != nil {
			out[i] = l.Path
		}
	}
	return out
}

func TestGlobMatch(t *testing.T) {
	for _, tc := range []struct {
		pattern, s string
		want       bool
	}{
		{"*", "", true}, {"*", "abc", true}, {"a*", "a", true}, {"a*", "ba", false},
		{"*a", "bca", true}, {"*a", "ab", false}, {"a*b", "ab", true}, {"a*b", "axxb", true},
		{"a*b", "axxbc", false}, {"a*b*c", "abbbc", true}, {"a*b*c", "acb", false},
		{"**", "x", true}, {"a**b", "ab", true}, {"abc", "abc", true}, {"abc", "abd", false},
		{"*ab*ab*", "xabyab", true}, {"*ab*ab*", "xab", false}, {"é*", "été", true},
	} {
		if got := globMatch(tc.pattern, tc.s); got != tc.want {
			t.Errorf("globMatch(%q, %q) = %v, want %v", tc.pattern, tc.s, got, tc.want)
		}
	}
}

func TestUnits(t *testing.T) {
	// envoyproxy/ratelimit UnitToDivider, in seconds.
	for u, secs := range map[Unit]int64{UnitSecond: 1, UnitMinute: 60, UnitHour: 3600, UnitDay: 86400,
		UnitWeek: 604800, UnitMonth: 2592000, UnitYear: 31536000, UnitUnknown: 0} {
		if got := int64(u.Duration().Seconds()); got != secs {
			t.Errorf("%v.Duration() = %ds, want %ds", u, got, secs)
		}
	}
	for s, want := range map[string]Unit{"second": UnitSecond, "MINUTE": UnitMinute, "Hour": UnitHour, "dAy": UnitDay,
		"week": UnitWeek, "month": UnitMonth, "year": UnitYear, "unknown": UnitUnknown, "": UnitUnknown, "seconds": UnitUnknown} {
		if got, _ := parseUnit(s); got != want {
			t.Errorf("parseUnit(%q) = %v, want %v", s, got, want)
		}
	}
	if UnitWeek.String() != "WEEK" || Unit(42).String() != "Unit(42)" {
		t.Errorf("String: %v %v", UnitWeek, Unit(42))
	}
}

// TestMatchSet: an unordered set finds the limit Match finds for the same
// entries in the tree's order, whatever order the set comes in.
func TestMatchSet(t *testing.T) {
	d := mustParse(t, "testdata/messaging.yaml")
	for _, tc := range []struct {
		set  []Entry
		want string // Path, "" for none
	}{
		{e("to_number", "2061111111", "message_type", "marketing"), "messaging|message_type_marketing|to_number"},
		{e("message_type", "marketing", "to_number", "2061111111"), "messaging|message_type_marketing|to_number"},
		{e("user", "bob", "tenant", "acme"), "messaging|tenant_acme|user"},
		{e("user", "batch-job", "tenant", "acme"), "messaging|tenant_acme|user_batch-job"},
		{e("method", "POST", "api", "v1"), "messaging|api|method_POST"},
		{e("api", "v1"), "messaging|api"},
		{e("remote_address", "198.51.100.7"), "messaging|remote_address_198.51.100.7"},
		{e("to_number", "1"), "messaging|to_number"},
		{e("user", "bob", "tenant", "other"), ""}, // no such tenant
		{e("user", "bob"), ""},                // not at the first level
		{e("api", "v1", "method", "GET"), ""}, // no backing up
		{e("to_number", "1", "x", "y"), ""},   // an entry left over
		{e("message_type", "marketing"), ""},  // the first level has no limit
		{nil, ""},
	} {
		l, ordered := d.MatchSet(tc.set)
		got := ""
		if l != nil {
			got = l.Path
			if m := d.Match(ordered); m != l {
				t.Errorf("MatchSet(%v): Match(%v) = %v, not the same limit", tc.set, ordered, m)
			}
		}
		if got != tc.want {
			t.Errorf("MatchSet(%v) = %q, want %q", tc.set, got, tc.want)
		}
	}
}
