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
