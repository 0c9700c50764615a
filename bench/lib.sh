# lib.sh: shell functions the bench scripts share (sourced, not run).

# free_port: a TCP port on 127.0.0.1 that nothing listens on now.
free_port() {
	local p
	for _ in $(seq 100); do
		p=$((20000 + RANDOM % 20000))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p"
			return
		fi
	done
	echo "$(basename "$0"): no free port found" >&2
	exit 1
}

# bench_config FILE: writes the benchmarks' configuration to FILE: domain
# bench, one limit on user that no load reaches (10^9 a second), so that
# every decision is admitted and the server's own work is measured.
bench_config() {
	cat >"$1" <<'YAML'
domain: bench
descriptors:
  - key: user
    rate_limit:
      unit: second
      requests_per_unit: 1000000000
YAML
}

# bench_header: prints the configuration lines that every benchmark report
# starts with (benchfmt configuration lines, which benchstat keeps as
# labels): floodgate's commit (+dirty when files outside bench/ changed),
# the Go and Redis versions and the cores. Run from bench/.
bench_header() {
	local commit
	commit=$(git -C .. rev-parse --short HEAD 2>/dev/null || echo unknown)
	if [[ -n $(git -C .. status --porcelain -- . ':!bench' 2>/dev/null) ]]; then commit="$commit+dirty"; fi
	echo "floodgate: $commit"
	echo "go: $(go env GOVERSION)"
	echo "redis: $(redis-server --version | sed -n 's/.*v=\([0-9.]*\).*/\1/p')"
	echo "cores: $(nproc)"
}
