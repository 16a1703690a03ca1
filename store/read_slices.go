package store

import "io"

// SliceReader is implemented by the files of Store.OpenFile. ReadSlices reads like ReadAt,
// but hands out the bytes of rebuilt pages where they are instead of copying them into p: a
// FUSE read of an older version is then written to the kernel straight from the page cache
// (writev of the parts), one copy of every byte fewer.
//
// The parts, in order, are the n bytes read; each is a slice of p or of a cached page. The
// caller must call release when done with them (later calls do nothing), and must not modify
// them. n and err are as ReadAt's; on an error other than io.EOF there are no parts.
type SliceReader interface {
	ReadSlices(p []byte, off int64) (parts [][]byte, release func(), n int, err error)
}

// maxSliceParts bounds the parts of one read: a read across many small tensors is copied into
// p instead (writev takes at most IOV_MAX buffers, and small parts save nothing).
const maxSliceParts = 32

// ReadSlices implements SliceReader. On an error other than io.EOF it hands out no parts.
func (f *versionFile) ReadSlices(p []byte, off int64) ([][]byte, func(), int, error) {
	if err := f.vouch(); err != nil {
		return nil, func() {}, 0, err
	}
	if parts, release, n, ok, err := f.sliceWhole(p, off); ok {
		return parts, release, n, err
	}
	if n, ok, err := f.readCopy(p, off); ok {
		return [][]byte{p[:n]}, func() {}, n, err
	}
	if !f.s.memServes(f.ver.m.Version) {
		f.copyLater()
	}
	var parts pageParts
	n, err := f.readSegments(p, off, func(sg segment, objOff int64, dst []byte) error {
		return f.s.objects.sliceObject(sg.id, sg.hint, objOff, dst, f.opts, &parts)
	})
	if err != nil && err != io.EOF {
		parts.release()
		return nil, func() {}, n, err
	}
	if len(parts.parts) > maxSliceParts {
		// Copied into p after all: fine-grained parts cost writev more than the copy.
		parts.gather(p)
		parts.release()
		return [][]byte{p[:n]}, func() {}, n, err
	}
	return parts.parts, parts.release, n, err
}

// pageParts collects the parts of a read in order: pieces of the caller's buffer, read there
// from the materialized copy, and pieces of cached pages, each page held until release.
type pageParts struct {
	parts    [][]byte
	held     []*cachedPage
	lastOwn  bool // the last part is a piece of the caller's buffer
	released bool
}

// addOwn adds a piece of the caller's buffer, which follows the previous piece there: a piece
// right after another of the buffer extends it.
func (pp *pageParts) addOwn(b []byte) {
	if len(b) == 0 {
		return
	}
	if pp.lastOwn {
		last := &pp.parts[len(pp.parts)-1]
		*last = (*last)[:len(*last)+len(b)]
		return
	}
	pp.parts = append(pp.parts, b)
	pp.lastOwn = true
}

// addPage adds b, a piece of page pg, and takes over the caller's reference to pg.
func (pp *pageParts) addPage(pg *cachedPage, b []byte) {
	pp.held = append(pp.held, pg)
	pp.parts = append(pp.parts, b)
	pp.lastOwn = false
}

// gather copies the parts into p, which they cover from its start in order; the pieces that
// are p's own are in place already.
func (pp *pageParts) gather(p []byte) {
	at := 0
	for _, part := range pp.parts {
		if len(part) > 0 && &part[0] != &p[at] {
			copy(p[at:], part)
		}
		at += len(part)
	}
}

// release lets go of the pages; only the first call does anything. Not safe for concurrent use.
func (pp *pageParts) release() {
	if pp.released {
		return
	}
	pp.released = true
	for _, pg := range pp.held {
		pg.release()
	}
	pp.held = nil
}
