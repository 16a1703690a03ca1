package store

import (
	"os"

	"golang.org/x/sys/unix"
)

// evictTree puts the regular files under dir out of the page cache: each is made durable
// first (dirty pages stay cached), then dropped (POSIX_FADV_DONTNEED), as `echo 3 >
// drop_caches` would, for these files alone.
func evictTree(dir string) error {
	return eachRegularFile(dir, func(f *os.File) error {
		if err := unix.Fdatasync(int(f.Fd())); err != nil {
			return err
		}
		return unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
	})
}
