package store

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
)

// Seeds of the materialized copy. The first version of a store has no copy to be diffed
// against, and once it is sealed the copy is built from its objects: every byte decompressed,
// hashed and written, while the trainer may already be writing the next version, which waits
// for the copy. A stream that has no base version therefore also writes the bytes it
// receives to a seed file beside the copy (they pass anyway; writing them costs a copy into
// the page cache), and the rebuild adopts a seed whose SHA-256 and size are those of a file
// of the version instead of building that file. The SHA-256 is the one the stream computed
// over the same bytes, as the rebuild would have checked it. Seeds nobody adopts are removed
// by the next rebuild, and by the next Open.
type seeds struct {
	dir string
	chk *checks // where a finished stream's sums and composition go (copysums.go)

	mu     sync.Mutex
	byHash map[seedKey]string // finished seeds: content -> file
}

type seedKey struct {
	sha  ID
	size int64
}

func newSeeds(dir string) *seeds {
	os.RemoveAll(dir) // a crashed process's seeds
	return &seeds{dir: dir, byHash: map[seedKey]string{}}
}

// create starts a seed file.
func (sd *seeds) create() (*os.File, error) {
	if err := os.MkdirAll(sd.dir, cacheDirPerm); err != nil {
		return nil, err
	}
	return os.CreateTemp(sd.dir, "seed-*")
}

// add offers a finished seed holding size bytes with SHA-256 sha.
func (sd *seeds) add(sha ID, size int64, path string) {
	sd.mu.Lock()
	defer sd.mu.Unlock()
	key := seedKey{sha, size}
	if old, ok := sd.byHash[key]; ok {
		os.Remove(old)
	}
	sd.byHash[key] = path
}

// take moves a seed with the content of f to dst, if there is one.
func (sd *seeds) take(f *manifestFile, dst string) bool {
	sd.mu.Lock()
	key := seedKey{f.SHA256, f.Size}
	p, ok := sd.byHash[key]
	delete(sd.byHash, key)
	sd.mu.Unlock()
	if !ok {
		return false
	}
	if err := os.Rename(p, dst); err != nil {
		os.Remove(p)
		return false
	}
	return true
}

// clear removes every finished seed.
func (sd *seeds) clear() {
	sd.mu.Lock()
	defer sd.mu.Unlock()
	for key, p := range sd.byHash {
		os.Remove(p)
		delete(sd.byHash, key)
	}
}

// seedWriter is a stream's seed file, written by its hasher (which sees every byte in
// order), and the sums of the copy's file that will hold those bytes, computed in the same
// pass as the file's SHA-256 (every stream has one; only a first version's has a file). A
// failure only ends the seed, never the stream.
type seedWriter struct {
	f    *os.File
	off  int64
	sums sumWriter
}

func (w *seedWriter) write(p []byte) {
	if w == nil {
		return
	}
	w.sums.Write(p)
	if w.f == nil {
		return
	}
	n, err := w.f.WriteAt(p, w.off)
	w.off += int64(n)
	if err != nil {
		w.drop()
	}
}

// finish records the sums of the stream's content and vouches for entry's composition (its
// objects and its SHA-256 were computed from the same bytes), then closes the seed and offers
// it, holding size bytes.
func (w *seedWriter) finish(sd *seeds, entry *manifestFile, size int64) {
	if w == nil {
		return
	}
	sha := entry.SHA256
	if w.sums.size == size && sd.chk != nil {
		sd.chk.noteSums(contentKey{sha, size}, w.sums.sums())
		sd.chk.vouch(false, composition(entry))
	}
	if w.f == nil {
		return
	}
	f := w.f
	w.f = nil
	if err := f.Close(); err != nil || w.off != size {
		os.Remove(f.Name())
		return
	}
	sd.add(sha, size, f.Name())
}

func (w *seedWriter) drop() {
	if w != nil && w.f != nil {
		w.f.Close()
		os.Remove(w.f.Name())
		w.f = nil
	}
}

// seedInto moves a seed holding file f into its place in the copy, if there is one.
func (m *materialized) seedInto(f *manifestFile) (bool, error) {
	dst := filepath.Join(m.dir, filepath.FromSlash(f.Path))
	if err := os.MkdirAll(filepath.Dir(dst), cacheDirPerm); err != nil {
		return false, fmt.Errorf("materialized copy: %w", err)
	}
	return m.seeds.take(f, dst), nil
}
