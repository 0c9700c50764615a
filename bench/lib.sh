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
