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
#
# Cases: closed-grpc, closed-http (closed loop on the memory backend, 1 and
# 10,000 keys), open-grpc, open-http (open loop at each of RATES on memory),
# floor-grpc (the closed and open loops of closed-grpc and open-grpc against
# cmd/rlsfloor, a grpc-go server that answers OK without deciding: the
# transport's floor), redis-grpc, redis-http (floodgate serve --redis, closed
# loop) and redis-lib (cmd/libload: the library's Limiter.Allow from 64
# goroutines on the same Redis: the issue's "library's own decisions/s in
# the same run").
#
# PIN=1 (the default on a machine with 2 or more cores) puts the server on the
# last core and the load generator on the others (taskset, GOMAXPROCS to
# match) in the memory and floor cases, so that the generator's work does not
# queue behind the server's; PIN=0 lets the kernel share all cores between
# them. The Redis cases are never pinned: redis-server, the server and the
# load generator (or the library) share every core, so that the library and
# the server get the same machine. Needs redis-server on PATH for the Redis
# cases, and taskset (util-linux) for PIN=1.
set -euo pipefail
cd "$(dirname "$0")"

DURATION=${DURATION:-10s}
RUNS=${RUNS:-3}
RATES=${RATES:-5000 10000 20000}
CASES=${CASES:-closed-grpc closed-http open-grpc open-http floor-grpc redis-lib redis-grpc redis-http}
CLIENT=${CLIENT:-h2}
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
cat >"$tmp/bench.yaml" <<'EOF'
domain: bench
descriptors:
  - key: user
    rate_limit:
      unit: second
      requests_per_unit: 1000000000
EOF

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

redis_port=""
if [[ " $CASES " == *" redis-"* ]]; then
	command -v redis-server >/dev/null || { echo "serve.sh: the Redis cases need redis-server (apt-get install -y redis-server)" >&2; exit 1; }
	redis_port=$((20000 + RANDOM % 20000))
	redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no \
		--dir "$tmp" --daemonize no >"$tmp/redis.log" 2>&1 &
	redis_pid=$!
	pids+=("$redis_pid")
	for _ in $(seq 50); do
		redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break
		sleep 0.1
	done
fi

# serve STORE: start floodgate serve (STORE memory or redis) or cmd/rlsfloor
# (STORE floor); sets server_pid, grpc_addr, http_addr, and the CPUs of the
# load generator (cpus, procs).
serve() {
	local args=(serve --config "$tmp/bench.yaml" --grpc-addr 127.0.0.1:0 --http-addr 127.0.0.1:0 --log-format json --log-level info --reload-interval 0)
	local scpus=$server_cpus sprocs=$server_procs
	cpus=$client_cpus procs=$client_procs
	if [[ $1 == redis ]]; then
		args+=(--redis "redis://127.0.0.1:$redis_port")
		scpus="" sprocs=$cores cpus="" procs=$cores
	fi
	: >"$tmp/serve.log"
	local ready='"msg":"floodgate starting"'
	if [[ $1 == floor ]]; then
		ready='listening on'
		GOMAXPROCS=$sprocs start "$scpus" "$tmp/rlsfloor" --addr 127.0.0.1:0 2>"$tmp/serve.log" &
	else
		GOMAXPROCS=$sprocs start "$scpus" "$fg" "${args[@]}" 2>"$tmp/serve.log" &
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
	echo "serve.sh: $name store=$store api=$api keys=$keys rate=${rate:-closed}: $(grep -o '"decisions_per_s": *[0-9]*' "$tmp/run.json")" >&2
}

# libload KEYS: one run of the library on the Redis.
libload() {
	local r0 r1
	r0=$(cputicks "$redis_pid")
	GOMAXPROCS=$cores "$tmp/libload" --redis "redis://127.0.0.1:$redis_port" --keys "$1" --duration "$DURATION" >"$tmp/run.json"
	r1=$(cputicks "$redis_pid")
	record redis-lib redis 0 "$((r1 - r0))"
	echo "serve.sh: redis-lib keys=$1: $(grep -o '"decisions_per_s": *[0-9]*' "$tmp/run.json")" >&2
}

# record CASE STORE SERVER_TICKS REDIS_TICKS: append the run in $tmp/run.json.
record() {
	printf '{"case":"%s","store":"%s","round":%d,"pin":%s,"client":"%s","server_cpu_s":%s,"redis_cpu_s":%s,"bench":%s}\n' \
		"$1" "$2" "$run" "$PIN" "$CLIENT" "$(awk -v t="$3" -v hz="$hz" 'BEGIN{print t/hz}')" \
		"$(awk -v t="$4" -v hz="$hz" 'BEGIN{print t/hz}')" "$(tr -d '\n' <"$tmp/run.json")" >>"$out"
}

mkdir -p results
out=results/serve-latest.jsonl
: >"$out"
echo "serve.sh: $cores cores, PIN=$PIN (server on CPUs ${server_cpus:-all}, load generator on ${client_cpus:-all}), $RUNS runs of $DURATION per case" >&2
for ((run = 1; run <= RUNS; run++)); do
	for c in $CASES; do
		case $c in
		closed-grpc | closed-http)
			serve memory
			for keys in 1 10000; do load "$c" memory "${c#closed-}" "$keys"; done
			stop_server ;;
		open-grpc | open-http)
			serve memory
			for rate in $RATES; do load "$c" memory "${c#open-}" 10000 "$rate"; done
			stop_server ;;
		floor-grpc)
			serve floor
			for keys in 1 10000; do load "$c" floor grpc "$keys"; done
			for rate in $RATES; do load "$c" floor grpc 10000 "$rate"; done
			stop_server ;;
		redis-lib)
			redis-cli -p "$redis_port" flushall >/dev/null
			for keys in 1 10000; do libload "$keys"; done ;;
		redis-grpc | redis-http)
			redis-cli -p "$redis_port" flushall >/dev/null
			serve redis
			for keys in 1 10000; do load "$c" redis "${c#redis-}" "$keys"; done
			stop_server ;;
		*)
			echo "serve.sh: unknown case $c" >&2
			exit 2 ;;
		esac
	done
done
go run ./cmd/servesummary "$out"
