package store

import (
	"os"

	"golang.org/x/sys/unix"
)

// adviseWillNeed asks the kernel to start reading [off, off+n) of f into the page cache now.
// A hint: errors are ignored.
func adviseWillNeed(f *os.File, off, n int64) {
	_ = unix.Fadvise(int(f.Fd()), off, n, unix.FADV_WILLNEED)
}
