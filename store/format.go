package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/weightfs/weightfs/store/format"
	"github.com/weightfs/weightfs/store/local"
)

// The store's format file, STORE/weightfs-store: its bytes and checks are package
// store/format's (format/storefile.go says what each format version is); Init and the
// writing of the file are here.
const (
	formatFileName     = format.FormatFileName
	storeFormatVersion = format.StoreFormatVersion // what Init writes and writers upgrade to
	oldestFormat       = format.OldestFormat       // the oldest format this program reads
	formatFileLen      = format.FormatFileLen
)

// FormatFileName is the name of the store's format file, STORE/weightfs-store (in S3,
// PREFIX/weightfs-store).
const FormatFileName = formatFileName

// FormatFile returns the bytes of the format file of a new store.
func FormatFile() []byte { return encodeFormatFile() }

// FormatVersion checks the bytes of a store's format file (ErrNotAStore, ErrCorrupt or
// ErrUnsupportedVersion when they are not this program's store) and returns the store's
// format version (for Opening.Format).
func FormatVersion(b []byte) (uint32, error) { return format.FormatFileVersion(b) }

func encodeFormatFile() []byte { return encodeFormatVersion(storeFormatVersion) }

// encodeFormatVersion returns the format file of a store of format version v.
func encodeFormatVersion(v uint32) []byte { return format.EncodeFormatFile(v) }

// storeDirs are the directories Init creates (see docs/format.md (Part I)).
var storeDirs = []string{"objects", "versions", "tmp", "cache"}

// InitShared is Init for a store its group may read (a read-only mount run by another user
// of the group): directories 0750, files 0640, objects 0440.
func InitShared(path string) error { return initStore(path, true) }

// Init creates an empty store in the local directory path (it must not exist or be empty).
// A local store is private: directories 0700, files 0600, objects 0400. (store/location
// creates a store from a STORE argument, s3://bucket/prefix too.)
func Init(path string) error { return initStore(path, false) }

func initStore(path string, shared bool) error {
	return initStoreFormat(path, shared, storeFormatVersion)
}

// initStoreFormat is Init writing a format file of format version v (tests make stores of
// format 2 with it: openLoose).
func initStoreFormat(path string, shared bool, v uint32) error {
	modes := modesFor(0o600)
	if shared {
		modes = modesFor(0o640)
	}
	entries, err := os.ReadDir(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.MkdirAll(path, modes.Dir); err != nil {
			return fmt.Errorf("init store: %w", err)
		}
	case err != nil:
		return fmt.Errorf("init store %s: %w", path, err)
	case len(entries) > 0:
		return fmt.Errorf("init store %s: directory is not empty", path)
	}
	if err := os.Chmod(path, modes.Dir); err != nil {
		return fmt.Errorf("init store: %w", err)
	}
	for _, d := range storeDirs {
		mode := modes.Dir
		if d == "cache" {
			mode = cacheDirPerm
		}
		if err := mkdirMode(filepath.Join(path, d), mode); err != nil {
			return fmt.Errorf("init store: %w", err)
		}
	}
	// The format file comes last: a directory without it is not a store, so an interrupted
	// Init is refused by Open rather than half-used.
	if err := writeFileSynced(filepath.Join(path, formatFileName), filepath.Join(path, "tmp"), encodeFormatVersion(v), modes.File); err != nil {
		return fmt.Errorf("init store %s: %w", path, err)
	}
	return nil
}

// writeFileSynced writes data to a temporary file in tmpDir, fsyncs it, renames it to path
// and fsyncs path's directory: afterwards path holds data (with permission bits mode) or
// (after a crash) its old content (local.WriteFileSynced).
func writeFileSynced(path, tmpDir string, data []byte, mode fs.FileMode) error {
	return local.WriteFileSynced(path, tmpDir, data, mode, nil)
}
