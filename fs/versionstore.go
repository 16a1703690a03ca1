package fs

import (
	"io"
	iofs "io/fs"
	"path/filepath"

	"github.com/weightfs/weightfs/store"
)

// VersionStore is what the FUSE layer needs from a store of versions: list the sealed ones,
// read them, open a new one. *store.Store provides it through FromStore; tests of the node
// tree use an in-memory fake (fakeStore). It is not called Backend because in this code base a
// backend is storage only (store.Backend: where objects and manifests are put and got, a
// directory or S3); the mount sits above the whole store, never on a backend. delta.DiffBackend
// (the CPU or GPU engine that diffs tensors) keeps its name: `--diff cpu|gpu` and the CLI's JSON
// call those "backend" too, and they store nothing.
type VersionStore interface {
	// Refresh picks up versions sealed by another process.
	Refresh() error
	// Versions lists sealed versions in ascending order.
	Versions() []store.VersionInfo
	// Entries lists the files and directories of a sealed version, sorted by path.
	Entries(v uint64) ([]store.Entry, error)
	// OpenFile opens one file of a sealed version for random access.
	OpenFile(v uint64, path string) (store.File, error)
	// NewVersion opens version v for writing; v must exceed every sealed version.
	NewVersion(v uint64) (VersionWriter, error)
}

// VersionWriter builds one version; see store.Writer.
type VersionWriter interface {
	AddFile(path string, r io.ReaderAt, size int64, mode iofs.FileMode) error
	AddDir(path string, mode iofs.FileMode) error
	Seal() (store.VersionInfo, error)
	Abort() error
}

// damageReporter is implemented by version stores that know of versions whose manifests exist but
// cannot be read (store.Store.VersionDamage). Optional: such a version is not listed, and a
// lookup of it is EIO (damage), never ENOENT.
type damageReporter interface {
	VersionDamage(v uint64) error
}

func (b storeVersions) VersionDamage(v uint64) error { return b.s.VersionDamage(v) }

// stagingDirer is implemented by version stores that offer a directory for staging files (on the
// store's own disk, so a full disk shows up as ENOSPC of the store). Optional.
type stagingDirer interface {
	StagingDir() (string, error)
}

// FromStore adapts an open *store.Store to VersionStore.
func FromStore(s *store.Store) VersionStore { return storeVersions{s} }

type storeVersions struct{ s *store.Store }

func (b storeVersions) Refresh() error                          { return b.s.Refresh() }
func (b storeVersions) Versions() []store.VersionInfo           { return b.s.Versions() }
func (b storeVersions) Entries(v uint64) ([]store.Entry, error) { return b.s.Entries(v) }
func (b storeVersions) OpenFile(v uint64, path string) (store.File, error) {
	return b.s.OpenFile(v, path)
}

func (b storeVersions) NewVersion(v uint64) (VersionWriter, error) {
	w, err := b.s.NewVersion(v)
	if err != nil {
		return nil, err
	}
	return w, nil
}

// StagingDir puts staging files on the store's disk: the store's own staging directory if it
// offers one, else a directory in its cache directory, else STORE/cache/staging (the writer's
// default cache directory, see store.Options.CacheDir).
func (b storeVersions) StagingDir() (string, error) {
	switch s := any(b.s).(type) {
	case stagingDirer:
		return s.StagingDir()
	case interface{ CacheDir() string }:
		return filepath.Join(s.CacheDir(), "staging"), nil
	}
	return filepath.Join(b.s.Root(), "cache", "staging"), nil
}

// versionHolder is implemented by version stores that keep the versions of open files from
// gc (store.Store.Hold). Optional: without it an open file holds nothing.
type versionHolder interface {
	Hold(v uint64) (release func(), err error)
}

func (b storeVersions) Hold(v uint64) (func(), error) { return b.s.Hold(v) }

// openHeld opens a file of sealed version v that holds v until it is closed, as an unlinked
// file stays readable through its open descriptors: a gc (a writer's --keep-last) keeps a
// version while a file of it is open here, or mapped (a mapping keeps the file open in the
// kernel until munmap), so that an engine loading it reads every byte.
func (m *mountState) openHeld(v uint64, path string) (store.File, error) {
	release := func() {}
	if h, ok := m.b.(versionHolder); ok {
		var err error
		if release, err = h.Hold(v); err != nil {
			return nil, err
		}
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
