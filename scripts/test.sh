#!/usr/bin/env bash
# floodgate's test command (README "Quick start"): installs the servers the
# tests start privately (redis-server, redis-tools) from Debian packages when
# they are missing, then vets and runs every test with the race detector.
# Tests never use a Redis already running on the machine.
set -euo pipefail
cd "$(dirname "$0")/.."

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v redis-cli >/dev/null 2>&1 || missing+=(redis-tools)
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
