package local

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync/atomic"
)

// WriteFileSynced writes data to a temporary file in tmpDir, fsyncs it, renames it to path
// and fsyncs path's directory: afterwards path holds data (with permission bits mode) or
// (after a crash) its old content. Its fsyncs (two) are added to n (nil: uncounted):
// Stats.Fsyncs.
func WriteFileSynced(path, tmpDir string, data []byte, mode fs.FileMode, n *atomic.Int64) error {
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
	CountFsync(n)
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
	return SyncDir(filepath.Dir(path), n)
}

// SyncDir fsyncs a directory so that renames and creations in it are durable, and adds the
// fsync to n (nil: uncounted): Stats.Fsyncs.
func SyncDir(dir string, n *atomic.Int64) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	CountFsync(n)
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}

// CountFsync adds one fsync made (whether or not it succeeded) to n, if n is not nil.
func CountFsync(n *atomic.Int64) {
	if n != nil {
		n.Add(1)
	}
}

// CreateTemp creates a temporary object file in dir (every backend's CreateTemp).
func CreateTemp(dir string) (*os.File, error) {
	f, err := os.CreateTemp(dir, "obj-*")
	if err != nil {
		return nil, fmt.Errorf("create temporary object file: %w", err)
	}
	return f, nil
}

// RemoveTemp closes and removes a temporary object file (every backend's RemoveTemp).
func RemoveTemp(f *os.File) {
	f.Close()
	os.Remove(f.Name())
}
