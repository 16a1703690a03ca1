package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
)

// RemoteStat is the optional part of a Backend whose StatObject answers from what this
// process knows (store/s3's writer: one listing and its own puts since): StatRemote asks
// the storage itself, for an object another process put (a writer group's rank).
type RemoteStat interface {
	StatRemote(id ID) (int64, error)
}

// A writer group's records (group.go) are the backend's RecordGroup records (Records): small
// named files below groups/ in the store (docs/format.md Part I §9), named relative to
// groups/: NAME/vNNNNNN/rank-R.part or .open. A backend without them has no writer groups
// (OpenRank and PublishGroup say so).

// groupDir is the groups' directory in a local store.
const groupDir = "groups"

func (b *localBackend) recordPath(name string) string {
	return filepath.Join(b.root, groupDir, filepath.FromSlash(name))
}

// mkdirAllModes creates dir and its missing parents up to the store's root with the store's
// directory mode.
func (b *localBackend) mkdirAllModes(dir string) error {
	if _, err := os.Stat(dir); err == nil {
		return nil
	}
	if parent := filepath.Dir(dir); parent != b.root && parent != dir {
		if err := b.mkdirAllModes(parent); err != nil {
			return err
		}
	}
	if err := mkdirMode(dir, b.modes.Dir); err != nil && !errors.Is(err, fs.ErrExist) {
		return err
	}
	return b.fsyncDir(filepath.Dir(dir))
}

// putGroupRecord replaces the group record in file p (PutRecord).
func (b *localBackend) putGroupRecord(p string, data []byte) error {
	var err error
	// A publisher's clean-up may remove the emptied version directory between our mkdir
	// and our write: make it again, a few times.
	for range 3 {
		if err = b.mkdirAllModes(filepath.Dir(p)); err != nil {
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
func (b *localBackend) listGroupRecords() ([]string, error) {
	var names []string
	root := filepath.Join(b.root, groupDir)
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
			if _, ok := parseManifestName(v.Name()); !ok || !v.IsDir() {
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
func (b *localBackend) deleteGroupRecord(p string) error {
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

// rankBackend is the local backend of a rank (OpenRank): its temporary object files live
// in groups/NAME/tmp/rank-R/, which only that rank cleans, so that the writer's clean-up of
// tmp/ at its open cannot take away a file a rank is writing.
type rankBackend struct {
	*localBackend
	tmpDir string
}

func (b *rankBackend) CreateTemp() (*os.File, error) { return createTempObject(b.tmpDir) }

func (b *rankBackend) CleanTemp() error {
	if err := os.RemoveAll(b.tmpDir); err != nil {
		return fmt.Errorf("clean temporary files: %w", err)
	}
	return b.mkdirAllModes(b.tmpDir)
}
