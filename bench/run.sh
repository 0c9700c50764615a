#!/usr/bin/env bash
# run.sh: the whole comparison of floodgate with its peers. Every library runs
# in one `go test` process on one private redis-server (started by the
# benchmarks themselves, never the machine's own). About 11 minutes on 2 cores
# with the defaults.
#
#   bench/run.sh                      # full run: -benchtime=0.5s, 5 rounds
#   BENCHTIME=2000x COUNT=1 SHORT=1 bench/run.sh   # smoke pass, about 1 minute
#   BENCH='^BenchmarkMemory$' FOOTPRINT=NONE bench/run.sh   # a subset
#
# The throughput benchmarks and the redis-benchmark ceiling run in COUNT
# rounds of `go test -count=1`: each round runs every library, one after the
# other, in one process on one private Redis. Rounds rather than -count=N
# (which repeats each benchmark back to back) spread every case's samples over
# the whole run, so that a burst of other work on the machine does not land
# on all samples of one case; benchstat and the summary take medians. Then
# the memory footprints run once (-benchtime=1x, on a fresh private Redis of
# the same configuration): they measure a state, not a rate, and do not vary.
#
# Writes results/latest.txt (raw benchmark output), results/benchstat.txt
# (benchstat's tables) and results/summary.md (the tables of results/README.md,
# with ratios and the targets met or missed). Needs redis-server and
# redis-benchmark on PATH (Debian: apt-get install -y redis-server redis-tools).
set -euo pipefail
cd "$(dirname "$0")"

BENCHTIME=${BENCHTIME:-0.5s}
COUNT=${COUNT:-5}
BENCH=${BENCH:-^Benchmark(Redis|Memory|ServerCeiling)$}
FOOTPRINT=${FOOTPRINT:-Footprint}
short=()
if [[ -n ${SHORT:-} ]]; then short=(-short); fi

for bin in redis-server redis-cli; do
	command -v "$bin" >/dev/null || { echo "run.sh: $bin not on PATH (apt-get install -y redis-server)" >&2; exit 1; }
done
command -v redis-benchmark >/dev/null || echo "run.sh: redis-benchmark not on PATH: the server ceiling is skipped (apt-get install -y redis-tools)" >&2

mkdir -p results
out=results/latest.txt
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT

. ./lib.sh # bench_header
{
	bench_header
	echo "benchtime: $BENCHTIME"
	echo "rounds: $COUNT"
	# Other work on the machine skews the numbers: the load before the run.
	echo "loadavg-before: $(cut -d' ' -f1-3 /proc/loadavg)"
} >"$tmp"

for ((round = 1; round <= COUNT; round++)); do
	echo "run.sh: round $round/$COUNT: go test -bench '$BENCH' -benchtime=$BENCHTIME -count=1 ${short[*]}" >&2
	go test -run '^$' -bench "$BENCH" -benchtime="$BENCHTIME" -count=1 "${short[@]}" -timeout 60m . | grep -v '^ok' | tee -a "$tmp"
done
echo "run.sh: go test -bench '$FOOTPRINT' -benchtime=1x -count=1" >&2
go test -run '^$' -bench "$FOOTPRINT" -benchtime=1x -count=1 -timeout 30m . | grep -v '^ok' | tee -a "$tmp"
echo "loadavg-after: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$tmp"
# Keep the result only when the run succeeded (set -o pipefail).
mv "$tmp" "$out"
chmod 644 "$out"
trap - EXIT

go tool benchstat "$out" >results/benchstat.txt
go run ./cmd/summary "$out" >results/summary.md

echo
echo "== server ceiling (redis-benchmark, EVALSHA gcra.lua) =="
grep -E '^\s+ceiling_test.go:[0-9]+: redis-benchmark' "$out" | sed 's/^ *ceiling_test.go:[0-9]*: //' || true
echo
cat results/summary.md
echo "run.sh: wrote $out, results/benchstat.txt, results/summary.md" >&2
