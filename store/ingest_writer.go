package store

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Writer builds one open version (used by the mount and by Commit). Nothing of it is visible
// until Seal. Files are added whole (AddFile, the batch path) or as they are written
// (StreamFile and AddStream, the streaming path: stream.go). Safe for concurrent use: several
// files may be added or streamed at once.
type Writer struct {
	s  *Store
	in *ingester // s.ingest
	v  uint64

	mu      sync.Mutex
	done    bool
	files   map[string]*manifestFile
	dirs    map[string]uint32
	created map[ID]int64 // objects this writer put, with their stored sizes
	held    map[ID]bool  // objects this writer keeps from being swept
	streams map[*FileStream]struct{}
	pool    *chunkPool // the chunks of its streams (stream.go)
	// bgMaterialize lets Seal return before the materialized copy is brought forward.
	bgMaterialize bool
	// noMaterialize leaves the materialized copy where it is (a writer group's publisher,
	// which diffs nothing: the copy is brought forward when a Writer next needs it).
	noMaterialize bool
	// indexes are pack indexes other processes wrote for this version (a writer group's
	// ranks: takeParts), which its manifest names beside the seal's own.
	indexes []string
	// floor is the latest version sealed when the writer opened: gc keeps it and every
	// later one while the writer is open, as its delta bases come from them (gc.go).
	floor uint64
	// started is when its first file began; streamed marks the files a stream diffed
	// (stats.go).
	started  time.Time
	streamed map[string]bool
	// refs are the objects the manifest of the last buildManifest names (finish reuses them).
	refs map[ID]bool

	// mem takes in the version's tensors for the base in memory (nil: off; ingest_basemem.go).
	mem *memCapture

	progress   func(done, total int64)
	progressMu sync.Mutex
	total      int64
	doneB      atomic.Int64
}

// NewVersion opens version v for writing; v must exceed every sealed version.
func (s *Store) NewVersion(v uint64) (*Writer, error) {
	if err := s.checkOpen(); err != nil {
		return nil, err
	}
	if s.readOnly && s.groups.rank == nil { // a rank writes parts (group.go)
		return nil, fmt.Errorf("new version %d: %w", v, ErrReadOnly)
	}
	if v == 0 {
		return nil, fmt.Errorf("version numbers start at 1: %w", ErrVersionNotAbove)
	}
	if err := checkVersionNumber(v); err != nil {
		return nil, fmt.Errorf("new version: %w", err)
	}
	if err := s.versions.checkAbove(v); err != nil {
		return nil, err
	}
	floor, _ := s.Latest()
	return s.ingest.newWriter(v, floor)
}

// newWriter opens version v (checked by NewVersion); floor is the latest sealed version.
func (in *ingester) newWriter(v, floor uint64) (*Writer, error) {
	in.pendMu.Lock()
	defer in.pendMu.Unlock()
	if in.open[v] != nil {
		return nil, fmt.Errorf("version %d: %w", v, ErrVersionBusy)
	}
	if len(in.open) == 0 {
		// Objects written from now on may end up in no manifest if this process dies: the
		// next writer to open sweeps when it finds the flag.
		if err := in.st.ix.setFlag(keyDirty, true); err != nil {
			return nil, fmt.Errorf("new version %d: index: %w", v, err)
		}
	}
	w := &Writer{s: in.st, in: in, v: v, files: map[string]*manifestFile{}, dirs: map[string]uint32{},
		created: map[ID]int64{}, held: map[ID]bool{}, streams: map[*FileStream]struct{}{}, floor: floor,
		mem: in.mem.newCapture()}
	in.open[v] = w
	return w, nil
}

// Version is the number of the version being written.
func (w *Writer) Version() uint64 { return w.v }

func (w *Writer) checkLive() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return fmt.Errorf("version %d: %w", w.v, ErrWriterDone)
	}
	return nil
}

// hold keeps id from being swept or collected while this writer is open. It must come before
// the check whether id is stored: GC deletes only objects nobody holds.
func (w *Writer) hold(id ID) {
	w.mu.Lock()
	if w.held == nil {
		w.mu.Unlock()
		return // the writer has ended: nothing it stores is used
	}
	already := w.held[id]
	w.held[id] = true
	w.mu.Unlock()
	if !already {
		w.in.addPending(id)
	}
}

// addPending keeps id from gc until the writer that holds it ends (closeWriter).
func (in *ingester) addPending(id ID) {
	in.pendMu.Lock()
	in.pending[id]++
	in.pendMu.Unlock()
}

func (w *Writer) noteCreated(id ID, size int64) {
	w.mu.Lock()
	w.created[id] = size
	w.mu.Unlock()
}

// AddFile adds a file of the version, read from r (size bytes). Adding a path again replaces
// the earlier file. r must not change while AddFile runs (a change it notices is an error).
func (w *Writer) AddFile(p string, r io.ReaderAt, size int64, mode fs.FileMode) error {
	if err := checkPath(p); err != nil {
		return err
	}
	if err := w.checkLive(); err != nil {
		return err
	}
	if size < 0 {
		return fmt.Errorf("add %s: negative size", p)
	}
	w.mu.Lock()
	_, isDir := w.dirs[p]
	w.mu.Unlock()
	if isDir {
		return fmt.Errorf("add %s: a directory of that name exists: %w", p, ErrBadPath)
	}
	if err := w.s.mat.ensureForWriter(); err != nil { // not while deferred (copy_defer.go)
		return fmt.Errorf("add %s: %w", p, err)
	}
	w.noteFileStart()
	entry, err := w.ingestFile(p, r, size, mode)
	if err != nil && w.s.mat.isBroken() {
		// The materialized copy was damaged under us: rebuild it and try once more.
		if err := w.s.mat.ensure(); err != nil {
			return fmt.Errorf("add %s: %w", p, err)
		}
		entry, err = w.ingestFile(p, r, size, mode)
	}
	if err != nil {
		return fmt.Errorf("add %s to version %d: %w", p, w.v, err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return fmt.Errorf("version %d: %w", w.v, ErrWriterDone)
	}
	w.files[p] = entry
	w.markStreamedLocked(p, false)
	return nil
}

// AddDir records a directory of the version (so empty ones round-trip). Parents of added
// files are recorded without it.
func (w *Writer) AddDir(p string, mode fs.FileMode) error {
	if err := checkPath(p); err != nil {
		return err
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return fmt.Errorf("version %d: %w", w.v, ErrWriterDone)
	}
	if w.files[p] != nil {
		return fmt.Errorf("add directory %s: a file of that name exists: %w", p, ErrBadPath)
	}
	w.dirs[p] = uint32(mode.Perm())
	return nil
}

// Remove drops a file or directory added earlier (a no-op for an unknown path).
func (w *Writer) Remove(p string) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done {
		return fmt.Errorf("version %d: %w", w.v, ErrWriterDone)
	}
	delete(w.files, p)
	delete(w.dirs, p)
	return nil
}

// Seal makes the version durable and visible; it returns only once it is, and (unless
// MaterializeInBackground was called) once the materialized copy holds it. On an error
// (ENOSPC, say) nothing sealed is harmed and the Writer stays usable: fix the cause and call
// Seal again (after Reset, to add the files anew), or Abort. Streams of the Writer that were
// not added are dropped by the seal.
func (w *Writer) Seal() (VersionInfo, error) {
	s := w.s
	if err := s.checkOpen(); err != nil {
		return VersionInfo{}, err
	}
	if s.groups.rank != nil {
		return VersionInfo{}, fmt.Errorf("seal version %d: a rank seals its part (SealPart); the writer publishes: %w", w.v, ErrGroupRank)
	}
	sealStart := time.Now()
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	if err := w.checkLive(); err != nil {
		return VersionInfo{}, err
	}
	m, err := w.buildManifest()
	if err != nil {
		return VersionInfo{}, err
	}
	if err := s.failpoint("seal-objects-written"); err != nil {
		return VersionInfo{}, err
	}
	// The manifest is checked while the objects are made durable (manifest_precheck.go).
	pre := precheckManifest(m, w.indexes, w.in.manifestLimit)
	if err := s.be.SyncObjects(); err != nil {
		<-pre.done
		return VersionInfo{}, fmt.Errorf("seal version %d: %w", w.v, err)
	}
	if err := s.failpoint("seal-objects-synced"); err != nil {
		return VersionInfo{}, err
	}
	// The pack indexes the objects' sync wrote (and those of a group's ranks) go into the
	// manifest: a reader loads them before it reads the version.
	own, err := s.be.unsealedIndexes()
	if err != nil {
		<-pre.done
		return VersionInfo{}, fmt.Errorf("seal version %d: %w", w.v, err)
	}
	m.Indexes = mergeIndexNames(w.indexes, own)
	data, err := pre.finalManifest(m, w.in.manifestLimit)
	if err != nil {
		return VersionInfo{}, err
	}
	if err := s.be.PutManifest(w.v, data); err != nil {
		return VersionInfo{}, fmt.Errorf("seal version %d: %w", w.v, err)
	}
	s.be.sealedIndexes(own)
	// The version exists from here on.
	if err := s.failpoint("seal-manifest-written"); err != nil {
		return VersionInfo{}, err
	}
	info := summarize(m)
	s.versions.addSealed(m, len(data), info)
	w.in.mem.install(w.mem, m) // the next version's bases (ingest_basemem.go)
	if err := s.ix.updateVersions([]VersionInfo{info}, nil); err != nil {
		s.log.Warn("index: not updated", "err", err)
	}
	w.noteSealed(info, sealStart)
	w.finish(m)
	// After finish, whose index write (the dirty flag) would otherwise wait for it.
	s.objects.flushMetasBehind()
	if err := s.failpoint("seal-index-updated"); err != nil {
		return info, err
	}
	switch {
	case w.noMaterialize:
	case w.in.mem.holds(w.v) && s.mat.deferrable(w.v):
		s.mat.deferTo(w.v) // the next diffs' bases are in memory (copy_defer.go)
	case w.bgMaterialize:
		s.mat.ensureInBackground()
	default:
		if err := s.mat.ensure(); err != nil {
			// The version is sealed; the copy is rebuilt when next needed.
			s.log.Warn("version sealed; materialized copy not brought forward", "version", w.v, "err", err)
		}
	}
	info.Anchor = info.PreviousNumber == 0
	s.collector.retainAfterSeal()
	return info, nil
}

// buildManifest assembles the manifest of the version from what was added.
func (w *Writer) buildManifest() (*manifest, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.files) == 0 {
		return nil, fmt.Errorf("version %d has no files: %w", w.v, ErrEmptyVersion)
	}
	if err := w.s.versions.checkAbove(w.v); err != nil {
		return nil, err
	}
	m := &manifest{Version: w.v, Created: w.in.now().UTC(), Dirs: []manifestDir{}}
	if latest, ok := w.s.Latest(); ok {
		m.Previous = latest
	}
	dirs := map[string]uint32{}
	for p, mode := range w.dirs {
		dirs[p] = mode
	}
	for p := range w.files {
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			if w.files[d] != nil {
				return nil, fmt.Errorf("%s lies below the file %s: %w", p, d, ErrBadPath)
			}
			if _, ok := dirs[d]; !ok {
				dirs[d] = 0o755
			}
		}
	}
	for p, mode := range dirs {
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			if w.files[d] != nil {
				return nil, fmt.Errorf("%s lies below the file %s: %w", p, d, ErrBadPath)
			}
			if _, ok := dirs[d]; !ok {
				dirs[d] = 0o755
			}
		}
		m.Dirs = append(m.Dirs, manifestDir{Path: p, Mode: mode})
	}
	slices.SortFunc(m.Dirs, func(a, b manifestDir) int { return cmp.Compare(a.Path, b.Path) })
	refs := map[ID]bool{}
	for _, f := range w.files {
		m.Files = append(m.Files, *f)
		m.Stats.LogicalBytes += f.Size
		refs[f.ID], refs[f.Header] = true, true
		for _, t := range f.Tensors {
			refs[t.ID] = true
			m.Stats.TotalElems += t.Elements()
			m.Stats.ChangedElems += t.Changed
		}
	}
	slices.SortFunc(m.Files, func(a, b manifestFile) int { return cmp.Compare(a.Path, b.Path) })
	for id, size := range w.created {
		if refs[id] {
			m.Stats.NewObjects++
			m.Stats.NewObjectBytes += size
		}
	}
	if err := m.Validate(); err != nil {
		return nil, fmt.Errorf("version %d: %w", w.v, err)
	}
	w.refs = refs
	return m, nil
}

// finish ends the writer: it is no longer open and holds nothing. m is the sealed manifest
// (nil for Abort); created objects it does not reference are left for the next sweep.
func (w *Writer) finish(m *manifest) {
	w.mu.Lock()
	w.done = true
	streams := w.streams
	w.streams = map[*FileStream]struct{}{}
	w.mu.Unlock()
	for st := range streams {
		st.Abort() // an added stream holds nothing more; any other is dropped
	}
	w.mu.Lock()
	held := w.held
	w.held = nil
	leftovers := false
	if len(w.created) > 0 {
		refs := map[ID]bool{}
		if m != nil && w.refs != nil {
			refs = w.refs // buildManifest's, of the same files
		} else if m != nil {
			for _, f := range m.Files {
				refs[f.ID], refs[f.Header] = true, true
				for _, t := range f.Tensors {
					refs[t.ID] = true
				}
			}
		}
		for id := range w.created {
			if !refs[id] {
				leftovers = true
				break
			}
		}
	}
	w.mu.Unlock()
	w.in.closeWriter(w.v, held, leftovers)
}

// closeWriter forgets the open writer of version v and the objects it held; leftovers: it
// put objects that no manifest uses (the next sweep removes them).
func (in *ingester) closeWriter(v uint64, held map[ID]bool, leftovers bool) {
	in.pendMu.Lock()
	for id := range held {
		if in.pending[id]--; in.pending[id] <= 0 {
			delete(in.pending, id)
		}
	}
	delete(in.open, v)
	if leftovers {
		in.leftovers = true
	}
	clearFlag := len(in.open) == 0 && !in.leftovers
	in.pendMu.Unlock()
	if clearFlag {
		if err := in.st.ix.setFlag(keyDirty, false); err != nil {
			in.st.log.Warn("index: not updated", "err", err)
		}
	}
}

// Abort drops the version. Objects written only for it are removed by the next sweep (the
// next writer's open, or GC).
func (w *Writer) Abort() error {
	if err := w.checkLive(); err != nil {
		if errors.Is(err, ErrWriterDone) {
			return nil
		}
		return err
	}
	w.finish(nil)
	return nil
}
