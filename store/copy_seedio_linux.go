package store

import (
	"os"

	"golang.org/x/sys/unix"
)

// setDirect turns O_DIRECT on for writes to f; false when its file system refuses it (tmpfs,
// some FUSE and network file systems).
func setDirect(f *os.File) bool {
	fl, err := unix.FcntlInt(f.Fd(), unix.F_GETFL, 0)
	if err != nil {
		return false
	}
	_, err = unix.FcntlInt(f.Fd(), unix.F_SETFL, fl|unix.O_DIRECT)
	return err == nil
}

// clearDirect turns O_DIRECT off again (a device that wants larger blocks than directAlign).
func clearDirect(f *os.File) bool {
	fl, err := unix.FcntlInt(f.Fd(), unix.F_GETFL, 0)
	if err != nil {
		return false
	}
	_, err = unix.FcntlInt(f.Fd(), unix.F_SETFL, fl&^unix.O_DIRECT)
	return err == nil
}
