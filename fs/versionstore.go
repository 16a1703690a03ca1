package fs

import (
	"io"
	iofs "io/fs"

	"github.com/weightfs/weightfs/store"
)

// VersionStore is what the FUSE layer needs from a store of versions, all of it: the mount
// calls these methods and asserts nothing else at run time, so every VersionStore (the tests'
// in-memory fake, fakeStore, included) goes down the same paths. *store.Store provides it
// through FromStore, a rank of a writer group through FromRank. It is not called Backend
// because in this code base a backend is storage only (store.Backend: where objects and
// manifests are put and got, a directory or S3); the mount sits above the whole store, never
// on a backend. delta.DiffBackend (the CPU or GPU engine that diffs tensors) keeps its name:
// `--diff cpu|gpu` and the CLI's JSON call those "backend" too, and they store nothing.
//
// A store that lacks a capability still has its methods, and they say so, as documented
// on each: RendersViews false (empty views), StagingDir "" (a temporary directory), Hold a
// release that does nothing, and for a writer StreamFile and Reset failing with
// errors.ErrUnsupported (the file is staged; a failed seal drops the writer) and
// MaterializeInBackground doing nothing. Both adapters of *store.Store have every
// capability; only the fake lacks some (it renders nothing and takes no streams).
type VersionStore interface {
	// The version list.

	// Poll picks up versions sealed by another process, cheaply (store.Store.Poll: it
	// lists the manifests only when the backend's hint says they may have changed).
	Poll() (store.PollResult, error)
	// Versions lists sealed versions in ascending order.
	Versions() []store.VersionInfo
	// NewerVersions says how many sealed versions are newer than v (the behind-latest
	// buckets of the read counters).
	NewerVersions(v uint64) int
	// VersionDamage is the error of version v when its manifest is in the store but cannot
	// be read (wrapping store.ErrCorrupt), else nil: such a version is not listed, and a
	// lookup of it is EIO (damage), never ENOENT.
	VersionDamage(v uint64) error

	// Sealed versions.

	// Entries lists the files and directories of a sealed version, sorted by path.
	Entries(v uint64) ([]store.Entry, error)
	// OpenFile opens one file of a sealed version for random access.
	OpenFile(v uint64, path string) (store.File, error)
	// Hold keeps version v from gc until release is called (store.Store.Hold): an open
	// file holds its version. A store without gc returns a release that does nothing.
	Hold(v uint64) (release func(), err error)

	// The patches/ and deltas/ views (views.go; store/render.go and store/render_slime.go).

	// RendersViews reports whether the store renders the views. When false the views are
	// empty and the other methods of this group are never called (they may fail with
	// errors.ErrUnsupported).
	RendersViews() bool
	// PatchBase returns the version the patch of v is taken against, or an error wrapping
	// store.ErrNoPrevious or store.ErrLayoutChanged when v has no patch.
	PatchBase(v uint64) (uint64, error)
	// RenderPatch returns the patch of v, rendered in the cache directory.
	RenderPatch(v uint64) (store.RenderedFile, error)
	// RenderPatchFrom returns the catch-up patch from version from to v, rendered in the
	// cache directory (store.ErrNoSuchVersion, ErrNoPrevious, ErrLayoutChanged: none).
	RenderPatchFrom(v, from uint64) (store.RenderedFile, error)
	// PatchNote says when v's patch carries files whole, and why ("" when it does not).
	PatchNote(v uint64) string
	// PatchSize is the size of v's patch without rendering it (ok false: render to know).
	PatchSize(v uint64) (size int64, ok bool, err error)
	// PlanSlime says how v is served in deltas/ (ErrNoSuchVersion: not at all).
	PlanSlime(v uint64) (store.SlimePlan, error)
	// RenderSlime returns the plan and, unless it is SlimeFull, the files of deltas/v.
	RenderSlime(v uint64) (store.SlimePlan, []store.RenderedFile, error)

	// Writing.

	// NewVersion opens version v for writing; v must exceed every sealed version.
	NewVersion(v uint64) (VersionWriter, error)
	// StagingDir is the directory for the mount's staging files on the store's own disk
	// (so that a full disk shows up as ENOSPC of the store), or "" for a store without
	// one: the mount then stages in a temporary directory.
	StagingDir() (string, error)
	// CommitPatch seals version v as the latest version with the one-file patch in r (size
	// bytes) applied (store.Store.CommitPatch: a patch written into patches/ on a read-write
	// mount, view_patches_in.go). A bad patch fails with store.ErrBadPatch; a store that
	// cannot (a rank of a writer group) with errors.ErrUnsupported.
	CommitPatch(r io.ReaderAt, size int64, v uint64) (store.VersionInfo, error)
	// CommitSlimeDelta seals version v from slime's delta checkpoint written into
	// deltas/weight_vNNNNNN/ (store.Store.CommitSlimeDelta).
	CommitSlimeDelta(index []byte, open store.SlimeShardOpener, v uint64) (store.VersionInfo, error)
	// CommitSlimeDeltaOnSeed seals version v, the store's first, from slime's first delta
	// applied to its seed checkpoint in dir (store.Store.CommitSlimeDeltaOnSeed).
	CommitSlimeDeltaOnSeed(dir string, index []byte, open store.SlimeShardOpener, v uint64) (store.VersionInfo, error)
	// SealedElsewhere reports whether another process seals the versions this mount
	// writes (a rank of a writer group: its group's publisher), so that the mount polls
	// for them and its root follows them (pollMode).
	SealedElsewhere() bool
}

// VersionWriter builds one version; see store.Writer. Like VersionStore it is the whole of
// what the mount calls: a writer that takes no streams, or cannot start over after a failed
// seal, says so (errors.ErrUnsupported).
type VersionWriter interface {
	AddFile(path string, r io.ReaderAt, size int64, mode iofs.FileMode) error
	AddDir(path string, mode iofs.FileMode) error
	// StreamFile starts a stream for a file written in order (stream.go); hint is its path
	// now. A writer that takes no streams fails (errors.ErrUnsupported): the file is staged.
	StreamFile(hint string) (*store.FileStream, error)
	// AddStream adds the file a closed stream received as path (a rank's sealed part:
	// compares it; see addStreamLocked).
	AddStream(path string, st *store.FileStream, mode iofs.FileMode) error
	// MaterializeInBackground makes Seal return once the version is durable, and bring the
	// store's materialized copy forward afterwards (a seal's latency is the trainer's).
	// A no-op for a writer without such a copy.
	MaterializeInBackground()
	Seal() (store.VersionInfo, error)
	// Reset makes the writer ready to be sealed again after a failed seal, keeping what its
	// streams stored (their bytes are nowhere else). A writer that cannot fails
	// (errors.ErrUnsupported), and the mount aborts it and starts afresh at the next seal.
	Reset() error
	Abort() error
}

// FromStore adapts an open *store.Store to VersionStore.
func FromStore(s *store.Store) VersionStore { return storeVersions{s} }

type storeVersions struct{ s *store.Store }

func (b storeVersions) Poll() (store.PollResult, error)         { return b.s.Poll() }
func (b storeVersions) Versions() []store.VersionInfo           { return b.s.Versions() }
func (b storeVersions) NewerVersions(v uint64) int              { return b.s.NewerVersions(v) }
func (b storeVersions) VersionDamage(v uint64) error            { return b.s.VersionDamage(v) }
func (b storeVersions) Entries(v uint64) ([]store.Entry, error) { return b.s.Entries(v) }
func (b storeVersions) OpenFile(v uint64, path string) (store.File, error) {
	return b.s.OpenFile(v, path)
}
func (b storeVersions) Hold(v uint64) (func(), error) { return b.s.Hold(v) }

func (b storeVersions) NewVersion(v uint64) (VersionWriter, error) {
	w, err := b.s.NewVersion(v)
	if err != nil {
		return nil, err
	}
	return w, nil
}

// StagingDir puts staging files on the store's disk: the store's own staging directory
// (STORE/cache/staging for a local store; see store.Options.CacheDir).
func (b storeVersions) StagingDir() (string, error) { return b.s.StagingDir() }

func (b storeVersions) CommitPatch(r io.ReaderAt, size int64, v uint64) (store.VersionInfo, error) {
	return b.s.CommitPatch(r, size, v)
}

func (b storeVersions) CommitSlimeDelta(index []byte, open store.SlimeShardOpener, v uint64) (store.VersionInfo, error) {
	return b.s.CommitSlimeDelta(index, open, v)
}

func (b storeVersions) CommitSlimeDeltaOnSeed(dir string, index []byte, open store.SlimeShardOpener, v uint64) (store.VersionInfo, error) {
	return b.s.CommitSlimeDeltaOnSeed(dir, index, open, v)
}

// SealedElsewhere: the versions a mount of a whole store writes are its own.
func (b storeVersions) SealedElsewhere() bool { return false }

// The store's writer is the whole VersionWriter.
var _ VersionWriter = (*store.Writer)(nil)

// openHeld opens a file of sealed version v that holds v until it is closed, as an unlinked
// file stays readable through its open descriptors: a gc (a writer's --keep-last) keeps a
// version while a file of it is open here, or mapped (a mapping keeps the file open in the
// kernel until munmap), so that an engine loading it reads every byte.
func (m *mountState) openHeld(v uint64, path string) (store.File, error) {
	release, err := m.b.Hold(v)
	if err != nil {
		return nil, err
	}
	f, err := m.b.OpenFile(v, path)
	if err != nil {
		release()
		return nil, err
	}
	return heldFile{File: f, release: release}, nil
}

// heldFile is a file of a sealed version that releases its hold when closed.
type heldFile struct {
	store.File
	release func()
}

func (h heldFile) Close() error {
	err := h.File.Close()
	h.release()
	return err
}

// ReadSlices passes the store's SliceReader on (a file without it reads into p).
func (h heldFile) ReadSlices(p []byte, off int64) ([][]byte, func(), int, error) {
	if sr, ok := h.File.(store.SliceReader); ok {
		return sr.ReadSlices(p, off)
	}
	n, err := h.File.ReadAt(p, off)
	return [][]byte{p[:n]}, func() {}, n, err
}
