package store

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// Files of a version below a directory of ours (the materialized copy, an export's target, a
// commit's source) are reached by their version-relative path from that directory, never by
// an absolute path: a version may hold any path whose elements are at most NAME_MAX bytes
// (MaxNameLen), and the directory's own path in front of a long one passes PATH_MAX (4096
// bytes with its NUL), which every system call refuses with ENAMETOOLONG. An os.Root (or
// openat, element by element, for a commit's source, whose symbolic links may point
// anywhere) resolves the path one element at a time, so only NAME_MAX bounds it.

// inDir runs fn with an os.Root opened on dir.
func inDir(dir string, fn func(r *os.Root) error) error {
	r, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer r.Close()
	return fn(r)
}

// openIn opens the file at the slash-separated path rel below dir.
func openIn(dir, rel string, flag int, perm fs.FileMode) (f *os.File, err error) {
	err = inDir(dir, func(r *os.Root) error {
		f, err = r.OpenFile(filepath.FromSlash(rel), flag, perm)
		return err
	})
	return f, err
}

// statIn is os.Stat of rel below dir.
func statIn(dir, rel string) (info fs.FileInfo, err error) {
	err = inDir(dir, func(r *os.Root) error {
		info, err = r.Stat(filepath.FromSlash(rel))
		return err
	})
	return info, err
}

// mkdirAllIn is os.MkdirAll of rel below dir.
func mkdirAllIn(dir, rel string, perm fs.FileMode) error {
	return inDir(dir, func(r *os.Root) error { return r.MkdirAll(filepath.FromSlash(rel), perm) })
}

// removeIn is os.Remove of rel below dir.
func removeIn(dir, rel string) error {
	return inDir(dir, func(r *os.Root) error { return r.Remove(filepath.FromSlash(rel)) })
}

// renameIn is os.Rename of from to to, both relative to dir.
func renameIn(dir, from, to string) error {
	return inDir(dir, func(r *os.Root) error { return r.Rename(filepath.FromSlash(from), filepath.FromSlash(to)) })
}

// openCacheFileIn is openCacheFile for rel below dir: anything but a regular file is refused
// before it is opened.
func openCacheFileIn(dir, rel string) (f *os.File, err error) {
	err = inDir(dir, func(r *os.Root) error {
		name := filepath.FromSlash(rel)
		st, err := r.Stat(name)
		if err != nil {
			return err
		}
		if !st.Mode().IsRegular() {
			return fmt.Errorf("%s: %w (mode %v)", filepath.Join(dir, name), errNotRegular, st.Mode())
		}
		f, err = r.Open(name)
		return err
	})
	return f, err
}

// createTempIn creates a new file (mode 0600, as os.CreateTemp) named prefix and a random
// suffix in the directory relDir below dir (relDir "." for dir itself), and returns it
// with its path relative to dir.
func createTempIn(dir, relDir, prefix string) (f *os.File, rel string, err error) {
	err = inDir(dir, func(r *os.Root) error {
		for range 10000 {
			rel = path.Join(relDir, prefix+strconv.FormatUint(uint64(rand.Uint32()), 10))
			f, err = r.OpenFile(filepath.FromSlash(rel), os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
			if !errors.Is(err, fs.ErrExist) {
				return err
			}
		}
		return fmt.Errorf("create a temporary file in %s: %w", filepath.Join(dir, relDir), fs.ErrExist)
	})
	return f, rel, err
}

// moveInto renames the file at src, an absolute path of ordinary length on dir's file system,
// to rel below dir: first to a temporary name in dir itself (when it is elsewhere), then
// within dir. On failure src (or its temporary name) is removed.
func moveInto(src, dir, rel string) error {
	name := filepath.Base(src)
	if filepath.Dir(src) != filepath.Clean(dir) {
		name = ".move-" + name
		if err := os.Rename(src, filepath.Join(dir, name)); err != nil {
			os.Remove(src)
			return err
		}
	}
	if err := renameIn(dir, name, rel); err != nil {
		os.Remove(filepath.Join(dir, name))
		return err
	}
	return nil
}

// openBeneath opens the slash-separated path rel below dir with openat, one element at a
// time, following symbolic links wherever they point (a commit's source may link out of its
// directory, as a Hugging Face snapshot does). flag is the open flag of the last element
// (unix.O_PATH to stat it without opening what it is).
func openBeneath(dir, rel string, flag int) (*os.File, error) {
	name := filepath.Join(dir, filepath.FromSlash(rel))
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: dir, Err: err}
	}
	for rest := rel; ; {
		elem, after, more := strings.Cut(rest, "/")
		fl := flag | unix.O_CLOEXEC
		if more {
			fl = unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC
		}
		var next int
		for {
			next, err = unix.Openat(fd, elem, fl, 0)
			if err != unix.EINTR {
				break
			}
		}
		unix.Close(fd)
		if err != nil {
			return nil, &fs.PathError{Op: "open", Path: name, Err: err}
		}
		fd = next
		if !more {
			return os.NewFile(uintptr(fd), name), nil
		}
		rest = after
	}
}

// statBeneath is os.Stat (following symbolic links) of rel below dir, by openBeneath.
func statBeneath(dir, rel string) (fs.FileInfo, error) {
	f, err := openBeneath(dir, rel, unix.O_PATH)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Stat()
}
