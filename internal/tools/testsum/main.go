// Command testsum summarises the output of `go test -json` for
// scripts/test.sh: one line per package as it finishes (result, time, counts
// of tests), the output of each failed test right under its package's line,
// a line every minute naming the packages still running, and at the end one
// closing line, "tests: N passed, N failed, N skipped".
//
// It reads the JSON stream (test2json's events) on standard input; lines
// that are not events (a build error printed by go itself) are printed as
// they come. With -raw FILE it also writes the whole stream there, for the
// output of tests that passed. It exits 1 when a test, a package or a build
// failed, or when a package started and never finished (a killed run), and 0
// otherwise; so a pipeline's status needs no PIPESTATUS.
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"time"
)

// event is one line of `go test -json` (cmd/test2json's TestEvent, and the
// build events go test adds to it).
type event struct {
	Time        time.Time
	Action      string
	Package     string
	ImportPath  string
	Test        string
	Elapsed     float64
	Output      string
	FailedBuild string
}

// pkg is what testsum knows of one package of the run.
type pkg struct {
	start                  time.Time
	passed, failed, skipft int
	out                    strings.Builder             // package-level output: panics, timeouts, "FAIL"
	tests                  map[string]*strings.Builder // output of tests still running or failed
	failedTests            []string
}

type summary struct {
	mu      sync.Mutex
	w       io.Writer
	prefix  string // module path, cut from package names
	pkgs    map[string]*pkg
	builds  map[string]*strings.Builder // build output by import path
	done    int
	failed  bool
	passed  int
	fails   int
	skipped int
}

func main() {
	raw := flag.String("raw", "", "also write the whole JSON stream to this `file`")
	prefix := flag.String("trim", "", "cut this `prefix` (the module path) from package names")
	every := flag.Duration("progress", time.Minute, "name the packages still running this often (0: never)")
	closing := flag.String("closing", "", "also write the closing line to this `file`")
	flag.Parse()

	var in io.Reader = os.Stdin
	if *raw != "" {
		f, err := os.Create(*raw)
		if err != nil {
			fmt.Fprintln(os.Stderr, "testsum:", err)
			os.Exit(2)
		}
		defer f.Close()
		in = io.TeeReader(os.Stdin, f)
	}
	s := newSummary(os.Stdout, *prefix)
	if *every > 0 {
		t := time.NewTicker(*every)
		defer t.Stop()
		go func() {
			for range t.C {
				s.progress()
			}
		}()
	}
	failed, last := s.read(in)
	if *closing != "" {
		if err := os.WriteFile(*closing, []byte(last+"\n"), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "testsum:", err)
			failed = true
		}
	}
	if failed {
		os.Exit(1)
	}
}

// read summarises the stream in to its end; it returns whether the run
// failed, and the closing line.
func (s *summary) read(in io.Reader) (bool, string) {
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 64<<20)
	for sc.Scan() {
		s.line(sc.Bytes())
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintln(s.w, "testsum: reading the stream:", err)
		s.failed = true
	}
	return s.finish()
}

func newSummary(w io.Writer, prefix string) *summary {
	return &summary{w: w, prefix: prefix, pkgs: map[string]*pkg{}, builds: map[string]*strings.Builder{}}
}

func (s *summary) name(p string) string {
	if s.prefix != "" {
		if p == s.prefix {
			return "."
		}
		if r, ok := strings.CutPrefix(p, s.prefix+"/"); ok {
			return r
		}
	}
	return p
}

// line handles one line of the stream.
func (s *summary) line(b []byte) {
	var e event
	if len(b) == 0 || b[0] != '{' || json.Unmarshal(b, &e) != nil || e.Action == "" {
		s.mu.Lock()
		fmt.Fprintf(s.w, "%s\n", b)
		s.mu.Unlock()
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	switch e.Action {
	case "build-output":
		bo := s.builds[e.ImportPath]
		if bo == nil {
			bo = new(strings.Builder)
			s.builds[e.ImportPath] = bo
		}
		bo.WriteString(e.Output)
		return
	case "build-fail":
		s.failed = true
		return
	}
	if e.Package == "" {
		return
	}
	p := s.pkgs[e.Package]
	if p == nil {
		p = &pkg{start: e.Time, tests: map[string]*strings.Builder{}}
		if p.start.IsZero() {
			p.start = time.Now()
		}
		s.pkgs[e.Package] = p
	}
	if e.Test == "" {
		switch e.Action {
		case "output":
			p.out.WriteString(e.Output)
		case "pass", "fail", "skip":
			s.endPackage(e, p)
		}
		return
	}
	buf := p.tests[e.Test]
	if buf == nil {
		buf = new(strings.Builder)
		p.tests[e.Test] = buf
	}
	switch e.Action {
	case "output":
		buf.WriteString(e.Output)
	case "pass":
		p.passed++
		delete(p.tests, e.Test)
	case "skip":
		p.skipft++
		delete(p.tests, e.Test)
	case "fail":
		p.failed++
		p.failedTests = append(p.failedTests, e.Test)
	}
}

// endPackage prints a package's line, and what failed in it.
func (s *summary) endPackage(e event, p *pkg) {
	s.done++
	s.passed += p.passed
	s.fails += p.failed
	s.skipped += p.skipft
	status := "ok  "
	switch {
	case e.Action == "fail":
		status = "FAIL"
		s.failed = true
	case e.Action == "skip" || p.passed+p.failed+p.skipft == 0:
		status = "--  "
	}
	counts := fmt.Sprintf("%d passed", p.passed)
	if p.failed > 0 {
		counts += fmt.Sprintf(", %d failed", p.failed)
	}
	if p.skipft > 0 {
		counts += fmt.Sprintf(", %d skipped", p.skipft)
	}
	if e.Action == "skip" {
		counts = "no tests"
	}
	fmt.Fprintf(s.w, "%s %-34s %7.1fs  %s\n", status, s.name(e.Package), e.Elapsed, counts)
	if e.Action != "fail" {
		delete(s.pkgs, e.Package)
		return
	}
	if e.FailedBuild != "" {
		if bo := s.builds[e.FailedBuild]; bo != nil {
			indent(s.w, bo.String())
		}
	}
	// The failed tests' own output, innermost subtests included; a parent
	// whose subtest failed repeats nothing of its own but its "--- FAIL".
	for _, t := range p.failedTests {
		indent(s.w, p.tests[t].String())
	}
	// Tests that never ended (a panic or the -timeout killed the binary),
	// and the package's own output, which says why.
	var running []string
	for t := range p.tests {
		if !slices.Contains(p.failedTests, t) {
			running = append(running, t)
		}
	}
	slices.Sort(running)
	for _, t := range running {
		fmt.Fprintf(s.w, "    (still running when the package ended: %s)\n", t)
		indent(s.w, tail(p.tests[t].String(), 40))
	}
	if p.failed == 0 || len(running) > 0 {
		indent(s.w, tail(p.out.String(), 80))
	}
	delete(s.pkgs, e.Package)
}

// progress names the packages that have been running for a while.
func (s *summary) progress() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.pkgs) == 0 {
		return
	}
	var names []string
	for n, p := range s.pkgs {
		names = append(names, fmt.Sprintf("%s (%s)", s.name(n), time.Since(p.start).Round(time.Second)))
	}
	slices.Sort(names)
	fmt.Fprintf(s.w, "...  still running: %s\n", strings.Join(names, ", "))
}

// finish prints what never finished and the closing line; it returns
// whether the run failed, and the closing line.
func (s *summary) finish() (bool, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for n, p := range s.pkgs {
		fmt.Fprintf(s.w, "FAIL %-34s  never finished (the run was cut short)\n", s.name(n))
		indent(s.w, tail(p.out.String(), 40))
		s.failed = true
	}
	if s.done == 0 && !s.failed {
		fmt.Fprintln(s.w, "testsum: no package was tested")
		s.failed = true
	}
	last := fmt.Sprintf("tests: %d passed, %d failed, %d skipped", s.passed, s.fails, s.skipped)
	fmt.Fprintln(s.w, last)
	return s.failed, last
}

func indent(w io.Writer, text string) {
	for l := range strings.Lines(text) {
		fmt.Fprintf(w, "    %s", l)
		if !strings.HasSuffix(l, "\n") {
			fmt.Fprintln(w)
		}
	}
}

// tail returns the last n lines of text.
func tail(text string, n int) string {
	lines := strings.SplitAfter(text, "\n")
	if len(lines) > n {
		lines = append([]string{"...\n"}, lines[len(lines)-n:]...)
	}
	return strings.Join(lines, "")
}
