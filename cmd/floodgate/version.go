package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"

	fg "github.com/floodgate-dev/floodgate"
)

const versionHelp = `Usage:
  floodgate version

Print floodgate's release version (fg.Version), the module version go
install recorded when it is another one (a pseudo-version of a commit between
releases), the VCS revision when the build recorded it, and the Go version.

Example:
  floodgate version
`

func runVersion(args []string, stdout, stderr io.Writer) int {
	rest, code, done := parse(newFlagSet("floodgate version"), args, true, versionHelp, stdout, stderr)
	if done {
		return code
	}
	if len(rest) > 0 {
		return usageError(stderr, "floodgate version", fmt.Sprintf("unexpected argument %q", rest[0]))
	}
	info, _ := debug.ReadBuildInfo()
	fmt.Fprintln(stdout, versionString(info))
	return exitOK
}

// versionString describes a build: "floodgate v0.9.0 go1.26.8" for a release,
// "floodgate v0.9.0 (rev 0123456789ab, modified) go1.26.8" for a work-tree
// build, "floodgate v0.9.0 (module v0.9.1-0.20261201120000-0123456789ab)
// go1.26.8" for go install of a commit after the release.
func versionString(info *debug.BuildInfo) string {
	v := "v" + fg.Version
	var notes []string
	if info != nil {
		if mv := info.Main.Version; mv != "" && mv != "(devel)" && mv != v {
			notes = append(notes, "module "+mv)
		}
		var rev, modified string
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				if s.Value == "true" {
					modified = ", modified"
				}
			}
		}
		if rev != "" {
			notes = append(notes, fmt.Sprintf("rev %.12s%s", rev, modified))
		}
	}
	out := "floodgate " + v
	if len(notes) > 0 {
		out += " (" + strings.Join(notes, ", ") + ")"
	}
	return out + " " + runtime.Version()
}
