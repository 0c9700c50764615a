package floodgate

import (
	"os"
	"regexp"
	"testing"
)

// Version must name the newest release of CHANGELOG.md, so that a release
// cannot bump one and forget the other.
func TestVersionMatchesChangelog(t *testing.T) {
	data, err := os.ReadFile("CHANGELOG.md")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^## \[(\d+\.\d+\.\d+[^\]]*)\] - \d{4}-\d{2}-\d{2}$`).FindSubmatch(data)
	if m == nil {
		t.Fatal(`CHANGELOG.md has no release heading "## [X.Y.Z] - YYYY-MM-DD"`)
	}
	if got := string(m[1]); got != Version {
		t.Errorf("CHANGELOG.md's newest release is %s, Version is %s", got, Version)
	}
}
