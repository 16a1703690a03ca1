package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/weightfs/weightfs/store/pack"
)

// A local store keeps packs as STORE/packs/<2 hex>/<64 hex>, read-only files like objects,
// and pack indexes as STORE/index/NAME (docs/format.md Part I §1). Both directories are made
// when the first pack or index is written.

const (
	packDir  = "packs"
	indexDir = "index"
)

var _ PackBackend = (*localBackend)(nil)

func (b *localBackend) packPath(id ID) string {
	h := id.String()
	return filepath.Join(b.root, packDir, h[:2], h)
}

func (b *localBackend) PutPack(id ID, tmp *os.File) error {
	renamed := false
	defer func() {
		if !renamed {
			b.RemoveTemp(tmp)
		}
	}()
	err := tmp.Sync()
	countFsync(&b.fsyncs)
	if err != nil {
		return fmt.Errorf("sync pack %s: %w", id, err)
	}
	if err := tmp.Chmod(b.modes.object); err != nil {
		return fmt.Errorf("put pack %s: %w", id, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("put pack %s: %w", id, err)
	}
	dst := b.packPath(id)
	fan := filepath.Dir(dst)
	if _, err := os.Stat(fan); errors.Is(err, fs.ErrNotExist) {
		top := filepath.Dir(fan)
		if _, err := os.Stat(top); errors.Is(err, fs.ErrNotExist) {
			if err := mkdirMode(top, b.modes.dir); err != nil && !errors.Is(err, fs.ErrExist) {
				return fmt.Errorf("put pack %s: %w", id, err)
			}
			b.markDirty(b.root)
		}
		if err := mkdirMode(fan, b.modes.dir); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("put pack %s: %w", id, err)
		}
		b.markDirty(top)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return fmt.Errorf("put pack %s: %w", id, err)
	}
	renamed = true
	b.markDirty(fan)
	return nil
}

func (b *localBackend) OpenPack(id ID) (ObjectFile, error) {
	p := b.packPath(id)
	// As for objects: anything but a regular file is damage, seen before it is opened.
	if st, err := os.Stat(p); err == nil && !st.Mode().IsRegular() {
		return nil, fmt.Errorf("pack %s is not a regular file (mode %v): %w", id, st.Mode(), ErrCorrupt)
	}
	f, err := os.Open(p)
	if errors.Is(err, syscall.ENOTDIR) {
		return nil, fmt.Errorf("open pack %s: %w (%w)", id, ErrCorrupt, err)
	}
	if err != nil {
		return nil, fmt.Errorf("open pack %s: %w", id, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("open pack %s: %w", id, err)
	}
	if !st.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("pack %s is not a regular file (mode %v): %w", id, st.Mode(), ErrCorrupt)
	}
	return localObject{f, st.Size()}, nil
}

func (b *localBackend) StatPack(id ID) (int64, error) {
	st, err := os.Stat(b.packPath(id))
	if err != nil {
		return 0, fmt.Errorf("stat pack %s: %w", id, err)
	}
	return st.Size(), nil
}

func (b *localBackend) ListPacks(fn func(id ID, size int64) error) error {
	top := filepath.Join(b.root, packDir)
	fans, err := os.ReadDir(top)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("list packs: %w", err)
	}
	for _, fan := range fans {
		if !fan.IsDir() || len(fan.Name()) != 2 {
			continue
		}
		entries, err := os.ReadDir(filepath.Join(top, fan.Name()))
		if err != nil {
			return fmt.Errorf("list packs: %w", err)
		}
		for _, e := range entries {
			id, err := ParseID(e.Name())
			if err != nil || !strings.HasPrefix(e.Name(), fan.Name()) || !e.Type().IsRegular() {
				continue
			}
			info, err := e.Info()
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return fmt.Errorf("list packs: %w", err)
			}
			if err := fn(id, info.Size()); err != nil {
				return err
			}
		}
	}
	return nil
}

func (b *localBackend) DeletePack(id ID) error {
	if err := os.Remove(b.packPath(id)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete pack %s: %w", id, err)
	}
	return nil
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
		if err := mkdirMode(dir, b.modes.dir); err != nil && !errors.Is(err, fs.ErrExist) {
			return err
		}
		if err := b.fsyncDir(b.root); err != nil {
			return err
		}
	}
	return b.writeSynced(p, filepath.Join(b.root, "tmp"), data, b.modes.file)
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
