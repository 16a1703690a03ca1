//go:build linux

package delta

import (
	"fmt"
	"math"

	"golang.org/x/sys/unix"
)

// Stores into a shared mapping change the file's pages in the page cache, exactly as pwrite
// would: a killed process loses nothing already stored, and fsync of the file writes them
// back (Linux has one page cache, so no msync is needed before the fsync).

// mapTarget maps the target, which must still be size bytes long. A target without a file
// descriptor, or one whose file system refuses shared writable mappings, gives an error
// wrapping errNoMapping.
func mapTarget(target ApplyTarget, size int64) (*fileMapping, error) {
	fd, ok := target.(interface{ Fd() uintptr })
	if !ok {
		return nil, fmt.Errorf("%w: no file descriptor", errNoMapping)
	}
	if size <= 0 || size > math.MaxInt {
		return nil, fmt.Errorf("%w: %d bytes", errNoMapping, size)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(fd.Fd()), &st); err != nil {
		return nil, fmt.Errorf("%w: fstat: %v", errNoMapping, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return nil, fmt.Errorf("%w: not a regular file", errNoMapping)
	}
	if st.Size != size {
		// Someone else changed the file since it was hashed; writing now would be a guess.
		return nil, fmt.Errorf("%w: the file is now %d bytes, it was %d when it was checked", ErrBaseMismatch, st.Size, size)
	}
	data, err := unix.Mmap(int(fd.Fd()), 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("%w: mmap: %v", errNoMapping, err)
	}
	return &fileMapping{data: data}, nil
}

func (m *fileMapping) unmap() error {
	if err := unix.Munmap(m.data); err != nil {
		return fmt.Errorf("unmap: %w", err)
	}
	return nil
}
