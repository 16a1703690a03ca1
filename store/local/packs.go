package local

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/weightfs/weightfs/store/backend"
	"github.com/weightfs/weightfs/store/format"
	"github.com/weightfs/weightfs/store/pack"
)

// A local store keeps packs as STORE/packs/<2 hex>/<64 hex>, read-only files like objects,
// and pack indexes as STORE/index/NAME (docs/format.md Part I §1). Both directories are made
// when the first pack or index is written.

// PackPath is the file of pack id: packs/<2 hex>/<64 hex>.
func (b *Backend) PackPath(id format.ID) string {
	return FanOutPath(filepath.Join(b.root, PackDir), id)
}

func (b *Backend) PutPack(id format.ID, tmp *os.File) error {
	return b.putFile("pack", id, tmp, b.PackPath(id), true)
}

func (b *Backend) OpenPack(id format.ID) (backend.ObjectFile, error) {
	return openRegularFile("pack", id, b.PackPath(id))
}

func (b *Backend) StatPack(id format.ID) (int64, error) {
	return StatFile("pack", id, b.PackPath(id))
}

func (b *Backend) ListPacks(fn func(id format.ID, size int64) error) error {
	return ListFanOut(filepath.Join(b.root, PackDir), "packs", true, fn)
}

func (b *Backend) DeletePack(id format.ID) error {
	return DeleteFile("pack", id, b.PackPath(id))
}

// indexFile is the file of pack index name (a name pack.ParseName accepts).
func (b *Backend) indexFile(name string) (string, error) {
	if _, ok := pack.ParseName(name); !ok {
		return "", fmt.Errorf("index record %q: not a pack index's name", name)
	}
	return filepath.Join(b.root, IndexDir, name), nil
}

// putIndexRecord writes a pack index durably: temporary file, fsync, rename, fsync of
// index/ (made, and the store's directory synced, when it is the first).
func (b *Backend) putIndexRecord(p string, data []byte) error {
	dir := filepath.Dir(p)
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		if err := MkdirMode(dir, b.modes.Dir); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		if err := b.fsyncDir(b.root); err != nil {
			return err
		}
	}
	return b.writeSynced(p, filepath.Join(b.root, "tmp"), data, b.modes.File)
}

func (b *Backend) listIndexRecords() ([]string, error) {
	ents, err := os.ReadDir(filepath.Join(b.root, IndexDir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list index records: %w", err)
	}
	names := make([]string, 0, len(ents))
	for _, e := range ents {
		if _, ok := pack.ParseName(e.Name()); ok {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// PackModTime is when pack id was written: its file's modification time (the temporary
// file's last write; a rename keeps it). store's gc removes a pack no index names only once
// it is old enough (pack_repack_gc.go).
func (b *Backend) PackModTime(id format.ID) (time.Time, error) {
	st, err := os.Stat(b.PackPath(id))
	if err != nil {
		return time.Time{}, fmt.Errorf("stat pack %s: %w", id, err)
	}
	return st.ModTime(), nil
}
