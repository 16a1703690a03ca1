package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"time"

	"github.com/zeebo/xxh3"
)

// The one writer and the one reader every case of a figure uses, so that the cases differ only
// in the file system underneath.

// treeFiles lists the regular files under dir as slash-separated relative paths, sorted.
func treeFiles(dir string) ([]string, error) {
	var files []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			rel, err := filepath.Rel(dir, p)
			if err != nil {
				return err
			}
			files = append(files, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	sort.Strings(files)
	return files, nil
}

// writeStats times one writeTree.
type writeStats struct {
	Bytes     int64
	Files     int
	Start     time.Time // before the first create
	LastWrite time.Time // when the last write(2) returned
	End       time.Time // after the last close (and fsync, if asked)
}

// WriteSeconds is the time from the first create to the last write's return.
func (s writeStats) WriteSeconds() float64 { return s.LastWrite.Sub(s.Start).Seconds() }

// TotalSeconds is the time from the first create to the end.
func (s writeStats) TotalSeconds() float64 { return s.End.Sub(s.Start).Seconds() }

// writeTree copies every regular file under src to the same path under dst with sequential
// write(2) calls of bufSize bytes (the last one of a file shorter), as a trainer saving a
// checkpoint does. With syncFiles each file is fsynced before its close and the directories
// after the last one. The source should be in the page cache (warmTree) so that its reads cost
// the same in every case.
func writeTree(src, dst string, bufSize int, syncFiles bool) (writeStats, error) {
	files, err := treeFiles(src)
	if err != nil {
		return writeStats{}, err
	}
	buf := make([]byte, bufSize)
	st := writeStats{Start: time.Now()}
	dirs := map[string]bool{}
	for _, rel := range files {
		out := filepath.Join(dst, filepath.FromSlash(rel))
		dir := filepath.Dir(out)
		if !dirs[dir] {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return st, fmt.Errorf("write tree: %w", err)
			}
			dirs[dir] = true
		}
		n, err := copyOneFile(filepath.Join(src, filepath.FromSlash(rel)), out, buf, syncFiles, &st.LastWrite)
		st.Bytes += n
		if err != nil {
			return st, err
		}
		st.Files++
	}
	if syncFiles {
		for dir := range dirs {
			if err := syncDir(dir); err != nil {
				return st, err
			}
		}
	}
	st.End = time.Now()
	return st, nil
}

// copyOneFile copies src to dst in len(buf) pieces, recording when each write returns.
func copyOneFile(src, dst string, buf []byte, syncFile bool, lastWrite *time.Time) (int64, error) {
	in, err := os.Open(src)
	if err != nil {
		return 0, fmt.Errorf("write tree: %w", err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return 0, fmt.Errorf("write tree: %w", err)
	}
	var n int64
	for {
		k, rerr := io.ReadFull(in, buf)
		if k > 0 {
			if _, err := out.Write(buf[:k]); err != nil {
				out.Close()
				return n, fmt.Errorf("write %s: %w", dst, err)
			}
			*lastWrite = time.Now()
			n += int64(k)
		}
		if errors.Is(rerr, io.EOF) || errors.Is(rerr, io.ErrUnexpectedEOF) {
			break
		}
		if rerr != nil {
			out.Close()
			return n, fmt.Errorf("read %s: %w", src, rerr)
		}
	}
	if syncFile {
		if err := out.Sync(); err != nil {
			out.Close()
			return n, fmt.Errorf("fsync %s: %w", dst, err)
		}
	}
	// The close of a file on a FUSE mount reports a failed flush.
	if err := out.Close(); err != nil {
		return n, fmt.Errorf("close %s: %w", dst, err)
	}
	return n, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", dir, err)
	}
	return nil
}

// readStats times one readTree.
type readStats struct {
	Bytes   int64
	Seconds float64
	Hashes  map[string]xxh3.Uint128 // per relative path: xxh3-128 of the bytes read
}

// readTree reads every regular file under dir with sequential read(2) calls of bufSize bytes,
// hashing what it reads (xxh3 runs at many GB/s, far above any mount here). If want is not nil
// every file's hash must match it and the two must list the same files: a read that returns
// wrong bytes is an error, not a figure.
func readTree(dir string, bufSize int, want map[string]xxh3.Uint128) (readStats, error) {
	files, err := treeFiles(dir)
	if err != nil {
		return readStats{}, err
	}
	buf := make([]byte, bufSize)
	st := readStats{Hashes: map[string]xxh3.Uint128{}}
	h := xxh3.New()
	began := time.Now()
	for _, rel := range files {
		h.Reset()
		n, err := readOneFile(filepath.Join(dir, filepath.FromSlash(rel)), buf, h)
		st.Bytes += n
		if err != nil {
			return st, err
		}
		st.Hashes[rel] = h.Sum128()
	}
	st.Seconds = time.Since(began).Seconds()
	if want != nil {
		if err := compareHashes(dir, want, st.Hashes); err != nil {
			return st, err
		}
	}
	return st, nil
}

func readOneFile(path string, buf []byte, w io.Writer) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("read tree: %w", err)
	}
	defer f.Close()
	var n int64
	for {
		k, err := f.Read(buf)
		if k > 0 {
			w.Write(buf[:k]) // a hash.Hash never fails
			n += int64(k)
		}
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, fmt.Errorf("read %s: %w", path, err)
		}
	}
}

// compareHashes reports the first difference between the expected and the read files.
func compareHashes(dir string, want, got map[string]xxh3.Uint128) error {
	names := make([]string, 0, len(want))
	for name := range want {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		g, ok := got[name]
		if !ok {
			return fmt.Errorf("%s: %s is missing", dir, name)
		}
		if g != want[name] {
			return fmt.Errorf("%s: %s: the bytes read differ from the bytes written", dir, name)
		}
	}
	for name := range got {
		if _, ok := want[name]; !ok {
			return fmt.Errorf("%s: unexpected file %s", dir, name)
		}
	}
	return nil
}

// hashFiles hashes files held in memory, keyed like readTree.
func hashFiles(files map[string][]byte) map[string]xxh3.Uint128 {
	out := make(map[string]xxh3.Uint128, len(files))
	for name, b := range files {
		out[name] = xxh3.Hash128(b)
	}
	return out
}

// warmTree reads every file under dir once so that it sits in the page cache.
func warmTree(dir string) error {
	_, err := readTree(dir, 4<<20, nil)
	return err
}

// dropCaches writes back dirty pages and empties the kernel's page, dentry and inode caches
// (root only), so that the next read comes from the disk or the FUSE daemon.
func dropCaches() error {
	syscall.Sync()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0); err != nil {
		return fmt.Errorf("drop the page cache (needs root): %w", err)
	}
	return nil
}

// treeBytes is the apparent size of the regular files under dir (0 if it does not exist).
func treeBytes(dir string) (int64, error) {
	var total int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			info, err := d.Info()
			if errors.Is(err, fs.ErrNotExist) {
				return nil // removed while we walked (a temporary file)
			}
			if err != nil {
				return err
			}
			total += info.Size()
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("size of %s: %w", dir, err)
	}
	return total, nil
}

// writeFileSynced writes b to path and fsyncs it.
func writeFileSynced(path string, b []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
