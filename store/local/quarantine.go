package local

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"github.com/weightfs/weightfs/store/format"
)

// The quarantine (store.Quarantiner, store's repair.go): quarantine/vNNNNNN for manifests,
// quarantine/objects/<id> for objects, moved there by rename (their bytes as they were) and
// made durable.

func (b *Backend) quarantineDir(sub string) (string, error) {
	dir := filepath.Join(b.root, "quarantine")
	for _, d := range []string{dir, filepath.Join(dir, sub)} {
		if err := MkdirMode(d, b.modes.Dir); err != nil && !errors.Is(err, fs.ErrExist) {
			return "", fmt.Errorf("create %s: %w", d, err)
		}
	}
	return filepath.Join(dir, sub), nil
}

func (b *Backend) moveAside(src, dstDir, name string) (string, error) {
	dst := filepath.Join(dstDir, name)
	if err := os.Rename(src, dst); err != nil {
		return "", err
	}
	if err := b.fsyncDir(dstDir); err != nil {
		return "", err
	}
	return dst, b.fsyncDir(filepath.Dir(src))
}

func (b *Backend) QuarantineManifest(v uint64) (string, error) {
	dir, err := b.quarantineDir("")
	if err != nil {
		return "", err
	}
	dst, err := b.moveAside(b.ManifestPath(v), dir, format.ManifestName(v))
	if err != nil {
		return "", fmt.Errorf("quarantine version %d: %w", v, err)
	}
	return dst, nil
}

func (b *Backend) QuarantineObject(id format.ID) (string, error) {
	dir, err := b.quarantineDir("objects")
	if err != nil {
		return "", err
	}
	dst, err := b.moveAside(b.ObjectPath(id), dir, id.String())
	if err != nil {
		return "", fmt.Errorf("quarantine object %s: %w", id, err)
	}
	return dst, nil
}

func (b *Backend) ListQuarantined() ([]uint64, error) {
	entries, err := os.ReadDir(filepath.Join(b.root, "quarantine"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list quarantine: %w", err)
	}
	var vs []uint64
	for _, e := range entries {
		if v, ok := format.ParseManifestName(e.Name()); ok {
			vs = append(vs, v)
		}
	}
	slices.Sort(vs)
	return vs, nil
}

func (b *Backend) QuarantineManifestPath(v uint64) string {
	return filepath.Join(b.root, "quarantine", format.ManifestName(v))
}

func (b *Backend) QuarantineObjectPath(id format.ID) string {
	return filepath.Join(b.root, "quarantine", "objects", id.String())
}

// The quarantine of packs (store.PackQuarantiner, store's repair_packs.go):
// quarantine/index/NAME for a pack index record and quarantine/packs/<id> for a pack, moved there by rename (their bytes as they were) and
// made durable; quarantine/objects/<id> for the bytes of a damaged record copied out of its
// pack (the pack stays until gc rewrites it).

func (b *Backend) QuarantineIndex(name string) (string, error) {
	src, err := b.indexFile(name)
	if err != nil {
		return "", err
	}
	dir, err := b.quarantineDir(IndexDir)
	if err != nil {
		return "", err
	}
	dst, err := b.moveAside(src, dir, name)
	if err != nil {
		return "", fmt.Errorf("quarantine pack index %s: %w", name, err)
	}
	return dst, nil
}

func (b *Backend) QuarantineIndexPath(name string) string {
	return filepath.Join(b.root, "quarantine", IndexDir, name)
}

func (b *Backend) QuarantinePack(id format.ID) (string, error) {
	dir, err := b.quarantineDir(PackDir)
	if err != nil {
		return "", err
	}
	dst, err := b.moveAside(b.PackPath(id), dir, id.String())
	if err != nil {
		return "", fmt.Errorf("quarantine pack %s: %w", id, err)
	}
	return dst, nil
}

func (b *Backend) QuarantinePackPath(id format.ID) string {
	return filepath.Join(b.root, "quarantine", PackDir, id.String())
}

// KeepQuarantinedObject writes data durably as quarantine/objects/<id>, read-only like an
// object. A file there already (the same object quarantined before) is kept as it is.
func (b *Backend) KeepQuarantinedObject(id format.ID, data []byte) (string, error) {
	dir, err := b.quarantineDir("objects")
	if err != nil {
		return "", err
	}
	dst := filepath.Join(dir, id.String())
	if _, err := os.Lstat(dst); err == nil {
		return dst, nil
	}
	if err := WriteFileSynced(dst, filepath.Join(b.root, "tmp"), data, b.modes.Object, nil); err != nil {
		return "", fmt.Errorf("quarantine object %s: %w", id, err)
	}
	return dst, nil
}
