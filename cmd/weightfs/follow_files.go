package main

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/weightfs/weightfs/delta"
	"github.com/weightfs/weightfs/fs"
)

// The follower's files: what a version holds (the mount's listing), and DIR brought to it.
// DIR's state records every file weightfs put there as it left it (delta.DirFile), so each
// round checks every file with one lstat and copies again from the mount the ones changed
// since (a write, a chmod, a replacement, a removal), and each step removes the files that
// the previous version had and the new one lacks, and only those.

// mountFile is a regular file of a version on the mount.
type mountFile struct {
	path string // slash-separated, relative to the version
	size int64
	mode os.FileMode // permission bits
}

// listVersion lists the regular files of version v on the mount (one readdir per directory,
// one getattr per file), less a state directory a version may hold at its top (committed
// from a directory weightfs followed, before commit skipped it).
func (c *followConfig) listVersion(v uint64) ([]mountFile, error) {
	src := filepath.Join(c.mnt, fs.VersionName(v))
	var files []mountFile
	err := filepath.WalkDir(src, func(path string, d iofs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, path)
		if rel == delta.StateDir {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		files = append(files, mountFile{path: filepath.ToSlash(rel), size: fi.Size(), mode: fi.Mode().Perm()})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list version %d: %w", v, err)
	}
	return files, nil
}

// unchanged says whether every recorded file is on disk as the record says (one lstat each).
func unchanged(dir string, record []delta.DirFile) bool {
	for _, f := range record {
		now, err := delta.StatDirFile(dir, f.Path)
		if f.Changed(now, err) != "" {
			return false
		}
	}
	return true
}

// settle brings DIR's files to version v, whose files are want, and returns the state that
// records it ({"version": v} with the files as left), for the caller to write once it has
// said what it did (so that a reader that sees the state sees the log line too). record is what weightfs may have put in DIR (nil:
// not known, an older state). With copyAll every file is copied; otherwise a file is copied
// again from the mount when it is missing, has another size than v's, or, unless the step's
// patch named it (touched: its result hash was checked) or nothing was recorded, differs from
// its record. Every file gets v's mode. The recorded files v lacks are removed.
func (c *followConfig) settle(record []delta.DirFile, v uint64, want []mountFile, touched map[string]bool, copyAll bool) (delta.DirState, int64, error) {
	recorded := make(map[string]delta.DirFile, len(record))
	for _, f := range record {
		recorded[f.Path] = f
	}
	src := filepath.Join(c.mnt, fs.VersionName(v))
	files := make([]delta.DirFile, 0, len(want))
	inVersion := make(map[string]bool, len(want))
	var copied int64
	for _, m := range want {
		inVersion[m.path] = true
		now, err := delta.StatDirFile(c.dir, m.path)
		why := ""
		switch {
		case copyAll:
		case errors.Is(err, iofs.ErrNotExist):
			why = "it is missing"
		case err != nil:
			why = err.Error()
		case now.Size != m.size:
			why = fmt.Sprintf("its size is %d bytes, not the version's %d", now.Size, m.size)
		case touched[m.path], record == nil:
		default:
			why = recorded[m.path].Changed(now, nil)
		}
		dst := filepath.Join(c.dir, filepath.FromSlash(m.path))
		switch {
		case copyAll || why != "":
			if err := delta.CheckDirPath(c.dir, m.path); err != nil {
				return delta.DirState{}, copied, err
			}
			if why != "" {
				c.logf("%s is not version %d's (%s): copying it again", m.path, v, why)
			}
			n, err := copyChecked(filepath.Join(src, filepath.FromSlash(m.path)), dst, m.mode, c.sync)
			copied += n
			if err != nil {
				return delta.DirState{}, copied, err
			}
		case os.FileMode(now.Mode) != m.mode:
			// A file the patch created, or a mode the version changed: the version's mode,
			// as export gives it (a 0600 file stays 0600).
			if err := os.Chmod(dst, m.mode); err != nil {
				return delta.DirState{}, copied, err
			}
		}
		df, err := delta.StatDirFile(c.dir, m.path)
		if err != nil {
			return delta.DirState{}, copied, err
		}
		files = append(files, df)
	}
	for _, f := range record {
		if inVersion[f.Path] {
			continue
		}
		if err := delta.RemoveDirFile(c.dir, f.Path); err != nil {
			return delta.DirState{}, copied, fmt.Errorf("remove %s, which version %d does not have: %w", f.Path, v, err)
		}
		c.logf("removed %s: version %d does not have it", f.Path, v)
	}
	return delta.DirState{Version: v, Source: c.mnt, Files: delta.UnionFiles(files, nil)}, copied, nil
}

// copyChecked copies src to dst through dst.weightfs-tmp, with mode: the copy is hashed as it
// is read and again as written, and renamed over dst only when the two agree. (The mount
// checks what it serves against the store's own checksums; this catches a bad local write.)
// The temporary file is created 0600 and given mode before the rename, so a 0600 file of
// the version is never readable by others on the way.
func copyChecked(src, dst string, mode os.FileMode, sync bool) (int64, error) {
	in, err := os.Open(src)
	if err != nil {
		return 0, err
	}
	defer in.Close()
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return 0, err
	}
	tmp := dst + ".weightfs-tmp"
	os.Remove(tmp)
	out, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return 0, err
	}
	read := sha256.New()
	n, err := io.Copy(io.MultiWriter(out, read), in)
	if err == nil {
		written := sha256.New()
		if _, err = out.Seek(0, io.SeekStart); err == nil {
			_, err = io.Copy(written, out)
		}
		if err == nil && string(written.Sum(nil)) != string(read.Sum(nil)) {
			err = fmt.Errorf("%s: the copy written does not hash as read", dst)
		}
	}
	if err == nil {
		err = out.Chmod(mode)
	}
	if err == nil && sync {
		err = out.Sync()
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, dst)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return n, err
}
