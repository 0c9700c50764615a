//go:build linux

package testenv

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"time"
)

// On Linux, Pdeathsig is delivered when the *thread* that forked the child
// exits, not when the process does. Go may retire OS threads, so every child
// is forked from one goroutine locked to its OS thread for the life of the
// test binary: the servers then get SIGKILL exactly when the binary dies.
var (
	spawnOnce sync.Once
	spawnCh   chan spawnReq
)

type spawnReq struct {
	cmd  *exec.Cmd
	errc chan error
}

// startCmd starts cmd so that the kernel kills it with SIGKILL when the test
// binary exits, however it exits.
func startCmd(cmd *exec.Cmd) error {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
	spawnOnce.Do(func() {
		spawnCh = make(chan spawnReq)
		go func() {
			// Never unlocked and never returns, so the thread is never
			// retired while the binary runs.
			runtime.LockOSThread()
			for req := range spawnCh {
				req.errc <- req.cmd.Start()
			}
		}()
	})
	errc := make(chan error, 1)
	spawnCh <- spawnReq{cmd: cmd, errc: errc}
	return <-errc
}

// waitStopped waits (up to timeout) until pid's scheduler state is stopped
// ('T') when stopped is true, or anything else when it is false, so that
// Pause and Resume return only once the signal has taken effect.
func waitStopped(pid int, stopped bool, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	path := fmt.Sprintf("/proc/%d/stat", pid)
	for {
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		// The state follows the parenthesised command name.
		var state byte
		if i := bytes.LastIndexByte(b, ')'); i >= 0 && i+2 < len(b) {
			state = b[i+2]
		}
		if (state == 'T') == stopped {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("testenv: pid %d still in state %q after %v", pid, state, timeout)
		}
		time.Sleep(2 * time.Millisecond)
	}
}
