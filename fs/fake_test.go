package fs

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	iofs "io/fs"
	"sort"
	"sync"
	"time"

	"github.com/weightfs/weightfs/store"
)

// fakeStore is an in-memory VersionStore for tests of the node tree: versions are maps of paths
// to bytes. It checks the rules the real store checks (numbers must grow, one writer per
// number) and can be told to fail.
type fakeStore struct {
	mu       sync.Mutex
	versions []store.VersionInfo
	content  map[uint64][]store.Entry
	bytes    map[uint64]map[string][]byte
	writers  map[uint64]*fakeWriter
	aborted  []uint64
	// sealErr, if set, is returned by the next Seal (then cleared).
	sealErr error
	// readErr, if set, is returned by every ReadAt.
	readErr error
}

func newFakeStore() *fakeStore {
	return &fakeStore{
		content: map[uint64][]store.Entry{},
		bytes:   map[uint64]map[string][]byte{},
		writers: map[uint64]*fakeWriter{},
	}
}

func (b *fakeStore) Refresh() error { return nil }

func (b *fakeStore) Versions() []store.VersionInfo {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]store.VersionInfo(nil), b.versions...)
}

// fakeReader is a second process's read-only view of a fakeStore: versions sealed after its
// last Refresh are not in its list.
type fakeReader struct {
	*fakeStore
	mu   sync.Mutex
	seen int
}

func newFakeReader(b *fakeStore) *fakeReader {
	return &fakeReader{fakeStore: b, seen: len(b.Versions())}
}

func (r *fakeReader) Refresh() error {
	n := len(r.fakeStore.Versions())
	r.mu.Lock()
	r.seen = n
	r.mu.Unlock()
	return nil
}

func (r *fakeReader) Versions() []store.VersionInfo {
	all := r.fakeStore.Versions()
	r.mu.Lock()
	defer r.mu.Unlock()
	return all[:min(r.seen, len(all))]
}

func (r *fakeReader) NewVersion(v uint64) (VersionWriter, error) { return nil, store.ErrReadOnly }

func (b *fakeStore) Entries(v uint64) ([]store.Entry, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	es, ok := b.content[v]
	if !ok {
		return nil, fmt.Errorf("version %d: %w", v, store.ErrNoSuchVersion)
	}
	return append([]store.Entry(nil), es...), nil
}

func (b *fakeStore) OpenFile(v uint64, path string) (store.File, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	data, ok := b.bytes[v][path]
	if !ok {
		return nil, fmt.Errorf("version %d: %s: %w", v, path, store.ErrNoSuchFile)
	}
	return &fakeFile{b: b, r: bytes.NewReader(data), size: int64(len(data))}, nil
}

func (b *fakeStore) NewVersion(v uint64) (VersionWriter, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n := len(b.versions); n > 0 && v <= b.versions[n-1].Number {
		return nil, fmt.Errorf("version %d: %w", v, store.ErrVersionNotAbove)
	}
	if b.writers[v] != nil {
		return nil, fmt.Errorf("version %d: %w", v, store.ErrVersionBusy)
	}
	w := &fakeWriter{b: b, v: v, files: map[string][]byte{}}
	b.writers[v] = w
	return w, nil
}

// file returns the bytes of a sealed file.
func (b *fakeStore) file(v uint64, path string) ([]byte, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	data, ok := b.bytes[v][path]
	return data, ok
}

func (b *fakeStore) openWriters() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.writers)
}

type fakeFile struct {
	b    *fakeStore
	r    *bytes.Reader
	size int64
}

func (f *fakeFile) ReadAt(p []byte, off int64) (int, error) {
	f.b.mu.Lock()
	err := f.b.readErr
	f.b.mu.Unlock()
	if err != nil {
		return 0, err
	}
	return f.r.ReadAt(p, off)
}
func (f *fakeFile) Size() int64  { return f.size }
func (f *fakeFile) Close() error { return nil }

type fakeWriter struct {
	b     *fakeStore
	v     uint64
	files map[string][]byte
	dirs  []store.Entry
	done  bool
}

func (w *fakeWriter) AddFile(path string, r io.ReaderAt, size int64, mode iofs.FileMode) error {
	if w.done {
		return store.ErrWriterDone
	}
	data := make([]byte, size)
	if _, err := r.ReadAt(data, 0); err != nil && !(err == io.EOF && size == 0) {
		return fmt.Errorf("read %s: %w", path, err)
	}
	w.files[path] = data
	w.dirs = append(w.dirs, store.Entry{Path: path, Size: size, Mode: mode, SHA256: sha256.Sum256(data)})
	return nil
}

func (w *fakeWriter) AddDir(path string, mode iofs.FileMode) error {
	if w.done {
		return store.ErrWriterDone
	}
	w.dirs = append(w.dirs, store.Entry{Path: path, Dir: true, Mode: mode})
	return nil
}

func (w *fakeWriter) Seal() (store.VersionInfo, error) {
	b := w.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if w.done {
		return store.VersionInfo{}, store.ErrWriterDone
	}
	if err := b.sealErr; err != nil {
		b.sealErr = nil
		return store.VersionInfo{}, err
	}
	if n := len(b.versions); n > 0 && w.v <= b.versions[n-1].Number {
		return store.VersionInfo{}, fmt.Errorf("version %d: %w", w.v, store.ErrVersionNotAbove)
	}
	w.done = true
	delete(b.writers, w.v)
	entries := append([]store.Entry(nil), w.dirs...)
	sort.Slice(entries, func(i, j int) bool { return entries[i].Path < entries[j].Path })
	info := store.VersionInfo{Number: w.v, Created: time.Now(), Files: len(w.files)}
	for _, d := range w.files {
		info.LogicalBytes += int64(len(d))
	}
	b.versions = append(b.versions, info)
	b.content[w.v] = entries
	b.bytes[w.v] = w.files
	return info, nil
}

func (w *fakeWriter) Abort() error {
	b := w.b
	b.mu.Lock()
	defer b.mu.Unlock()
	if w.done {
		return nil
	}
	w.done = true
	delete(b.writers, w.v)
	b.aborted = append(b.aborted, w.v)
	return nil
}
