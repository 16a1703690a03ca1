package store

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	"github.com/weightfs/weightfs/delta"
)

// Options configure Open.
type Options struct {
	// ReadOnly opens the store for reading only: no lock is taken, nothing in the store is
	// written, and versions sealed by the writer appear after Refresh.
	ReadOnly bool
	// CacheDir holds this process's index and materialized copy. Empty: the writer uses
	// STORE/cache; a reader uses a fresh per-process directory under the user cache dir
	// (removed by Close).
	CacheDir string
	// Diff is the diff backend; nil means the CPU backend.
	Diff delta.DiffBackend
	// Logger receives the store's log records, at the levels log.go describes (nil:
	// discarded).
	Logger *slog.Logger

	// Materialize makes a read-only store keep a plain copy of the latest version in its
	// cache directory (brought forward on Refresh), so reads of it and of the versions just
	// before it need no replay. A read-only mount wants it; one-shot commands (log, export,
	// verify) do not. The writer always keeps one (built when a version is first ingested).
	Materialize bool
	// MaxChain bounds the deltas between any object and a whole copy (0: DefaultMaxChain).
	MaxChain int
	// CacheBytes bounds the memory of rebuilt pages, delta bodies and decoded delta blocks
	// kept for reads (0: DefaultCacheBytes; an eighth, three eighths and an eighth of it).
	CacheBytes int64
	// FileCopyBytes bounds the disk used by the checked copies of the files of older
	// versions that reads make in the cache directory (0: DefaultFileCopyBytes; negative:
	// none, every read of an older version replays: filecopy.go).
	FileCopyBytes int64
	// BaseMemory (0: off) bounds the memory in which the writer keeps the tensors of the
	// latest version it sealed, so that the next version's diffs read their bases from memory
	// rather than from the materialized copy on disk: a version whose tensors' bytes exceed
	// it is not kept (ingest_basemem.go). While a version is written the process holds about
	// this much more (the tensors of the latest version are dropped as they are used, the new
	// version's taken in), and Go's collector may let the heap grow to about twice it between
	// collections. The mount's default is DefaultBaseMemory.
	BaseMemory int64
	// Retention (zero: none) runs gc in the background after every seal (gc_retention.go).
	Retention Retention
	// Observer (nil: none) is told of seals and of versions a reader finds (stats.go).
	Observer Observer
	// Failpoint (nil: none; tests and crash drills) is called at the named points of
	// failpoints.go; an error it returns stops the operation there as if the process had
	// died (a daemon's hook may instead end the process there: cmd/weightfs's
	// WEIGHTFS_FAILPOINT).
	Failpoint func(point string) error

	// looseObjects (tests: openLoose; the environment variable WEIGHTFS_LOOSE_OBJECTS=1 for
	// the tests of the weightfs command) keeps the layout of store format 2: objects are
	// loose files, no packs are written, and a writer upgrades the format file to 2 at most.
	looseObjects bool
}

// looseObjectsEnv, set to 1, makes every store this process opens keep loose objects
// (Options.looseObjects): a knob for the tests that damage or read object files of the
// format-2 layout through the weightfs command, not for users.
const looseObjectsEnv = "WEIGHTFS_LOOSE_OBJECTS"

// Defaults of Options.
const (
	DefaultMaxChain   = 64
	DefaultCacheBytes = 256 << 20
)

// Store is an open store. Safe for concurrent use.
type Store struct {
	root     string
	opts     Options
	log      *slog.Logger // Options.Logger, or one that discards
	readOnly bool
	be       *backendCaps // the backend and its optional parts, asserted at open (backend.go)

	groups writerGroups // writer groups: the publisher's side (group_publish.go) and a rank's (group.go)

	codec *codec
	lock  io.Closer // the writer's lock (lock.go, or store/s3's lease); nil for a reader
	ix    *index
	cache cacheDirState // the cache directory, and whether it is this process's own (cache_dir.go)

	collector *collector // gc, its sweeps, retention and the holds of open files (gc.go)
	maxChain  int
	// format is the store's format version as its format file said at Open (2 once a writer
	// upgraded it there): Verify reports the file when objects hold sections it does not
	// allow (verify_format.go).
	format uint32
	stats  storeStats // what it did since Open, for metrics (stats.go)

	mu       sync.RWMutex // guards closed (the version list has its own: version_list.go)
	closed   bool
	versions *versionList // sealed versions, damage, parsed manifests, Refresh and Poll (version_list.go)

	objects *objectStore // metas, object reads and their caches (object_store.go)

	// writeMu serializes what changes the set of versions or objects: Seal, GC,
	// RebuildIndex, the clean-up at open.
	writeMu sync.Mutex
	ingest  *ingester // open Writers, what they hold from gc, the diff backend (ingest.go)
	mat     *materialized
	files   *fileCopies // checked copies of files of older versions (filecopy.go)
	renders *renders    // the render cache: patches and slime deltas (render.go)
	checker *checker    // Verify, Repair, Export and the vouching of files (verify.go)

	// hook, when set (tests), is called at named points of the seal and GC; an error it
	// returns is returned from there, as if the process had died at that point.
	hook func(point string) error
}

func (s *Store) failpoint(point string) error {
	if s.hook != nil {
		return s.hook(point)
	}
	return nil
}

// localFormat checks the format file of the local store at path and returns the modes its
// files are made with (private, or shared with the group: perm.go) and its format version.
func localFormat(path string) (storeModes, uint32, error) {
	formatInfo, err := os.Stat(filepath.Join(path, formatFileName))
	if errors.Is(err, fs.ErrNotExist) {
		return storeModes{}, 0, fmt.Errorf("open store %s: %w", path, ErrNotAStore)
	}
	if err != nil {
		return storeModes{}, 0, fmt.Errorf("open store %s: %w", path, err)
	}
	if !formatInfo.Mode().IsRegular() {
		// Looked at before it is read: reading a FIFO would block every command forever.
		return storeModes{}, 0, fmt.Errorf("open store %s: %s is not a regular file (mode %v): %w", path, formatFileName, formatInfo.Mode(), ErrCorrupt)
	}
	format, err := os.ReadFile(filepath.Join(path, formatFileName))
	if err != nil {
		return storeModes{}, 0, fmt.Errorf("open store %s: %w", path, err)
	}
	v, err := FormatVersion(format)
	if err != nil {
		return storeModes{}, 0, fmt.Errorf("open store %s: %w", path, err)
	}
	return modesFor(formatInfo.Mode()), v, nil
}

// Open opens the store in the local directory path. (A STORE argument, which may also name
// a store in S3, is opened by package store/location.)
func Open(path string, opts Options) (*Store, error) {
	modes, format, err := localFormat(path)
	if err != nil {
		return nil, err
	}
	o := Opening{Root: path, Format: format, NewBackend: func(string) (Backend, error) { return newLocalBackend(path, modes), nil },
		StoreID: func() (string, error) { return localStoreID(path) }}
	if !opts.ReadOnly {
		lock, err := acquireWriterLock(filepath.Join(path, "lock"), modes.File)
		if err != nil {
			return nil, fmt.Errorf("open store %s for writing: %w", path, err)
		}
		o.Lock = lock
		o.WriterCacheDir = filepath.Join(path, "cache")
		o.UpgradeFormat = func(data []byte) error {
			return writeFileSynced(filepath.Join(path, formatFileName), filepath.Join(path, "tmp"), data, modes.File)
		}
	}
	return OpenBackend(o, opts)
}

// Opening is a store on a backend, ready to open: what OpenBackend needs. Open builds one
// for a local directory, store/s3 one for s3://bucket/prefix.
type Opening struct {
	// Root names the store (Store.Root, messages): its directory or its s3:// address.
	Root string
	// Lock is the writer's lock, already held (nil when Options.ReadOnly): an flock, an S3
	// lease, whatever the backend's kind has. The store closes it last, at Close, or when
	// OpenBackend fails.
	Lock io.Closer
	// WriterCacheDir is the writer's cache directory when Options.CacheDir is empty (a
	// reader's is a fresh per-process directory under the user cache directory).
	WriterCacheDir string
	// NewBackend opens the backend; cacheDir is the store's cache directory, where a
	// backend with a local cache keeps it.
	NewBackend func(cacheDir string) (Backend, error)
	// Format is the store's format version, from its format file (FormatVersion; 0 is taken
	// as 1). A store of format 1 gets version-1 delta sections only, unless the writer
	// upgrades it.
	Format uint32
	// UpgradeFormat (a writer's; nil: the store is not upgraded) replaces the store's format
	// file by data, durably and atomically. A writer opening a store of format 1 calls it
	// with the format file of format 2 before it writes anything.
	UpgradeFormat func(data []byte) error
	// StoreID (nil: Root identifies the store) returns the store's identity, which its
	// index records so that a cache directory reused for another store is emptied
	// (index_identity.go). Called after the format upgrade.
	StoreID func() (string, error)
}

// OpenBackend opens the store that o describes: its cache directory, its backend (behind
// the store's cache policy if the backend is a RemoteCache, cache_policy.go), a writer's
// clean-up of temporary files, the index, the versions and the materialized copy. The
// caller has checked the store's format file (FormatVersion, o.Format); a writer upgrades a
// store of format 1 (o.UpgradeFormat).
func OpenBackend(o Opening, opts Options) (*Store, error) {
	if os.Getenv(looseObjectsEnv) == "1" {
		opts.looseObjects = true
	}
	s := newBareStore(o.Root, opts)
	s.lock = o.Lock
	ok := false
	defer func() {
		if !ok {
			s.shutdown()
		}
	}()
	if s.lock == nil && !s.readOnly {
		return nil, fmt.Errorf("open store %s for writing: no writer lock", o.Root)
	}
	if !s.readOnly && s.opts.CacheDir == "" {
		s.opts.CacheDir = o.WriterCacheDir
		if st, err := os.Lstat(o.WriterCacheDir); err == nil && !st.IsDir() {
			// The writer's own cache (STORE/cache): what else stands there is no one's, and
			// a cache is rebuilt from the store. A cache directory the user names is left
			// alone (an error below).
			s.log.Warn("the writer's cache directory is not a directory; removed and made anew", "path", o.WriterCacheDir, "mode", st.Mode().String())
			if err := os.Remove(o.WriterCacheDir); err != nil {
				return nil, fmt.Errorf("open store %s: writer's cache directory: %w", o.Root, err)
			}
		}
	}
	if err := s.upgradeFormat(o); err != nil {
		return nil, err
	}
	if err := s.setupCacheDir(); err != nil {
		return nil, err
	}
	be, err := o.NewBackend(s.cache.dir)
	if err != nil {
		return nil, err
	}
	s.be.use(be, s.readOnly && opts.Materialize, s.root, s.log)
	if err := s.be.usePacks(opts.looseObjects, s.log); err != nil {
		return nil, fmt.Errorf("open store %s: %w", o.Root, err)
	}
	if !s.readOnly {
		// Nothing is being written now: leftovers are from a process that died.
		if err := s.be.CleanTemp(); err != nil {
			return nil, err
		}
	}
	owner, err := ownerOf(o, s.cache.dir)
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", o.Root, err)
	}
	if err := s.finishOpen(owner); err != nil {
		return nil, err
	}
	ok = true
	return s, nil
}

// newBareStore builds the in-memory part of a Store; its backend is set by the caller
// (OpenBackend: backendCaps.use).
func newBareStore(path string, opts Options) *Store {
	s := &Store{
		root: path, opts: opts, log: newLogger(opts.Logger), readOnly: opts.ReadOnly, be: &backendCaps{},
		maxChain: opts.MaxChain, hook: opts.Failpoint,
	}
	s.ingest = newIngester(s, opts.Diff)
	if s.maxChain <= 0 {
		s.maxChain = DefaultMaxChain
	}
	cacheBytes := opts.CacheBytes
	if cacheBytes <= 0 {
		cacheBytes = DefaultCacheBytes
	}
	s.versions = newVersionList(s)
	s.objects = newObjectStore(s, cacheBytes)
	s.groups.publisher = &groupPublisher{root: path, be: s.be, log: s.log, st: s}
	// After the parts above: the collector's holds and retainer take their methods.
	s.renders = newRenders(s)
	s.collector = newCollector(s)
	s.checker = newChecker(s)
	return s
}

// finishOpen is the part of Open common to every backend, once the backend, the writer's
// lock and the cache directory are in place: the codec, the index, the version list, the
// writer's clean-up and a reader's materialized copy.
func (s *Store) finishOpen(owner indexOwner) error {
	var err error
	if s.codec, err = newCodec(); err != nil {
		return err
	}
	indexPath := filepath.Join(s.cache.dir, "index.db")
	_, statErr := os.Stat(indexPath)
	if s.ix, err = openIndex(indexPath, owner, s.log); err != nil {
		return err
	}
	s.mat = newMaterialized(s, filepath.Join(s.cache.dir, "materialized"))
	fileCopyBytes := s.opts.FileCopyBytes
	if fileCopyBytes == 0 {
		fileCopyBytes = DefaultFileCopyBytes
	}
	s.files = newFileCopies(s, filepath.Join(s.cache.dir, "files"), fileCopyBytes)
	if err := s.versions.loadVersions(); err != nil {
		return err
	}
	if !s.readOnly {
		s.collector.ensureGCRecord()
	}
	if !s.readOnly && (statErr != nil || s.ix.flag(keyDirty)) {
		// A writer died between writing objects and sealing them (or the index, which
		// remembers that, is new): drop the objects no manifest needs.
		if err := s.collector.sweep(); err != nil {
			return err
		}
	}
	// The writer always keeps the copy (it diffs against it and serves the latest version from
	// it); a reader keeps one when asked to. Bring it to the latest version now, so the first
	// reads of the latest version are plain preads rather than a replay.
	if !s.readOnly || s.opts.Materialize {
		if err := s.mat.ensure(); err != nil {
			if s.readOnly || !errors.Is(err, ErrCorrupt) {
				return err
			}
			// The writer opens all the same: Repair needs it, and every version but the
			// damaged one is readable. Ingest needs the copy and says why it cannot.
			s.log.Error("materialized copy not built (run weightfs verify --repair "+s.root+")", "err", err)
		}
	}
	return nil
}

func (s *Store) setupCacheDir() error {
	s.cache.dir = s.opts.CacheDir
	switch {
	case s.cache.dir != "":
		if err := os.MkdirAll(s.cache.dir, cacheDirPerm); err != nil {
			return fmt.Errorf("create cache directory: %w", err)
		}
	case !s.readOnly:
		s.cache.dir = filepath.Join(s.root, "cache")
		if err := os.MkdirAll(s.cache.dir, cacheDirPerm); err != nil {
			return fmt.Errorf("create cache directory: %w", err)
		}
	default:
		base, err := os.UserCacheDir()
		if err != nil {
			base = os.TempDir()
		}
		base = filepath.Join(base, "weightfs")
		if err := os.MkdirAll(base, cacheDirPerm); err != nil {
			return fmt.Errorf("create cache directory: %w", err)
		}
		removeDeadReaderCaches(base)
		if s.cache.dir, err = os.MkdirTemp(base, fmt.Sprintf("reader-%d-*", os.Getpid())); err != nil {
			return fmt.Errorf("create cache directory: %w", err)
		}
		s.cache.own = true
	}
	return nil
}

// removeDeadReaderCaches removes the per-process cache directories of readers that died
// without Close (their names carry the process id).
func removeDeadReaderCaches(base string) {
	entries, _ := os.ReadDir(base)
	for _, e := range entries {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "reader-%d-", &pid); err != nil || pid <= 0 || pid == os.Getpid() {
			continue
		}
		if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
			os.RemoveAll(filepath.Join(base, e.Name()))
		}
	}
}

// Close releases the lock, the index and every open file. Open Writers are aborted.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	s.mu.Unlock()
	s.collector.close() // a retention gc stops between objects once closed is set
	for _, w := range s.ingest.openWriters() {
		w.Abort()
	}
	return s.shutdown()
}

// shutdown releases resources without any clean-up of the store (also used after a failed
// Open, and by tests as a simulated crash).
func (s *Store) shutdown() error {
	var errs []error
	if s.files != nil {
		s.files.close() // first: its rebuilds read ahead
	}
	if s.objects != nil {
		s.objects.wait()
	}
	if s.mat != nil {
		s.mat.close()
	}
	if s.ix != nil {
		s.objects.flushMetas()
		if s.lock != nil && s.ingest.clean() {
			// Clean shutdown of the writer: no sweep needed at the next open.
			s.ix.setFlag(keyDirty, false)
		}
		errs = append(errs, s.ix.close())
	}
	if s.codec != nil {
		s.codec.close()
	}
	// A remote backend stops its transfers (objects not yet uploaded belong to no sealed
	// version) before its cache directory may go.
	if s.be.Backend != nil {
		errs = append(errs, s.be.Close())
	}
	if s.cache.own {
		errs = append(errs, os.RemoveAll(s.cache.dir))
	}
	if s.lock != nil {
		errs = append(errs, s.lock.Close())
	}
	return errors.Join(errs...)
}

func (s *Store) checkOpen() error {
	s.mu.RLock()
	defer s.mu.RUnlock()
	if s.closed {
		return ErrClosed
	}
	return nil
}

// Root is the store's path.
func (s *Store) Root() string { return s.root }

// Backend is the backend the store keeps its bytes in, as it was given (its own
// counters, such as store/s3's Stats, are asked of it).
func (s *Store) Backend() Backend { return s.be.given }

// StagingDir is where a read-write mount keeps the bytes of open versions: CACHE/staging, on
// the cache directory's disk (STORE/cache/staging for a local writer with the default
// cache). A store in S3 has no local directory of its own, so this is the one place for it.
func (s *Store) StagingDir() (string, error) { return filepath.Join(s.cache.dir, "staging"), nil }

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

// ChangedFraction is ChangedElems/TotalElems (0 for a version without tensors).
func (v VersionInfo) ChangedFraction() float64 {
	if v.TotalElems == 0 {
		return 0
	}
	return float64(v.ChangedElems) / float64(v.TotalElems)
}

func summarize(m *manifest) VersionInfo {
	return VersionInfo{
		Number: m.Version, Created: m.Created, Files: len(m.Files),
		LogicalBytes: m.Stats.LogicalBytes, StoredBytes: m.Stats.NewObjectBytes,
		ChangedElems: m.Stats.ChangedElems, TotalElems: m.Stats.TotalElems,
		PreviousNumber: m.Previous,
	}
}

// Entry is one file or directory of a version.
type Entry struct {
	Path   string // slash-separated, relative to the version root
	Dir    bool
	Size   int64
	Mode   fs.FileMode
	SHA256 [32]byte
}

// Entries lists the files and directories of a sealed version, sorted by path.
func (s *Store) Entries(v uint64) ([]Entry, error) {
	ver, err := s.versions.sealedVersion(v)
	if err != nil {
		return nil, err
	}
	out := make([]Entry, 0, len(ver.m.Dirs)+len(ver.m.Files))
	for _, d := range ver.m.Dirs {
		out = append(out, Entry{Path: d.Path, Dir: true, Mode: fs.ModeDir | fileMode(d.Mode)})
	}
	for _, f := range ver.m.Files {
		out = append(out, Entry{Path: f.Path, Size: f.Size, Mode: fileMode(f.Mode), SHA256: f.SHA256})
	}
	slices.SortFunc(out, func(a, b Entry) int {
		switch {
		case a.Path < b.Path:
			return -1
		case a.Path > b.Path:
			return 1
		}
		return 0
	})
	return out, nil
}
