#!/usr/bin/env bash
# delayqueue.sh: floodgate's delayqueue against hibiken/asynq (issue 30),
# BenchmarkDelayQueue of delayqueue_test.go: lateness at given rates of jobs
# coming due, with one consumer of concurrency 16 and four of 4; the drain of
# a backlog of due jobs; script calls, Redis commands and Redis CPU per job.
# Every library runs in one `go test` process on one private redis-server
# (started by the benchmark itself, never the machine's own), each case on an
# emptied Redis with clients of its own. About 3.5 minutes a round on 2 cores
# with the defaults.
#
#   bench/delayqueue.sh                          # 2 rounds, the issue's sizes
#   COUNT=1 SHORT=1 bench/delayqueue.sh          # smoke pass, about 1 minute
#   COUNT=3 DQ_RATES=2000,5000,10000 bench/delayqueue.sh
#   BENCH='^BenchmarkDelayQueue$/^drain$' bench/delayqueue.sh   # one case
#
# Sizes come from the environment, read by the benchmark: DQ_JOBS (jobs of a
# lateness case, 20000; 2000 with SHORT), DQ_RATES (jobs due per second,
# comma-separated, 2000,5000), DQ_DRAIN_JOBS (50000; 5000 with SHORT),
# DQ_LEAD (consumers' start to the first due time, 1.5s) and DQ_DEADLINE
# (after the last due time, when an undelivered job counts as lost, 15s).
#
# As in run.sh, the cases run in COUNT rounds of `go test -count=1`, each round
# running every library one after the other, rather than -count=N (which would
# repeat each case back to back): a burst of other work on the machine then
# does not land on all samples of one library. The summary takes medians.
#
# Writes results/delayqueue-latest.txt (raw benchmark output, with the
# configuration lines benchstat keeps as labels) and
# results/delayqueue-summary.md (the tables of go run ./cmd/dqsummary, also
# printed). Needs redis-server on PATH (Debian: apt-get install -y
# redis-server).
set -euo pipefail
cd "$(dirname "$0")"

COUNT=${COUNT:-2}
BENCH=${BENCH:-^BenchmarkDelayQueue$}
short=()
if [[ -n ${SHORT:-} ]]; then short=(-short); fi

command -v redis-server >/dev/null || { echo "delayqueue.sh: redis-server not on PATH (apt-get install -y redis-server)" >&2; exit 1; }

mkdir -p results
out=results/delayqueue-latest.txt
tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT

. ./lib.sh # bench_header
{
	bench_header
	echo "asynq: $(go list -m -f '{{.Version}}' github.com/hibiken/asynq)"
	echo "rounds: $COUNT"
	echo "short: ${SHORT:-no}"
	for v in DQ_JOBS DQ_RATES DQ_DRAIN_JOBS DQ_LEAD DQ_DEADLINE; do
		if [[ -n ${!v:-} ]]; then echo "$v: ${!v}"; fi
	done
	# Other work on the machine skews the numbers: the load before the run.
	echo "loadavg-before: $(cut -d' ' -f1-3 /proc/loadavg)"
} >"$tmp"

for ((round = 1; round <= COUNT; round++)); do
	echo "delayqueue.sh: round $round/$COUNT: go test -bench '$BENCH' -benchtime=1x -count=1 ${short[*]}" >&2
	go test -run '^$' -bench "$BENCH" -benchtime=1x -count=1 "${short[@]}" -timeout 60m . | grep -v '^ok' | tee -a "$tmp"
done
echo "loadavg-after: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$tmp"
# Keep the result only when every round succeeded (set -o pipefail).
mv "$tmp" "$out"
chmod 644 "$out"
trap - EXIT

go run ./cmd/dqsummary "$out" >results/delayqueue-summary.md
echo
cat results/delayqueue-summary.md
echo "delayqueue.sh: wrote $out and results/delayqueue-summary.md" >&2
