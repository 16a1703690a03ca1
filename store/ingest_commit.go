package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"github.com/weightfs/weightfs/delta"
	"golang.org/x/sys/unix"
)

// CommitOptions configure Commit.
type CommitOptions struct {
	Version  uint64 // 0: latest+1
	Progress func(done, total int64)
}

// Commit ingests the files under dir as a new sealed version (the batch path). Directories
// (empty ones too) and regular files are stored; symbolic links to regular files are stored
// as the files they point to; anything else is refused. An empty directory is refused
// (ErrEmptyVersion). DIR/.weightfs (delta.StateDir: the state and lock that `weightfs
// apply PATCH DIR` and `weightfs follow` keep there) is not stored.
func (s *Store) Commit(dir string, opts CommitOptions) (VersionInfo, error) {
	if err := s.checkOpen(); err != nil {
		return VersionInfo{}, err
	}
	st, err := os.Stat(dir)
	if err != nil {
		return VersionInfo{}, fmt.Errorf("commit: %w", err)
	}
	if !st.IsDir() {
		return VersionInfo{}, fmt.Errorf("commit %s: not a directory", dir)
	}
	files, dirs, total, err := scanTree(dir)
	if err != nil {
		return VersionInfo{}, fmt.Errorf("commit %s: %w", dir, err)
	}
	if len(files) == 0 {
		return VersionInfo{}, fmt.Errorf("commit %s: %w", dir, ErrEmptyVersion)
	}
	v := opts.Version
	if v == 0 {
		top, _ := s.versions.highest() // above damaged and quarantined versions too
		if top >= MaxVersion {
			return VersionInfo{}, fmt.Errorf("commit %s: version %d is the largest a store accepts: there is no next version: %w", dir, top, ErrVersionOutOfRange)
		}
		v = top + 1
	}
	w, err := s.NewVersion(v)
	if err != nil {
		return VersionInfo{}, fmt.Errorf("commit %s: %w", dir, err)
	}
	w.progress, w.total = opts.Progress, total
	ok := false
	defer func() {
		if !ok {
			w.Abort()
		}
	}()
	for _, d := range dirs {
		if err := w.AddDir(d.rel, d.mode); err != nil {
			return VersionInfo{}, fmt.Errorf("commit %s: %w", dir, err)
		}
	}
	for _, f := range files {
		if err := w.addPath(f); err != nil {
			return VersionInfo{}, fmt.Errorf("commit %s: %w", dir, err)
		}
	}
	info, err := w.Seal()
	if err != nil {
		return VersionInfo{}, fmt.Errorf("commit %s: %w", dir, err)
	}
	ok = true
	return info, nil
}

type treeEntry struct {
	rel  string // slash-separated
	dir  string // the commit's source: rel is opened below it (reldir.go)
	size int64
	mode fs.FileMode
}

// scanTree lists the regular files and directories under dir. It walks by paths relative to
// dir (reldir.go), so a tree deeper than PATH_MAX below dir is listed too.
func scanTree(dir string) (files, dirs []treeEntry, total int64, err error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, nil, 0, err
	}
	defer root.Close()
	err = fs.WalkDir(root.FS(), ".", func(rel string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if rel == "." {
			return nil
		}
		if rel == delta.StateDir {
			// The state and lock of `weightfs apply DIR` and `weightfs follow`: weightfs's
			// bookkeeping of the directory, not part of the model.
			if d.IsDir() {
				return fs.SkipDir
			}
			return nil // (SkipDir on a file would skip the rest of dir)
		}
		info, err := statBeneath(dir, rel) // follows symbolic links, wherever they point
		if err != nil {
			return err
		}
		switch {
		case d.Type()&fs.ModeSymlink != 0 && info.IsDir():
			return fmt.Errorf("%s: symbolic link to a directory is not supported", rel)
		case info.IsDir():
			dirs = append(dirs, treeEntry{rel: rel, dir: dir, mode: info.Mode()})
		case info.Mode().IsRegular():
			files = append(files, treeEntry{rel: rel, dir: dir, size: info.Size(), mode: info.Mode()})
			total += info.Size()
		default:
			return fmt.Errorf("%s: %v is not a regular file or directory", rel, info.Mode().Type())
		}
		return nil
	})
	return files, dirs, total, err
}

// addPath adds one source file. Its size, mtime and ctime (and identity) are taken when it
// is opened and again once it is read: a file that changed meanwhile fails the commit
// (ErrSourceChanged), whatever the hashes say (ingestFile checks that its reads agree). A
// write within the clock's granularity may leave the times as they were; the hashes catch
// every change that reached the bytes read.
func (w *Writer) addPath(e treeEntry) error {
	f, err := openBeneath(e.dir, e.rel, os.O_RDONLY)
	if err != nil {
		return err
	}
	defer f.Close()
	before, err := stampOf(f)
	if err != nil {
		return err
	}
	if before.size != e.size {
		return fmt.Errorf("%s changed size during the commit (%d bytes, then %d): %w", e.rel, e.size, before.size, ErrSourceChanged)
	}
	err = w.AddFile(e.rel, f, e.size, e.mode)
	if errors.Is(err, ErrBadPath) || errors.Is(err, ErrNameTooLong) {
		return fmt.Errorf("%s: %w", e.rel, err)
	}
	if err != nil {
		return err
	}
	if err := w.s.failpoint("commit-file-read"); err != nil {
		return err
	}
	after, err := stampOf(f)
	if err != nil {
		return err
	}
	if after != before {
		w.Remove(e.rel)
		return fmt.Errorf("%s changed while it was committed (%s, then %s): commit again once its writer is done: %w", e.rel, before, after, ErrSourceChanged)
	}
	return nil
}

// stamp is what changes when a file is written: its size, mtime and ctime, and which file
// it is.
type stamp struct {
	dev, ino     uint64
	size         int64
	mtime, ctime unix.Timespec
}

func stampOf(f *os.File) (stamp, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return stamp{}, fmt.Errorf("stat %s: %w", f.Name(), err)
	}
	return stamp{dev: uint64(st.Dev), ino: uint64(st.Ino), size: st.Size, mtime: st.Mtim, ctime: st.Ctim}, nil
}

func (s stamp) String() string {
	return fmt.Sprintf("%d bytes, mtime %d.%09d, ctime %d.%09d", s.size, s.mtime.Sec, s.mtime.Nsec, s.ctime.Sec, s.ctime.Nsec)
}
