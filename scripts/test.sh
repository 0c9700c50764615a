#!/usr/bin/env bash
# floodgate's test command (README "Quick start"): installs the servers the
# tests start privately (Redis, PostgreSQL, MariaDB, ZooKeeper) and headless
# Chromium from Debian packages when they are missing, then vets and runs every test with the race
# detector. Tests start their own server processes on free ports; they never
# use servers already running on the machine.
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
command -v go >/dev/null 2>&1 || { echo "go is not on PATH: install Go 1.24 or newer" >&2; exit 1; }

go vet ./...
(cd bench && go vet ./...)
go test -race -count=1 -timeout 15m ./...
