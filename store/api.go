package store

// API CONTRACT for fs/ and cmd/ (bodies to be replaced by the implementation).

import (
	"errors"
	"io"
	"io/fs"
	"time"

	"github.com/weightfs/weightfs/delta"
)

var errNotYet = errors.New("not implemented yet")

// Options configure Open.
type Options struct {
	// ReadOnly opens the store for reading only: no lock is taken, nothing in the store is
	// written, and versions sealed by the writer appear after Refresh.
	ReadOnly bool
	// CacheDir holds this process's index and materialized copy. Empty: the writer uses
	// STORE/cache; a reader uses a fresh per-process directory under the user cache dir.
	CacheDir string
	// Diff is the diff backend; nil means the CPU backend.
	Diff delta.DiffBackend
	// Logf receives one line per noteworthy event (nil: discarded).
	Logf func(format string, args ...any)
}

// Store is an open store.
type Store struct{}

// Init creates an empty store at path (a local directory; it must not exist or be empty).
func Init(path string) error { return errNotYet }

// Open opens the store at path.
func Open(path string, opts Options) (*Store, error) { return nil, errNotYet }

// Close releases the lock, the index and every open file.
func (s *Store) Close() error { return errNotYet }

// Refresh picks up versions sealed by another process since the last call.
func (s *Store) Refresh() error { return errNotYet }

// VersionInfo summarises one sealed version.
type VersionInfo struct {
	Number         uint64
	Created        time.Time
	Files          int
	LogicalBytes   int64 // sum of file sizes
	StoredBytes    int64 // bytes of objects this version added to the store
	ChangedElems   int64 // elements that differ from the previous version's same tensors
	TotalElems     int64 // elements of all tensors
	Anchor         bool  // the version has no predecessor it was diffed against
	PreviousNumber uint64
}

// Versions lists sealed versions in ascending order.
func (s *Store) Versions() []VersionInfo { return nil }

// Latest is the newest sealed version; ok is false for an empty store.
func (s *Store) Latest() (v uint64, ok bool) { return 0, false }

// Entry is one file or directory of a version.
type Entry struct {
	Path   string // slash-separated, relative to the version root
	Dir    bool
	Size   int64
	Mode   fs.FileMode
	SHA256 [32]byte
}

// Entries lists the files and directories of a sealed version, sorted by path.
func (s *Store) Entries(v uint64) ([]Entry, error) { return nil, errNotYet }

// File is an open file of a sealed version: random access, exact bytes, safe for concurrent
// ReadAt. Reads fail (errors wrapping ErrCorrupt) rather than return wrong bytes.
type File interface {
	io.ReaderAt
	Size() int64
	Close() error
}

// OpenFile opens one file of a sealed version.
func (s *Store) OpenFile(v uint64, path string) (File, error) { return nil, errNotYet }

// CommitOptions configure Commit.
type CommitOptions struct {
	Version  uint64 // 0: latest+1
	Progress func(done, total int64)
}

// Commit ingests the files under dir as a new sealed version (the batch path).
func (s *Store) Commit(dir string, opts CommitOptions) (VersionInfo, error) {
	return VersionInfo{}, errNotYet
}

// Writer builds one open version (used by the mount). Not visible to anyone until Seal.
type Writer struct{}

// NewVersion opens version v for writing; v must exceed every sealed version.
func (s *Store) NewVersion(v uint64) (*Writer, error) { return nil, errNotYet }

// AddFile adds a file of the version, read from r (size bytes).
func (w *Writer) AddFile(path string, r io.ReaderAt, size int64, mode fs.FileMode) error {
	return errNotYet
}

// AddDir records a directory of the version (so empty ones round-trip).
func (w *Writer) AddDir(path string, mode fs.FileMode) error { return errNotYet }

// Seal makes the version durable and visible; it returns only once it is.
func (w *Writer) Seal() (VersionInfo, error) { return VersionInfo{}, errNotYet }

// Abort drops the version and everything written for it.
func (w *Writer) Abort() error { return errNotYet }
