package store

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sync"
	"time"
)

// Writer groups: several processes (ranks 0..W-1, on one node or many) write one version
// together, each its own files, and one process, the store's writer, publishes it
// (docs/format.md Part I §9 has the records byte by byte, docs/design.md "Writer groups"
// the reasons).
//
//   - A rank opens the store with OpenRank: no writer's lock (the writer may hold it), a
//     lock of its own rank instead, and a cache directory of its own. NewPart(v, files...)
//     begins its part of version v: it writes the rank's open marker (from here on the
//     writer's sweeps delete nothing: the rank writes objects no record names yet), and
//     brings the rank's materialized copy to the latest version, holding only the rank's
//     own files. The rank then adds its files as any Writer does (each tensor diffed
//     against the same tensor of the same-named file of the latest version: the objects
//     are those one writer would store), and SealPart makes its objects durable and writes
//     its part record: the files' manifest entries and the objects it stored.
//   - The writer (which holds the store's lock or lease) publishes with PublishGroup once
//     every rank has sealed: the parts are read and checked (format, CRC, version, rank,
//     W, base, no path of two ranks, every object stored, every file's objects hashing to
//     its SHA-256: group_check.go) and sealed as one manifest, by
//     the writer's own Seal: the version appears whole or not at all. A missing part
//     publishes nothing (ErrGroupIncomplete names the ranks); PublishGroupWait polls.
//     PublishReady (the publishing mount's poll) turns a refusal that waiting cannot cure
//     into a refusal record (group_refuse.go): the ranks waiting on the version
//     (WaitPublished) fail with ErrGroupRefused and the reason. A rank's wait succeeds only
//     if the version that appears holds its part exactly (group_holds.go): one of another
//     group of the same number fails it with ErrGroupMismatch.
//   - Records of a version that cannot be published any more (a version at or below the
//     latest sealed one: published, or overtaken) are deleted by the next publish and by
//     gc's sweep; AbortGroupVersion deletes a version's records at once. They are never
//     read as a version: only a manifest makes one.

// Rank names one member of a writer group.
type Rank struct {
	Group string // the group's name (CheckGroupName)
	Rank  int    // this member, 0..Ranks-1
	Ranks int    // W, how many ranks the group has
}

func (r Rank) check() error {
	if err := CheckGroupName(r.Group); err != nil {
		return err
	}
	if r.Ranks < 1 || r.Ranks > MaxRanks || r.Rank < 0 || r.Rank >= r.Ranks {
		return fmt.Errorf("rank %d of %d: ranks are 0..W-1, W from 1 to %d: %w", r.Rank, r.Ranks, MaxRanks, ErrGroupMismatch)
	}
	return nil
}

func (r Rank) String() string {
	return fmt.Sprintf("rank %d of %d of group %s", r.Rank, r.Ranks, r.Group)
}

// writerGroups is a Store's side of writer groups: the publisher's, which the writer uses
// (group_publish.go), and, for a Store opened with OpenRank, the rank's state (nil for every
// other Store).
type writerGroups struct {
	publisher *groupPublisher
	rank      *rankState
}

// rankState is what a rank's Store knows of its group (nil for every other Store).
type rankState struct {
	Rank
	recs Records
	log  *slog.Logger

	mu  sync.Mutex
	own map[string]bool // the paths the rank owns: its materialized copy holds these
	// ownFile keeps own across runs (in the rank's cache directory)
	ownFile string
	bases   map[uint64]uint64 // version being written -> the version it diffs against
	// the scoped form of one version (cached: ensure asks for it at every file)
	scopedOf, scoped *version
	// sealed: the parts this process sealed, until their wait ends; others: the other
	// groups seen with records of a version being waited on (group_holds.go)
	sealed map[uint64]*sealedPart
	others map[uint64]map[string]bool
}

// OpenRank opens the local store at path as rank r of a writer group: it writes objects and
// its part records, never a manifest, and takes no writer's lock, only the lock of its rank
// (groups/NAME/rank-R.lock: one process per rank). opts.CacheDir (empty:
// groups/NAME/cache/rank-R in the store) keeps its index and its materialized copy, which
// holds only the rank's own files. It sees versions published after its open at its next
// NewPart (which refreshes the list).
func OpenRank(path string, r Rank, opts Options) (*Store, error) {
	if err := r.check(); err != nil {
		return nil, fmt.Errorf("open store %s as %s: %w", path, r, err)
	}
	modes, format, err := localFormat(path)
	if err != nil {
		return nil, err
	}
	local := newLocalBackend(path, modes)
	groupRoot := filepath.Join(path, groupDir, r.Group)
	if err := local.MkdirAll(groupRoot); err != nil {
		return nil, fmt.Errorf("open store %s as %s: %w", path, r, err)
	}
	lock, err := acquireWriterLock(filepath.Join(groupRoot, fmt.Sprintf("rank-%d.lock", r.Rank)), modes.File)
	if err != nil {
		return nil, fmt.Errorf("open store %s as %s: %w", path, r, err)
	}
	be := newRankBackend(local, filepath.Join(groupRoot, "tmp", fmt.Sprintf("rank-%d", r.Rank)))
	if opts.CacheDir == "" {
		opts.CacheDir = filepath.Join(groupRoot, "cache", fmt.Sprintf("rank-%d", r.Rank))
	}
	o := Opening{Root: path, Lock: lock, Format: format, NewBackend: func(string) (Backend, error) {
		// Only this rank's process writes its temporary directory (its lock says so).
		if err := be.CleanTemp(); err != nil {
			return nil, err
		}
		return be, nil
	}, StoreID: func() (string, error) { return localStoreID(path) }}
	return OpenRankBackend(o, r, opts)
}

// OpenRankBackend opens the store that o describes as rank r of a writer group (OpenRank
// for a local directory, store/s3's OpenRank for a bucket). o.Lock is the rank's own lock, or
// nil where the backend has none; o.NewBackend must give a backend that holds group records
// (Records: RecordGroup) and may write objects without the writer's lock. opts.CacheDir must be set:
// it keeps the rank's index and copy across runs.
func OpenRankBackend(o Opening, r Rank, opts Options) (*Store, error) {
	if err := r.check(); err != nil {
		if o.Lock != nil {
			o.Lock.Close()
		}
		return nil, fmt.Errorf("open store %s as %s: %w", o.Root, r, err)
	}
	if opts.CacheDir == "" {
		if o.Lock != nil {
			o.Lock.Close()
		}
		return nil, fmt.Errorf("open store %s as %s: a rank needs a cache directory of its own", o.Root, r)
	}
	// A rank is a reader that may also write objects and part records: no sweep, no gc,
	// no clean-up of tmp/ (the writer's), no seal; its copy is built by NewPart alone.
	opts.ReadOnly, opts.Materialize, opts.Retention = true, false, Retention{}
	s, err := OpenBackend(o, opts)
	if err != nil {
		return nil, err
	}
	recs := s.be.records
	if recs == nil {
		s.Close()
		return nil, fmt.Errorf("open store %s as %s: %w", o.Root, r, ErrGroupUnsupported)
	}
	g := newRankState(r, recs, s.cache.dir, s.log)
	s.groups.rank = g
	return s, nil
}

// ownedFileName is the file in a rank's cache directory that lists the paths it owns (JSON,
// an array of strings), kept across runs.
const ownedFileName = "group-owned.json"

// NewPart begins this rank's part of version v, owning the files own (more may be added
// with Writer.Own before they are written). It refreshes the list of versions: the latest
// sealed one is the part's base, and v must be above it.
func (s *Store) NewPart(v uint64, own ...string) (*Writer, error) {
	g := s.groups.rank
	if g == nil {
		return nil, fmt.Errorf("new part of version %d: this store is not open as a rank (OpenRank): %w", v, ErrGroupRank)
	}
	if err := checkVersionNumber(v); err != nil {
		return nil, fmt.Errorf("new part: %w", err)
	}
	if err := s.Refresh(); err != nil {
		return nil, fmt.Errorf("new part of version %d: %w", v, err)
	}
	if err := s.versions.checkAbove(v); err != nil {
		return nil, fmt.Errorf("%s: %w", g.member(), err)
	}
	// A refused number is not written again: the rank learns it now, not after its part.
	if ref, err := g.refusal(v); err != nil {
		return nil, fmt.Errorf("%s: new part of version %d: %w", g.member(), v, err)
	} else if ref != nil {
		return nil, fmt.Errorf("%s: %w", g.member(), refusalErr(ref))
	}
	base, _ := s.Latest()
	marker, err := encodePart(g.newPart(v, base))
	if err != nil {
		return nil, err
	}
	// The marker comes before any object: a sweep that runs from here on spares them.
	if err := g.putRecord(g.recordName(v, recordOpen), marker); err != nil {
		return nil, fmt.Errorf("%s: %w", g.member(), err)
	}
	w, err := s.NewVersion(v)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", g.member(), err)
	}
	g.setBase(v, base)
	if err := w.Own(own...); err != nil {
		w.Abort()
		return nil, err
	}
	return w, nil
}

// Own declares that this rank writes the files paths: its materialized copy then holds
// their latest versions, the bases of their tensors. What a rank owns accumulates, across
// runs too (kept in its cache directory: the copy holds every file it owned; one it no
// longer writes costs disk, nothing else). A path owned for the first time rebuilds the copy, unless the copy left by
// an earlier run holds it already (files being diffed meanwhile may be stored whole: own
// every file before writing). SealPart refuses a file the rank never owned.
func (w *Writer) Own(paths ...string) error {
	g := w.s.groups.rank
	if g == nil {
		return fmt.Errorf("own: version %d is not a rank's part: %w", w.v, ErrGroupRank)
	}
	for _, p := range paths {
		if err := checkPath(p); err != nil {
			return err
		}
	}
	if g.addOwned(paths) {
		// A copy of the same version with other files: taken up again from the index's
		// record if it holds every owned file, else rebuilt.
		w.s.mat.invalidate()
	}
	return w.s.mat.ensure()
}

// scope is the form of ver the materialized copy holds: ver itself, or for a rank the
// version with only the files the rank owns (nil stays nil).
func (g *rankState) scope(ver *version) *version {
	if g == nil || ver == nil {
		return ver
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.scopedOf == ver {
		return g.scoped
	}
	m := *ver.m
	m.Files = nil
	for i := range ver.m.Files {
		if g.own[ver.m.Files[i].Path] {
			m.Files = append(m.Files, ver.m.Files[i])
		}
	}
	// Only the directories the owned files lie in: the copy makes nothing else.
	keep := map[string]bool{}
	for i := range m.Files {
		for d := path.Dir(m.Files[i].Path); d != "."; d = path.Dir(d) {
			keep[d] = true
		}
	}
	m.Dirs = nil
	for _, d := range ver.m.Dirs {
		if keep[d.Path] {
			m.Dirs = append(m.Dirs, d)
		}
	}
	g.scopedOf, g.scoped = ver, newVersion(&m)
	return g.scoped
}

// WaitVersion refreshes the list of versions every poll until one at or above v is sealed
// (a rank waits so before its next part: its base must be the version just published), or
// ctx ends.
func (s *Store) WaitVersion(ctx context.Context, v uint64, poll time.Duration) error {
	if poll <= 0 {
		poll = time.Second
	}
	for {
		if err := s.Refresh(); err != nil {
			return err
		}
		if latest, ok := s.Latest(); ok && latest >= v {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("wait for version %d: %w", v, ctx.Err())
		case <-time.After(poll):
		}
	}
}

// PartInfo describes a sealed part.
type PartInfo struct {
	Rank        Rank
	Version     uint64
	Base        uint64 // the version its files were diffed against (0: none)
	Files       int
	NewObjects  int   // objects the rank stored for it
	ObjectBytes int64 // their stored bytes
	// Hashes is each file's SHA-256, by path: what a rank compares a file with when asked to
	// seal a part it sealed already (fs).
	Hashes map[string]ID
}

// SealPart makes the rank's objects durable and writes its part record; the version
// appears once the writer publishes every rank's part (PublishGroup). The Writer ends; on
// an error it stays usable (fix the cause and call SealPart again) or Abort it.
func (w *Writer) SealPart() (PartInfo, error) {
	s, g := w.s, w.s.groups.rank
	if g == nil {
		return PartInfo{}, fmt.Errorf("seal part of version %d: this store is not open as a rank: %w", w.v, ErrGroupRank)
	}
	if err := s.checkOpen(); err != nil {
		return PartInfo{}, err
	}
	s.writeMu.Lock()
	defer s.writeMu.Unlock()
	if err := w.checkLive(); err != nil {
		return PartInfo{}, err
	}
	base := g.baseOf(w.v)
	rec, info, err := w.partRecord(g, base)
	if err != nil {
		return PartInfo{}, err
	}
	name := g.recordName(w.v, recordPart)
	key, _ := parseRecordName(name)
	if err := checkPart(rec, key); err != nil {
		return PartInfo{}, fmt.Errorf("%s: part of version %d: %w", g.member(), w.v, err)
	}
	if err := s.failpoint("part-objects-written"); err != nil {
		return PartInfo{}, err
	}
	if err := s.be.SyncObjects(); err != nil {
		return PartInfo{}, fmt.Errorf("%s: seal part of version %d: %w", g.member(), w.v, err)
	}
	// The rank's pack indexes go into its part: the publisher loads them and names them in
	// the manifest.
	if rec.Indexes, err = s.be.unsealedIndexes(); err != nil {
		return PartInfo{}, fmt.Errorf("%s: seal part of version %d: %w", g.member(), w.v, err)
	}
	data, err := encodePart(rec)
	if err != nil {
		return PartInfo{}, err
	}
	// The other groups writing this number now (before the record: once it is there, they
	// are noted): named if one publishes it without this rank (group_holds.go).
	g.noteOtherGroups(w.v)
	if err := g.putRecord(name, data); err != nil {
		return PartInfo{}, fmt.Errorf("%s: seal part of version %d: %w", g.member(), w.v, err)
	}
	// The part is sealed from here on.
	s.be.sealedIndexes(rec.Indexes)
	if err := s.failpoint("part-written"); err != nil {
		return info, err
	}
	if err := g.deleteRecord(g.recordName(w.v, recordOpen)); err != nil {
		s.log.Warn("writer group: open marker not removed (the part supersedes it)", "err", err)
	}
	g.forgetBase(w.v)
	g.rememberPart(w.v, rec)
	// The part's tensors are the bases of the rank's next part once the version is published
	// (ingest_basemem.go: served only for that version, by identity).
	w.in.mem.install(w.mem, &manifest{Version: w.v, Files: rec.Files})
	w.finish(&manifest{Files: rec.Files})
	return info, nil
}

// partRecord is the part record of w's files, directories and the new objects they name,
// sorted as the record's check wants them, and what SealPart reports of it: a file written
// without being owned is refused (ErrBadPath).
func (w *Writer) partRecord(g *rankState, base uint64) (*partRecord, PartInfo, error) {
	own := g.ownedPaths()
	rec := g.newPart(w.v, base)
	w.mu.Lock()
	for p, f := range w.files {
		if !own[p] {
			w.mu.Unlock()
			return nil, PartInfo{}, fmt.Errorf("%s: file %s of version %d was not owned (Writer.Own) before it was written: %w", g.member(), p, w.v, ErrBadPath)
		}
		rec.Files = append(rec.Files, *f)
	}
	for p, mode := range w.dirs {
		rec.Dirs = append(rec.Dirs, manifestDir{Path: p, Mode: mode})
	}
	refs := map[ID]bool{}
	manifestRoots(&manifest{Files: rec.Files}, refs)
	info := PartInfo{Rank: g.member(), Version: w.v, Base: base, Files: len(rec.Files), Hashes: map[string]ID{}}
	for i := range rec.Files {
		info.Hashes[rec.Files[i].Path] = rec.Files[i].SHA256
	}
	for id, size := range w.created {
		if refs[id] {
			rec.Objects = append(rec.Objects, partObject{ID: id, Size: size})
			info.NewObjects++
			info.ObjectBytes += size
		}
	}
	w.mu.Unlock()
	slices.SortFunc(rec.Files, func(a, b manifestFile) int { return cmp.Compare(a.Path, b.Path) })
	slices.SortFunc(rec.Dirs, func(a, b manifestDir) int { return cmp.Compare(a.Path, b.Path) })
	slices.SortFunc(rec.Objects, func(a, b partObject) int { return cmp.Compare(a.ID.String(), b.ID.String()) })
	return rec, info, nil
}

// writerName names this process for people: "host pid N".
func writerName() string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s pid %d", host, os.Getpid())
}
