//go:build linux

package testenv

import (
	"bytes"
	"os"
	"strconv"
	"time"
)

// procEntry is what procTable reads from /proc/<pid>/stat.
type procEntry struct {
	pid, ppid, pgrp int
	live            bool // not a zombie
}

// procTable lists the processes visible in /proc.
func procTable() []procEntry {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var t []procEntry
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// After the parenthesised command name: state ppid pgrp ...
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := bytes.Fields(b[i+1:])
		if len(f) < 3 {
			continue
		}
		ppid, _ := strconv.Atoi(string(f[1]))
		pgrp, _ := strconv.Atoi(string(f[2]))
		t = append(t, procEntry{pid: pid, ppid: ppid, pgrp: pgrp, live: f[0][0] != 'Z' && f[0][0] != 'X'})
	}
	return t
}

// descendants returns the live descendants of pid (PostgreSQL's backends
// make themselves session leaders, so its process group is not enough).
func descendants(pid int) []int {
	children := make(map[int][]int)
	for _, p := range procTable() {
		if p.live {
			children[p.ppid] = append(children[p.ppid], p.pid)
		}
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		for _, c := range children[queue[0]] {
			out = append(out, c)
			queue = append(queue, c)
		}
		queue = queue[1:]
	}
	return out
}

// anyAlive reports whether one of pids, or a member of process group pgid,
// is still alive (zombies, which hold no resources, do not count: an
// orphaned one may never be reaped when PID 1 does not reap).
func anyAlive(pgid int, pids []int) bool {
	want := make(map[int]bool, len(pids))
	for _, p := range pids {
		want[p] = true
	}
	for _, p := range procTable() {
		if p.live && (p.pgrp == pgid || want[p.pid]) {
			return true
		}
	}
	return false
}

// waitStoppedOrGone waits (up to timeout) until pid is stopped, a zombie,
// or gone: a helper process may exit while its server is being paused.
func waitStoppedOrGone(pid int, timeout time.Duration) {
	deadline := time.Now().Add(timeout)
	path := "/proc/" + strconv.Itoa(pid) + "/stat"
	for {
		b, err := os.ReadFile(path)
		if err != nil {
			return
		}
		i := bytes.LastIndexByte(b, ')')
		if i < 0 || i+2 >= len(b) {
			return
		}
		switch b[i+2] {
		case 'T', 't', 'Z', 'X':
			return
		}
		if time.Now().After(deadline) {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
}
