package store

import (
	"fmt"
	"io"
	"sort"
	"sync"
)

// SliceReader is implemented by the files of Store.OpenFile. ReadSlices reads like ReadAt,
// but hands out the bytes of rebuilt pages where they are instead of copying them into p: a
// FUSE read of an older version is then written to the kernel straight from the page cache
// (writev of the parts), one copy of every byte fewer.
//
// The parts, in order, are the n bytes read; each is a slice of p or of a cached page. The
// caller must call release exactly once when done with them (it is safe to call more often
// and does nothing after the first time), and must not modify them. n and err are as ReadAt's.
type SliceReader interface {
	ReadSlices(p []byte, off int64) (parts [][]byte, release func(), n int, err error)
}

// maxSliceParts bounds the parts of one read: a read across many small tensors is copied into
// p instead (writev takes at most IOV_MAX buffers, and small parts save nothing).
const maxSliceParts = 32

// ReadSlices implements SliceReader.
func (f *versionFile) ReadSlices(p []byte, off int64) ([][]byte, func(), int, error) {
	noop := func() {}
	if off < 0 {
		return nil, noop, 0, fmt.Errorf("read %s at %d: negative offset", f.f.Path, off)
	}
	if off >= f.f.Size {
		return nil, noop, 0, io.EOF
	}
	want := len(p)
	if rest := f.f.Size - off; int64(len(p)) > rest {
		p = p[:rest]
	}
	var (
		parts [][]byte
		held  []*cachedPage
		inP   = -1 // parts[len(parts)-1] is p[inP:n] (then a part from p extends it)
	)
	var once sync.Once
	release := func() {
		once.Do(func() {
			for _, pg := range held {
				pg.release()
			}
		})
	}
	addP := func(from, to int) {
		if inP >= 0 {
			parts[len(parts)-1] = p[inP:to]
			return
		}
		parts = append(parts, p[from:to])
		inP = from
	}
	i := sort.Search(len(f.segs), func(i int) bool { return f.segs[i].end > off })
	n := 0
	for ; n < len(p) && i < len(f.segs); i++ {
		sg := f.segs[i]
		pos := off + int64(n)
		k := int(min(int64(len(p)-n), sg.end-pos))
		if f.s.servedByCopy(sg.id, f.opts) {
			if err := f.s.readObject(sg.id, sg.hint, pos-sg.start, p[n:n+k], f.opts); err != nil {
				release()
				return nil, noop, n, fmt.Errorf("read %s of version %d: %w", f.f.Path, f.ver.m.Version, err)
			}
			addP(n, n+k)
			n += k
			continue
		}
		for objOff, end := pos-sg.start, pos-sg.start+int64(k); objOff < end; {
			pg, err := f.s.page(sg.id, sg.hint, objOff/pageSize, f.opts)
			if err != nil {
				release()
				return nil, noop, n, fmt.Errorf("read %s of version %d: %w", f.f.Path, f.ver.m.Version, err)
			}
			in := objOff % pageSize
			m := min(int64(len(pg.b))-in, end-objOff)
			if m <= 0 {
				pg.release()
				release()
				return nil, noop, n, fmt.Errorf("read %s of version %d: %w", f.f.Path, f.ver.m.Version,
					objectError(sg.id, fmt.Errorf("read at %d past the content end: %w", objOff, ErrCorrupt)))
			}
			held = append(held, pg)
			parts = append(parts, pg.b[in:in+m])
			inP = -1
			objOff += m
			n += int(m)
		}
	}
	f.noteRead(off, off+int64(n))
	if len(parts) > maxSliceParts {
		// Copied into p after all: fine-grained parts cost writev more than the copy.
		at := 0
		for _, part := range parts {
			at += copy(p[at:], part)
		}
		release()
		parts, release = [][]byte{p[:n]}, noop
	}
	if n < want {
		return parts, release, n, io.EOF
	}
	return parts, release, n, nil
}

// servedByCopy reports whether reads of object id come straight from the materialized copy
// (a pread into the caller's buffer, no page).
func (s *Store) servedByCopy(id ID, opts readOpts) bool {
	if opts.noMaterialized {
		return false
	}
	view := s.mat.view()
	if view == nil {
		return false
	}
	defer view.release()
	return view.holds(id)
}
