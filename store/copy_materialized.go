package store

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sync"
	"sync/atomic"
)

// materialized is the plain-file copy of the latest version in CACHE/materialized/. New
// versions are diffed against it without replay; reads use it as a whole copy. It is brought
// forward at each seal (or Refresh) by writing only changed bytes in place; its state (version,
// clean) is in the index, and a copy not marked clean (an update was interrupted) is rebuilt.
// It is a cache, checked on every read against sums of its files' content (copy_sums.go); a
// copy that fails a check, or cannot be built at all, is dropped and reads replay from the
// objects: nothing about it may stop a store.
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

	crcs  contentCRCs // of the content of tensors that may be bases (ingest_basecheck.go)
	seeds *seeds      // files of a first version, as its streams received them (copy_seed.go)
	// unbuildable is a version whose copy could not be built (a damaged version, a full
	// cache disk): not tried again until another version is the latest or a read finds the
	// copy broken (guarded by ensureMu).
	unbuildable uint64

	chk    *checks              // sums of content and compositions vouched for
	sums   map[string]*fileSums // of each file of ver, by path (guarded by mu)
	closed atomic.Bool          // close has begun: start no background rebuild

	// deferred is the version a writer's seal left the copy behind (its bases are in
	// memory), 0 when none; asked: a reader asked for it since (copy_defer.go).
	deferred atomic.Uint64
	asked    atomic.Bool
}

// matLoc is where an object's bytes sit in the copy.
type matLoc struct {
	path string
	off  int64
}

func newMaterialized(s *Store, dir string) *materialized {
	chk := newChecks(s.ix)
	sd := newSeeds(filepath.Join(filepath.Dir(dir), "seed"))
	sd.chk = chk
	return &materialized{s: s, dir: dir, files: map[string]*os.File{}, direct: map[string]*os.File{},
		seeds: sd, chk: chk}
}

func (m *materialized) close() {
	m.closed.Store(true)
	m.bg.Wait()
	m.chk.saveCheckedObjects() // read_check.go: the objects checked since the last save
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

// view takes a shared hold on the copy, or returns nil when it holds nothing usable (nothing,
// or a copy a read found damaged).
func (m *materialized) view() *matView {
	m.mu.RLock()
	if m.ver == nil || m.broken.Load() {
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
	if m.ver == nil || m.broken.Load() {
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
// holds an older clean version, else a rebuild. A copy that cannot be had (a version whose
// objects are damaged or whose files do not match their SHA-256, a full or failing cache
// disk, a name the cache's file system refuses) is logged and dropped: reads replay from the
// objects and a writer stores the next version's tensors whole, a new chain, so no cache
// failure stops a mount or a seal. Only an injected crash (tests) is returned.
func (m *materialized) ensure() error {
	m.ensureMu.Lock()
	defer m.ensureMu.Unlock()
	return m.ensureLatestLocked()
}

// ensureThen brings the copy to target and then calls publish, both under ensureMu, so that
// no other ensure runs between them: it would take the latest version published so far,
// older than target, for its own target and take the copy back. A copy that cannot be
// brought to target is dropped and logged as by ensure, and publish is called all the same.
// With target nil it publishes first and then does what ensure does.
func (m *materialized) ensureThen(target *version, publish func()) error {
	m.ensureMu.Lock()
	defer m.ensureMu.Unlock()
	if target == nil {
		publish()
		return m.ensureLatestLocked()
	}
	err := m.ensureTarget(target)
	publish()
	return err
}

// ensureLatestLocked is ensure for a caller that holds ensureMu.
func (m *materialized) ensureLatestLocked() error {
	target, err := m.s.versions.latestVersion()
	target = m.s.groups.rank.scope(target) // a rank's copy holds its own files (group.go)
	if err != nil {
		m.drop()
		m.s.log.Warn("materialized copy: the latest version cannot be read; reads replay from the objects", "err", err)
		return nil
	}
	return m.ensureTarget(target)
}

// ensureTarget brings the copy to target (nil: nothing to do), dropping and logging a copy
// that cannot be had; the caller holds ensureMu.
func (m *materialized) ensureTarget(target *version) error {
	m.asked.Store(true) // a read meanwhile need not ask for the copy (copy_defer.go)
	err := m.ensureLocked(target)
	if errors.Is(err, errInjected) {
		return err
	}
	if target != nil {
		m.reached(target.m.Version) // copy_defer.go
	}
	if err == nil {
		return nil
	}
	m.drop()
	m.unbuildable = target.m.Version
	if serr := m.s.ix.setMaterialized(matState{Version: target.m.Version}); serr != nil {
		m.s.log.Warn("materialized copy: record its state", "err", serr)
	}
	what := "new versions are stored without a base (a new chain)"
	if m.s.readOnly {
		what = "its files are checked and served from the objects"
	}
	m.s.log.Warn(fmt.Sprintf("materialized copy: version %d cannot be copied; reads replay from the objects, %s", target.m.Version, what), "err", err)
	return nil
}

func (m *materialized) ensureLocked(target *version) error {
	m.mu.RLock()
	cur := m.ver
	m.mu.RUnlock()
	if m.broken.Swap(false) {
		m.s.log.Warn("materialized copy: a read of it failed its check; rebuilding")
		cur = nil
		m.unbuildable = 0
	} else if cur == nil {
		cur = m.loadState()
		if cur != nil && target != nil && cur.m.Version < target.m.Version {
			// A cache behind the latest version: a writer deferred it (copy_defer.go), or a
			// run ended before it was brought forward. Said once, as caches are.
			m.s.log.Info(fmt.Sprintf("materialized copy: it holds version %d, the latest is %d; bringing it forward", cur.m.Version, target.m.Version))
		}
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
		m.s.log.Warn("materialized copy: not brought forward; rebuilding", "from", cur.m.Version, "to", target.m.Version, "err", err)
	}
	return m.rebuild(target)
}

// loadState adopts a clean copy left by an earlier run, if the index vouches for it.
func (m *materialized) loadState() *version {
	st := m.s.ix.materialized()
	if !st.Clean || st.Version == 0 || !m.s.versions.isSealed(st.Version) {
		return nil
	}
	ver, err := m.s.versions.loadVersion(st.Version)
	if err != nil {
		return nil
	}
	ver = m.s.groups.rank.scope(ver)
	for i := range ver.m.Files {
		f := &ver.m.Files[i]
		info, err := statIn(m.dir, f.Path)
		if err != nil || !info.Mode().IsRegular() || info.Size() != f.Size {
			return nil
		}
	}
	// The record says which version; the sums of its files' content (and a check of each
	// file not vouched for) say whether the copy holds it.
	sums, err := m.copySums(ver, func(*manifestFile) bool { return false })
	if err != nil {
		m.s.log.Warn("materialized copy: it does not hold the version its state record says; rebuilding", "version", ver.m.Version, "err", err)
		return nil
	}
	m.install(ver, sums)
	return ver
}

// copySums returns the checked sums of every file of ver as the copy holds it: known ones
// (computed from checked bytes, in memory or in the index), else from one pass over the file
// that checks its SHA-256. A file's composition is vouched for too: composed(f) says the
// copy's bytes of f were just made from ver's objects in the manifest's order; otherwise it
// must have been vouched for before, or the pass also checks each object's bytes against its
// identity.
func (m *materialized) copySums(ver *version, composed func(*manifestFile) bool) (map[string]*fileSums, error) {
	out := make(map[string]*fileSums, len(ver.m.Files))
	held := make(map[contentKey]*fileSums, len(ver.m.Files))
	comps := make([]ID, 0, len(ver.m.Files))
	for i := range ver.m.Files {
		f := &ver.m.Files[i]
		comp := composition(f)
		vouched := composed(f) || m.chk.isVouched(comp)
		fs := m.chk.sumsOf(keyOf(f))
		if fs == nil || !vouched {
			var err error
			if fs, err = m.scanCopyFile(f, !vouched); err != nil {
				return nil, err
			}
			m.chk.noteSums(keyOf(f), fs)
		}
		comps = append(comps, comp)
		out[f.Path] = fs
		held[keyOf(f)] = fs
	}
	m.chk.vouch(true, comps...)
	if err := m.chk.keepSums(held); err != nil {
		m.s.log.Warn("materialized copy: record its sums in the index", "err", err)
	}
	return out, nil
}

func (m *materialized) install(ver *version, sums map[string]*fileSums) {
	m.mu.Lock()
	m.closeFilesLocked()
	old := m.locs
	m.ver, m.locs, m.sums = ver, locsOf(ver), sums
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
	m.ver, m.locs, m.sums = nil, nil, nil
	m.gen++
	m.mu.Unlock()
}

// rebuild writes the copy of target from the store alone.
func (m *materialized) rebuild(target *version) error {
	defer m.seeds.clearUpTo(target.m.Version)
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
		if err := mkdirAllIn(m.dir, d.Path, cacheDirPerm); err != nil {
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
		if err := renameIn(m.dir, tmp, f.Path); err != nil {
			removeIn(m.dir, tmp)
			return fmt.Errorf("materialized copy: %w", err)
		}
	}
	// Every file was written from the objects in the manifest's order and checked against
	// its SHA-256 (writeTemp), or adopted from a seed that was.
	sums, err := m.copySums(target, func(*manifestFile) bool { return true })
	if err != nil {
		return err
	}
	m.install(target, sums)
	if err := m.s.ix.setMaterialized(matState{Version: target.m.Version, Clean: true}); err != nil {
		return fmt.Errorf("materialized copy: %w", err)
	}
	m.s.log.Info(fmt.Sprintf("materialized copy: rebuilt at version %d (%d of %d files as streamed)", target.m.Version, seeded, len(target.m.Files)))
	return nil
}

// writeTemp writes file f of ver into a temporary file beside its place in the copy (through
// the read path) and checks its SHA-256. It returns the temporary file's path relative to
// the copy's directory (reldir.go).
func (m *materialized) writeTemp(ver *version, f *manifestFile, opts readOpts) (string, error) {
	if err := mkdirAllIn(m.dir, path.Dir(f.Path), cacheDirPerm); err != nil {
		return "", fmt.Errorf("materialized copy: %w", err)
	}
	out, tmp, err := createTempIn(m.dir, path.Dir(f.Path), ".tmp-")
	if err != nil {
		return "", fmt.Errorf("materialized copy: %w", err)
	}
	vf := m.s.newVersionFile(ver, f, opts)
	h := sha256.New()
	var sw sumWriter // the copy's sums, from the bytes hashed (copy_sums.go)
	err = m.s.failpoint("materialize-write")
	if err == nil {
		// Page-sized reads: a smaller one would rebuild a page for each piece of it.
		_, err = io.CopyBuffer(io.MultiWriter(out, h, &sw), io.NewSectionReader(vf, 0, f.Size), make([]byte, pageSize))
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil && !bytes.Equal(h.Sum(nil), f.SHA256[:]) {
		err = fmt.Errorf("%s of version %d does not match its SHA-256: %w", f.Path, ver.m.Version, ErrCorrupt)
	}
	if err == nil {
		m.chk.noteSums(keyOf(f), sw.sums())
	}
	if err != nil {
		removeIn(m.dir, tmp)
		return "", fmt.Errorf("materialized copy of %s: %w", f.Path, err)
	}
	return tmp, nil
}

// heldVersionNoWait is the number of the version the copy holds (0: none), without waiting
// for its lock: ok is false while a change of the copy holds it.
func (m *materialized) heldVersionNoWait() (v uint64, ok bool) {
	if !m.mu.TryRLock() {
		return 0, false
	}
	defer m.mu.RUnlock()
	if m.ver != nil {
		v = m.ver.m.Version
	}
	return v, true
}
