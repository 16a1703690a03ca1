package delta

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// The files a checkpoint directory's state records (docs/format.md Part III §3, "files"). The
// directory is weightfs's, but a person or a program may still write into it: the record
// says which files weightfs put there and how it left them, so that
//
//   - a file the next version lacks is removed, and only such a file: a file weightfs never
//     put there (the user's notes, an engine's own cache) is never touched;
//   - a file changed since (its size, modification time, change time or inode differ: a
//     write, a chmod, a replacement; ctime cannot be set back by a user) is found with one
//     lstat per file, with no read, and copied again from the version.
//
// While a step is pending the record holds every file either version may have put there
// (the stats of those of the step's target are zero: unknown), so that a step finished by
// another version (the pending one was removed by gc) still knows what to remove.

// DirFile is one file of a checkpoint directory as weightfs left it.
type DirFile struct {
	Path  string `json:"path"`            // slash-separated, relative to the directory
	Size  int64  `json:"size"`            // bytes
	Mode  uint32 `json:"mode,omitempty"`  // permission bits (0o777)
	Mtime int64  `json:"mtime,omitempty"` // nanoseconds since the epoch; 0: unknown
	Ctime int64  `json:"ctime,omitempty"` // nanoseconds since the epoch; 0: unknown
	Ino   uint64 `json:"ino,omitempty"`
}

// Known says whether the record holds the file's stats (not only its name).
func (f DirFile) Known() bool { return f.Ctime != 0 }

// StatDirFile records dir/path as it is now; an error wrapping fs.ErrNotExist if it is gone.
// A symbolic link or anything else than a regular file is an error: weightfs puts only
// regular files in the directory.
func StatDirFile(dir, path string) (DirFile, error) {
	var st unix.Stat_t
	full := filepath.Join(dir, filepath.FromSlash(path))
	if err := unix.Lstat(full, &st); err != nil {
		return DirFile{}, &fs.PathError{Op: "lstat", Path: full, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return DirFile{}, fmt.Errorf("%s is not a regular file (mode %#o)", full, st.Mode)
	}
	return DirFile{Path: path, Size: st.Size, Mode: st.Mode & 0o777, Mtime: st.Mtim.Nano(), Ctime: st.Ctim.Nano(), Ino: st.Ino}, nil
}

// Changed says why the file on disk (now, or the error of its lstat) is not the one the
// record describes; "" when it is.
func (f DirFile) Changed(now DirFile, err error) string {
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return "it is gone"
	case err != nil:
		return err.Error()
	case !f.Known():
		return "its state is not recorded"
	case now.Size != f.Size:
		return fmt.Sprintf("its size is %d bytes, not %d", now.Size, f.Size)
	case now.Ino != f.Ino:
		return "it was replaced by another file"
	case now.Mode != f.Mode:
		return fmt.Sprintf("its mode is %#o, not %#o", now.Mode, f.Mode)
	case now.Mtime != f.Mtime || now.Ctime != f.Ctime:
		return "it was written or its times were changed"
	}
	return ""
}

// UnionFiles returns the record a and every name of b not in a (with b's entry), by path.
func UnionFiles(a, b []DirFile) []DirFile {
	seen := make(map[string]bool, len(a)+len(b))
	out := make([]DirFile, 0, len(a)+len(b))
	for _, l := range [][]DirFile{a, b} {
		for _, f := range l {
			if !seen[f.Path] {
				seen[f.Path] = true
				out = append(out, f)
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out
}

// CheckDirPath refuses a recorded path that is not a file inside dir (absolute, "..", under
// the state directory) or that leads through a symbolic link (planted in place of one of
// its directories, it would make a removal or a copy act outside dir).
func CheckDirPath(dir, path string) error {
	if !filepath.IsLocal(filepath.FromSlash(path)) || path == StateDir || strings.HasPrefix(path, StateDir+"/") {
		return fmt.Errorf("%w: %q is not a file inside a directory", ErrMalformed, path)
	}
	p := dir
	parts := strings.Split(path, "/")
	for _, part := range parts[:len(parts)-1] {
		p = filepath.Join(p, part)
		fi, err := os.Lstat(p)
		if errors.Is(err, fs.ErrNotExist) {
			return nil // created as a directory when needed
		}
		if err != nil {
			return err
		}
		if !fi.IsDir() {
			return fmt.Errorf("%s is not a directory (%v): weightfs does not follow links in %s", p, fi.Mode().Type(), dir)
		}
	}
	return nil
}

// RemoveDirFile removes dir/path, a file weightfs put there, and then each parent directory
// below dir that this leaves empty. A file already gone is no error. The temporary copy a
// killed copy or apply may have left beside it (FILE.weightfs-tmp) goes too.
func RemoveDirFile(dir, path string) error {
	if err := CheckDirPath(dir, path); err != nil {
		return err
	}
	full := filepath.Join(dir, filepath.FromSlash(path))
	if err := os.Remove(full); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	unix.Unlink(full + wholeTempSuffix) // a copy a killed follower or apply left: never renamed into place
	for p := filepath.Dir(full); p != dir && len(p) > len(dir); p = filepath.Dir(p) {
		if os.Remove(p) != nil { // not empty (or not ours to remove): stop
			break
		}
	}
	return nil
}
