package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/weightfs/weightfs/store/format"
	"github.com/weightfs/weightfs/store/local"
)

// localBackend keeps a store in a local directory:
//
//	objects/ab/<64 hex>   objects, fanned out by their first byte
//	versions/v000043      manifests
//	tmp/                  temporary files
type localBackend struct {
	root  string
	modes storeModes

	// syncer keeps the directories with renames not yet fsynced and counts every fsync of a
	// file or directory this backend made (Fsyncs).
	syncer local.Syncer
	// loose is whether objects/ was seen empty (noLooseObjects, ingest_dedup.go).
	loose looseCheck
}

// Fsyncs is how many fsyncs of files and directories of the store the backend made since
// it was opened (objects, their directories, manifests, records): Stats.Fsyncs.
func (b *localBackend) Fsyncs() int64 { return b.syncer.Fsyncs() }

// fsyncDir is syncDir, counted.
func (b *localBackend) fsyncDir(dir string) error { return b.syncer.SyncDir(dir) }

// writeSynced is writeFileSynced, counted.
func (b *localBackend) writeSynced(path, tmpDir string, data []byte, mode fs.FileMode) error {
	return b.syncer.WriteFileSynced(path, tmpDir, data, mode)
}

func newLocalBackend(root string, modes storeModes) *localBackend {
	return &localBackend{root: root, modes: modes}
}

var _ Backend = (*localBackend)(nil)

// localDirBackend is a backend that keeps the store in a local directory: a writer's
// default cache lives beside the objects there (Verify checks it: verify_caches.go).
type localDirBackend interface {
	LocalDir() string
}

// LocalDir is the store's directory.
func (b *localBackend) LocalDir() string { return b.root }

// Close has nothing to end: every call of the local backend is done when it returns.
func (b *localBackend) Close() error { return nil }

func (b *localBackend) objectPath(id ID) string {
	return local.FanOutPath(filepath.Join(b.root, local.ObjectDir), id)
}

func (b *localBackend) manifestPath(v uint64) string {
	return filepath.Join(b.root, "versions", manifestName(v))
}

// manifestName is "v" and the number (format.ManifestName).
func manifestName(v uint64) string { return format.ManifestName(v) }

// parseManifestName is the inverse of manifestName (format.ParseManifestName).
func parseManifestName(name string) (uint64, bool) { return format.ParseManifestName(name) }

func (b *localBackend) CreateTemp() (*os.File, error) {
	return createTempObject(filepath.Join(b.root, "tmp"))
}

func (b *localBackend) RemoveTemp(f *os.File) { removeTempObject(f) }

// createTempObject creates a temporary object file in dir (both backends' CreateTemp).
func createTempObject(dir string) (*os.File, error) { return local.CreateTemp(dir) }

// removeTempObject closes and removes a temporary object file (both backends' RemoveTemp).
func removeTempObject(f *os.File) { local.RemoveTemp(f) }

func (b *localBackend) PutObject(id ID, tmp *os.File) error {
	b.SawLoose()
	return b.putFile("object", id, tmp, b.objectPath(id), false)
}

// SyncObjects fsyncs the directories that objects and packs were renamed into (and those
// that gained fan-out directories), the deepest first.
func (b *localBackend) SyncObjects() error { return b.syncer.SyncDirty() }

func (b *localBackend) OpenObject(id ID) (ObjectFile, error) {
	return openRegularFile("object", id, b.objectPath(id))
}

func (b *localBackend) StatObject(id ID) (int64, error) {
	b.loose.stats.Add(1)
	return statFile("object", id, b.objectPath(id))
}

func (b *localBackend) ListObjects(fn func(id ID, size int64) error) error {
	return listFanOut(filepath.Join(b.root, "objects"), "objects", false, fn)
}

func (b *localBackend) DeleteObject(id ID) error {
	return deleteFile("object", id, b.objectPath(id))
}

func (b *localBackend) PutManifest(v uint64, data []byte) error {
	if err := b.writeSynced(b.manifestPath(v), filepath.Join(b.root, "tmp"), data, b.modes.File); err != nil {
		return fmt.Errorf("write manifest of version %d: %w", v, err)
	}
	return nil
}

func (b *localBackend) GetManifest(v uint64) ([]byte, error) {
	data, err := os.ReadFile(b.manifestPath(v))
	if err != nil {
		return nil, fmt.Errorf("read manifest of version %d: %w", v, err)
	}
	return data, nil
}

func (b *localBackend) ListManifests() ([]uint64, error) {
	entries, err := os.ReadDir(filepath.Join(b.root, "versions"))
	if err != nil {
		return nil, fmt.Errorf("list versions: %w", err)
	}
	var vs []uint64
	for _, e := range entries {
		if v, ok := parseManifestName(e.Name()); ok && e.Type().IsRegular() {
			vs = append(vs, v)
		}
	}
	slices.Sort(vs)
	return vs, nil
}

func (b *localBackend) DeleteManifest(v uint64) error {
	if err := os.Remove(b.manifestPath(v)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete manifest of version %d: %w", v, err)
	}
	return b.fsyncDir(filepath.Join(b.root, "versions"))
}

func (b *localBackend) CleanTemp() error {
	dir := filepath.Join(b.root, "tmp")
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ENOTDIR) {
		// tmp/ holds nothing between processes: missing (a copy of the store by a tool that
		// skips empty directories) or not a directory, it is made anew.
		if err := os.Remove(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("clean temporary files: %w", err)
		}
		if err := mkdirMode(dir, b.modes.Dir); err != nil {
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

// The quarantine (repair.go): quarantine/vNNNNNN for manifests, quarantine/objects/<id> for
// objects, moved there by rename (their bytes as they were) and made durable.

func (b *localBackend) quarantineDir(sub string) (string, error) {
	dir := filepath.Join(b.root, "quarantine")
	for _, d := range []string{dir, filepath.Join(dir, sub)} {
		if err := mkdirMode(d, b.modes.Dir); err != nil && !errors.Is(err, fs.ErrExist) {
			return "", fmt.Errorf("create %s: %w", d, err)
		}
	}
	return filepath.Join(dir, sub), nil
}

func (b *localBackend) moveAside(src, dstDir, name string) (string, error) {
	dst := filepath.Join(dstDir, name)
	if err := os.Rename(src, dst); err != nil {
		return "", err
	}
	if err := b.fsyncDir(dstDir); err != nil {
		return "", err
	}
	return dst, b.fsyncDir(filepath.Dir(src))
}

func (b *localBackend) QuarantineManifest(v uint64) (string, error) {
	dir, err := b.quarantineDir("")
	if err != nil {
		return "", err
	}
	dst, err := b.moveAside(b.manifestPath(v), dir, manifestName(v))
	if err != nil {
		return "", fmt.Errorf("quarantine version %d: %w", v, err)
	}
	return dst, nil
}

func (b *localBackend) QuarantineObject(id ID) (string, error) {
	dir, err := b.quarantineDir("objects")
	if err != nil {
		return "", err
	}
	dst, err := b.moveAside(b.objectPath(id), dir, id.String())
	if err != nil {
		return "", fmt.Errorf("quarantine object %s: %w", id, err)
	}
	return dst, nil
}

func (b *localBackend) ListQuarantined() ([]uint64, error) {
	entries, err := os.ReadDir(filepath.Join(b.root, "quarantine"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list quarantine: %w", err)
	}
	var vs []uint64
	for _, e := range entries {
		if v, ok := parseManifestName(e.Name()); ok {
			vs = append(vs, v)
		}
	}
	slices.Sort(vs)
	return vs, nil
}

func (b *localBackend) QuarantineManifestPath(v uint64) string {
	return filepath.Join(b.root, "quarantine", manifestName(v))
}

func (b *localBackend) QuarantineObjectPath(id ID) string {
	return filepath.Join(b.root, "quarantine", "objects", id.String())
}

// The small records (Records) of a local store, each kind in its place of the layout: the
// gc record STORE/dropped, group records below STORE/groups/ (group_local.go), readers'
// pins STORE/pins/NAME.json.

var _ Records = (*localBackend)(nil)

// recordFile is the file of the record of that kind and name.
func (b *localBackend) recordFile(kind RecordKind, name string) (string, error) {
	valid := name != "" && name != "." && fs.ValidPath(name)
	switch {
	case kind == RecordGC && name == GCRecordName:
		return filepath.Join(b.root, GCRecordName), nil
	case kind == RecordGroup && valid:
		return b.recordPath(name), nil
	case kind == RecordPin && valid && !strings.Contains(name, "/"):
		return filepath.Join(b.root, pinDir, name), nil
	case kind == RecordIndex && name != "":
		return b.indexFile(name)
	case kind != RecordGC && kind != RecordGroup && kind != RecordPin && kind != RecordIndex:
		return "", fmt.Errorf("%s records: %w", kind, errors.ErrUnsupported)
	}
	return "", fmt.Errorf("%s record %q: not a record's name", kind, name)
}

// recordWhat names a record in messages.
func recordWhat(kind RecordKind, name string) string {
	if kind == RecordGC {
		return "gc record"
	}
	return string(kind) + " record " + name
}

func (b *localBackend) RecordPath(kind RecordKind, name string) string {
	p, _ := b.recordFile(kind, name)
	return p
}

func (b *localBackend) PutRecord(kind RecordKind, name string, data []byte) error {
	p, err := b.recordFile(kind, name)
	if err != nil {
		return err
	}
	switch kind {
	case RecordGroup:
		err = b.putGroupRecord(p, data)
	case RecordPin:
		err = putPinFile(p, data)
	case RecordIndex:
		err = b.putIndexRecord(p, data)
	default:
		err = b.writeSynced(p, filepath.Join(b.root, "tmp"), data, b.modes.File)
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", recordWhat(kind, name), err)
	}
	return nil
}

// putPinFile replaces a pin record: a temporary file beside it (not a record's name: it
// does not end in .json) renamed over it, so that gc never reads half a record. A pin is
// renewed every PinLease/4 and lives no longer than its reader: it is not synced.
func putPinFile(p string, data []byte) error {
	// Private, as the store (docs/format.md §1); a shared store gives it the group write bit.
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}

func (b *localBackend) GetRecord(kind RecordKind, name string) ([]byte, error) {
	p, err := b.recordFile(kind, name)
	if err != nil {
		return nil, err
	}
	// Looked at before it is read: reading a FIFO would block until a writer came.
	st, err := os.Lstat(p)
	if err == nil && !st.Mode().IsRegular() {
		err = fmt.Errorf("%s: %w (mode %v)", p, errNotRegular, st.Mode())
	}
	var data []byte
	if err == nil {
		data, err = os.ReadFile(p)
	}
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", recordWhat(kind, name), err)
	}
	return data, nil
}

func (b *localBackend) ListRecords(kind RecordKind) ([]string, error) {
	switch kind {
	case RecordGC:
		if _, err := os.Lstat(filepath.Join(b.root, GCRecordName)); errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		} else if err != nil {
			return nil, fmt.Errorf("list gc records: %w", err)
		}
		return []string{GCRecordName}, nil
	case RecordGroup:
		return b.listGroupRecords()
	case RecordPin:
		ents, err := os.ReadDir(filepath.Join(b.root, pinDir))
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("list pin records: %w", err)
		}
		var names []string
		for _, e := range ents {
			if strings.HasSuffix(e.Name(), ".json") { // not a renewal's temporary file
				names = append(names, e.Name())
			}
		}
		return names, nil
	case RecordIndex:
		return b.listIndexRecords()
	}
	_, err := b.recordFile(kind, "")
	return nil, err
}

func (b *localBackend) DeleteRecord(kind RecordKind, name string) error {
	p, err := b.recordFile(kind, name)
	if err != nil {
		return err
	}
	switch kind {
	case RecordGroup:
		err = b.deleteGroupRecord(p)
	default:
		if err = os.Remove(p); errors.Is(err, fs.ErrNotExist) {
			err = nil
		} else if err == nil && kind == RecordGC {
			err = b.fsyncDir(b.root)
		} else if err == nil && kind == RecordIndex {
			err = b.fsyncDir(filepath.Dir(p))
		}
	}
	if err != nil {
		return fmt.Errorf("delete %s: %w", recordWhat(kind, name), err)
	}
	return nil
}
