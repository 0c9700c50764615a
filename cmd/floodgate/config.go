package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sort"

	"github.com/floodgate-dev/floodgate/server/config"
)

const configHelp = `Usage:
  floodgate config check FILE|DIR...

Commands:
  check     validate configuration files offline

Run 'floodgate config check --help' for more.

Examples:
  floodgate config check ratelimit.yaml
  floodgate config check /etc/floodgate/
`

func runConfig(args []string, stdout, stderr io.Writer) int {
	rest, code, done := parse(newFlagSet("floodgate config"), args, false, configHelp, stdout, stderr)
	if done {
		return code
	}
	if len(rest) == 0 {
		fmt.Fprint(stderr, configHelp)
		return exitUsage
	}
	switch rest[0] {
	case "check":
		return runConfigCheck(rest[1:], stdout, stderr)
	}
	return usageError(stderr, "floodgate config", fmt.Sprintf("unknown command %q", rest[0]))
}

const configCheckHelp = `Usage:
  floodgate config check FILE|DIR...

Check rate limit configurations the way the server loads them, without
starting it: envoyproxy/ratelimit's YAML files (one domain each) plus
floodgate's per-limit algorithm. A directory means every *.yaml and *.yml
file in it. Each path is checked on its own.

A valid path prints one line per domain (its descriptors and limits) and the
command exits 0. Otherwise every problem is printed as FILE:LINE: problem on
standard error and the command exits 1.

Examples:
  floodgate config check ratelimit.yaml
  floodgate config check /etc/floodgate/ ./staging/
  floodgate config check config/*.yaml
`

func runConfigCheck(args []string, stdout, stderr io.Writer) int {
	paths, code, done := parse(newFlagSet("floodgate config check"), args, true, configCheckHelp, stdout, stderr)
	if done {
		return code
	}
	if len(paths) == 0 {
		return usageError(stderr, "floodgate config check", "no file or directory to check")
	}
	status := exitOK
	for _, p := range paths {
		cfg, err := config.Load(p)
		if err != nil {
			var list config.ErrorList
			if errors.As(err, &list) {
				for _, e := range list {
					fmt.Fprintln(stderr, e)
				}
			} else {
				fmt.Fprintln(stderr, err)
			}
			if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
				fmt.Fprintln(stderr, "floodgate config check: give a configuration file, or a directory of *.yaml files (examples/floodgate.yaml is one)")
			}
			status = exitFailure
			continue
		}
		domains := make([]*config.Domain, 0, len(cfg.Domains))
		for _, d := range cfg.Domains {
			domains = append(domains, d)
		}
		sort.Slice(domains, func(i, j int) bool { return domains[i].File < domains[j].File })
		for _, d := range domains {
			fmt.Fprintf(stdout, "%s: domain %q: %s, %s\n", d.File, d.Name,
				plural(d.Descriptors(), "descriptor"), plural(len(d.Limits()), "limit"))
		}
	}
	return status
}

func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
