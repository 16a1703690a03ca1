package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/weightfs/weightfs/store/local"
)

// cacheDirState is a Store's cache directory: where it is (Options.CacheDir, STORE/cache
// for a local writer, or a directory of this process's own for a reader: setupCacheDir), and
// whether it is this process's own, removed at Close.
type cacheDirState struct {
	dir string
	own bool // a per-process reader cache, removed at Close
}

// cacheMkdirAll is os.MkdirAll for a directory inside this process's cache directory that a
// cache needs (the render cache's render/, render/patches, ...). A cache is rebuilt from the
// store, so what stands where one of its directories should be (a file, left by anything) is
// no one's: it is removed, with a log line, and the directory made, rather than let the
// damaged cache cost the read that needed it. A directory outside the cache is only made.
func (s *Store) cacheMkdirAll(dir string) error {
	err := os.MkdirAll(dir, cacheDirPerm)
	if err == nil || !(errors.Is(err, syscall.ENOTDIR) || errors.Is(err, fs.ErrExist)) {
		return err
	}
	rel, rerr := filepath.Rel(s.cache.dir, dir)
	if rerr != nil || rel == "." || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return err
	}
	p := s.cache.dir
	for _, el := range strings.Split(rel, string(filepath.Separator)) {
		p = filepath.Join(p, el)
		st, lerr := os.Lstat(p)
		if lerr != nil || st.IsDir() {
			continue
		}
		s.log.Warn("cache: not a directory where the cache keeps one; removed, made anew", "path", p, "mode", st.Mode().String())
		if rmErr := os.Remove(p); rmErr != nil {
			return err
		}
		return os.MkdirAll(dir, cacheDirPerm)
	}
	return err
}

// errNotRegular marks a file that this program writes as a regular file but is not one (a
// directory, a FIFO, a device in its place), refused before it is read: a cache that holds
// one is damaged, and is dropped and made again; a pin record stops gc.
var errNotRegular = local.ErrNotRegular

// openCacheFile is os.Open for a file of a cache, which only this program writes, as regular
// files: anything else in its place is refused, looked at before it is opened (opening a FIFO
// blocks until a writer comes, which would hang the read that asked for it forever).
func openCacheFile(p string) (*os.File, error) {
	if err := checkCacheFile(p); err != nil {
		return nil, err
	}
	return os.Open(p)
}

// readCacheFile is os.ReadFile for a file of a cache (see openCacheFile).
func readCacheFile(p string) ([]byte, error) {
	if err := checkCacheFile(p); err != nil {
		return nil, err
	}
	return os.ReadFile(p)
}

// checkCacheFile refuses what is not a regular file at p (a missing one is os.Stat's error).
func checkCacheFile(p string) error {
	st, err := os.Stat(p)
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s: %w (mode %v)", p, errNotRegular, st.Mode())
	}
	return nil
}
