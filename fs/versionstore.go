package fs

import (
	"io"
	iofs "io/fs"
	"path/filepath"

	"github.com/weightfs/weightfs/store"
)

// Backend is what the FUSE layer needs from a store. *store.Store provides it through
// StoreBackend; tests of the node tree use an in-memory fake.
type Backend interface {
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

// damageReporter is implemented by backends that know of versions whose manifests exist but
// cannot be read (store.Store.VersionDamage). Optional: such a version is not listed, and a
// lookup of it is EIO (damage), never ENOENT.
type damageReporter interface {
	VersionDamage(v uint64) error
}

func (b storeBackend) VersionDamage(v uint64) error { return b.s.VersionDamage(v) }

// stagingDirer is implemented by backends that offer a directory for staging files (on the
// store's own disk, so a full disk shows up as ENOSPC of the store). Optional.
type stagingDirer interface {
	StagingDir() (string, error)
}

// StoreBackend adapts an open *store.Store to Backend.
func StoreBackend(s *store.Store) Backend { return storeBackend{s} }

type storeBackend struct{ s *store.Store }

func (b storeBackend) Refresh() error                          { return b.s.Refresh() }
func (b storeBackend) Versions() []store.VersionInfo           { return b.s.Versions() }
func (b storeBackend) Entries(v uint64) ([]store.Entry, error) { return b.s.Entries(v) }
func (b storeBackend) OpenFile(v uint64, path string) (store.File, error) {
	return b.s.OpenFile(v, path)
}

func (b storeBackend) NewVersion(v uint64) (VersionWriter, error) {
	w, err := b.s.NewVersion(v)
	if err != nil {
		return nil, err
	}
	return w, nil
}

// StagingDir puts staging files on the store's disk: the store's own staging directory if it
// offers one, else a directory in its cache directory, else STORE/cache/staging (the writer's
// default cache directory, see store.Options.CacheDir).
func (b storeBackend) StagingDir() (string, error) {
	switch s := any(b.s).(type) {
	case stagingDirer:
		return s.StagingDir()
	case interface{ CacheDir() string }:
		return filepath.Join(s.CacheDir(), "staging"), nil
	}
	return filepath.Join(b.s.Root(), "cache", "staging"), nil
}
