package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/floodgate-dev/floodgate/ratelimit"
)

// FuzzParse checks that Parse never panics, that every error it returns is an
// ErrorList naming the file, and that what it accepts is usable: a named
// domain whose every limit has a rule (or is unlimited), and that matches
// without panicking.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob("testdata/*.yaml")
	for _, file := range files {
		if data, err := os.ReadFile(file); err == nil {
			f.Add(data)
		}
	}
	for _, s := range []string{
		"", "domain: d", "domain: d\ndescriptors:\n  - key: a\n    value: b*c\n    rate_limit: {unit: second, requests_per_unit: 1}\n",
		"domain: d\ndescriptors: &x [{key: a, descriptors: *x}]\n",
		"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, requests_per_unit: 7, algorithm: leaky_bucket, burst: 3, delay: nodelay}\n",
		"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: week, requests_per_unit: 9, algorithm: sliding_window, buckets: 7}\n",
		"domain: d\ndescriptors:\n  - {key: a, rate_limit: {name: n, unlimited: yes, replaces: [{name: m}]}}\n  - {key: b, rate_limit: {name: m, unit: day}}\n",
		"domain: d\ndescriptors:\n  - key: a\n    metadata: {x: &y [1, *y]}\n",
		"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: second, unit_multiplier: 10, requests_per_unit: 1000, algorithm: gcra}\n",
		"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: year, unit_multiplier: 11, requests_per_unit: 1}\n",
		"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: month, unit_multiplier: 0x7fffffffffffffff, requests_per_unit: 1}\n",
		"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unit: minute, unit_multiplier: 0, algorithm: sliding_window, buckets: 7}\n",
		"domain: d\ndescriptors:\n  - key: a\n    rate_limit: {unlimited: true, unit_multiplier: 3}\n",
		"---\ndomain: d\n---\n", "domain: d\n\t", "{domain: d, descriptors: [{key: a, value: '*'}]}",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		d, err := Parse("fuzz.yaml", data)
		if err != nil {
			var list ErrorList
			if d != nil || !errors.As(err, &list) || len(list) == 0 {
				t.Fatalf("Parse = %v, %T %v", d, err, err)
			}
			for _, e := range list {
				if e.File != "fuzz.yaml" || e.Msg == "" || e.Line < 0 {
					t.Fatalf("error %+v", e)
				}
			}
			for _, line := range strings.Split(err.Error(), "\n") {
				if !strings.HasPrefix(line, "fuzz.yaml") {
					t.Fatalf("error line %q does not name the file", line)
				}
			}
			return
		}
		if d == nil || d.Name == "" || d.File != "fuzz.yaml" {
			t.Fatalf("Parse = %+v, nil", d)
		}
		for _, l := range d.Limits() {
			if l.Unlimited != (l.Rule == nil) || l.Unlimited != (l.Algorithm == "") || !strings.HasPrefix(l.Path, EscapePath(d.Name)+"|") {
				t.Fatalf("limit %+v", l)
			}
			// A limited limit has a period of whole units, within MaxPeriod.
			if !l.Unlimited && (l.UnitMultiplier < 1 || l.Window() <= 0 || l.Window() > ratelimit.MaxPeriod ||
				l.Window() != l.Unit.Duration()*time.Duration(l.UnitMultiplier)) {
				t.Fatalf("limit %+v: period %v", l, l.Window())
			}
		}
		probes := [][]Entry{nil, e("a", ""), e("a", "b"), e("a", "b", "c", "d"), e("key", "value", "key", "value")}
		for _, l := range d.Limits() {
			probes = append(probes, e(l.Name, l.Name))
		}
		var matched []*Limit
		for _, entries := range probes {
			if l := d.Match(entries); l != nil {
				matched = append(matched, l)
				_ = l.StateKey(entries)
			}
		}
		ApplyReplaces(matched)
	})
}
