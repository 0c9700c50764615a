package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"image/png"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// simTexts returns the text of every <text> element of the SVG file p, which
// must be well-formed XML.
func simTexts(t *testing.T, p string) []string {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(bytes.NewReader(data))
	var texts []string
	in := false
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return texts
		}
		if err != nil {
			t.Fatalf("%s is not XML: %v", p, err)
		}
		switch tok := tok.(type) {
		case xml.StartElement:
			in = tok.Name.Local == "text"
		case xml.CharData:
			if in {
				texts = append(texts, string(tok))
			}
		case xml.EndElement:
			in = false
		}
	}
}

// simPanels returns the panel titles of an SVG chart: the texts that sum up a rule.
func simPanels(t *testing.T, p string) []string {
	var panels []string
	for _, s := range simTexts(t, p) {
		if strings.Contains(s, " — admitted ") {
			panels = append(panels, s)
		}
	}
	return panels
}

// TestSimulateAll runs the default comparison end to end: six panels in the
// SVG, the fixed window's double spend in the table, every bound held.
func TestSimulateAll(t *testing.T) {
	out := filepath.Join(t.TempDir(), "boundary.svg")
	code, stdout, stderr := floodgate(t, "simulate", "--all", "--limit", "10", "--per", "1s", "--burst", "10", "--out", out)
	if code != 0 || stderr != "" {
		t.Fatalf("exit %d, stderr %q\n%s", code, stderr, stdout)
	}
	panels := simPanels(t, out)
	if len(panels) != 6 {
		t.Fatalf("%d panels: %q", len(panels), panels)
	}
	for i, want := range []string{"FixedWindow{Limit: 10, Window: 1s} — admitted 20 of 20, most 20 per 1s, bound held",
		"SlidingWindow{", "SlidingLog{Limit: 10, Window: 1s} — admitted 10 of 20", "TokenBucket{", "LeakyBucket{", "GCRA{"} {
		if !strings.HasPrefix(panels[i], want) {
			t.Errorf("panel %d is %q, want %q...", i, panels[i], want)
		}
	}
	// Compare words, not the table's column widths.
	words := strings.Join(strings.Fields(stdout), " ")
	for _, want := range []string{
		"boundary attack: 10 requests in the 100ms before a 1s window edge and 10 in the 100ms after 20 requests, 1 key,",
		" fixed_window FixedWindow{Limit: 10, Window: 1s} 20 20 0 20/1s 0s 0s held ",
		" sliding_log SlidingLog{Limit: 10, Window: 1s} 20 10 10 10/1s 0s 0s held ",
		" leaky_bucket LeakyBucket{Rate: 10, Per: 1s, Burst: 10, Delay: 0} 20 12 8 12/1s 495ms 990ms held ",
		" fixed_window at most 10 per aligned 1s window held: 10 (of 10 allowed) in [900ms, 990ms] " +
			"at most 20 in any closed 1s span held: 20 (of 20 allowed) in [900ms, 1.09s] ",
		" wrote " + out + " (6 panels)",
	} {
		if !strings.Contains(words, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
}

// TestSimulateRulesFile simulates the limits of a server configuration, each
// named by its name or descriptor path, with traffic from a CSV file.
func TestSimulateRulesFile(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, dir, "api.yaml", `domain: api
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 2, algorithm: sliding_log}
  - key: user
    value: bot
    rate_limit: {unlimited: true}
  - key: path
    rate_limit: {name: paths, unit: second, requests_per_unit: 3, algorithm: gcra, burst: 1}
`)
	traffic := writeFile(t, dir, "t.csv", "timestamp,key\n"+
		"2025-01-01T00:00:00Z,alice\n2025-01-01T00:00:00.1Z,alice\n2025-01-01T00:00:00.2Z,alice\n"+
		"2025-01-01T00:00:00Z,bob\n2025-01-01T00:00:00.5Z,bob\n")
	out := filepath.Join(dir, "c.svg")
	code, stdout, stderr := floodgate(t, "simulate", "--rules", cfg, "--traffic-file", traffic, "--out", out, "--json")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	var rep struct {
		Requests, Keys int
		Held           bool
		Rules          []struct {
			Name, Algorithm             string
			Offered, Admitted, Rejected int64
			MostInWindow                struct{ Count int64 } `json:"most_in_window"`
			Bounds                      []struct {
				Held     bool
				Observed int64
				Source   string
			}
		}
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("%v\n%s", err, stdout)
	}
	// Sliding log 2/s: alice 2 of 3, bob 2 of 2. GCRA 3/s burst 1: one per
	// 333ms; alice at 0 (then 100ms and 200ms are too soon), bob at 0 and 500ms.
	if rep.Requests != 5 || rep.Keys != 2 || !rep.Held || len(rep.Rules) != 2 {
		t.Fatalf("%+v", rep)
	}
	r0, r1 := rep.Rules[0], rep.Rules[1]
	if r0.Name != "api|user" || r0.Algorithm != "sliding_log" || r0.Admitted != 4 || r0.Rejected != 1 || r0.MostInWindow.Count != 2 ||
		len(r0.Bounds) != 1 || !strings.Contains(r0.Bounds[0].Source, "docs/algorithms.md") {
		t.Errorf("rule 0: %+v", r0)
	}
	if r1.Name != "paths" || r1.Algorithm != "gcra" || r1.Admitted != 3 || r1.Offered != 5 {
		t.Errorf("rule 1: %+v", r1)
	}
	if panels := simPanels(t, out); len(panels) != 2 || !strings.HasPrefix(panels[0], "api|user: SlidingLog{") || !strings.HasPrefix(panels[1], "paths: GCRA{") {
		t.Errorf("panels %q", panels)
	}
	if !strings.Contains(stderr, "wrote "+out+" (2 panels)") {
		t.Errorf("stderr %q", stderr)
	}

	// --only picks limits by name or path.
	code, stdout, stderr = floodgate(t, "simulate", "--rules", cfg, "--only", "paths", "--out", "")
	if code != 0 || !strings.Contains(stdout, "\npaths ") || strings.Contains(stdout, "api|user") {
		t.Errorf("--only paths: exit %d, stderr %q\n%s", code, stderr, stdout)
	}
	code, _, stderr = floodgate(t, "simulate", "--rules", cfg, "--only", "nope*", "--out", "")
	if code != 1 || !strings.Contains(stderr, `--only "nope*" matches none of the limits of `+cfg+": api|user, paths") {
		t.Errorf("--only nope: exit %d, stderr %q", code, stderr)
	}
}

// TestSimulateDeterministic runs the same random traffic twice: same seed,
// same report and the same chart, byte for byte; another seed differs.
func TestSimulateDeterministic(t *testing.T) {
	dir := t.TempDir()
	sim := func(seed, name string) (string, []byte) {
		out := filepath.Join(dir, name)
		code, stdout, stderr := floodgate(t, "simulate", "--all", "--traffic", "poisson", "--rate", "15", "--duration", "20s", "--seed", seed, "--json", "--out", out)
		if code != 0 {
			t.Fatalf("exit %d, stderr %q", code, stderr)
		}
		svg, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		return stdout, svg
	}
	j1, s1 := sim("7", "a.svg")
	j2, s2 := sim("7", "b.svg")
	j3, _ := sim("8", "c.svg")
	if j1 != j2 || !bytes.Equal(s1, s2) {
		t.Errorf("seed 7 twice: the reports or charts differ")
	}
	if j1 == j3 {
		t.Errorf("seeds 7 and 8 gave the same report")
	}
	if !strings.Contains(j1, `"traffic": "poisson 15/s for 20s, seed 7"`) {
		t.Errorf("report:\n%s", j1)
	}
}

func TestSimulatePNG(t *testing.T) {
	dir := t.TempDir()
	svg := filepath.Join(dir, "x.svg")
	code, stdout, stderr := floodgate(t, "simulate", "--algorithm", "leaky_bucket", "--limit", "5", "--burst", "10", "--delay", "4",
		"--traffic", "steady", "--rate", "12", "--out", svg, "--png")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	for _, p := range []string{svg, filepath.Join(dir, "x.png")} {
		if !strings.Contains(stdout, "wrote "+p+" (1 panel)\n") {
			t.Errorf("stdout lacks wrote %s:\n%s", p, stdout)
		}
	}
	f, err := os.Open(filepath.Join(dir, "x.png"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := png.Decode(f); err != nil {
		t.Errorf("PNG: %v", err)
	}
	// The leaky bucket delays: the table shows it.
	if !strings.Contains(stdout, "LeakyBucket{Rate: 5, Per: 1s, Burst: 10, Delay: 4}") || strings.Contains(stdout, "  0s          0s  ") {
		t.Errorf("no delays in:\n%s", stdout)
	}

	// By extension alone.
	p := filepath.Join(dir, "only.png")
	if code, _, stderr := floodgate(t, "simulate", "--algorithm", "gcra", "--out", p); code != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	if _, err := os.Stat(p); err != nil {
		t.Error(err)
	}
}

func TestSimulateUsageErrors(t *testing.T) {
	dir := t.TempDir()
	cfg := writeFile(t, dir, "c.yaml", "domain: d\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n")
	for _, tc := range []struct {
		args []string
		code int
		want string // in stderr
	}{
		{[]string{"--algorithm", "bogus"}, 2, `--algorithm: unknown algorithm "bogus" (want fixed_window, sliding_window, sliding_log, token_bucket, leaky_bucket, gcra)`},
		{[]string{"--algorithm", "gcra", "--all"}, 2, "use --algorithm or --all, not both"},
		{[]string{"--algorithm", "gcra,GCRA"}, 2, "--algorithm names gcra twice"},
		{[]string{"--algorithm", "fixed_window", "--burst", "3"}, 2, "--burst does not apply to fixed_window; token_bucket, leaky_bucket, gcra take it"},
		{[]string{"--delay", "soon"}, 2, `--delay "soon": want a number of requests >= 0, or nodelay`},
		{[]string{"--rules", cfg, "--limit", "3"}, 2, "--limit describes rules on the command line; with --rules the configuration has them"},
		{[]string{"--only", "x"}, 2, "--only selects limits of --rules"},
		{[]string{"--traffic", "zigzag"}, 2, `--traffic: unknown pattern "zigzag"`},
		{[]string{"--traffic", "steady", "--rate", "0"}, 2, "--traffic steady: rate must be > 0 requests per second, got 0"},
		{[]string{"--traffic", "boundary", "--spread", "2s"}, 2, "--traffic boundary: spread must be > 0 and at most the window (1s), got 2s"},
		{[]string{"--traffic-file", "x.csv", "--rate", "3"}, 2, "--rate shapes built-in traffic; --traffic-file gives the requests"},
		{[]string{"--out", "chart.gif"}, 2, `--out "chart.gif": name a .svg or .png file`},
		{[]string{"--out", "", "--png"}, 2, "--png writes a PNG beside the --out SVG"},
		{[]string{"extra"}, 2, `unexpected argument "extra"`},
		{[]string{"--leased", "-1"}, 2, "--leased -1: want a number of processes from 1 to 1000"},
		{[]string{"--lease-target", "10ms"}, 2, "--lease-target goes with --leased"},
		{[]string{"--leased", "2", "--lease-target", "0s"}, 2, "--lease-target 0s: want a positive duration"},
		{[]string{"--algorithm", "gcra", "--limit", "0", "--out", ""}, 1, `floodgate simulate: rule "gcra": ratelimit: GCRA.Rate must be > 0, got 0`},
		{[]string{"--traffic-file", filepath.Join(dir, "missing.csv")}, 1, "--traffic-file: open " + filepath.Join(dir, "missing.csv")},
		{[]string{"--rules", filepath.Join(dir, "missing.yaml")}, 1, "missing.yaml: stat: no such file or directory"},
	} {
		code, stdout, stderr := floodgate(t, append([]string{"simulate"}, tc.args...)...)
		if code != tc.code || stdout != "" || !strings.Contains(stderr, tc.want) {
			t.Errorf("simulate %q: exit %d, stdout %q, stderr %q; want exit %d and %q", tc.args, code, stdout, stderr, tc.code, tc.want)
		}
		if code == 2 && !strings.Contains(stderr, "Run 'floodgate simulate --help' for usage.") {
			t.Errorf("simulate %q: no pointer to the help: %q", tc.args, stderr)
		}
	}
}

// TestSimulateBadTrafficFile reports the file and line of a bad timestamp.
func TestSimulateBadTrafficFile(t *testing.T) {
	p := writeFile(t, t.TempDir(), "t.csv", "1735689600,a\n1735689601,b\nnoon,c\n")
	code, stdout, stderr := floodgate(t, "simulate", "--traffic-file", p, "--out", "")
	want := p + `:3: "noon" is not a timestamp; want RFC3339 (2025-01-01T00:00:00.25Z) or Unix seconds (1735689600.25)` + "\n" +
		"floodgate simulate: fix the traffic file: one request per line, a timestamp or timestamp,key\n"
	if code != 1 || stdout != "" || stderr != want {
		t.Errorf("exit %d, stdout %q\nstderr %q\nwant   %q", code, stdout, stderr, want)
	}
}

func TestSimulateHelp(t *testing.T) {
	code, stdout, _ := floodgate(t, "simulate", "--help")
	for _, want := range []string{"Usage: floodgate simulate", "--traffic-file", "Exit status: 0 when every rule kept", "Examples:\n  floodgate simulate "} {
		if code != 0 || !strings.Contains(stdout, want) {
			t.Errorf("help lacks %q (exit %d):\n%s", want, code, stdout)
		}
	}
}

// TestSimulateShippedTraffic runs the README's simulate example on the files
// it names, examples/floodgate.yaml and examples/traffic.csv, so that the
// example keeps working as the rules, the file format and the command change.
func TestSimulateShippedTraffic(t *testing.T) {
	const rules, traffic = "examples/floodgate.yaml", "examples/traffic.csv"
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	if example := "floodgate simulate --rules " + rules + " --traffic-file " + traffic; !strings.Contains(string(readme), example) {
		t.Errorf("README.md lacks %q: update this test with the README", example)
	}
	out := filepath.Join(t.TempDir(), "traffic.svg")
	code, stdout, stderr := floodgate(t, "simulate", "--rules", "../../"+rules, "--traffic-file", "../../"+traffic, "--out", out, "--json")
	if code != 0 {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}
	var rep simJSONOut
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("%v\n%s", err, stdout)
	}
	// 456 requests of alice, bob, carol and scraper-7; the limits of the
	// configuration with a rate (the unlimited one is not a rule).
	if rep.Requests != 456 || rep.Keys != 4 || !rep.Held || len(rep.Rules) != 4 {
		t.Fatalf("requests %d, keys %d, held %v, %d rules; want 456, 4, true, 4", rep.Requests, rep.Keys, rep.Held, len(rep.Rules))
	}
	// The sample shows limits at work: the per-user GCRA (10/s, burst 20)
	// stops scraper-7's bursts of 25/s.
	if r := rep.Rules[0]; r.Name != "api|user" || r.Rejected == 0 || r.Admitted+r.Rejected != 456 || r.MostInWindow.Key != "scraper-7" {
		t.Errorf("rule 0: %+v, want api|user rejecting some of scraper-7's requests", r)
	}
	if panels := simPanels(t, out); len(panels) != 4 {
		t.Errorf("%d panels: %q", len(panels), panels)
	}
}

// TestSimulateLeased: --leased runs each rule that can lease through quota
// leases in N processes beside the exact rule: a panel each, a line per
// process on it, the under-admission in the table and the JSON, and the
// rules that cannot lease named.
func TestSimulateLeased(t *testing.T) {
	out := filepath.Join(t.TempDir(), "leases.svg")
	args := []string{"simulate", "--algorithm", "gcra,sliding_log", "--limit", "100", "--per", "1s",
		"--traffic", "steady", "--rate", "150", "--duration", "3s", "--leased", "3", "--out", out}
	code, stdout, stderr := floodgate(t, args...)
	if code != 0 || stderr != "" {
		t.Fatalf("exit %d, stderr %q\n%s", code, stderr, stdout)
	}
	panels := simPanels(t, out)
	if len(panels) != 3 || !strings.HasPrefix(panels[1], "gcra, leased in 3 processes — admitted ") || !strings.Contains(panels[1], "without leases), bound held") {
		t.Fatalf("panels: %q", panels)
	}
	texts := strings.Join(simTexts(t, out), "|")
	for _, want := range []string{"process 1", "process 2", "process 3"} {
		if !strings.Contains(texts, want) {
			t.Errorf("the chart's legend lacks %q", want)
		}
	}
	words := strings.Join(strings.Fields(stdout), " ")
	for _, want := range []string{"gcra, leased in 3 processes: admitted ", "under-admitted", "per process [",
		"not leased: sliding_log: ratelimit: rule cannot lease"} {
		if !strings.Contains(words, want) {
			t.Errorf("stdout lacks %q:\n%s", want, stdout)
		}
	}
	code, stdout, stderr = floodgate(t, append(args[:len(args)-2], "--out", "", "--json")...)
	if code != 0 {
		t.Fatalf("--json: exit %d, %s", code, stderr)
	}
	var rep struct {
		Rules []struct {
			Name       string  `json:"name"`
			Admitted   int64   `json:"admitted"`
			Processes  int     `json:"processes"`
			PerProcess []int64 `json:"per_process"`
			Exact      *int64  `json:"exact_admitted"`
		} `json:"rules"`
	}
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Rules) != 3 || rep.Rules[1].Processes != 3 || len(rep.Rules[1].PerProcess) != 3 || rep.Rules[1].Exact == nil ||
		*rep.Rules[1].Exact != rep.Rules[0].Admitted || rep.Rules[1].Admitted > rep.Rules[0].Admitted || rep.Rules[0].Exact != nil {
		t.Fatalf("JSON rules: %+v", rep.Rules)
	}
}
