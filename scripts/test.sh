#!/usr/bin/env bash
# floodgate's test command (README "Tests"): vets both modules and runs
# every test of the main one with the race detector. The tests start private
# servers of their own on free ports (internal/testenv); they never use
# servers already running on the machine. First, whichever of these Debian
# packages is missing is installed with apt-get (as root, or through sudo):
#
#   redis-server, redis-tools   every test on Redis: standalone, a 3-master
#                               Cluster (created by redis-cli), a Sentinel group
#   postgresql                  lock/sqllock on PostgreSQL; internal/testenv
#   mariadb-server              lock/sqllock on MySQL/MariaDB; internal/testenv
#   zookeeper                   lock/zklock; internal/testenv
#   default-jre-headless        the Java runtime ZooKeeper runs on
#   chromium                    server's dashboard test, which drives headless
#                               Chromium (or set $CHROMIUM to a browser)
#
# With only Go installed, `go test -short ./...` runs the rest: tests whose
# server is not installed skip under -short, naming what is missing. Here,
# without -short, a server that is missing or cannot start fails its tests.
#
# Every step runs even when one before it failed, and the script fails at the
# end if any did. Tests print one line per package as it finishes, with the
# output of whatever failed under it, and a line a minute naming the packages
# still running (internal/tools/testsum reads go test -json); the whole JSON
# stream is kept in $FLOODGATE_TEST_LOG (default: a file under $TMPDIR, named
# at the end). Client libraries' own logs (go-redis's dial errors) are quiet
# in tests unless FLOODGATE_TEST_LOGS=1.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || missing+=(redis-tools)
# PostgreSQL: initdb is on PATH or in Debian's versioned directory.
command -v initdb >/dev/null 2>&1 || compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || missing+=(postgresql)
{ command -v mariadb-install-db >/dev/null 2>&1 && { command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ]; }; } || missing+=(mariadb-server)
[ -f /usr/share/java/zookeeper.jar ] || missing+=(zookeeper)
command -v java >/dev/null 2>&1 || missing+=(default-jre-headless)
# The dashboard's browser test drives headless Chromium.
{ command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || [ -n "${CHROMIUM:-}" ]; } || missing+=(chromium)
if ((${#missing[@]})); then
	sudo=""
	[ "$(id -u)" -eq 0 ] || sudo="sudo"
	echo "installing ${missing[*]}"
	$sudo apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
command -v go >/dev/null 2>&1 || { echo "go is not on PATH: install Go 1.26 or newer" >&2; exit 1; }

start=$SECONDS
failed=()

# step NAME CMD...: runs CMD, says how long it took, and remembers a failure.
step() {
	local name=$1 t0=$SECONDS rc=0
	shift
	echo "== $name"
	"$@" || rc=$?
	if ((rc)); then
		failed+=("$name")
		echo "== $name: FAILED (exit $rc) after $((SECONDS - t0))s"
	else
		echo "== $name: ok, $((SECONDS - t0))s"
	fi
}

module=$(go list -m)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
log=${FLOODGATE_TEST_LOG:-$(mktemp "${TMPDIR:-/tmp}/floodgate-test.XXXXXX.json")}
go build -o "$tmp/testsum" ./internal/tools/testsum

# tests runs both go test commands into one summary; it fails when testsum
# saw a failure or either command exited non-zero.
tests() {
	{
		go test -json -race -count=1 -timeout 15m ./... || echo "go test -race: exit $?" >>"$tmp/rc"
		# TestServerPause forces a ZooKeeper reconnect, on which
		# go-zookeeper/zk itself has a data race: -race skips it, so it runs
		# here without.
		go test -json -count=1 -timeout 5m -run '^TestServerPause$' ./lock/zklock/ ||
			echo "go test TestServerPause: exit $?" >>"$tmp/rc"
	} 2>&1 | "$tmp/testsum" -trim "$module" -raw "$log" -closing "$tmp/closing"
	local rc=$?
	if [ -s "$tmp/rc" ]; then
		cat "$tmp/rc"
		return 1
	fi
	return $rc
}

step "go vet" go vet ./...
step "go vet (bench module)" bash -c 'cd bench && go vet ./...'
step "go test -race" tests

echo "== total $((SECONDS - start))s; go test -json stream in $log"
if ((${#failed[@]})); then
	echo "== FAILED: ${failed[*]}"
fi
cat "$tmp/closing" 2>/dev/null || echo "tests: 0 passed, 1 failed"
((${#failed[@]} == 0))
