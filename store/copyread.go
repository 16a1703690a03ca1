package store

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
)

// Reads of the materialized copy that may find it cold: pages of older versions rebuilt from
// it (readPage) and the bases ingest diffs against (stream_base.go). Through the page cache,
// a cold copy costs the kernel a fresh page of memory for every 4 KiB (allocated, filled,
// copied out, later reclaimed), and a rebuilt page's bytes would be cached twice: as the copy
// and as the version's file, which the kernel keeps (FOPEN_KEEP_CACHE). So bytes the kernel
// does not hold are read with O_DIRECT straight into the reader's aligned buffer (readInto).
// Measured here (cold 481 MiB read of a version ten deltas behind, interleaved runs): the
// daemon's CPU 0.76-1.11 -> 0.72-0.74 s, 634-853 -> 793-851 MiB/s; the spread was the VM's
// minutes of expensive fresh memory. (A cold `dd` of the copy: 489 MB/s through the page
// cache, 1.7 GB/s with iflag=direct.)

// directAlign is the alignment O_DIRECT asks of file offsets, lengths and memory: the logical
// block size, at most 4 KiB on the disks a store lives on.
const directAlign = 4096

// readPage fills page with bytes [off, off+len(page.b)) of object id from the copy (readInto
// into page.raw, which moves page.b to where they landed) and says whether it read them with
// O_DIRECT. Short pages (raw nil) read through the page cache.
func (v *matView) readPage(id ID, page *cachedPage, off int64) (direct bool, err error) {
	if page.raw == nil {
		return false, v.readAt(id, page.b, off)
	}
	b, direct, err := v.readInto(id, page.raw, off, int64(len(page.b)))
	if err == nil {
		page.b = b
	}
	return direct, err
}

// readInto reads bytes [off, off+n) of object id from the copy into raw, a directAlign-aligned
// buffer at least n+2*directAlign long, and returns them (a part of raw) and whether it read
// them with O_DIRECT. It does when the page cache does not hold them all (partly cached bytes
// are read whole from the disk). Files that refuse O_DIRECT and kernels that cannot tell what
// they cache read through the page cache.
func (v *matView) readInto(id ID, raw []byte, off, n int64) (b []byte, direct bool, err error) {
	loc, ok := v.m.locs[id]
	if !ok {
		return nil, false, fmt.Errorf("materialized copy does not hold object %s", id)
	}
	abs := loc.off + off
	// raw[i] holds file byte base+i: base is abs rounded down to a block, so that every
	// block-aligned file offset lands at a block-aligned address.
	base := abs - abs%directAlign
	b = raw[abs-base : abs-base+n]
	f, err := v.m.file(loc.path)
	if err != nil {
		return nil, false, err
	}
	if all, known := rangeCached(f, abs, n); all || !known {
		return b, false, v.readAt(id, b, off)
	}
	df, err := v.m.directFile(loc.path)
	if errors.Is(err, errNoDirectIO) {
		return b, false, v.readAt(id, b, off)
	}
	if err != nil {
		return nil, false, err
	}
	to := min((abs+n+directAlign-1)/directAlign*directAlign, base+int64(len(raw)))
	got, err := df.ReadAt(raw[:to-base], base)
	if errors.Is(err, syscall.EINVAL) {
		// The device wants larger blocks than directAlign: the page cache it is, from now on.
		v.m.filesMu.Lock()
		v.m.noDirect = true
		v.m.filesMu.Unlock()
		return b, false, v.readAt(id, b, off)
	}
	if base+int64(got) < abs+n {
		if err == nil || errors.Is(err, io.EOF) {
			err = fmt.Errorf("short read of %d bytes at %d: %w", to-base, base, ErrCorrupt)
		}
		v.m.broken.Store(true) // someone damaged the copy: rebuild it at the next ensure
		return nil, true, fmt.Errorf("read materialized copy of %s: %w", loc.path, err)
	}
	return b, true, nil
}

// readAt reads bytes [off, off+len(p)) of object id from the copy.
func (v *matView) readAt(id ID, p []byte, off int64) error {
	loc, ok := v.m.locs[id]
	if !ok {
		return fmt.Errorf("materialized copy does not hold object %s", id)
	}
	f, err := v.m.file(loc.path)
	if err != nil {
		return err
	}
	if err := readFull(f, p, loc.off+off); err != nil {
		// Someone damaged the copy: rebuild it at the next ensure.
		v.m.broken.Store(true)
		return fmt.Errorf("read materialized copy of %s: %w", loc.path, err)
	}
	return nil
}

// file returns an open handle of a file of the copy (under a shared or exclusive hold).
func (m *materialized) file(p string) (*os.File, error) {
	m.filesMu.Lock()
	defer m.filesMu.Unlock()
	if f := m.files[p]; f != nil {
		return f, nil
	}
	f, err := os.OpenFile(filepath.Join(m.dir, filepath.FromSlash(p)), os.O_RDWR, 0)
	if err != nil {
		m.broken.Store(true)
		return nil, fmt.Errorf("materialized copy: %w", err)
	}
	m.files[p] = f
	return f, nil
}

// directFile returns the O_DIRECT handle of a file of the copy (under a shared or exclusive
// hold), or errNoDirectIO when the file system refuses O_DIRECT.
func (m *materialized) directFile(p string) (*os.File, error) {
	m.filesMu.Lock()
	defer m.filesMu.Unlock()
	if m.noDirect {
		return nil, errNoDirectIO
	}
	if f := m.direct[p]; f != nil {
		return f, nil
	}
	f, err := openDirect(filepath.Join(m.dir, filepath.FromSlash(p)))
	if errors.Is(err, errNoDirectIO) {
		m.noDirect = true
		return nil, err
	}
	if err != nil {
		m.broken.Store(true)
		return nil, fmt.Errorf("materialized copy: %w", err)
	}
	m.direct[p] = f
	return f, nil
}
