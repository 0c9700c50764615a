package floodgate

import (
	"bytes"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// Every relative link of the repository's Markdown files must lead somewhere:
// [text](path) and [text](path#anchor) (images and reference definitions
// too) name a file or directory that exists, and an anchor into a Markdown
// file names one of its headings as GitHub spells it. Links with a scheme
// (https:, mailto:) are not followed. Links inside code are not links.
func TestDocLinks(t *testing.T) {
	files := markdownFiles(t)
	if len(files) == 0 {
		t.Fatal("no Markdown files found")
	}
	anchors := map[string]map[string]bool{} // slash path of a .md file -> its anchors
	anchorsOf := func(p string) (map[string]bool, error) {
		if a, ok := anchors[p]; ok {
			return a, nil
		}
		data, err := os.ReadFile(filepath.FromSlash(p))
		if err != nil {
			return nil, err
		}
		a := markdownAnchors(data)
		anchors[p] = a
		return a, nil
	}
	checked := 0
	for _, file := range files {
		data, err := os.ReadFile(filepath.FromSlash(file))
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range markdownLinks(data) {
			dest := l.dest
			if dest == "" || hasScheme(dest) {
				continue
			}
			checked++
			target, anchor, _ := strings.Cut(dest, "#")
			if t, err := url.PathUnescape(target); err == nil {
				target = t
			}
			if a, err := url.PathUnescape(anchor); err == nil {
				anchor = a
			}
			switch {
			case target == "":
				target = file // #anchor: this file
			case strings.HasPrefix(target, "/"):
				target = path.Clean(strings.TrimPrefix(target, "/"))
			default:
				target = path.Join(path.Dir(file), target)
			}
			if target == ".." || strings.HasPrefix(target, "../") {
				t.Errorf("%s:%d: %s leads out of the repository", file, l.line, dest)
				continue
			}
			info, err := os.Stat(filepath.FromSlash(target))
			if err != nil {
				t.Errorf("%s:%d: %s: no such file %s", file, l.line, dest, target)
				continue
			}
			if anchor == "" {
				continue
			}
			if info.IsDir() {
				target = path.Join(target, "README.md") // GitHub shows a directory's README
			}
			if !strings.HasSuffix(target, ".md") {
				continue // #L12 into source: GitHub's line anchors
			}
			a, err := anchorsOf(target)
			if err != nil {
				t.Errorf("%s:%d: %s: %v", file, l.line, dest, err)
				continue
			}
			if !a[anchor] {
				t.Errorf("%s:%d: %s: %s has no heading with anchor #%s", file, l.line, dest, target, anchor)
			}
		}
	}
	if checked == 0 {
		t.Error("no relative links found: the link parser is broken")
	}
}

// markdownFiles returns the repository's Markdown files, tracked or new but
// not ignored (slash paths from the module root); without git, those under
// the root outside hidden directories and testdata.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	if out, err := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard", "--", "*.md").Output(); err == nil {
		var files []string
		for f := range strings.SplitSeq(string(out), "\x00") {
			if f != "" {
				if _, err := os.Stat(filepath.FromSlash(f)); err == nil { // deleted, not yet committed
					files = append(files, f)
				}
			}
		}
		return files
	}
	var files []string
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			files = append(files, filepath.ToSlash(p))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

type mdLink struct {
	line int
	dest string
}

var (
	inlineLink = regexp.MustCompile(`\]\(\s*(<[^>]*>|[^)\s]*)`)   // [text](dest "title"), ![alt](dest)
	refDef     = regexp.MustCompile(`^ {0,3}\[[^\]]+\]:\s*(\S+)`) // [ref]: dest
	codeSpan   = regexp.MustCompile("(`+)[^`]*?(`+)")
	atxHeading = regexp.MustCompile(`^ {0,3}#{1,6}(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$`)
	htmlAnchor = regexp.MustCompile(`<a\s+(?:name|id)="([^"]+)"`)
	headLink   = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
)

// markdownLinks returns the link destinations of a Markdown file outside
// fenced code blocks and code spans, with their 1-based line numbers.
func markdownLinks(md []byte) []mdLink {
	var links []mdLink
	forEachProseLine(md, func(n int, line string) {
		line = codeSpan.ReplaceAllString(line, "")
		if m := refDef.FindStringSubmatch(line); m != nil {
			links = append(links, mdLink{n, strings.Trim(m[1], "<>")})
			return
		}
		for _, m := range inlineLink.FindAllStringSubmatch(line, -1) {
			links = append(links, mdLink{n, strings.Trim(m[1], "<>")})
		}
	})
	return links
}

// markdownAnchors returns the anchors GitHub gives a Markdown file's
// headings (a repeated heading gets -1, -2, ...), and those of <a name=...>
// and <a id=...> tags.
func markdownAnchors(md []byte) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	forEachProseLine(md, func(_ int, line string) {
		for _, m := range htmlAnchor.FindAllStringSubmatch(line, -1) {
			anchors[m[1]] = true
		}
		m := atxHeading.FindStringSubmatch(line)
		if m == nil {
			return
		}
		slug := githubSlug(m[1])
		if k := seen[slug]; k > 0 {
			anchors[slug+"-"+strconv.Itoa(k)] = true
		} else {
			anchors[slug] = true
		}
		seen[slug]++
	})
	return anchors
}

// githubSlug is GitHub's anchor for a heading's text: the text as rendered
// (links reduced to their text, code to its content), lowercased, every
// character but letters, digits, '-', '_' and spaces dropped, and each space
// made a '-'.
func githubSlug(heading string) string {
	heading = headLink.ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteByte('-')
		case r == '-' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.IsMark(r) || unicode.Is(unicode.Pc, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// forEachProseLine calls fn with each line of md (1-based) that is not
// inside a fenced code block (``` or ~~~) nor an HTML comment.
func forEachProseLine(md []byte, fn func(n int, line string)) {
	var fence string
	comment := false
	n := 0
	for raw := range bytes.Lines(md) {
		n++
		line := strings.TrimRight(string(raw), "\r\n")
		trimmed := strings.TrimLeft(line, " ")
		if fence != "" {
			if strings.HasPrefix(trimmed, fence) && strings.Trim(trimmed, fence[:1]+" \t") == "" {
				fence = ""
			}
			continue
		}
		if comment {
			if strings.Contains(line, "-->") {
				comment = false
			}
			continue
		}
		if len(line)-len(trimmed) < 4 && (strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~")) {
			fence = trimmed[:3]
			for _, c := range trimmed[3:] {
				if c != rune(fence[0]) {
					break
				}
				fence += string(c)
			}
			continue
		}
		if i := strings.Index(line, "<!--"); i >= 0 && !strings.Contains(line[i:], "-->") {
			comment = true
			line = line[:i]
		}
		fn(n, line)
	}
}

// hasScheme reports whether a link destination is absolute (https:,
// mailto:, ...), which this test does not follow.
func hasScheme(dest string) bool {
	u, err := url.Parse(dest)
	return err == nil && u.Scheme != "" || strings.HasPrefix(dest, "//")
}

func TestDocLinksParser(t *testing.T) {
	for _, c := range []struct{ heading, want string }{
		{"Envoy's quota service (RLQS)", "envoys-quota-service-rlqs"},
		{"The decision server: `floodgate serve`", "the-decision-server-floodgate-serve"},
		{"SQL locks after issue 17 (hand-off on PostgreSQL, GET_LOCK gate on MySQL/MariaDB)", "sql-locks-after-issue-17-hand-off-on-postgresql-get_lock-gate-on-mysqlmariadb"},
		{"Wake-up: holder's Unlock returns → waiter's Lock returns", "wake-up-holders-unlock-returns--waiters-lock-returns"},
		{"See [the API](api.md) ×2", "see-the-api-2"},
	} {
		if got := githubSlug(c.heading); got != c.want {
			t.Errorf("githubSlug(%q) = %q, want %q", c.heading, got, c.want)
		}
	}
	md := []byte("# Title\n\n[a](x.md) `[b](code.md)` ![c](img/c.png \"title\")\n\n```sh\n[d](fenced.md)\n# not a heading\n```\n\n## Title\n[e]: <ref.md#title-1>\n")
	var got []string
	for _, l := range markdownLinks(md) {
		got = append(got, strconv.Itoa(l.line)+":"+l.dest)
	}
	if want := "3:x.md 3:img/c.png 11:ref.md#title-1"; strings.Join(got, " ") != want {
		t.Errorf("markdownLinks = %q, want %q", strings.Join(got, " "), want)
	}
	a := markdownAnchors(md)
	if len(a) != 2 || !a["title"] || !a["title-1"] {
		t.Errorf("markdownAnchors = %v, want title and title-1", a)
	}
}
