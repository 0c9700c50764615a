package config

import (
	"fmt"
	"strings"
)

// Error is one problem in a configuration file.
type Error struct {
	File string
	Line int // 1-based; 0 when the problem is not at a line (an unreadable file)
	Msg  string
	// Envoy is envoyproxy/ratelimit's text for the problem (without its file
	// name), when it reports one; "" otherwise. LoadWith with
	// LoadOptions.Envoy puts it first in Msg.
	Envoy string
}

// Error returns "FILE:LINE: problem", or "FILE: problem" without a line.
func (e *Error) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	}
	return e.File + ": " + e.Msg
}

// ErrorList is every problem Parse or Load found, in file and line order. Its
// Error has one line per problem. errors.As finds the first *Error.
type ErrorList []*Error

func (l ErrorList) Error() string {
	lines := make([]string, len(l))
	for i, e := range l {
		lines[i] = e.Error()
	}
	return strings.Join(lines, "\n")
}

// Unwrap returns the errors of the list.
func (l ErrorList) Unwrap() []error {
	errs := make([]error, len(l))
	for i, e := range l {
		errs[i] = e
	}
	return errs
}

// maxErrors bounds the problems reported for one file.
const maxErrors = 25
