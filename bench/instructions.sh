#!/usr/bin/env bash
# instructions.sh: instructions executed by floodgate serve per decision,
# counted by valgrind's callgrind, for the working tree's build and for the
# build of a git revision BASE. Unlike wall-clock or CPU time (serve.sh),
# an instruction count does not depend on what else the machine does, on
# its frequency or on the regime a shared VM happens to run in: the same
# build and load give the same count, so a before/after comparison of the
# server's own work holds on a noisy machine. It says nothing of cache
# misses, locks or the kernel's share (system calls count as one
# instruction each); serve.sh measures those.
#
#   bench/instructions.sh                        # BASE=5fb8def, memory cases, about 10 minutes
#   BASE=HEAD~3 CASES='memory-1' REPEATS=1 N1=2000 N2=6000 bench/instructions.sh
#   CASES='memory-1 memory-10000 redis-1 redis-10000' bench/instructions.sh
#
# Cases: memory-K (the embedded memory backend) and redis-K (--redis, on a
# private redis-server this script starts; the server's instructions only),
# with K keys: floodgate bench --keys K 'user={n}' on serve.sh's
# configuration (domain bench, key user, 10^9 a second: never denied). When
# the working tree's build has --leases (off by default), the redis cases
# also run it with --leases, as "after-leases".
#
# Each run starts the server under callgrind (GOMAXPROCS=1, as serve.sh's
# pinned server), sends WARMUP requests, zeroes the counters, then sends N1
# requests and dumps the counters (callgrind_control -d), then N2 requests
# and dumps again (each dump counts since the last): instructions per
# decision = (Ir(N2) - Ir(N1)) / (N2 - N1), which leaves out start-up, the load generator's connection and check
# request, and anything else a run of floodgate bench costs once. The load
# generator (the working tree's floodgate bench, CONCURRENCY workers, one
# connection) runs natively. Each (case, build) runs REPEATS times, builds
# interleaved; one line per run goes to stderr, then one line per case and
# build to stdout: the mean and the spread (max - min) of the runs.
#
# Under callgrind the server decides about 500 times a second; N1=10000 and
# N2=30000 take about 70 s a run. KEEP=DIR keeps the callgrind files
# (DIR/CASE.BUILD.RUN.{1,2}) for callgrind_annotate.
#
# Go under valgrind 3.19 needs GODEBUG=cpu.rdtscp=off (valgrind does not
# decode RDTSCP) and asyncpreemptoff=1 (callgrind asserts on the SIGURG of
# asynchronous preemption, and on SIGTERM: the server is ended with SIGKILL
# once its counters are dumped). Needs valgrind (callgrind_control) and, for
# the redis cases, redis-server. Not part of the test suite.
set -euo pipefail
cd "$(dirname "$0")/.."

BASE=${BASE:-5fb8def}
CASES=${CASES:-memory-1 memory-10000}
N1=${N1:-10000}
N2=${N2:-30000}
WARMUP=${WARMUP:-1000}
REPEATS=${REPEATS:-2}
CONCURRENCY=${CONCURRENCY:-4}
KEEP=${KEEP:-}

command -v valgrind >/dev/null && command -v callgrind_control >/dev/null ||
	{ echo "instructions.sh: needs valgrind (apt-get install -y valgrind)" >&2; exit 1; }
((N2 > N1)) || { echo "instructions.sh: N2 must be larger than N1" >&2; exit 2; }

tmp=$(mktemp -d)
server_pid="" redis_pid=""
cleanup() {
	# A server still running (after a failure) under callgrind: SIGKILL,
	# as callgrind would assert on SIGTERM.
	if [[ -n $server_pid ]]; then kill -9 "$server_pid" 2>/dev/null || true; wait "$server_pid" 2>/dev/null || true; fi
	if [[ -n $redis_pid ]]; then kill "$redis_pid" 2>/dev/null || true; wait "$redis_pid" 2>/dev/null || true; fi
	rm -rf "$tmp"
}
trap cleanup EXIT
[[ -z $KEEP ]] || mkdir -p "$KEEP"

go build -o "$tmp/after" ./cmd/floodgate
mkdir -p "$tmp/base-src"
git archive "$BASE" | tar -x -C "$tmp/base-src"
(cd "$tmp/base-src" && go build -buildvcs=false -o "$tmp/base" ./cmd/floodgate)
after_desc=$(git describe --always --dirty 2>/dev/null || echo '(no git)')
base_desc=$(git rev-parse --short "$BASE")
fg=$tmp/after # the load generator
leases=0
if "$tmp/after" serve --help 2>&1 | grep -q -- '-leases'; then leases=1; fi

. bench/lib.sh # free_port, bench_config
bench_config "$tmp/bench.yaml"


redis_port=""
if [[ " $CASES " == *" redis-"* ]]; then
	command -v redis-server >/dev/null || { echo "instructions.sh: the redis cases need redis-server" >&2; exit 1; }
	redis_port=$(free_port)
	redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no \
		--dir "$tmp" --daemonize no >"$tmp/redis.log" 2>&1 &
	redis_pid=$!
	for _ in $(seq 50); do
		redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break
		sleep 0.1
	done
fi

# load KEYS N: N requests from floodgate bench; prints the decisions made
# (OK and OVER_LIMIT answers), fails on any error.
load() {
	"$fg" bench --addr "$grpc_addr" --domain bench --keys "$1" --requests "$2" \
		--concurrency "$CONCURRENCY" --conns 1 --json --quiet 'user={n}' >"$tmp/run.json"
	local ok over errors
	ok=$(sed -n 's/^ *"ok": *\([0-9]*\).*/\1/p' "$tmp/run.json")
	over=$(sed -n 's/^ *"over_limit": *\([0-9]*\).*/\1/p' "$tmp/run.json")
	errors=$(sed -n 's/^ *"errors": *\([0-9]*\).*/\1/p' "$tmp/run.json")
	[[ $errors == 0 ]] || { echo "instructions.sh: $errors errors:" >&2; cat "$tmp/run.json" >&2; exit 1; }
	echo $((ok + over))
}

# dump N: the Ir counted since the counters were last zeroed or dumped
# (callgrind_control -d writes it to cg.out.N and zeroes them).
dump() {
	callgrind_control -d "$server_pid" >/dev/null 2>&1
	sed -n 's/^summary: *//p' "$tmp/cg.out.$1"
}

# measure CASE BUILD RUN: one run; sets per to its instructions per decision.
measure() {
	local case=$1 build=$2 run=$3 store=${1%-*} keys=${1#*-}
	local bin=$tmp/$build args=()
	args=(serve --config "$tmp/bench.yaml" --grpc-addr 127.0.0.1:0 --http-addr '' --log-format json --reload-interval 0)
	if [[ $build == after-leases ]]; then bin=$tmp/after args+=(--leases); fi
	if [[ $store == redis ]]; then
		redis-cli -p "$redis_port" flushall >/dev/null
		args+=(--redis "redis://127.0.0.1:$redis_port")
	fi
	rm -f "$tmp"/cg.out*
	GODEBUG=cpu.rdtscp=off,asyncpreemptoff=1 GOMAXPROCS=1 \
		valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.out" "$bin" "${args[@]}" 2>"$tmp/serve.log" &
	server_pid=$!
	for _ in $(seq 1200); do
		grep -q '"msg":"floodgate starting"' "$tmp/serve.log" && break
		kill -0 "$server_pid" 2>/dev/null || break
		sleep 0.1
	done
	grpc_addr=$(sed -n 's/.*"msg":"floodgate starting".*"grpc":"\([^"]*\)".*/\1/p' "$tmp/serve.log")
	[[ -n $grpc_addr ]] || { echo "instructions.sh: the server did not start:" >&2; cat "$tmp/serve.log" >&2; exit 1; }
	load "$keys" "$WARMUP" >/dev/null
	callgrind_control -z "$server_pid" >/dev/null 2>&1
	local d1 d2 i1 i2
	d1=$(load "$keys" "$N1")
	i1=$(dump 1)
	d2=$(load "$keys" "$N2")
	i2=$(dump 2)
	if [[ -n $KEEP ]]; then
		local f
		for f in "$tmp"/cg.out.*; do cp "$f" "$KEEP/$case.$build.$run.${f##*.}"; done
	fi
	kill -9 "$server_pid" 2>/dev/null || true
	wait "$server_pid" 2>/dev/null || true
	server_pid=""
	per=$(awk -v i1="$i1" -v i2="$i2" -v d1="$d1" -v d2="$d2" 'BEGIN{printf "%.0f", (i2 - i1) / (d2 - d1)}')
	echo "instructions.sh: $case $build run $run: Ir $i1 for $d1 decisions, $i2 for $d2: $per instructions/decision" >&2
}

echo "instructions.sh: after = working tree $after_desc, base = $BASE ($base_desc), $(go env GOVERSION), $(valgrind --version)" >&2
echo "instructions.sh: N1=$N1 N2=$N2 WARMUP=$WARMUP CONCURRENCY=$CONCURRENCY REPEATS=$REPEATS" >&2
declare -A results
for c in $CASES; do
	case $c in
	memory-[0-9]* | redis-[0-9]*) ;;
	*) echo "instructions.sh: unknown case $c" >&2; exit 2 ;;
	esac
	builds=(base after)
	if [[ $c == redis-* && $leases == 1 ]]; then builds+=(after-leases); fi
	for ((run = 1; run <= REPEATS; run++)); do
		# Builds interleaved, each round starting with the next one.
		for ((i = 0; i < ${#builds[@]}; i++)); do
			b=${builds[$(((i + run - 1) % ${#builds[@]}))]}
			measure "$c" "$b" "$run"
			results[$c.$b]+="$per "
		done
	done
	for b in "${builds[@]}"; do
		desc=$after_desc
		[[ $b == base ]] && desc=$base_desc
		# shellcheck disable=SC2086
		printf '%s\n' ${results[$c.$b]} | awk -v c="$c" -v b="$b" -v d="$desc" '
			{ s += $1; n++; if (n == 1 || $1 < lo) lo = $1; if (n == 1 || $1 > hi) hi = $1; all = all " " $1 }
			END { printf "%-14s %-15s %-10s %8.0f instructions/decision (runs:%s; spread %.1f%%)\n", c, b, d, s / n, all, 100 * (hi - lo) / (s / n) }'
	done
done
