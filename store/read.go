package store

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"sort"
	"sync/atomic"
)

// File is an open file of a sealed version: random access, exact bytes, safe for concurrent
// ReadAt. Reads fail (errors wrapping ErrCorrupt) rather than return wrong bytes.
type File interface {
	io.ReaderAt
	Size() int64
	Close() error
}

// readOpts choose the sources a read may use.
type readOpts struct {
	// noMaterialized reads from the store's objects only (verify, rebuilding the copy).
	noMaterialized bool
	// pages replaces the store's page cache (verify keeps its own, so that nothing it
	// checks comes from pages built before or from the materialized copy).
	pages *lru[pageKey, *cachedPage]
	// check serves an object's bytes rebuilt from the objects only once its whole content was
	// hashed and found equal to its identity (read_check.go): OpenFile's reads, and the
	// renders'. The readers that hash what they read themselves (export, verify, the copies'
	// passes) do not ask for it.
	check bool
	// vouch is the reference that check replaced: the whole file is read and hashed against
	// the manifest's SHA-256 before its first byte is served (verify_vouch.go). Only tests ask
	// for it, to compare the two.
	vouch bool
}

// objHint says where an object sits in a version (file, and tensor or header), so a read can
// look for the same place in the latest version and walk back from there.
type objHint struct {
	path   string
	tensor string
	header bool
	xxh    xxh3Digest // the tensor's xxh3-128 from its manifest; zero: none (checked by id)
}

// segment is one object's bytes within a file.
type segment struct {
	start, end int64
	id         ID
	hint       objHint
}

type versionFile struct {
	s    *Store
	ver  *version
	f    *manifestFile
	segs []segment
	opts readOpts
	// lastEnd is the furthest any read has reached: reads near it are sequential (read_ahead.go).
	lastEnd atomic.Int64
	// checkNext is the first segment whose check the read-ahead has not started (checkAhead).
	checkNext atomic.Int64
	// vouched: the file's composition was checked (verify_vouch.go).
	vouched atomic.Bool
	// whole: whether the materialized copy holds the file whole (copy_read_file.go).
	whole atomic.Pointer[wholeCopy]
	// copyAsked: a read from the objects asked for the file's copy (filecopy.go).
	copyAsked atomic.Bool
}

var _ File = (*versionFile)(nil)

// OpenFile opens one file of a sealed version.
func (s *Store) OpenFile(v uint64, path string) (File, error) {
	ver, err := s.versions.sealedVersion(v)
	if err != nil {
		return nil, err
	}
	f := ver.files[path]
	if f == nil {
		return nil, fmt.Errorf("%s in version %d: %w", path, v, ErrNoSuchFile)
	}
	return s.newVersionFile(ver, f, readOpts{check: true}), nil
}

func (s *Store) newVersionFile(ver *version, f *manifestFile, opts readOpts) *versionFile {
	vf := &versionFile{s: s, ver: ver, f: f, opts: opts}
	if f.Kind == kindBlob {
		vf.segs = []segment{{0, f.Size, f.ID, objHint{path: f.Path}}}
		return vf
	}
	vf.segs = make([]segment, 0, 1+len(f.Tensors))
	vf.segs = append(vf.segs, segment{0, f.HeaderLen, f.Header, objHint{path: f.Path, header: true}})
	for i := range f.Tensors {
		t := &f.Tensors[i]
		if t.End > t.Begin {
			vf.segs = append(vf.segs, segment{f.HeaderLen + t.Begin, f.HeaderLen + t.End, t.ID, objHint{path: f.Path, tensor: t.Name, xxh: t.XXH3}})
		}
	}
	return vf
}

func (f *versionFile) Size() int64  { return f.f.Size }
func (f *versionFile) Close() error { return nil }

// ReadAt reads len(p) bytes at off; at the end of the file it returns the bytes there are and
// io.EOF.
func (f *versionFile) ReadAt(p []byte, off int64) (int, error) {
	if err := f.vouch(); err != nil {
		return 0, err
	}
	if n, ok, err := f.readWhole(p, off); ok {
		return n, err
	}
	if n, ok, err := f.readCopy(p, off); ok {
		return n, err
	}
	if !f.s.memServes(f.ver.m.Version) {
		f.copyLater()
	}
	return f.readSegments(p, off, func(sg segment, objOff int64, dst []byte) error {
		return f.s.objects.readObject(sg.id, sg.hint, objOff, dst, f.opts)
	})
}

// readSegments walks the objects under file bytes [off, off+len(p)) (p cut at the end of the
// file), calling read for each piece: content bytes from objOff of segment sg, for dst, the
// piece's part of p. It returns the bytes covered, with io.EOF at the end of the file, as
// ReadAt, and notes the read for the read-ahead.
func (f *versionFile) readSegments(p []byte, off int64, read func(sg segment, objOff int64, dst []byte) error) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("read %s at %d: negative offset", f.f.Path, off)
	}
	if off >= f.f.Size {
		return 0, io.EOF
	}
	want := len(p)
	if rest := f.f.Size - off; int64(len(p)) > rest {
		p = p[:rest]
	}
	i := sort.Search(len(f.segs), func(i int) bool { return f.segs[i].end > off })
	n := 0
	for ; n < len(p) && i < len(f.segs); i++ {
		sg := f.segs[i]
		pos := off + int64(n)
		k := min(int64(len(p)-n), sg.end-pos)
		if err := read(sg, pos-sg.start, p[n:n+int(k)]); err != nil {
			return n, f.s.collector.removedByGC(f.ver.m.Version, fmt.Errorf("read %s of version %d: %w", f.f.Path, f.ver.m.Version, err))
		}
		n += int(k)
	}
	f.noteRead(off, off+int64(n))
	if n < want {
		return n, io.EOF
	}
	return n, nil
}

// pageSize is the unit in which object content is reconstructed and cached; it equals the
// chunk size of full objects, so a page of a whole copy is one frame.
const pageSize = fullChunkSize

type pageKey struct {
	id   ID
	page int64
}

// readObject reads content bytes [off, off+len(p)) of object id.
func (o *objectStore) readObject(id ID, hint objHint, off int64, p []byte, opts readOpts) error {
	if served, err := o.st.readFromCopy(id, off, p, opts); served {
		return err
	}
	if o.st.readFromMemory(id, hint, off, p, opts) { // the copy deferred (read_basemem.go)
		return nil
	}
	if err := o.checkFirst(id, hint, opts); err != nil {
		return err
	}
	var parts pageParts
	err := o.slicePages(id, hint, off, p, opts, &parts)
	parts.gather(p)
	parts.release()
	return err
}

// sliceObject reads content bytes [off, off+len(p)) of object id as parts (pageParts): from
// the materialized copy straight into p, else as the parts of the cached pages that hold them.
func (o *objectStore) sliceObject(id ID, hint objHint, off int64, p []byte, opts readOpts, parts *pageParts) error {
	if served, err := o.st.readFromCopy(id, off, p, opts); served {
		if err == nil {
			parts.addOwn(p)
		}
		return err
	}
	if o.st.readFromMemory(id, hint, off, p, opts) { // the copy deferred (read_basemem.go)
		parts.addOwn(p)
		return nil
	}
	if err := o.checkFirst(id, hint, opts); err != nil {
		return err
	}
	return o.slicePages(id, hint, off, p, opts, parts)
}

// checkFirst checks object id's content (read_check.go) before a read with opts.check serves
// bytes of it rebuilt from the objects.
func (o *objectStore) checkFirst(id ID, hint objHint, opts readOpts) error {
	if !opts.check {
		return nil
	}
	return o.st.checker.checkTensor(id, hint)
}

// readFromCopy reads content bytes [off, off+len(p)) of object id from the materialized copy,
// which holds the latest version as plain files: a pread, no page built or cached. served is
// false when the copy does not hold the object.
func (s *Store) readFromCopy(id ID, off int64, p []byte, opts readOpts) (served bool, err error) {
	if opts.noMaterialized {
		return false, nil
	}
	view := s.mat.view()
	if view == nil {
		return false, nil
	}
	defer view.release()
	if !view.holds(id) {
		s.stats.copyMisses.Add(1)
		return false, nil
	}
	if err := view.readAt(id, p, off); err != nil {
		// The copy failed its check or its read (logged, marked broken): from the objects.
		s.stats.copyMisses.Add(1)
		return false, nil
	}
	s.stats.copyHits.Add(1)
	return true, nil
}

// slicePages adds the parts of the cached pages of object id that hold content bytes
// [off, off+len(p)), building the pages that are not cached.
func (o *objectStore) slicePages(id ID, hint objHint, off int64, p []byte, opts readOpts, parts *pageParts) error {
	for len(p) > 0 {
		pg, err := o.page(id, hint, off/pageSize, opts)
		if err != nil {
			return err
		}
		in := off % pageSize
		if in >= int64(len(pg.b)) {
			pg.release()
			return objectError(id, fmt.Errorf("read at %d past the content end: %w", off, ErrCorrupt))
		}
		n := min(len(p), len(pg.b)-int(in))
		parts.addPage(pg, pg.b[in:int(in)+n])
		p, off = p[n:], off+int64(n)
	}
	return nil
}

// page returns page number pg of object id's content, reconstructing it if needed. The caller
// holds a reference to it and must release it.
func (o *objectStore) page(id ID, hint objHint, pg int64, opts readOpts) (*cachedPage, error) {
	cache := opts.pages
	if cache == nil {
		cache = o.pages
	}
	key := pageKey{id, pg}
	p, ok := cache.get(key)
	if opts.pages == nil {
		hit(&o.stats.pageHits, &o.stats.pageMisses, ok) // the shared cache only
	}
	if ok {
		return p, nil
	}
	if opts.pages != nil {
		// A private cache (verify, export): one reader, nobody to wait for.
		return o.buildCachedPage(id, hint, pg, opts, cache)
	}
	// Reads of one page from several requests at once (the kernel's read-ahead beside the
	// reader's own read) build it once, into the cache, and each takes its reference there.
	_, err, _ := o.pageFlight.Do(flightKey(id, pg), func() (any, error) {
		if cache.has(key) {
			return nil, nil
		}
		p, err := o.buildCachedPage(id, hint, pg, opts, cache)
		if err != nil {
			return nil, err
		}
		p.release()
		return nil, nil
	})
	if err != nil {
		return nil, err
	}
	if p, ok := cache.get(key); ok {
		return p, nil
	}
	// Pushed out already by other readers' pages (or larger than the cache): build one for
	// this caller.
	return o.buildCachedPage(id, hint, pg, opts, cache)
}

// buildCachedPage builds a page and adds it to cache; the caller holds a reference.
func (o *objectStore) buildCachedPage(id ID, hint objHint, pg int64, opts readOpts, cache *lru[pageKey, *cachedPage]) (*cachedPage, error) {
	reloaded := false
	for attempt := 0; ; attempt++ {
		// A stale plan (GC re-anchored an object under us, or a cached page to start from
		// was pushed out) is retried with fresh headers.
		p, err := o.buildPage(id, hint, pg, opts, cache, attempt < 2)
		if errors.Is(err, errStale) && attempt < 2 {
			continue
		}
		if isCopyError(err) && !opts.noMaterialized {
			// The copy failed its check (logged, marked broken): from the objects alone.
			opts.noMaterialized = true
			continue
		}
		if isDamage(err) && !reloaded {
			// What this process cached of the chain may predate another process's gc
			// (read_reload.go): once more from the files.
			reloaded = true
			n := o.forgetObjects(id, hint)
			o.log.Info("read failed with what was cached of its objects; reading them again", "object", id, "objects", n, "err", err)
			continue
		}
		if err != nil {
			if reloaded && isVerdictDamage(err) {
				o.log.Warn("read failed again from the files: damage", "object", id, "err", err)
			} else if reloaded && isDamage(err) {
				o.log.Warn("read failed again from the files (an I/O error: no verdict of damage)", "object", id, "err", err)
			}
			return nil, err
		}
		cache.add(pageKey{id, pg}, p, p.size())
		return p, nil
	}
}

// buildPage reconstructs a page; the caller holds the one reference to it.
func (o *objectStore) buildPage(id ID, hint objHint, pg int64, opts readOpts, cache *lru[pageKey, *cachedPage], allowStale bool) (*cachedPage, error) {
	var view *matView
	if !opts.noMaterialized {
		view = o.st.mat.view()
		defer view.release()
	}
	m, err := o.meta(id)
	if err != nil {
		return nil, err
	}
	off := pg * pageSize
	if off >= m.ContentLen {
		return nil, objectError(id, fmt.Errorf("page %d past the content end: %w", pg, ErrCorrupt))
	}
	w := planWalker{s: o, view: view, pg: pg}
	if allowStale {
		// The last attempt does not start from another cached page: it might be pushed
		// out again before it is copied.
		w.cache = cache
	}
	p, chain, err := w.planFor(id, hint)
	if err != nil {
		if allowStale {
			// Cached metas may predate a GC that re-anchored part of the chain.
			o.forgetChain(chain)
			return nil, errStale
		}
		return nil, err
	}
	// An object of the plan that is gone (here, as the deltas are loaded to check their
	// lengths, or as the page is filled): a gc (retention, in the writer's process) may have
	// re-anchored the chain and deleted its old bases after our metas were cached. Fresh
	// headers plan again; a second miss is reported.
	stale := func(err error) bool {
		if !allowStale || !errors.Is(err, fs.ErrNotExist) || isCopyError(err) {
			return false
		}
		o.forgetMeta(id)
		o.forgetMeta(p.start)
		for _, st := range p.steps {
			o.forgetMeta(st.obj)
		}
		return true
	}
	if err := o.checkStepLengths(id, p, m.ContentLen); err != nil {
		if stale(err) {
			return nil, errStale
		}
		return nil, err
	}
	page := o.bufs.newPage(min(pageSize, m.ContentLen-off))
	if err := o.fillPage(page, p, opts, view, cache, off, pg, m.Width); err != nil {
		page.release()
		if stale(err) {
			return nil, errStale
		}
		return nil, err
	}
	return page, nil
}

// checkStepLengths checks the content length the page of id is cut by (from id's header
// before its CRC was checked, or from the index) against a checked source: the header of
// every delta the plan applies, each loaded with its object's CRC checked (loadDelta caches
// them for applySteps). A length that disagrees is damage (ErrCorrupt), found before a read
// of the start object is sized by it.
func (o *objectStore) checkStepLengths(id ID, p plan, contentLen int64) error {
	for _, st := range p.steps {
		d, err := o.loadDelta(st.obj)
		if errors.Is(err, errStale) {
			o.forgetMeta(st.obj)
		}
		if err != nil {
			return err
		}
		if d.hdr.ContentLen != contentLen {
			o.forgetMeta(id)
			return objectError(id, fmt.Errorf("read as %d content bytes, delta %s (checked) has %d: %w",
				contentLen, st.obj, d.hdr.ContentLen, ErrCorrupt))
		}
	}
	return nil
}

// fillPage writes into page.b the page at content offset off (page number pg) of the object
// plan p reconstructs. A page read from the copy with O_DIRECT moves within its buffer.
func (o *objectStore) fillPage(page *cachedPage, p plan, opts readOpts, view *matView, cache *lru[pageKey, *cachedPage], off, pg int64, width int) error {
	buf := page.b
	switch {
	case p.fromCache:
		from, ok := cache.get(pageKey{p.start, pg})
		if !ok {
			return errStale // pushed out since the plan was made
		}
		n := len(from.b)
		if n == len(buf) {
			copy(buf, from.b)
		}
		from.release()
		if n != len(buf) {
			return objectError(p.start, fmt.Errorf("cached page of %d bytes, want %d: %w", n, len(buf), ErrCorrupt))
		}
	case p.fromMat:
		direct, err := view.readPage(p.start, page, off)
		if err != nil {
			return err
		}
		buf = page.b // moved within its buffer by a direct read
		if !direct && opts.pages == nil {
			view.willNeed(p.start, off+int64(len(buf)), copyReadAheadBytes)
		}
	default:
		if err := o.readFullRange(p.start, off, buf); err != nil {
			if errors.Is(err, errStale) {
				o.forgetMeta(p.start)
			}
			return err
		}
	}
	return o.applySteps(p.steps, buf, off/int64(width))
}

// forgetChain drops the metas of objects a failed walk passed.
func (o *objectStore) forgetChain(chain []ID) {
	for _, id := range chain {
		o.forgetMeta(id)
	}
}

// readFullRange reads content bytes [off, off+len(dst)) of full object id.
func (o *objectStore) readFullRange(id ID, off int64, dst []byte) error {
	info, err := o.objectInfoOf(id)
	if err != nil {
		return err
	}
	if info.hdr.Kind != kindFull {
		return errStale
	}
	// The range comes from a length the caller took from elsewhere (a delta's header, the
	// index): one past this object's content is damage, and would make no progress below.
	if off < 0 || off+int64(len(dst)) > info.hdr.ContentLen {
		return objectError(id, fmt.Errorf("read of content bytes [%d, %d) of an object of %d bytes: %w",
			off, off+int64(len(dst)), info.hdr.ContentLen, ErrCorrupt))
	}
	size := info.table.Size
	for len(dst) > 0 {
		i := off / size
		in := off - i*size
		clen := info.table.ChunkLen(int(i), info.hdr.ContentLen)
		if clen <= in { // every pass must move: never spin on a chunk with nothing left
			return objectError(id, fmt.Errorf("chunk %d holds no content byte at %d: %w", i, off, ErrCorrupt))
		}
		if in == 0 && int64(len(dst)) >= clen {
			if err := o.readChunk(id, int(i), dst[:clen]); err != nil {
				return err
			}
			dst, off = dst[clen:], off+clen
			continue
		}
		tmp := make([]byte, clen)
		if err := o.readChunk(id, int(i), tmp); err != nil {
			return err
		}
		n := copy(dst, tmp[in:])
		dst, off = dst[n:], off+int64(n)
	}
	return nil
}
