package testenv

import (
	"errors"
	"fmt"
	"testing"
)

// ErrNotInstalled is matched (errors.Is) by the error of a Start function
// when a program the server needs is not installed: redis-server or
// redis-cli, PostgreSQL's initdb and postgres, MariaDB's mariadb-install-db
// and mariadbd, java or ZooKeeper's jars. The error says which, and how to
// install it.
var ErrNotInstalled = errors.New("testenv: not installed")

// missingError is the error of a lookup that found no program; it matches
// ErrNotInstalled.
type missingError struct{ msg string }

func (e *missingError) Error() string        { return e.msg }
func (e *missingError) Is(target error) bool { return target == ErrNotInstalled }

// notInstalled returns a *missingError with the formatted message, which
// names what is missing and how to install it.
func notInstalled(format string, args ...any) error {
	return &missingError{msg: fmt.Sprintf(format, args...)}
}

// NotInstalled ends a test that cannot run because something it needs is not
// installed; what names it and how to get it. Under go test -short the test
// is skipped, so that go test -short ./... passes on a machine with only Go;
// otherwise (the test command, CI) it fails, and the message says how to get
// the rest installed.
func NotInstalled(t testing.TB, what string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("%s (skipped under -short)", what)
	}
	t.Fatalf("%s; run ./scripts/test.sh, which installs what the tests need, or go test -short to skip the tests that need it", what)
}

// startFailed ends a test whose server (what) could not start: through
// NotInstalled when err matches ErrNotInstalled, else with t.Fatalf.
func startFailed(t testing.TB, what string, err error) {
	t.Helper()
	if errors.Is(err, ErrNotInstalled) {
		NotInstalled(t, err.Error())
	}
	t.Fatalf("testenv: cannot start %s: %v", what, err)
}
