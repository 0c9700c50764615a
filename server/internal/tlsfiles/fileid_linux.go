package tlsfiles

import (
	"fmt"
	"io/fs"
	"syscall"
)

// fileID returns the inode and change time of a file: a file replaced by a
// rename, or rewritten in place with its old modification time (cp -p),
// still counts as changed.
func fileID(fi fs.FileInfo) string {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return ""
	}
	return fmt.Sprintf("%d %d.%d", st.Ino, st.Ctim.Sec, st.Ctim.Nsec)
}
