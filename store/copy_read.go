package store

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
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

// Every read of the copy is checked (copy_sums.go): it reads the whole sumChunks under the
// bytes asked for, checks their CRC-32C against the sums of the file's content, and only then
// are the bytes used. A read that fails its check, or fails at all, marks the copy broken
// (nothing reads it any more; the next ensure rebuilds it, started at once in the background
// where the store keeps a copy) and returns a copyError: the caller reads from the objects
// instead. So a damaged copy costs time, never a wrong byte.

// copySlack is how much longer than the bytes asked for a buffer of readInto must be: a chunk
// before them and one after.
const copySlack = 2 * sumChunk

// copyError is a failed read of the copy (damage, or an I/O error): the caller falls back to
// the objects.
type copyError struct{ err error }

func (e *copyError) Error() string { return "materialized copy: " + e.err.Error() }
func (e *copyError) Unwrap() error { return e.err }

func isCopyError(err error) bool {
	var ce *copyError
	return errors.As(err, &ce)
}

// failed marks the copy broken after a failed read of it and returns err as a copyError.
func (m *materialized) failed(err error) error {
	if !m.broken.Swap(true) && !m.closed.Load() && (!m.s.readOnly || m.s.opts.Materialize) {
		m.ensureInBackground()
	}
	return &copyError{err}
}

// suspect is called when a render found bytes that do not match their SHA-256: they may have
// come from the copy (read through the same checks, so they should not have), so the copy is
// dropped and rebuilt from the objects, which checks every file against its SHA-256 again.
func (m *materialized) suspect(err error) {
	m.mu.RLock()
	held := m.ver != nil
	m.mu.RUnlock()
	if held && !m.broken.Load() {
		m.s.log.Warn("materialized copy: a render found damage; the copy is rebuilt from the objects", "err", err)
		m.failed(err)
	}
}

// chunkError logs a chunk of the copy that does not match its sums and marks the copy broken.
func (m *materialized) chunkError(p string, chunk int64, want, got uint32) error {
	m.s.log.Warn(fmt.Sprintf("materialized copy: %s: chunk %d (bytes %d-%d) has CRC-32C %08x, its sums say %08x: not served; reads replay from the objects and the copy is rebuilt",
		p, chunk, chunk*sumChunk, (chunk+1)*sumChunk, got, want), "file", p)
	return m.failed(fmt.Errorf("%s: chunk %d does not match its sum: %w", p, chunk, ErrCorrupt))
}

// readChecked reads bytes [abs, abs+len(p)) of file path of the copy into p and checks every
// chunk under them before p may be used (preadChecked).
func (v *matView) readChecked(path string, p []byte, abs int64) error {
	sums := v.m.sums[path]
	end := abs + int64(len(p))
	if sums == nil || abs < 0 || end > sums.size {
		return v.m.failed(fmt.Errorf("%s: bytes [%d, %d) are not in the checked copy", path, abs, end))
	}
	f, err := v.m.file(path)
	if err != nil {
		return err
	}
	err = preadChecked(f, sums, p, abs, &v.m.s.objects.buffers().edges)
	var bad *chunkMismatch
	switch {
	case errors.As(err, &bad):
		return v.m.chunkError(path, bad.chunk, bad.want, bad.got)
	case err != nil:
		return v.m.failed(fmt.Errorf("read %s: %w", path, err))
	}
	return nil
}

// chunkMismatch is a chunk of a checked file whose CRC-32C is not its sum's.
type chunkMismatch struct {
	chunk     int64
	want, got uint32
}

func (e *chunkMismatch) Error() string {
	return fmt.Sprintf("chunk %d (bytes %d-%d) has CRC-32C %08x, its sums say %08x", e.chunk, e.chunk*sumChunk, (e.chunk+1)*sumChunk, e.got, e.want)
}

// preadChecked reads bytes [abs, abs+len(p)) of f, whose content sums describes, into p: the
// parts of their first and last chunks outside p into buffers of their own, then every chunk
// is checked before p may be used (edges: the Store's pool of such buffers). A chunk that
// does not match is a *chunkMismatch.
func preadChecked(f *os.File, sums *fileSums, p []byte, abs int64, edges *sync.Pool) error {
	end := abs + int64(len(p))
	if abs < 0 || end > sums.size {
		return fmt.Errorf("bytes [%d, %d) of a checked file of %d bytes: %w", abs, end, sums.size, ErrCorrupt)
	}
	lo := abs - abs%sumChunk
	hi := min((end+sumChunk-1)/sumChunk*sumChunk, sums.size)
	bp := edges.Get().(*[]byte)
	defer edges.Put(bp)
	head, tail := (*bp)[:abs-lo], (*bp)[sumChunk:sumChunk+hi-end]
	for _, r := range []struct {
		b   []byte
		off int64
	}{{head, lo}, {p, abs}, {tail, end}} {
		if len(r.b) == 0 {
			continue
		}
		if err := readFull(f, r.b, r.off); err != nil {
			return err
		}
	}
	if chunk, want, got, ok := sums.check(lo, head, p, tail); !ok {
		return &chunkMismatch{chunk, want, got}
	}
	return nil
}

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
// buffer at least n+copySlack long, checks them, and returns them (a part of raw) and whether
// it read them with O_DIRECT (readFileInto).
func (v *matView) readInto(id ID, raw []byte, off, n int64) (b []byte, direct bool, err error) {
	loc, ok := v.m.locs[id]
	if !ok {
		return nil, false, fmt.Errorf("materialized copy does not hold object %s", id)
	}
	return v.readFileInto(loc.path, raw, loc.off+off, n)
}

// readFileInto reads bytes [abs, abs+n) of file path of the copy into raw, a
// directAlign-aligned buffer at least n+copySlack long, checks them, and returns them (a part
// of raw) and whether it read them with O_DIRECT. It does when the page cache does not hold
// them all (partly cached bytes are read whole from the disk). Files that refuse O_DIRECT and
// kernels that cannot tell what they cache read through the page cache.
func (v *matView) readFileInto(path string, raw []byte, abs, n int64) (b []byte, direct bool, err error) {
	sums := v.m.sums[path]
	if sums == nil || abs < 0 || abs+n > sums.size {
		return nil, false, v.m.failed(fmt.Errorf("%s: bytes [%d, %d) are not in the checked copy", path, abs, abs+n))
	}
	// raw[i] holds file byte base+i: base is abs rounded down to a chunk of the sums (a
	// multiple of a block), so that every block-aligned file offset lands at a block-aligned
	// address and the chunks under the bytes can be checked in place.
	base := abs - abs%sumChunk
	hi := min((abs+n+sumChunk-1)/sumChunk*sumChunk, sums.size)
	if int64(len(raw)) < hi-base {
		return nil, false, fmt.Errorf("read of %d bytes of the copy into a buffer of %d", n, len(raw))
	}
	b = raw[abs-base : abs-base+n]
	f, err := v.m.file(path)
	if err != nil {
		return nil, false, err
	}
	if all, known := rangeCached(f, abs, n); all || !known {
		return b, false, v.readChecked(path, b, abs)
	}
	df, err := v.m.directFile(path)
	if errors.Is(err, errNoDirectIO) {
		return b, false, v.readChecked(path, b, abs)
	}
	if err != nil {
		return nil, false, err
	}
	to := min((hi+directAlign-1)/directAlign*directAlign, base+int64(len(raw)))
	got, err := df.ReadAt(raw[:to-base], base)
	if errors.Is(err, syscall.EINVAL) {
		// The device wants larger blocks than directAlign: the page cache it is, from now on.
		v.m.filesMu.Lock()
		v.m.noDirect = true
		v.m.filesMu.Unlock()
		return b, false, v.readChecked(path, b, abs)
	}
	if base+int64(got) < hi {
		if err == nil || errors.Is(err, io.EOF) {
			err = fmt.Errorf("short read of %d bytes at %d: %w", to-base, base, ErrCorrupt)
		}
		// Someone damaged the copy: rebuild it.
		return nil, true, v.m.failed(fmt.Errorf("read %s: %w", path, err))
	}
	if chunk, want, got, ok := sums.check(base, raw[:hi-base]); !ok {
		return nil, true, v.m.chunkError(path, chunk, want, got)
	}
	return b, true, nil
}

// readCached reads bytes [off, off+len(p)) of object id from the copy into p with one pread
// and without the copy's sums, when the page cache holds them (false: it does not, nothing
// was read). Only for a caller that checks every byte it reads against the object's own
// identity or CRC before anything computed from them is kept (a diff's baseCheck, which
// falls back to the objects when they do not match): the sums would check the same bytes a
// second time, and under a small tensor read and check up to two chunks of its neighbours
// (three times the bytes for a 64 KiB expert; issue 29).
//
// A read of at most smallBaseRead bytes goes through the page cache even when it does not
// hold them (it then returns true as well): a batch commit of a mixture of experts diffs
// thousands of such tensors one after the other, and one O_DIRECT read each was a wait on
// the disk per tensor, of three times its bytes; through the page cache, the kernel's read
// ahead brings the next tensors in with the first, and the seal's bring-forward of the copy
// (copy_forward.go, which reads the copy through the page cache) finds them there.
func (v *matView) readCached(id ID, p []byte, off int64) (bool, error) {
	loc, ok := v.m.locs[id]
	if !ok {
		return false, fmt.Errorf("materialized copy does not hold object %s", id)
	}
	abs, n := loc.off+off, int64(len(p))
	sums := v.m.sums[loc.path]
	if sums == nil || abs < 0 || abs+n > sums.size {
		return false, v.m.failed(fmt.Errorf("%s: bytes [%d, %d) are not in the checked copy", loc.path, abs, abs+n))
	}
	f, err := v.m.file(loc.path)
	if err != nil {
		return false, err
	}
	if n > smallBaseRead {
		if all, known := rangeCached(f, abs, n); !all && known {
			return false, nil
		}
	}
	if err := readFull(f, p, abs); err != nil {
		return false, v.m.failed(fmt.Errorf("read %s: %w", loc.path, err))
	}
	return true, nil
}

// smallBaseRead is the longest read of readCached that goes through the page cache when it
// does not hold the bytes: a small tensor read whole (experts of a mixture are tens to
// hundreds of KiB). Longer reads (a large tensor's chunks) stay on O_DIRECT with the read
// ahead of stream_base.go.
const smallBaseRead = 1 << 20

// readAt reads bytes [off, off+len(p)) of object id from the copy.
func (v *matView) readAt(id ID, p []byte, off int64) error {
	loc, ok := v.m.locs[id]
	if !ok {
		return fmt.Errorf("materialized copy does not hold object %s", id)
	}
	return v.readChecked(loc.path, p, loc.off+off)
}

// file returns an open handle of a file of the copy (under a shared or exclusive hold).
func (m *materialized) file(p string) (*os.File, error) {
	m.filesMu.Lock()
	defer m.filesMu.Unlock()
	if f := m.files[p]; f != nil {
		return f, nil
	}
	f, err := openIn(m.dir, p, os.O_RDWR, 0)
	if err != nil {
		return nil, m.failed(err)
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
	f, err := openDirect(m.dir, p)
	if errors.Is(err, errNoDirectIO) {
		m.noDirect = true
		return nil, err
	}
	if err != nil {
		return nil, m.failed(err)
	}
	m.direct[p] = f
	return f, nil
}
