package config

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files of testdata")

// dump writes what a domain holds, one limit a line, in file order.
func dump(d *Domain) string {
	var b strings.Builder
	fmt.Fprintf(&b, "domain %q (line %d): %d descriptors, %d limits\n", d.Name, d.Line, d.Descriptors(), len(d.Limits()))
	for _, l := range d.Limits() {
		fmt.Fprintf(&b, "%s line %d:", l.Path, l.Line)
		if l.Name != "" {
			fmt.Fprintf(&b, " name=%s", l.Name)
		}
		if l.Unlimited {
			b.WriteString(" unlimited")
		} else {
			per := l.Unit.String()
			if l.UnitMultiplier != 1 {
				per = fmt.Sprintf("%d×%s", l.UnitMultiplier, l.Unit)
			}
			fmt.Fprintf(&b, " %d/%s (%v) %s %T%+v", l.RequestsPerUnit, per, l.Window(), l.Algorithm, l.Rule, l.Rule)
		}
		for _, f := range []struct {
			on   bool
			name string
		}{{l.ShadowMode, "shadow_mode"}, {l.DetailedMetric, "detailed_metric"}, {l.QuotaMode, "quota_mode"}} {
			if f.on {
				b.WriteString(" " + f.name)
			}
		}
		if len(l.Replaces) > 0 {
			fmt.Fprintf(&b, " replaces=%v", l.Replaces)
		}
		if l.Metadata != nil {
			fmt.Fprintf(&b, " metadata=%v", l.Metadata)
		}
		b.WriteByte('\n')
	}
	return b.String()
}

// TestGolden loads every testdata/*.yaml and compares what it holds with
// testdata/*.golden (go test -run TestGolden -update rewrites them).
func TestGolden(t *testing.T) {
	files, err := filepath.Glob("testdata/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no testdata: %v", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			d, err := Parse(f, data)
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			got := dump(d)
			golden := strings.TrimSuffix(f, ".yaml") + ".golden"
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test -run TestGolden -update to create it)", err)
			}
			if got != string(want) {
				t.Errorf("%s differs from %s:\n--- got\n%s--- want\n%s", f, golden, got, want)
			}
		})
	}
}

func TestLoadDirectory(t *testing.T) {
	cfg, err := Load("testdata")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for name, d := range cfg.Domains {
		names = append(names, name)
		if d.Name != name || !strings.HasPrefix(d.File, "testdata"+string(filepath.Separator)) {
			t.Errorf("domain %q: Name %q File %q", name, d.Name, d.File)
		}
	}
	if len(names) != 6 {
		t.Errorf("domains %v, want the 6 of testdata", names)
	}
	if got := cfg.Match("messaging", []Entry{{"to_number", "555"}}, []Entry{{"nope", "x"}}); got[0] == nil || got[0].RequestsPerUnit != 100 || got[1] != nil {
		t.Errorf("Match = %v", got)
	}
	if got := cfg.Match("no-such-domain", []Entry{{"to_number", "555"}}); len(got) != 1 || got[0] != nil {
		t.Errorf("Match of an unknown domain = %v, want [nil]", got)
	}
}

func TestLoadFileAndDirectoryRules(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	a := write("a.yaml", "domain: one\n")
	write("b.yml", "domain: two\n")
	write(".hidden.yaml", "this is not: [valid")
	write("notes.txt", "ignored")
	if err := os.Mkdir(filepath.Join(dir, "sub.yaml"), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Domains) != 2 || cfg.Domains["one"] == nil || cfg.Domains["two"] == nil {
		t.Fatalf("domains %v", cfg.Domains)
	}
	if cfg, err := Load(a); err != nil || len(cfg.Domains) != 1 {
		t.Fatalf("Load(file) = %v, %v", cfg, err)
	}

	c := write("c.yaml", "# the same domain again\ndomain: one\n")
	_, err = Load(dir)
	want := c + `:2: duplicate domain "one" (also in ` + a + ":1)"
	if err == nil || err.Error() != want {
		t.Fatalf("Load with a duplicate domain: %v, want %s", err, want)
	}
	var ce *Error
	if !errors.As(err, &ce) || ce.File != c || ce.Line != 2 {
		t.Errorf("errors.As: %+v", ce)
	}
	if err := os.Remove(c); err != nil {
		t.Fatal(err)
	}

	// Every file's problems are reported, in file order.
	write("d.yaml", "domain: d\ndescriptors:\n  - value: x\n")
	write("e.yaml", "domain: [e]\n")
	_, err = Load(dir)
	want = filepath.Join(dir, "d.yaml") + ":3: descriptor has no key\n" +
		filepath.Join(dir, "e.yaml") + ":1: domain must be a string, got a list"
	if err == nil || err.Error() != want {
		t.Fatalf("Load: %v\nwant %s", err, want)
	}

	if _, err := Load(filepath.Join(dir, "missing.yaml")); err == nil || !strings.Contains(err.Error(), "missing.yaml: stat: no such file or directory") {
		t.Errorf("Load of a missing file: %v", err)
	}
	empty := t.TempDir()
	if _, err := Load(empty); err == nil || err.Error() != empty+": no *.yaml or *.yml files in the directory" {
		t.Errorf("Load of an empty directory: %v", err)
	}
	// envoyproxy/ratelimit reads an empty runtime directory as no domains.
	if cfg, err := LoadWith(empty, LoadOptions{Envoy: true, EmptyDirectory: true}); err != nil || len(cfg.Domains) != 0 {
		t.Errorf("LoadWith(EmptyDirectory) of an empty directory: %v, %v; want a configuration without domains", cfg, err)
	}
}
