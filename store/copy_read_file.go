package store

import "io"

// Reads of a file that the materialized copy holds whole: the latest version's files, and the
// files of older versions that are laid out alike (every object at the same offset of the same
// file of the copy). Read object by object, a FUSE request of 1 MiB across a dozen tensors
// would be a dozen checked reads of the copy, each reading the partial chunks at its two ends
// again to check them. Instead the request is one checked read of the copy's file: into a
// recycled aligned buffer, with O_DIRECT when the page cache does not hold the bytes
// (readFileInto), and the buffer is handed to the kernel as it is (SliceReader), so that a cold
// read of the latest version costs the disk's transfer into memory, one CRC-32C pass and the
// copy into the kernel's reply, and fills no page cache of the copy beside the mount's own.
// Every byte is checked on every read, as every read of the copy is (copy_read.go).

// wholeCopy records whether one generation of the copy holds a file whole (copyWhole).
type wholeCopy struct {
	gen   uint64
	path  string
	whole bool
}

// copyWhole says whether the copy of view v holds f whole: the copy's file of f's path has
// f's composition (the same objects at the same offsets, the same size and SHA-256), so it
// holds f's bytes at f's offsets. Worked out once per generation of the copy.
func (f *versionFile) copyWhole(v *matView) (string, bool) {
	if w := f.whole.Load(); w != nil && w.gen == v.gen {
		return w.path, w.whole
	}
	w := &wholeCopy{gen: v.gen, path: f.f.Path}
	w.whole = v.holdsWhole(f.f)
	f.whole.Store(w)
	return w.path, w.whole
}

// wholeFromCopy returns a view of the copy and the path of f in it when the copy holds f
// whole; nil when it does not (the caller releases the view).
func (f *versionFile) wholeFromCopy() (*matView, string) {
	if f.opts.noMaterialized {
		return nil, ""
	}
	f.s.mat.wanted(f.ver.m.Version) // a copy the writer deferred is written now (copy_defer.go)
	v := f.s.mat.view()
	if v == nil {
		return nil, ""
	}
	path, ok := f.copyWhole(v)
	if !ok {
		v.release()
		return nil, ""
	}
	return v, path
}

// readWhole serves ReadAt from the copy when it holds f whole: ok is false when it does not,
// or when the read failed (the copy is marked broken and logged: the caller reads from the
// objects).
func (f *versionFile) readWhole(p []byte, off int64) (n int, ok bool, err error) {
	if off < 0 || off >= f.f.Size {
		return 0, false, nil
	}
	v, path := f.wholeFromCopy()
	if v == nil {
		return 0, false, nil
	}
	defer v.release()
	want := len(p)
	if rest := f.f.Size - off; int64(len(p)) > rest {
		p = p[:rest]
	}
	if err := v.readChecked(path, p, off); err != nil {
		f.s.stats.copyMisses.Add(1)
		return 0, false, nil
	}
	f.s.stats.copyHits.Add(1)
	f.adviseWhole(v, path, off, off+int64(len(p)))
	if len(p) < want {
		return len(p), true, io.EOF
	}
	return len(p), true, nil
}

// adviseWhole is called after a ReadAt of [off, end) of f, which the copy holds whole: if it
// lies near the furthest read so far, the kernel is asked to read the copy's file ahead of it
// (willNeedFile), since ReadAt reads the copy through the page cache. ReadSlices (the mount's
// reads) reads bytes the kernel does not hold with O_DIRECT instead, and asks for nothing.
func (f *versionFile) adviseWhole(v *matView, path string, off, end int64) {
	prev := f.lastEnd.Load()
	for end > prev && !f.lastEnd.CompareAndSwap(prev, end) {
		prev = f.lastEnd.Load()
	}
	if off < prev-sequentialSlack || off > prev+sequentialSlack {
		return
	}
	if ahead := max(prev, end); ahead < f.f.Size {
		v.willNeedFile(path, ahead, copyReadAheadBytes)
	}
}

// sliceWhole serves ReadSlices from the copy when it holds f whole, a recycled page buffer per
// MiB (readFileInto): ok is false as for readWhole.
func (f *versionFile) sliceWhole(p []byte, off int64) (parts [][]byte, release func(), n int, ok bool, err error) {
	if off < 0 || off >= f.f.Size {
		return nil, nil, 0, false, nil
	}
	v, path := f.wholeFromCopy()
	if v == nil {
		return nil, nil, 0, false, nil
	}
	defer v.release()
	want := len(p)
	if rest := f.f.Size - off; int64(len(p)) > rest {
		p = p[:rest]
	}
	var pp pageParts
	for at := 0; at < len(p); {
		k := min(len(p)-at, pageSize)
		abs := off + int64(at)
		page := f.s.objects.buffers().newPage(int64(k))
		var err error
		if page.raw == nil {
			// Short: into the caller's buffer, through the page cache.
			page.release()
			if err = v.readChecked(path, p[at:at+k], abs); err == nil {
				pp.addOwn(p[at : at+k])
			}
		} else {
			var b []byte
			if b, _, err = v.readFileInto(path, page.raw, abs, int64(k)); err == nil {
				pp.addPage(page, b)
			} else {
				page.release()
			}
		}
		if err != nil {
			pp.release()
			f.s.stats.copyMisses.Add(1)
			return nil, nil, 0, false, nil
		}
		at += k
	}
	f.s.stats.copyHits.Add(1)
	if len(p) < want {
		err = io.EOF
	}
	return pp.parts, pp.release, len(p), true, err
}
