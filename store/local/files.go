package local

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/weightfs/weightfs/store/format"
)

// The files of a local store's objects and packs are alike: read-only files
// STORE/<dir>/<2 hex>/<64 hex>, put by rename, opened only when regular, listed by walking
// the fan-out directories. One function each serves both; kind ("object", "pack") names the
// file in errors.

// ErrNotRegular marks a file that this program writes as a regular file but is not one (a
// directory, a FIFO, a device in its place), refused before it is read (store's caches and
// its pins test for it: store's errNotRegular is this value).
var ErrNotRegular = errors.New("not a regular file")

// Directories of a store's layout (docs/format.md Part I §1).
const (
	ObjectDir = "objects"
	PackDir   = "packs"
	IndexDir  = "index"
	GroupDir  = "groups"
)

// FanOutPath is the file of id in fan-out directory top (STORE/objects, STORE/packs):
// top/<first 2 hex digits>/<64 hex digits>.
func FanOutPath(top string, id format.ID) string {
	h := id.String()
	return filepath.Join(top, h[:2], h)
}

// File is an object's or a pack's file, open for reading, with its size.
type File struct {
	*os.File
	size int64
}

// Size is the file's size when it was opened.
func (f File) Size() int64 { return f.size }

// OpenFile opens file p of an object or a pack (kind names it in errors).
func OpenFile(kind string, id format.ID, p string) (File, error) {
	// Anything but a regular file in an object's place is damage, and is looked at before it
	// is opened: the open of a FIFO would block until a writer came (hanging every read of
	// the object), the reads of a directory fail with EISDIR, which says nothing of the store.
	if st, err := os.Stat(p); err == nil && !st.Mode().IsRegular() {
		return File{}, notARegularFile(kind, id, st.Mode())
	}
	f, err := os.Open(p)
	if errors.Is(err, syscall.ENOTDIR) {
		// A file where its fan-out directory (or objects/) should be: the object is
		// missing, and that is damage.
		return File{}, fmt.Errorf("open %s %s: %w (%w)", kind, id, format.ErrCorrupt, err)
	}
	if err != nil {
		return File{}, fmt.Errorf("open %s %s: %w", kind, id, err)
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return File{}, fmt.Errorf("open %s %s: %w", kind, id, err)
	}
	if !st.Mode().IsRegular() { // replaced since the look above
		f.Close()
		return File{}, notARegularFile(kind, id, st.Mode())
	}
	return File{f, st.Size()}, nil
}

func notARegularFile(kind string, id format.ID, mode fs.FileMode) error {
	return fmt.Errorf("%s %s is not a regular file (mode %v): %w", kind, id, mode, format.ErrCorrupt)
}

// StatFile is the size of file p of an object or a pack (kind names it in errors).
func StatFile(kind string, id format.ID, p string) (int64, error) {
	st, err := os.Stat(p)
	if err != nil {
		return 0, fmt.Errorf("stat %s %s: %w", kind, id, err)
	}
	return st.Size(), nil
}

// ListFanOut calls fn for each file of top/<2 hex>/<64 hex> (objects or packs: what names
// them in errors); a missing top lists nothing where missingOK says it may be missing.
func ListFanOut(top, what string, missingOK bool, fn func(id format.ID, size int64) error) error {
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
			id, err := format.ParseID(e.Name())
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

// DeleteFile removes file p of an object or a pack (kind names it in errors); a missing one
// is no error.
func DeleteFile(kind string, id format.ID, p string) error {
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("delete %s %s: %w", kind, id, err)
	}
	return nil
}
