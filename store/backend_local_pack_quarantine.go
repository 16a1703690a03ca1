package store

import (
	"fmt"
	"os"
	"path/filepath"
)

// The quarantine of packs (repair_packs.go): quarantine/index/NAME for a pack index record
// and quarantine/packs/<id> for a pack, moved there by rename (their bytes as they were) and
// made durable; quarantine/objects/<id> for the bytes of a damaged record copied out of its
// pack (the pack stays until gc rewrites it).

var _ PackQuarantiner = (*localBackend)(nil)

func (b *localBackend) QuarantineIndex(name string) (string, error) {
	src, err := b.indexFile(name)
	if err != nil {
		return "", err
	}
	dir, err := b.quarantineDir(indexDir)
	if err != nil {
		return "", err
	}
	dst, err := b.moveAside(src, dir, name)
	if err != nil {
		return "", fmt.Errorf("quarantine pack index %s: %w", name, err)
	}
	return dst, nil
}

func (b *localBackend) QuarantineIndexPath(name string) string {
	return filepath.Join(b.root, "quarantine", indexDir, name)
}

func (b *localBackend) QuarantinePack(id ID) (string, error) {
	dir, err := b.quarantineDir(packDir)
	if err != nil {
		return "", err
	}
	dst, err := b.moveAside(b.packPath(id), dir, id.String())
	if err != nil {
		return "", fmt.Errorf("quarantine pack %s: %w", id, err)
	}
	return dst, nil
}

func (b *localBackend) QuarantinePackPath(id ID) string {
	return filepath.Join(b.root, "quarantine", packDir, id.String())
}

// KeepQuarantinedObject writes data durably as quarantine/objects/<id>, read-only like an
// object. A file there already (the same object quarantined before) is kept as it is.
func (b *localBackend) KeepQuarantinedObject(id ID, data []byte) (string, error) {
	dir, err := b.quarantineDir("objects")
	if err != nil {
		return "", err
	}
	dst := filepath.Join(dir, id.String())
	if _, err := os.Lstat(dst); err == nil {
		return dst, nil
	}
	if err := writeFileSynced(dst, filepath.Join(b.root, "tmp"), data, b.modes.Object); err != nil {
		return "", fmt.Errorf("quarantine object %s: %w", id, err)
	}
	return dst, nil
}
