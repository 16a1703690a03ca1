package local

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"syscall"

	"github.com/weightfs/weightfs/store/backend"
	"github.com/weightfs/weightfs/store/format"
)

// Backend keeps a store in a local directory (docs/format.md Part I §1), and implements
// backend.Backend, backend.PackBackend, backend.Records and the optional parts store asks of
// a backend that can (store.Quarantiner, store.PackQuarantiner, the fsync count, the pack's
// age, the check for loose objects):
//
//	objects/ab/<64 hex>   objects, fanned out by their first byte
//	packs/ab/<64 hex>     packs (packs.go), pack indexes in index/
//	versions/v000043      manifests
//	tmp/                  temporary files
//	dropped, groups/, pins/, index/   records (records.go, groups.go)
//	quarantine/           what repair moved aside (quarantine.go)
type Backend struct {
	root  string
	modes Modes

	// syncer keeps the directories with renames not yet fsynced and counts every fsync of a
	// file or directory this backend made (Fsyncs).
	syncer Syncer
	// loose is whether objects/ was seen empty (NoLooseObjects, loose.go).
	loose looseCheck
}

// The contract store holds a local store to.
var (
	_ backend.Backend     = (*Backend)(nil)
	_ backend.PackBackend = (*Backend)(nil)
	_ backend.Records     = (*Backend)(nil)
	_ backend.Backend     = (*RankBackend)(nil)
)

// Fsyncs is how many fsyncs of files and directories of the store the backend made since
// it was opened (objects, their directories, manifests, records): Stats.Fsyncs.
func (b *Backend) Fsyncs() int64 { return b.syncer.Fsyncs() }

// fsyncDir is SyncDir, counted.
func (b *Backend) fsyncDir(dir string) error { return b.syncer.SyncDir(dir) }

// writeSynced is WriteFileSynced, counted.
func (b *Backend) writeSynced(path, tmpDir string, data []byte, mode fs.FileMode) error {
	return b.syncer.WriteFileSynced(path, tmpDir, data, mode)
}

// New is the backend of the store in directory root, whose files a writer creates with
// modes (ModesFor the format file's mode). It checks nothing: store.Open has read the
// format file.
func New(root string, modes Modes) *Backend {
	return &Backend{root: root, modes: modes}
}

// LocalDir is the store's directory: a writer's default cache lives beside the objects
// there (store's Verify checks it: verify_caches.go).
func (b *Backend) LocalDir() string { return b.root }

// Close has nothing to end: every call of the local backend is done when it returns.
func (b *Backend) Close() error { return nil }

// ObjectPath is the file of loose object id: objects/<2 hex>/<64 hex>.
func (b *Backend) ObjectPath(id format.ID) string {
	return FanOutPath(filepath.Join(b.root, ObjectDir), id)
}

// ManifestPath is the file of version v's manifest: versions/vNNNNNN.
func (b *Backend) ManifestPath(v uint64) string {
	return filepath.Join(b.root, "versions", format.ManifestName(v))
}

// CreateTemp creates a temporary file in tmp/.
func (b *Backend) CreateTemp() (*os.File, error) {
	return CreateTemp(filepath.Join(b.root, "tmp"))
}

// RemoveTemp closes and removes a temporary file.
func (b *Backend) RemoveTemp(f *os.File) { RemoveTemp(f) }

func (b *Backend) PutObject(id format.ID, tmp *os.File) error {
	b.SawLoose()
	return b.putFile("object", id, tmp, b.ObjectPath(id), false)
}

// SyncObjects fsyncs the directories that objects and packs were renamed into (and those
// that gained fan-out directories), the deepest first.
func (b *Backend) SyncObjects() error { return b.syncer.SyncDirty() }

func (b *Backend) OpenObject(id format.ID) (backend.ObjectFile, error) {
	return openRegularFile("object", id, b.ObjectPath(id))
}

func (b *Backend) StatObject(id format.ID) (int64, error) {
	b.loose.stats.Add(1)
	return StatFile("object", id, b.ObjectPath(id))
}

func (b *Backend) ListObjects(fn func(id format.ID, size int64) error) error {
	return ListFanOut(filepath.Join(b.root, "objects"), "objects", false, fn)
}

func (b *Backend) DeleteObject(id format.ID) error {
	return DeleteFile("object", id, b.ObjectPath(id))
}

func (b *Backend) PutManifest(v uint64, data []byte) error {
	if err := b.writeSynced(b.ManifestPath(v), filepath.Join(b.root, "tmp"), data, b.modes.File); err != nil {
		return fmt.Errorf("write manifest of version %d: %w", v, err)
	}
	return nil
}

func (b *Backend) GetManifest(v uint64) ([]byte, error) {
	data, err := os.ReadFile(b.ManifestPath(v))
	if err != nil {
		return nil, fmt.Errorf("read manifest of version %d: %w", v, err)
	}
	return data, nil
}

func (b *Backend) ListManifests() ([]uint64, error) {
	entries, err := os.ReadDir(filepath.Join(b.root, "versions"))
	if err != nil {
		return nil, fmt.Errorf("list versions: %w", err)
	}
	var vs []uint64
	for _, e := range entries {
		if v, ok := format.ParseManifestName(e.Name()); ok && e.Type().IsRegular() {
			vs = append(vs, v)
		}
	}
	slices.Sort(vs)
	return vs, nil
}

func (b *Backend) DeleteManifest(v uint64) error {
	if err := os.Remove(b.ManifestPath(v)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete manifest of version %d: %w", v, err)
	}
	return b.fsyncDir(filepath.Join(b.root, "versions"))
}

func (b *Backend) CleanTemp() error {
	dir := filepath.Join(b.root, "tmp")
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		// tmp/ holds nothing between processes: missing (a copy of the store by a tool that
		// skips empty directories) or not a directory, it is made anew.
		if err := os.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("clean temporary files: %w", err)
		}
		if err := MkdirMode(dir, b.modes.Dir); err != nil {
			return fmt.Errorf("clean temporary files: %w", err)
		}
		return b.fsyncDir(b.root)
	}
	if err != nil {
		return fmt.Errorf("clean temporary files: %w", err)
	}
	for _, e := range entries {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return fmt.Errorf("clean temporary files: %w", err)
		}
	}
	return nil
}

// The files of a local store's objects and packs are alike (files.go): one function each
// serves both; kind ("object", "pack") names the file in errors.

// putFile moves tmp, synced and made read-only, to dst, a file of a fan-out directory
// (Syncer.PutFile); kind ("object", "pack") names it in errors. The directories
// changed are synced by SyncObjects.
func (b *Backend) putFile(kind string, id format.ID, tmp *os.File, dst string, makeTop bool) error {
	return b.syncer.PutFile(kind, id, tmp, dst, makeTop, b.modes)
}

// openRegularFile opens file p of an object or a pack (kind names it in errors) as a
// backend.ObjectFile: nil, not a File, on error.
func openRegularFile(kind string, id format.ID, p string) (backend.ObjectFile, error) {
	f, err := OpenFile(kind, id, p)
	if err != nil {
		return nil, err
	}
	return f, nil
}
