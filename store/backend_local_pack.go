package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/weightfs/weightfs/store/local"
	"github.com/weightfs/weightfs/store/pack"
)

// A local store keeps packs as STORE/packs/<2 hex>/<64 hex>, read-only files like objects,
// and pack indexes as STORE/index/NAME (docs/format.md Part I §1). Both directories are made
// when the first pack or index is written.

const (
	packDir  = local.PackDir
	indexDir = local.IndexDir
)

var _ PackBackend = (*localBackend)(nil)

func (b *localBackend) packPath(id ID) string {
	return local.FanOutPath(filepath.Join(b.root, packDir), id)
}

func (b *localBackend) PutPack(id ID, tmp *os.File) error {
	return b.putFile("pack", id, tmp, b.packPath(id), true)
}

func (b *localBackend) OpenPack(id ID) (ObjectFile, error) {
	return openRegularFile("pack", id, b.packPath(id))
}

func (b *localBackend) StatPack(id ID) (int64, error) {
	return statFile("pack", id, b.packPath(id))
}

func (b *localBackend) ListPacks(fn func(id ID, size int64) error) error {
	return listFanOut(filepath.Join(b.root, packDir), "packs", true, fn)
}

func (b *localBackend) DeletePack(id ID) error {
	return deleteFile("pack", id, b.packPath(id))
}

// indexFile is the file of pack index name (a name pack.ParseName accepts).
func (b *localBackend) indexFile(name string) (string, error) {
	if _, ok := pack.ParseName(name); !ok {
		return "", fmt.Errorf("index record %q: not a pack index's name", name)
	}
	return filepath.Join(b.root, indexDir, name), nil
}

// putIndexRecord writes a pack index durably: temporary file, fsync, rename, fsync of
// index/ (made, and the store's directory synced, when it is the first).
func (b *localBackend) putIndexRecord(p string, data []byte) error {
	dir := filepath.Dir(p)
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		if err := mkdirMode(dir, b.modes.Dir); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		if err := b.fsyncDir(b.root); err != nil {
			return err
		}
	}
	return b.writeSynced(p, filepath.Join(b.root, "tmp"), data, b.modes.File)
}

func (b *localBackend) listIndexRecords() ([]string, error) {
	ents, err := os.ReadDir(filepath.Join(b.root, indexDir))
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
