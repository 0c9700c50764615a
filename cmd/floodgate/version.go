package main

import (
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
)

const versionHelp = `Usage:
  floodgate version

Print floodgate's module version (as go install records it; "devel" for a
build from a work tree without one), the VCS revision when the build recorded
it, and the Go version.

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

// versionString describes a build: "floodgate v1.2.3 go1.26.8", or "floodgate
// devel (rev 0123456789ab, modified) go1.26.8" for a work-tree build.
func versionString(info *debug.BuildInfo) string {
	v := "devel"
	var rev, modified string
	if info != nil {
		if mv := info.Main.Version; mv != "" && mv != "(devel)" {
			v = mv
		}
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
	}
	out := "floodgate " + v
	if rev != "" {
		out += fmt.Sprintf(" (rev %.12s%s)", rev, modified)
	}
	return out + " " + runtime.Version()
}
