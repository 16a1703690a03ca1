package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync/atomic"
)

// The store's format file, STORE/weightfs-store, is 16 bytes:
//
//	0  8  magic "WFSSTORE"
//	8  4  store format version, u32 little-endian (1 or 2)
//	12 4  CRC-32C of bytes 0..12, u32 little-endian
//
// Open checks the magic, then the version, then the checksum (the order bbolt's meta
// validation uses: an alien file is "not a store", a newer one "unsupported", a damaged one
// "corrupt"). Format 2 is format 1 whose objects may hold version-2 delta sections (coded
// against a context, object_delta_context.go): a program that reads only format 1 refuses such a store
// rather than taking its sections for damage. Format 3 is format 2 whose objects may be in
// packs, found through pack indexes (pack_layer.go), and whose manifests may name those
// indexes. This program reads all three; it creates stores of format 3, and a writer opening
// a store of format 1 or 2 rewrites its format file as format 3 before it writes anything
// (docs/format.md Part I §2); the loose objects of the old format stay where they are and
// readable, new ones go into packs.
const (
	formatFileName     = "weightfs-store"
	formatMagic        = "WFSSTORE"
	storeFormatVersion = 3 // what Init writes and writers upgrade to
	oldestFormat       = 1 // the oldest format this program reads
	formatFileLen      = 16
)

// FormatFileName is the name of the store's format file, STORE/weightfs-store (in S3,
// PREFIX/weightfs-store).
const FormatFileName = formatFileName

// FormatFile returns the bytes of the format file of a new store.
func FormatFile() []byte { return encodeFormatFile() }

// FormatVersion checks the bytes of a store's format file (ErrNotAStore, ErrCorrupt or
// ErrUnsupportedVersion when they are not this program's store) and returns the store's
// format version (for Opening.Format).
func FormatVersion(b []byte) (uint32, error) {
	if err := checkFormatFile(b); err != nil {
		return 0, err
	}
	return binary.LittleEndian.Uint32(b[8:]), nil
}

func encodeFormatFile() []byte { return encodeFormatVersion(storeFormatVersion) }

// encodeFormatVersion returns the format file of a store of format version v.
func encodeFormatVersion(v uint32) []byte {
	b := make([]byte, formatFileLen)
	copy(b, formatMagic)
	binary.LittleEndian.PutUint32(b[8:], v)
	binary.LittleEndian.PutUint32(b[12:], crc32c(b[:12]))
	return b
}

func checkFormatFile(b []byte) error {
	if len(b) < len(formatMagic) || string(b[:len(formatMagic)]) != formatMagic {
		return fmt.Errorf("%s has no weightfs magic: %w", formatFileName, ErrNotAStore)
	}
	if len(b) != formatFileLen {
		return fmt.Errorf("%s is %d bytes, want %d: %w", formatFileName, len(b), formatFileLen, ErrCorrupt)
	}
	if v := binary.LittleEndian.Uint32(b[8:]); v < oldestFormat || v > storeFormatVersion {
		return fmt.Errorf("%s: store format version %d (this program reads %d to %d): %w",
			formatFileName, v, oldestFormat, storeFormatVersion, ErrUnsupportedVersion)
	}
	if got, want := binary.LittleEndian.Uint32(b[12:]), crc32c(b[:12]); got != want {
		return fmt.Errorf("%s: checksum %08x, want %08x: %w", formatFileName, got, want, ErrCorrupt)
	}
	return nil
}

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
		if err := os.MkdirAll(path, modes.dir); err != nil {
			return fmt.Errorf("init store: %w", err)
		}
	case err != nil:
		return fmt.Errorf("init store %s: %w", path, err)
	case len(entries) > 0:
		return fmt.Errorf("init store %s: directory is not empty", path)
	}
	if err := os.Chmod(path, modes.dir); err != nil {
		return fmt.Errorf("init store: %w", err)
	}
	for _, d := range storeDirs {
		mode := modes.dir
		if d == "cache" {
			mode = cacheDirPerm
		}
		if err := mkdirMode(filepath.Join(path, d), mode); err != nil {
			return fmt.Errorf("init store: %w", err)
		}
	}
	// The format file comes last: a directory without it is not a store, so an interrupted
	// Init is refused by Open rather than half-used.
	if err := writeFileSynced(filepath.Join(path, formatFileName), filepath.Join(path, "tmp"), encodeFormatVersion(v), modes.file); err != nil {
		return fmt.Errorf("init store %s: %w", path, err)
	}
	return nil
}

// writeFileSynced writes data to a temporary file in tmpDir, fsyncs it, renames it to path
// and fsyncs path's directory: afterwards path holds data (with permission bits mode) or
// (after a crash) its old content.
func writeFileSynced(path, tmpDir string, data []byte, mode fs.FileMode) error {
	return writeFileSyncedCounting(path, tmpDir, data, mode, nil)
}

// writeFileSyncedCounting is writeFileSynced adding its fsyncs (two) to n (nil: uncounted):
// Stats.Fsyncs.
func writeFileSyncedCounting(path, tmpDir string, data []byte, mode fs.FileMode, n *atomic.Int64) error {
	f, err := os.CreateTemp(tmpDir, "put-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			f.Close()
			os.Remove(tmp)
		}
	}()
	if err := f.Chmod(mode); err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		return err
	}
	err = f.Sync()
	countFsync(n)
	if err != nil {
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp, path); err != nil {
		return err
	}
	ok = true
	return syncDirCounting(filepath.Dir(path), n)
}

// syncDirCounting fsyncs a directory so that renames and creations in it are durable, and
// adds the fsync to n (nil: uncounted): Stats.Fsyncs. The local backend calls it as fsyncDir.
func syncDirCounting(dir string, n *atomic.Int64) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	countFsync(n)
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}

// countFsync adds one fsync made (whether or not it succeeded) to n, if n is not nil.
func countFsync(n *atomic.Int64) {
	if n != nil {
		n.Add(1)
	}
}
