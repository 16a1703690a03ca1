package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// The files of a local store's objects and packs (backend_local.go, backend_local_pack.go)
// are alike: read-only files STORE/<dir>/<2 hex>/<64 hex>, put by rename, opened only when
// regular, listed by walking the fan-out directories. One function each serves both; kind
// ("object", "pack") names the file in errors.

// putFile moves tmp, synced and made read-only, to dst, a file of a fan-out directory; kind
// ("object", "pack") names it in errors. The fan-out directory is made when missing, and the
// directory above it too where makeTop says it may be missing (packs/ is made with the first
// pack; objects/ is made with the store). The directories changed are synced by SyncObjects.
func (b *localBackend) putFile(kind string, id ID, tmp *os.File, dst string, makeTop bool) error {
	renamed := false
	defer func() {
		if !renamed {
			b.RemoveTemp(tmp)
		}
	}()
	err := tmp.Sync()
	countFsync(&b.fsyncs)
	if err != nil {
		return fmt.Errorf("sync %s %s: %w", kind, id, err)
	}
	// Objects are never written in place: read-only files guard against accidents.
	if err := tmp.Chmod(b.modes.object); err != nil {
		return fmt.Errorf("put %s %s: %w", kind, id, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("put %s %s: %w", kind, id, err)
	}
	fan := filepath.Dir(dst)
	if _, err := os.Stat(fan); errors.Is(err, fs.ErrNotExist) {
		top := filepath.Dir(fan)
		if makeTop {
			if _, err := os.Stat(top); errors.Is(err, fs.ErrNotExist) {
				if err := mkdirMode(top, b.modes.dir); err != nil && !errors.Is(err, fs.ErrExist) {
					return fmt.Errorf("put %s %s: %w", kind, id, err)
				}
				b.markDirty(b.root)
			}
		}
		if err := mkdirMode(fan, b.modes.dir); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("put %s %s: %w", kind, id, err)
		}
		b.markDirty(top)
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return fmt.Errorf("put %s %s: %w", kind, id, err)
	}
	renamed = true
	b.markDirty(fan)
	return nil
}

// openRegularFile opens file p of an object or a pack (kind names it in errors).
func openRegularFile(kind string, id ID, p string) (ObjectFile, error) {
	// Anything but a regular file in an object's place is damage, and is looked at before it
	// is opened: the open of a FIFO would block until a writer came (hanging every read of
	// the object), the reads of a directory fail with EISDIR, which says nothing of the store.
	if st, err := os.Stat(p); err == nil && !st.Mode().IsRegular() {
		return nil, notARegularFile(kind, id, st.Mode())
	}
	f, err := os.Open(p)
	if errors.Is(err, syscall.ENOTDIR) {
		// A file where its fan-out directory (or objects/) should be: the object is
		// missing, and that is damage.
		return nil, fmt.Errorf("open %s %s: %w (%w)", kind, id, ErrCorrupt, err)
	}
	if err != nil {
		return nil, fmt.Errorf("open %s %s: %w", kind, id, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("open %s %s: %w", kind, id, err)
	}
	if !st.Mode().IsRegular() { // replaced since the look above
		f.Close()
		return nil, notARegularFile(kind, id, st.Mode())
	}
	return localObject{f, st.Size()}, nil
}

func notARegularFile(kind string, id ID, mode fs.FileMode) error {
	return fmt.Errorf("%s %s is not a regular file (mode %v): %w", kind, id, mode, ErrCorrupt)
}

// statFile is the size of file p of an object or a pack (kind names it in errors).
func statFile(kind string, id ID, p string) (int64, error) {
	st, err := os.Stat(p)
	if err != nil {
		return 0, fmt.Errorf("stat %s %s: %w", kind, id, err)
	}
	return st.Size(), nil
}

// listFanOut calls fn for each file of top/<2 hex>/<64 hex> (objects or packs: what names
// them in errors); a missing top lists nothing where missingOK says it may be missing.
func listFanOut(top, what string, missingOK bool, fn func(id ID, size int64) error) error {
	fans, err := os.ReadDir(top)
	if missingOK && errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("list %s: %w", what, err)
	}
	for _, fan := range fans {
		if !fan.IsDir() || len(fan.Name()) != 2 {
			continue
		}
		entries, err := os.ReadDir(filepath.Join(top, fan.Name()))
		if err != nil {
			return fmt.Errorf("list %s: %w", what, err)
		}
		for _, e := range entries {
			id, err := ParseID(e.Name())
			if err != nil || !strings.HasPrefix(e.Name(), fan.Name()) || !e.Type().IsRegular() {
				continue // not an object file; the layout has nothing else here
			}
			info, err := e.Info()
			if errors.Is(err, fs.ErrNotExist) {
				continue // deleted meanwhile
			}
			if err != nil {
				return fmt.Errorf("list %s: %w", what, err)
			}
			if err := fn(id, info.Size()); err != nil {
				return err
			}
		}
	}
	return nil
}

// deleteFile removes file p of an object or a pack (kind names it in errors); a missing one
// is no error.
func deleteFile(kind string, id ID, p string) error {
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete %s %s: %w", kind, id, err)
	}
	return nil
}
