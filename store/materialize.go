package store

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/weightfs/weightfs/delta"
)

// materialized is the plain-file copy of the latest version in CACHE/materialized/. New
// versions are diffed against it without replay; reads use it as a whole copy. It is brought
// forward at each seal (or Refresh) by writing only changed bytes in place; its state (version,
// clean) is in the index, and a copy not marked clean (an update was interrupted) is rebuilt.
type materialized struct {
	s   *Store
	dir string

	ensureMu sync.Mutex     // one ensure (rebuild or bring forward) at a time
	bg       sync.WaitGroup // ensures running in the background (ensureInBackground)

	mu       sync.RWMutex // readers of the copy hold it shared; changes hold it exclusively
	ver      *version     // the version held; nil: the copy is not usable
	locs     map[ID]matLoc
	broken   atomic.Bool // a read of the copy failed: rebuild it
	filesMu  sync.Mutex  // guards files, direct and noDirect between holders of the shared lock
	files    map[string]*os.File
	direct   map[string]*os.File // O_DIRECT handles (directread.go)
	noDirect bool                // the copy's file system refused O_DIRECT
	gen      uint64              // bumped by every change

	adviceMu sync.Mutex
	advised  map[adviceKey]int64 // how far willNeed asked the kernel to read each file ahead

	crcs  contentCRCs // of the content of tensors that may be bases (stream_crc.go)
	seeds *seeds      // files of a first version, as its streams received them (stream_seed.go)
	// unbuildable is a version a read-only store found damaged while building the copy:
	// not tried again (guarded by ensureMu).
	unbuildable uint64
}

// matLoc is where an object's bytes sit in the copy.
type matLoc struct {
	path string
	off  int64
}

func newMaterialized(s *Store, dir string) *materialized {
	return &materialized{s: s, dir: dir, files: map[string]*os.File{}, direct: map[string]*os.File{},
		seeds: newSeeds(filepath.Join(filepath.Dir(dir), "seed"))}
}

func (m *materialized) close() {
	m.bg.Wait()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.closeFilesLocked()
	m.ver = nil
}

func (m *materialized) closeFilesLocked() {
	m.filesMu.Lock()
	defer m.filesMu.Unlock()
	for p, f := range m.files {
		f.Close()
		delete(m.files, p)
	}
	for p, f := range m.direct {
		f.Close()
		delete(m.direct, p)
	}
}

// matView is a shared hold on the copy; release it promptly.
type matView struct {
	m   *materialized
	ver *version
	gen uint64
}

// view takes a shared hold on the copy, or returns nil when it holds nothing usable.
func (m *materialized) view() *matView {
	m.mu.RLock()
	if m.ver == nil {
		m.mu.RUnlock()
		return nil
	}
	return &matView{m: m, ver: m.ver, gen: m.gen}
}

// tryView is view for a goroutine that a holder of a view waits for: it does not wait for a
// change of the copy that waits for that holder (nil instead).
func (m *materialized) tryView() *matView {
	if !m.mu.TryRLock() {
		return nil
	}
	if m.ver == nil {
		m.mu.RUnlock()
		return nil
	}
	return &matView{m: m, ver: m.ver, gen: m.gen}
}

func (v *matView) release() {
	if v != nil {
		v.m.mu.RUnlock()
	}
}

func (v *matView) holds(id ID) bool {
	if v == nil {
		return false
	}
	_, ok := v.m.locs[id]
	return ok
}

func locsOf(ver *version) map[ID]matLoc {
	locs := map[ID]matLoc{}
	for i := range ver.m.Files {
		f := &ver.m.Files[i]
		if f.Kind == kindBlob {
			locs[f.ID] = matLoc{f.Path, 0}
			continue
		}
		locs[f.Header] = matLoc{f.Path, 0}
		for j := range f.Tensors {
			t := &f.Tensors[j]
			locs[t.ID] = matLoc{f.Path, f.HeaderLen + t.Begin}
		}
	}
	return locs
}

// ensure brings the copy to the latest sealed version: nothing if it is there, forward if it
// holds an older clean version, else a rebuild.
func (m *materialized) ensure() error {
	m.ensureMu.Lock()
	defer m.ensureMu.Unlock()
	target, err := m.s.latestVersion()
	if err != nil {
		return err
	}
	m.mu.RLock()
	cur := m.ver
	m.mu.RUnlock()
	if m.broken.Swap(false) {
		m.s.logf("materialized copy: a read of it failed; rebuilding")
		cur = nil
	} else if cur == nil {
		cur = m.loadState()
	}
	switch {
	case target == nil:
		return nil
	case cur != nil && cur.m.Version == target.m.Version:
		return nil
	case cur == nil && m.unbuildable == target.m.Version:
		return nil // tried and logged: reads replay from the objects
	case cur != nil && cur.m.Version < target.m.Version:
		err := m.forward(cur, target)
		if err == nil {
			return nil
		}
		if errors.Is(err, errInjected) {
			return err
		}
		m.s.logf("materialized copy: bring forward from version %d to %d: %v; rebuilding", cur.m.Version, target.m.Version, err)
	}
	err = m.rebuild(target)
	if err != nil && m.s.readOnly && errors.Is(err, ErrCorrupt) {
		// A reader serves what it can of a damaged version (EIO for the damaged objects,
		// exact bytes for the rest) rather than refuse to start; a writer must not ingest
		// against it.
		m.s.logf("materialized copy: version %d cannot be built (%v); reads replay from the objects", target.m.Version, err)
		m.unbuildable = target.m.Version
		return nil
	}
	return err
}

// loadState adopts a clean copy left by an earlier run, if the index vouches for it.
func (m *materialized) loadState() *version {
	st := m.s.ix.materialized()
	if !st.Clean || st.Version == 0 || !m.s.isSealed(st.Version) {
		return nil
	}
	ver, err := m.s.loadVersion(st.Version)
	if err != nil {
		return nil
	}
	for i := range ver.m.Files {
		f := &ver.m.Files[i]
		info, err := os.Stat(filepath.Join(m.dir, filepath.FromSlash(f.Path)))
		if err != nil || !info.Mode().IsRegular() || info.Size() != f.Size {
			return nil
		}
	}
	m.install(ver)
	return ver
}

func (m *materialized) install(ver *version) {
	m.mu.Lock()
	m.closeFilesLocked()
	old := m.locs
	m.ver, m.locs = ver, locsOf(ver)
	m.crcs.forget(old, m.locs)
	m.gen++
	m.mu.Unlock()
}

// invalidate drops the copy (it is rebuilt when next needed), after any update in progress.
func (m *materialized) invalidate() {
	m.ensureMu.Lock()
	defer m.ensureMu.Unlock()
	m.drop()
}

// drop forgets the copy at once; the caller holds ensureMu.
func (m *materialized) drop() {
	m.mu.Lock()
	m.closeFilesLocked()
	m.ver, m.locs = nil, nil
	m.gen++
	m.mu.Unlock()
}

// rebuild writes the copy of target from the store alone.
func (m *materialized) rebuild(target *version) error {
	defer m.seeds.clear()
	if err := m.s.ix.setMaterialized(matState{Version: target.m.Version}); err != nil {
		return fmt.Errorf("materialized copy: %w", err)
	}
	m.drop()
	if err := os.RemoveAll(m.dir); err != nil {
		return fmt.Errorf("materialized copy: %w", err)
	}
	if err := os.MkdirAll(m.dir, cacheDirPerm); err != nil {
		return fmt.Errorf("materialized copy: %w", err)
	}
	for _, d := range target.m.Dirs {
		if err := os.MkdirAll(filepath.Join(m.dir, filepath.FromSlash(d.Path)), cacheDirPerm); err != nil {
			return fmt.Errorf("materialized copy: %w", err)
		}
	}
	seeded := 0
	for i := range target.m.Files {
		f := &target.m.Files[i]
		if ok, err := m.seedInto(f); err != nil {
			return err
		} else if ok {
			seeded++
			continue
		}
		// Its own small page cache (a page read in two pieces is built once): the pages of a
		// whole version, read once, would only push out the pages readers use.
		tmp, err := m.writeTemp(target, f, readOpts{noMaterialized: true, pages: newPageCache(4 * pageSize)})
		if err != nil {
			return err
		}
		if err := os.Rename(tmp, filepath.Join(m.dir, filepath.FromSlash(f.Path))); err != nil {
			os.Remove(tmp)
			return fmt.Errorf("materialized copy: %w", err)
		}
	}
	m.install(target)
	if err := m.s.ix.setMaterialized(matState{Version: target.m.Version, Clean: true}); err != nil {
		return fmt.Errorf("materialized copy: %w", err)
	}
	m.s.logf("materialized copy: rebuilt at version %d (%d of %d files as streamed)", target.m.Version, seeded, len(target.m.Files))
	return nil
}

// writeTemp writes file f of ver into a temporary file beside its place in the copy (through
// the read path) and checks its SHA-256. It returns the temporary path.
func (m *materialized) writeTemp(ver *version, f *manifestFile, opts readOpts) (string, error) {
	dst := filepath.Join(m.dir, filepath.FromSlash(f.Path))
	if err := os.MkdirAll(filepath.Dir(dst), cacheDirPerm); err != nil {
		return "", fmt.Errorf("materialized copy: %w", err)
	}
	out, err := os.CreateTemp(filepath.Dir(dst), ".tmp-*")
	if err != nil {
		return "", fmt.Errorf("materialized copy: %w", err)
	}
	vf := m.s.newVersionFile(ver, f, opts)
	h := sha256.New()
	// Page-sized reads: a smaller one would rebuild a page for each piece of it.
	_, err = io.CopyBuffer(io.MultiWriter(out, h), io.NewSectionReader(vf, 0, f.Size), make([]byte, pageSize))
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil && !bytes.Equal(h.Sum(nil), f.SHA256[:]) {
		err = fmt.Errorf("%s of version %d does not match its SHA-256: %w", f.Path, ver.m.Version, ErrCorrupt)
	}
	if err != nil {
		os.Remove(out.Name())
		return "", fmt.Errorf("materialized copy of %s: %w", f.Path, err)
	}
	return out.Name(), nil
}

// inPlace is one tensor of a file updated in place: apply the delta of object obj in
// direction dir to the bytes [off, off+size).
type inPlace struct {
	path  string
	off   int64
	size  int64
	width int
	obj   ID
	dir   delta.Direction
}

// forward brings the copy from cur to target: files whose layout is unchanged get their
// changed tensors patched in place from the delta objects linking old and new identities;
// other changed files are written beside and renamed over; files gone are removed.
func (m *materialized) forward(cur, target *version) error {
	var patches []inPlace
	rewrites := map[string]string{} // path -> temporary file
	defer func() {
		for _, tmp := range rewrites {
			os.Remove(tmp)
		}
	}()
	for i := range target.m.Files {
		f := &target.m.Files[i]
		old := cur.files[f.Path]
		if old != nil && old.SHA256 == f.SHA256 && old.Size == f.Size {
			continue
		}
		if ps, ok := m.s.patchPlan(old, f); ok {
			patches = append(patches, ps...)
			continue
		}
		tmp, err := m.writeTemp(target, f, readOpts{})
		if err != nil {
			return err
		}
		rewrites[f.Path] = tmp
	}
	// From here on the copy is neither cur nor target until the end: mark it unclean first.
	if err := m.s.ix.setMaterialized(matState{Version: cur.m.Version}); err != nil {
		return fmt.Errorf("materialized copy: %w", err)
	}
	// Readers let go of the copy and replay until it holds target: the update runs without
	// keeping anyone waiting (ensureMu keeps other updates out).
	m.drop()
	err := m.apply(cur, target, patches, rewrites)
	m.mu.Lock()
	m.closeFilesLocked()
	if err == nil {
		m.ver, m.locs = target, locsOf(target)
		m.crcs.forget(locsOf(cur), m.locs)
	}
	m.gen++
	m.mu.Unlock()
	if err != nil {
		return err
	}
	return m.s.ix.setMaterialized(matState{Version: target.m.Version, Clean: true})
}

// apply changes the files of the copy from cur to target. Nobody reads the copy meanwhile.
func (m *materialized) apply(cur, target *version, patches []inPlace, rewrites map[string]string) error {
	var bufs patchBufs
	for i, p := range patches {
		if i == len(patches)/2 {
			if err := m.s.failpoint("materialize-partial"); err != nil {
				return err
			}
		}
		if err := m.patch(p, &bufs); err != nil {
			return err
		}
	}
	for p, tmp := range rewrites {
		if err := os.Rename(tmp, filepath.Join(m.dir, filepath.FromSlash(p))); err != nil {
			return fmt.Errorf("materialized copy: %w", err)
		}
		delete(rewrites, p)
	}
	// Files and directories of cur that target does not have.
	for i := range cur.m.Files {
		p := cur.m.Files[i].Path
		if target.files[p] == nil {
			if err := os.Remove(filepath.Join(m.dir, filepath.FromSlash(p))); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("materialized copy: %w", err)
			}
		}
	}
	keep := map[string]bool{}
	for _, d := range target.m.Dirs {
		keep[d.Path] = true
		if err := os.MkdirAll(filepath.Join(m.dir, filepath.FromSlash(d.Path)), cacheDirPerm); err != nil {
			return fmt.Errorf("materialized copy: %w", err)
		}
	}
	for p := range target.files {
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			keep[d] = true
		}
	}
	var gone []string
	for _, d := range cur.m.Dirs {
		if !keep[d.Path] {
			gone = append(gone, d.Path)
		}
	}
	// Deepest first, so parents are empty when their turn comes.
	slices.SortFunc(gone, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	for _, d := range gone {
		os.Remove(filepath.Join(m.dir, filepath.FromSlash(d)))
	}
	return nil
}

// patchPlan lists the in-place updates that turn old into f, when both are safetensors files
// with the same header (so the same layout) and every changed tensor is linked to its old
// identity by a delta object (either way).
func (s *Store) patchPlan(old, f *manifestFile) ([]inPlace, bool) {
	if old == nil || old.Kind != kindSafetensors || f.Kind != kindSafetensors || old.Header != f.Header ||
		len(old.Tensors) != len(f.Tensors) || old.Size != f.Size {
		return nil, false
	}
	var out []inPlace
	for j := range f.Tensors {
		nt, ot := &f.Tensors[j], &old.Tensors[j]
		if nt.ID == ot.ID {
			continue
		}
		p := inPlace{path: f.Path, off: f.HeaderLen + nt.Begin, size: nt.End - nt.Begin, width: nt.DType.Size()}
		if nm, err := s.meta(nt.ID); err == nil && nm.DeltaLen > 0 && nm.Base == ot.ID {
			p.obj, p.dir = nt.ID, delta.Forward
		} else if om, err := s.meta(ot.ID); err == nil && om.DeltaLen > 0 && om.Base == nt.ID {
			p.obj, p.dir = ot.ID, delta.Backward
		} else {
			return nil, false
		}
		out = append(out, p)
	}
	return out, true
}

// patchBufs are the buffers of patch, kept from one tensor to the next: made afresh, they were
// twice the copy's size in garbage at every update.
type patchBufs struct{ buf, orig []byte }

// patch applies one in-place update, 4 MiB at a time, writing back only the byte runs that
// changed.
func (m *materialized) patch(p inPlace, bufs *patchBufs) error {
	d, err := m.s.loadDelta(p.obj)
	if err != nil {
		return err
	}
	f, err := m.file(p.path)
	if err != nil {
		return err
	}
	step := int64(ingestChunk)
	if n := int(min(step, p.size)); len(bufs.buf) < n {
		bufs.buf, bufs.orig = make([]byte, n), make([]byte, n)
	}
	buf, orig := bufs.buf, bufs.orig
	for off := int64(0); off < p.size; off += step {
		n := min(step, p.size-off)
		b, o := buf[:n], orig[:n]
		if err := readFull(f, o, p.off+off); err != nil {
			return fmt.Errorf("materialized %s: %w", p.path, err)
		}
		copy(b, o)
		if err := delta.ApplyDelta(d.body, b, off/int64(p.width), p.dir); err != nil {
			return objectError(p.obj, fmt.Errorf("apply to the materialized copy: %w", err))
		}
		if err := writeChangedRuns(f, o, b, p.off+off); err != nil {
			return fmt.Errorf("materialized %s: %w", p.path, err)
		}
	}
	return nil
}
