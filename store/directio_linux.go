package store

import (
	"errors"
	"os"

	"golang.org/x/sys/unix"
)

// openDirect opens rel below dir (reldir.go) for reading with O_DIRECT; errNoDirectIO when
// its file system refuses the flag (tmpfs, some FUSE and network file systems).
func openDirect(dir, rel string) (*os.File, error) {
	f, err := openIn(dir, rel, os.O_RDONLY|unix.O_DIRECT, 0)
	if errors.Is(err, unix.EINVAL) {
		return nil, errNoDirectIO
	}
	return f, err
}

// rangeCached reports whether the page cache holds every page of bytes [off, off+n) of f
// (cachestat(2), Linux 6.5: it starts no reading, unlike a read with RWF_NOWAIT, which
// starts the kernel's read-ahead when it misses). known is false when the kernel cannot say.
func rangeCached(f *os.File, off, n int64) (all, known bool) {
	first, end := off/pageCacheUnit, (off+n+pageCacheUnit-1)/pageCacheUnit
	r := unix.CachestatRange{Off: uint64(first * pageCacheUnit), Len: uint64((end - first) * pageCacheUnit)}
	var st unix.Cachestat_t
	if err := unix.Cachestat(uint(f.Fd()), &r, &st, 0); err != nil {
		return false, false
	}
	return int64(st.Cache) >= end-first, true
}

// pageCacheUnit is the kernel's page size as cachestat counts it.
var pageCacheUnit = int64(os.Getpagesize())
