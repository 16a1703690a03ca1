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

// A writer group's records (store's group.go) are the backend's records of kind
// backend.RecordGroup: small named files below groups/ in the store (docs/format.md Part I
// §9), named relative to groups/: NAME/vNNNNNN/rank-R.part or .open.

func (b *Backend) recordPath(name string) string {
	return filepath.Join(b.root, GroupDir, filepath.FromSlash(name))
}

// MkdirAll creates dir and its missing parents up to the store's root with the store's
// directory mode, each made durable (store.OpenRank makes a group's directory with it).
func (b *Backend) MkdirAll(dir string) error {
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	if parent := filepath.Dir(dir); parent != b.root && parent != dir {
		if err := b.MkdirAll(parent); err != nil {
			return err
		}
	}
	if err := MkdirMode(dir, b.modes.Dir); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return b.fsyncDir(filepath.Dir(dir))
}

// putGroupRecord replaces the group record in file p (PutRecord).
func (b *Backend) putGroupRecord(p string, data []byte) error {
	var err error
	// A publisher's clean-up may remove the emptied version directory between our mkdir
	// and our write: make it again, a few times.
	for range 3 {
		if err = b.MkdirAll(filepath.Dir(p)); err != nil {
			break
		}
		// The temporary file sits beside the record (no other process's clean-up of tmp/
		// can take it away) and is not a record's name.
		if err = b.writeSynced(p, filepath.Dir(p), data, b.modes.File); !errors.Is(err, fs.ErrNotExist) {
			break
		}
	}
	return err
}

// listGroupRecords lists the group records' names, NAME/vNNNNNN/FILE (ListRecords).
func (b *Backend) listGroupRecords() ([]string, error) {
	var names []string
	root := filepath.Join(b.root, GroupDir)
	groups, err := os.ReadDir(root)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list group records: %w", err)
	}
	for _, g := range groups {
		if !g.IsDir() {
			continue
		}
		versions, err := os.ReadDir(filepath.Join(root, g.Name()))
		if err != nil {
			return nil, fmt.Errorf("list group records: %w", err)
		}
		for _, v := range versions {
			if _, ok := format.ParseManifestName(v.Name()); !ok || !v.IsDir() {
				continue
			}
			files, err := os.ReadDir(filepath.Join(root, g.Name(), v.Name()))
			if err != nil && !errors.Is(err, fs.ErrNotExist) {
				return nil, fmt.Errorf("list group records: %w", err)
			}
			for _, f := range files {
				if f.Type().IsRegular() {
					names = append(names, g.Name()+"/"+v.Name()+"/"+f.Name())
				}
			}
		}
	}
	slices.Sort(names)
	return names, nil
}

// deleteGroupRecord removes the group record in file p (DeleteRecord).
func (b *Backend) deleteGroupRecord(p string) error {
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	dir := filepath.Dir(p)
	if err := b.fsyncDir(dir); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	// An emptied version directory goes too (a rank may be creating a record in it: then
	// the removal fails, harmlessly).
	if os.Remove(dir) == nil {
		b.fsyncDir(filepath.Dir(dir))
	}
	return nil
}
