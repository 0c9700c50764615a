#!/usr/bin/env bash
# serve.sh: floodgate serve under load from floodgate bench, as two processes
# (three with Redis), the way a platform team would measure its deployment.
# Every case runs RUNS times (cases interleaved, so that a burst of other work
# on the machine does not land on all runs of one case); each run appends one
# JSON line (floodgate bench --json, plus the case and the server's CPU) to
# results/serve-latest.jsonl, and go run ./cmd/servesummary turns them into
# the tables of results/server.md.
#
#   bench/serve.sh                          # everything, about 12 minutes
#   RUNS=1 DURATION=3s bench/serve.sh       # a smoke pass
#   CASES='open-grpc' RATES=20000 bench/serve.sh
#   CASES='envoy-grpc envoy-pipelined-grpc compat-grpc redis-grpc' RUNS=5 \
#     REDIS_RATES='2000 5000' OUT=results/serve-envoy.jsonl bench/serve.sh
#
# Cases: closed-grpc, closed-http (closed loop on the memory backend, 1 and
# 10,000 keys), open-grpc, open-http (open loop at each of RATES on memory),
# floor-grpc (the closed and open loops of closed-grpc and open-grpc against
# cmd/rlsfloor, a grpc-go server that answers OK without deciding: the
# transport's floor), redis-grpc, redis-http (floodgate serve --redis, closed
# loop; redis-grpc also an open loop at each of REDIS_RATES) and redis-lib
# (cmd/libload: the library's Limiter.Allow from 64 goroutines on the same
# Redis: the issue's "library's own decisions/s in the same run").
#
# envoy-grpc and compat-grpc put floodgate beside envoyproxy/ratelimit (issue
# 16), with redis-grpc for floodgate in its own mode: envoy-grpc builds
# envoyproxy/ratelimit from its module at ENVOY_VERSION (fetched from the Go
# module proxy when the script runs; none of its code is kept here) and
# compat-grpc runs floodgate serve --compat envoy. Both get the same
# environment (envoy's variables: the configuration below in envoy's runtime
# layout, RUNTIME_ROOT/RUNTIME_SUBDIRECTORY/config/bench.yaml, the same Redis,
# statsd off, REDIS_TIMEOUT written out at envoy's default of 10s) and the same
# closed loops, then an open loop at each of REDIS_RATES (as redis-grpc).
# envoy-pipelined-grpc is envoy-grpc with REDIS_PIPELINE_WINDOW set to
# ENVOY_PIPELINE_WINDOW (envoy's advice for throughput: 150us to 500us; its
# default, 0, writes every command at once). Ratios between the servers of
# one round are what count on a shared machine; OUT names the results file
# (relative to bench/; default results/serve-latest.jsonl).
#
# BASE=REV adds, for each floodgate case (closed-*, open-*, redis-grpc,
# redis-http, compat-grpc), the same case against floodgate built from the
# git revision REV, named CASE@base: before and after a change, in one run,
# interleaved, with the same load generator (the working tree's).
#
# PIN=1 (the default on a machine with 2 or more cores) puts the server on the
# last core and the load generator on the others (taskset, GOMAXPROCS to
# match) in the memory and floor cases, so that the generator's work does not
# queue behind the server's; PIN=0 lets the kernel share all cores between
# them. The Redis cases are never pinned: redis-server, the server and the
# load generator (or the library) share every core, so that the library and
# the server get the same machine. Needs redis-server on PATH for the Redis
# cases (envoy-*, compat-grpc included), the Go module proxy (GOPROXY) for
# envoy-*, and taskset (util-linux) for PIN=1.
set -euo pipefail
cd "$(dirname "$0")"
. ./lib.sh # free_port, bench_config

DURATION=${DURATION:-10s}
RUNS=${RUNS:-3}
RATES=${RATES:-5000 10000 20000}
CASES=${CASES:-closed-grpc closed-http open-grpc open-http floor-grpc redis-lib redis-grpc redis-http}
CLIENT=${CLIENT:-h2}
ENVOY_MODULE=${ENVOY_MODULE:-github.com/envoyproxy/ratelimit}
ENVOY_VERSION=${ENVOY_VERSION:-v1.4.1-0.20260122083618-3fb702589d36}
ENVOY_PIPELINE_WINDOW=${ENVOY_PIPELINE_WINDOW:-150us}
REDIS_RATES=${REDIS_RATES:-2000}
OUT=${OUT:-results/serve-latest.jsonl}
cores=$(nproc)
PIN=${PIN:-$((cores >= 2 ? 1 : 0))}

tmp=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	rm -rf "$tmp"
}
trap cleanup EXIT

(cd .. && go build -o "$tmp/floodgate" ./cmd/floodgate)
go build -o "$tmp/rlsfloor" ./cmd/rlsfloor
go build -o "$tmp/libload" ./cmd/libload
fg=$tmp/floodgate
srv=$fg # the server of the case running: $fg, or the BASE build
base_desc=""
if [[ -n ${BASE:-} ]]; then
	mkdir -p "$tmp/base-src"
	git -C .. archive "$BASE" | tar -x -C "$tmp/base-src"
	(cd "$tmp/base-src" && go build -buildvcs=false -o "$tmp/floodgate-base" ./cmd/floodgate)
	base_desc="$(git -C .. rev-parse --short "$BASE")"
fi
# The configuration, in envoyproxy/ratelimit's runtime layout so that every
# server reads the same file.
mkdir -p "$tmp/runtime/current/config"
config=$tmp/runtime/current/config/bench.yaml
bench_config "$config"

server_cpus="" client_cpus="" server_procs=$cores client_procs=$cores
if [[ $PIN == 1 ]]; then
	command -v taskset >/dev/null || { echo "serve.sh: PIN=1 needs taskset (apt-get install -y util-linux)" >&2; exit 1; }
	server_cpus=$((cores - 1))
	client_cpus=0-$((cores - 2))
	server_procs=1
	client_procs=$((cores - 1))
fi
pinned() { # CPUS COMMAND...: run COMMAND on CPUS when pinning
	local cpus=$1
	shift
	if [[ -n $cpus ]]; then taskset -c "$cpus" "$@"; else "$@"; fi
}
# start CPUS COMMAND...: start COMMAND in the background, pinned as above;
# the function's subshell becomes the command (exec), so $! is its PID.
start() {
	local cpus=$1
	shift
	if [[ -n $cpus ]]; then exec taskset -c "$cpus" "$@"; else exec "$@"; fi
}

# cputicks PID: user + system CPU of PID, in clock ticks.
cputicks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
hz=$(getconf CLK_TCK)


# build_envoy: envoyproxy/ratelimit's server at ENVOY_VERSION, from the Go
# module proxy, built in a copy of its module (its go.mod may have replace
# directives, which go install refuses).
envoy=""
build_envoy() {
	local json dir
	if ! json=$(cd "$tmp" && GOWORK=off GOFLAGS=-mod=mod go mod download -json "$ENVOY_MODULE@$ENVOY_VERSION" 2>&1); then
		echo "serve.sh: cannot download $ENVOY_MODULE@$ENVOY_VERSION from the Go module proxy (GOPROXY=$(go env GOPROXY)); set ENVOY_VERSION to a version the proxy serves, or GOPROXY:" >&2
		printf '%s\n' "$json" >&2
		exit 1
	fi
	dir=$(printf '%s\n' "$json" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
	[[ -n $dir && -d $dir/src/service_cmd ]] || { echo "serve.sh: $ENVOY_MODULE@$ENVOY_VERSION has no src/service_cmd:" >&2; printf '%s\n' "$json" >&2; exit 1; }
	cp -R "$dir" "$tmp/envoy-src"
	chmod -R u+w "$tmp/envoy-src"
	echo "serve.sh: building $ENVOY_MODULE@$ENVOY_VERSION (./src/service_cmd)" >&2
	(cd "$tmp/envoy-src" && GOWORK=off GOFLAGS=-mod=mod go build -o "$tmp/envoy-ratelimit" ./src/service_cmd) ||
		{ echo "serve.sh: building $ENVOY_MODULE@$ENVOY_VERSION failed" >&2; exit 1; }
	envoy=$tmp/envoy-ratelimit
}
if [[ " $CASES " == *" envoy-"* ]]; then build_envoy; fi

redis_port=""
if [[ " $CASES " =~ \ (redis|envoy|compat)- ]]; then
	command -v redis-server >/dev/null || { echo "serve.sh: the Redis cases need redis-server (apt-get install -y redis-server)" >&2; exit 1; }
	redis_port=$(free_port)
	redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no \
		--dir "$tmp" --daemonize no >"$tmp/redis.log" 2>&1 &
	redis_pid=$!
	pids+=("$redis_pid")
	for _ in $(seq 50); do
		redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break
		sleep 0.1
	done
fi

# envoy_env: envoyproxy/ratelimit's environment for the envoy and compat
# cases, with fresh ports; the same for both servers.
envoy_env() {
	env_vars=(
		USE_STATSD=false LOG_LEVEL=warn
		REDIS_SOCKET_TYPE=tcp REDIS_URL="127.0.0.1:$redis_port" REDIS_TIMEOUT=10s
		RUNTIME_ROOT="$tmp/runtime" RUNTIME_SUBDIRECTORY=current RUNTIME_WATCH_ROOT=false
		HOST=127.0.0.1 PORT="$(free_port)" GRPC_HOST=127.0.0.1 GRPC_PORT="$(free_port)"
		DEBUG_HOST=127.0.0.1 DEBUG_PORT="$(free_port)"
	)
	local v
	for v in "${env_vars[@]}"; do
		[[ $v != *= ]] || { echo "serve.sh: no value for ${v%=}" >&2; exit 1; }
	done
}

# serve STORE: start floodgate serve (STORE memory or redis; compat: floodgate
# serve --compat envoy on Redis), envoyproxy/ratelimit (envoy,
# envoy-pipelined) or cmd/rlsfloor (floor); sets server_pid, server,
# grpc_addr, http_addr, and the CPUs of the load generator (cpus, procs).
serve() {
	local args=(serve --config "$config" --grpc-addr 127.0.0.1:0 --http-addr 127.0.0.1:0 --log-format json --log-level info --reload-interval 0)
	local scpus=$server_cpus sprocs=$server_procs
	cpus=$client_cpus procs=$client_procs
	server=floodgate
	if [[ $1 == redis || $1 == envoy* || $1 == compat ]]; then
		scpus="" sprocs=$cores cpus="" procs=$cores
	fi
	if [[ $1 == redis ]]; then args+=(--redis "redis://127.0.0.1:$redis_port"); fi
	: >"$tmp/serve.log"
	local ready='"msg":"floodgate starting"'
	if [[ $1 == envoy* || $1 == compat ]]; then
		# Both servers as an envoyproxy/ratelimit deployment runs: its
		# variables only, no flags.
		envoy_env
		if [[ $1 == envoy-pipelined ]]; then
			env_vars+=(REDIS_PIPELINE_WINDOW="$ENVOY_PIPELINE_WINDOW")
		fi
		if [[ $1 == envoy* ]]; then
			server="envoyproxy/ratelimit $ENVOY_VERSION"
			if [[ $1 == envoy-pipelined ]]; then server+=" REDIS_PIPELINE_WINDOW=$ENVOY_PIPELINE_WINDOW"; fi
			env "${env_vars[@]}" GOMAXPROCS="$sprocs" "$envoy" >"$tmp/serve.log" 2>&1 &
		else
			server="floodgate --compat envoy"
			env "${env_vars[@]}" GOMAXPROCS="$sprocs" "$srv" serve --compat envoy >"$tmp/serve.log" 2>&1 &
		fi
		server_pid=$!
		pids+=("$server_pid")
		grpc_addr=127.0.0.1:$(env_value GRPC_PORT) http_addr=127.0.0.1:$(env_value PORT)
		# Ready when it answers a decision.
		for _ in $(seq 100); do
			"$fg" check --addr "$grpc_addr" --domain bench --timeout 1s user=ready >/dev/null 2>&1 && return
			kill -0 "$server_pid" 2>/dev/null || break
			sleep 0.1
		done
		echo "serve.sh: $server did not start:" >&2
		cat "$tmp/serve.log" >&2
		exit 1
	fi
	if [[ $1 == floor ]]; then
		server=rlsfloor
		ready='listening on'
		GOMAXPROCS=$sprocs start "$scpus" "$tmp/rlsfloor" --addr 127.0.0.1:0 2>"$tmp/serve.log" &
	else
		GOMAXPROCS=$sprocs start "$scpus" "$srv" "${args[@]}" 2>"$tmp/serve.log" &
	fi
	server_pid=$!
	pids+=("$server_pid")
	for _ in $(seq 100); do
		grep -q "$ready" "$tmp/serve.log" && break
		sleep 0.05
	done
	if [[ $1 == floor ]]; then
		grpc_addr=$(sed -n 's/.*listening on //p' "$tmp/serve.log") http_addr=none
	else
		grpc_addr=$(sed -n 's/.*"msg":"floodgate starting".*"grpc":"\([^"]*\)".*/\1/p' "$tmp/serve.log")
		http_addr=$(sed -n 's/.*"msg":"floodgate starting".*"http":"\([^"]*\)".*/\1/p' "$tmp/serve.log")
	fi
	[[ -n $grpc_addr && -n $http_addr ]] || { echo "serve.sh: the $1 server did not start:" >&2; cat "$tmp/serve.log" >&2; exit 1; }
}

# env_value NAME: the value of NAME in env_vars.
env_value() {
	local v
	for v in "${env_vars[@]}"; do
		if [[ $v == "$1="* ]]; then echo "${v#*=}"; fi
	done
}

stop_server() {
	kill "$server_pid" 2>/dev/null || true
	wait "$server_pid" 2>/dev/null || true
}

# load CASE STORE API KEYS [RATE]: one run of floodgate bench against the
# running server, appended to the results with the server's CPU per decision.
load() {
	local name=$1 store=$2 api=$3 keys=$4 rate=${5:-}
	local args=(bench --domain bench --keys "$keys" --duration "$DURATION" --json --quiet)
	if [[ $api == grpc ]]; then args+=(--addr "$grpc_addr" --client "$CLIENT"); else args+=(--http "http://$http_addr/v1/check"); fi
	if [[ -n $rate ]]; then args+=(--rate "$rate"); fi
	local s0 r0=0 s1 r1=0
	s0=$(cputicks "$server_pid")
	if [[ $store == redis ]]; then r0=$(cputicks "$redis_pid"); fi
	GOMAXPROCS=$procs pinned "$cpus" "$fg" "${args[@]}" 'user={n}' >"$tmp/run.json"
	s1=$(cputicks "$server_pid")
	if [[ $store == redis ]]; then r1=$(cputicks "$redis_pid"); fi
	record "$name" "$store" "$((s1 - s0))" "$((r1 - r0))"
	echo "serve.sh: $name ($server) store=$store api=$api keys=$keys rate=${rate:-closed}: $(grep -o '"decisions_per_s": *[0-9]*' "$tmp/run.json")" >&2
}

# libload KEYS: one run of the library on the Redis.
libload() {
	local r0 r1
	r0=$(cputicks "$redis_pid")
	GOMAXPROCS=$cores "$tmp/libload" --redis "redis://127.0.0.1:$redis_port" --keys "$1" --duration "$DURATION" >"$tmp/run.json"
	r1=$(cputicks "$redis_pid")
	server=library
	record redis-lib redis 0 "$((r1 - r0))"
	echo "serve.sh: redis-lib keys=$1: $(grep -o '"decisions_per_s": *[0-9]*' "$tmp/run.json")" >&2
}

# record CASE STORE SERVER_TICKS REDIS_TICKS: append the run in $tmp/run.json.
record() {
	printf '{"case":"%s","server":"%s","store":"%s","round":%d,"pin":%s,"client":"%s","server_cpu_s":%s,"redis_cpu_s":%s,"bench":%s}\n' \
		"$1" "$server${server_suffix:-}" "$2" "$run" "$PIN" "$CLIENT" "$(awk -v t="$3" -v hz="$hz" 'BEGIN{print t/hz}')" \
		"$(awk -v t="$4" -v hz="$hz" 'BEGIN{print t/hz}')" "$(tr -d '\n' <"$tmp/run.json")" >>"$out"
}

mkdir -p "$(dirname "$OUT")"
out=$OUT
: >"$out"
echo "serve.sh: floodgate $(cd .. && git describe --always --dirty 2>/dev/null || echo '(no git)'), $(go env GOVERSION), $(redis-server --version 2>/dev/null | grep -o 'v=[^ ]*' || echo 'no redis-server'); results in $out" >&2
echo "serve.sh: $cores cores, PIN=$PIN (server on CPUs ${server_cpus:-all}, load generator on ${client_cpus:-all}), $RUNS runs of $DURATION per case" >&2
read -ra cases <<<"$CASES"
if [[ -n $base_desc ]]; then
	for c in "${cases[@]}"; do
		case $c in
		closed-* | open-* | redis-grpc | redis-http | compat-grpc) cases+=("$c@base") ;;
		esac
	done
	echo "serve.sh: BASE=$BASE ($base_desc): each floodgate case also runs as CASE@base" >&2
fi
for ((run = 1; run <= RUNS; run++)); do
	# Each round starts one case later, so that no case always runs right
	# after the same other one.
	for ((i = 0; i < ${#cases[@]}; i++)); do
		c=${cases[$(((i + run - 1) % ${#cases[@]}))]}
		name=$c srv=$fg server_suffix=""
		if [[ $c == *@base ]]; then
			c=${c%@base} srv=$tmp/floodgate-base server_suffix=" (base $base_desc)"
		fi
		case $c in
		closed-grpc | closed-http)
			serve memory
			for keys in 1 10000; do load "$name" memory "${c#closed-}" "$keys"; done
			stop_server ;;
		open-grpc | open-http)
			serve memory
			for rate in $RATES; do load "$name" memory "${c#open-}" 10000 "$rate"; done
			stop_server ;;
		floor-grpc)
			serve floor
			for keys in 1 10000; do load "$name" floor grpc "$keys"; done
			for rate in $RATES; do load "$name" floor grpc 10000 "$rate"; done
			stop_server ;;
		redis-lib)
			redis-cli -p "$redis_port" flushall >/dev/null
			for keys in 1 10000; do libload "$keys"; done ;;
		redis-grpc | redis-http)
			redis-cli -p "$redis_port" flushall >/dev/null
			serve redis
			for keys in 1 10000; do load "$name" redis "${c#redis-}" "$keys"; done
			if [[ $c == redis-grpc ]]; then
				for rate in $REDIS_RATES; do load "$name" redis grpc 10000 "$rate"; done
			fi
			stop_server ;;
		envoy-grpc | envoy-pipelined-grpc | compat-grpc)
			redis-cli -p "$redis_port" flushall >/dev/null
			serve "${c%-grpc}"
			for keys in 1 10000; do load "$name" redis grpc "$keys"; done
			for rate in $REDIS_RATES; do load "$name" redis grpc 10000 "$rate"; done
			stop_server ;;
		*)
			echo "serve.sh: unknown case $c" >&2
			exit 2 ;;
		esac
	done
done
go run ./cmd/servesummary "$out"
