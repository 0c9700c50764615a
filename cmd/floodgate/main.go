// Command floodgate is the command line of floodgate's decision server.
//
//	floodgate serve --config FILE|DIR    run the decision server
//	floodgate check --domain D k=v ...   ask a running server for a decision
//	floodgate bench --domain D k=v ...   measure a running server
//	floodgate simulate [flags]           run traffic through rules on a fake clock
//	floodgate config check FILE|DIR...   validate configuration files offline
//	floodgate version                    print the version
//
// Every command takes --help. Exit status: 0 on success, 1 when a
// configuration is invalid, 2 on a usage error.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// Exit statuses.
const (
	exitOK      = 0
	exitFailure = 1 // the command ran and found a problem (an invalid configuration)
	exitUsage   = 2 // the command line is wrong
)

// A command is one subcommand of floodgate.
type command struct {
	name    string
	summary string // one line for the top-level help
	run     func(args []string, stdout, stderr io.Writer) int
}

// commands are floodgate's subcommands, in the order the help lists them.
func commands() []command {
	return []command{
		{"serve", "run the decision server (Envoy RLS gRPC and HTTP)", runServe},
		{"check", "ask a running server for a decision", runCheck},
		{"simulate", "run traffic through rules on a simulated clock; chart and check them", runSimulate},
		{"bench", "measure a server: decisions/s and latency percentiles", runBench},
		{"config", "check configuration files (config check FILE|DIR)", runConfig},
		{"version", "print the version", runVersion},
	}
}

const topUsage = `floodgate: distributed traffic control on Redis or in process.

Usage:
  floodgate <command> [arguments]

Commands:
%s
Run 'floodgate <command> --help' for more about a command.

Examples:
  floodgate serve --config examples/floodgate.yaml            # limits in process, no Redis
  floodgate serve --config conf/ --redis redis://localhost:6379
  floodgate check --domain api user=alice                     # ask the server on localhost:8081
  floodgate bench --domain api --keys 1000 'user=u{n}'        # load it: decisions/s and latency
  floodgate simulate --all --traffic boundary --out b.svg     # compare the algorithms on a fake clock
  floodgate config check ratelimit.yaml                       # one file: one domain
  floodgate config check /etc/floodgate/                      # every *.yaml and *.yml file of a directory
  floodgate version
`

func topHelp() string {
	var list string
	for _, c := range commands() {
		list += fmt.Sprintf("  %-9s %s\n", c.name, c.summary)
	}
	return fmt.Sprintf(topUsage, list)
}

// run is floodgate with the arguments after the program name; it returns the
// exit status.
func run(args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("floodgate")
	rest, code, done := parse(fs, args, false, topHelp(), stdout, stderr)
	if done {
		return code
	}
	if len(rest) == 0 {
		fmt.Fprint(stderr, topHelp())
		return exitUsage
	}
	name := rest[0]
	if name == "help" {
		if len(rest) == 1 {
			fmt.Fprint(stdout, topHelp())
			return exitOK
		}
		// "floodgate help config check" is "floodgate config check --help".
		return run(append(rest[1:], "--help"), stdout, stderr)
	}
	for _, c := range commands() {
		if c.name == name {
			return c.run(rest[1:], stdout, stderr)
		}
	}
	return usageError(stderr, "floodgate", fmt.Sprintf("unknown command %q", name))
}

// newFlagSet returns a flag set that reports nothing itself: parse does.
func newFlagSet(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	return fs
}

// parse parses the flags of a command whose help is help. When the command
// line asks for help it prints help to stdout; on a bad flag it reports the
// error. done says whether the command should return code now.
//
// A command with subcommands takes -h, -help or --help before its first
// argument (the subcommand); a leaf command (anywhere) takes it anywhere
// before "--", so that "floodgate config check x.yaml --help" helps.
func parse(fs *flag.FlagSet, args []string, anywhere bool, help string, stdout, stderr io.Writer) (rest []string, code int, done bool) {
	for _, a := range args {
		if a == "--" || !anywhere {
			break
		}
		if a == "-h" || a == "-help" || a == "--help" {
			fmt.Fprint(stdout, help)
			return nil, exitOK, true
		}
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, help)
			return nil, exitOK, true
		}
		return nil, usageError(stderr, fs.Name(), err.Error()), true
	}
	return fs.Args(), 0, false
}

// usageError reports a usage problem of command cmd and returns exitUsage.
func usageError(stderr io.Writer, cmd, msg string) int {
	fmt.Fprintf(stderr, "%s: %s\nRun '%s --help' for usage.\n", cmd, msg, cmd)
	return exitUsage
}
