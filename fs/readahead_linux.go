package fs

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
)

// ReadAheadKiB is the kernel read-ahead weightfs asks for on its mounts. FUSE takes at most the
// default 128 KiB at INIT, so a reader of a large file waits on one 128 KiB request after
// another; with a few MiB in flight the daemon reads (or rebuilds) the next MiBs while the
// reader copies the last ones (docs/benchmarks.md, figure 4).
const ReadAheadKiB = 4096

// SetReadAhead sets the kernel's read-ahead of the filesystem mounted at mnt to kib KiB through
// its backing device's sysfs entry (/sys/class/bdi/MAJOR:MINOR/read_ahead_kb). It needs root;
// callers treat a failure as a missed optimisation.
func SetReadAhead(mnt string, kib int) error {
	path, err := readAheadPath(mnt)
	if err == nil {
		err = os.WriteFile(path, []byte(strconv.Itoa(kib)+"\n"), 0)
	}
	if err != nil {
		return fmt.Errorf("set read-ahead of %s: %w", mnt, err)
	}
	return nil
}

// readAheadPath is the sysfs file holding the read-ahead of the filesystem mounted at mnt.
func readAheadPath(mnt string) (string, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(mnt, &st); err != nil {
		return "", err
	}
	dev := uint64(st.Dev)
	// Linux's dev_t: major in bits 8-19 and 32-43, minor in bits 0-7 and 20-31.
	major := (dev>>8)&0xfff | (dev>>32)&^0xfff
	minor := dev&0xff | (dev>>12)&^0xff
	return fmt.Sprintf("/sys/class/bdi/%d:%d/read_ahead_kb", major, minor), nil
}
