package fs

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/weightfs/weightfs/store"
)

// fakeStore is an in-memory VersionStore for tests of the node tree: versions are maps of paths
// to bytes. It checks the rules the real store checks (numbers must grow, one writer per
// number) and can be told to fail. It implements the whole VersionStore, so the mount takes
// the same paths as with the real store; what it lacks it says as VersionStore documents: it
// renders no views, has no staging directory and no gc (Hold does nothing), and its writers
// take no streams and cannot start over after a failed seal.
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
	// damaged holds the versions whose manifests are in the store but cannot be read, with
	// why (see damage): not listed, their lookups fail with the error.
	damaged map[uint64]error
}

func newFakeStore() *fakeStore {
	return &fakeStore{
		content: map[uint64][]store.Entry{},
		bytes:   map[uint64]map[string][]byte{},
		writers: map[uint64]*fakeWriter{},
		damaged: map[uint64]error{},
	}
}

// damage marks version v as damaged, as a manifest that cannot be read is in the real store
// (store.Store.VersionDamage): it is dropped from the list, and what asks for it gets an
// error wrapping store.ErrCorrupt.
func (b *fakeStore) damage(v uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.versions = slices.DeleteFunc(b.versions, func(info store.VersionInfo) bool { return info.Number == v })
	delete(b.content, v)
	delete(b.bytes, v)
	b.damaged[v] = fmt.Errorf("version %d: manifest: %w (run weightfs repair)", v, store.ErrCorrupt)
}

// Poll: a version is listed as soon as it is sealed.
func (b *fakeStore) Poll() (store.PollResult, error) {
	return store.PollResult{Listed: true}, nil
}

func (b *fakeStore) Versions() []store.VersionInfo {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]store.VersionInfo(nil), b.versions...)
}

// fakeReader is a second process's read-only view of a fakeStore: versions sealed after its
// last Refresh (its Poll) are not in its list.
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

func (r *fakeReader) Poll() (store.PollResult, error) {
	return store.PollResult{Listed: true}, r.Refresh()
}

func (r *fakeReader) NewerVersions(v uint64) int { return newerIn(r.Versions(), v) }

func (r *fakeReader) NewVersion(v uint64) (VersionWriter, error) { return nil, store.ErrReadOnly }

func (b *fakeStore) NewerVersions(v uint64) int { return newerIn(b.Versions(), v) }

// newerIn counts the versions of vs newer than v.
func newerIn(vs []store.VersionInfo, v uint64) int {
	n := 0
	for _, info := range vs {
		if info.Number > v {
			n++
		}
	}
	return n
}

func (b *fakeStore) VersionDamage(v uint64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.damaged[v]
}

// Hold: the fake has no gc, so nothing is to be held.
func (b *fakeStore) Hold(v uint64) (func(), error) { return func() {}, nil }

// StagingDir: the fake has no disk; the mount stages in a temporary directory.
func (b *fakeStore) StagingDir() (string, error) { return "", nil }

func (b *fakeStore) SealedElsewhere() bool { return false }

// CommitPatch: the fake renders no views, so its patches/ takes no patch.
func (b *fakeStore) CommitPatch(io.ReaderAt, int64, uint64) (store.VersionInfo, error) {
	return store.VersionInfo{}, errNoRenders
}

// CommitSlimeDelta: the fake renders no views, so its deltas/ takes no delta.
func (b *fakeStore) CommitSlimeDelta([]byte, store.SlimeShardOpener, uint64) (store.VersionInfo, error) {
	return store.VersionInfo{}, errNoRenders
}

func (b *fakeStore) CommitSlimeDeltaOnSeed(string, []byte, store.SlimeShardOpener, uint64) (store.VersionInfo, error) {
	return store.VersionInfo{}, errNoRenders
}

// The fake renders no views: they are empty.
func (b *fakeStore) RendersViews() bool { return false }

func (b *fakeStore) PatchBase(v uint64) (uint64, error) { return 0, errNoRenders }
func (b *fakeStore) RenderPatch(v uint64) (store.RenderedFile, error) {
	return store.RenderedFile{}, errNoRenders
}
func (b *fakeStore) RenderPatchFrom(v, from uint64) (store.RenderedFile, error) {
	return store.RenderedFile{}, errNoRenders
}
func (b *fakeStore) PatchNote(v uint64) string               { return "" }
func (b *fakeStore) PatchSize(v uint64) (int64, bool, error) { return 0, false, errNoRenders }
func (b *fakeStore) PlanSlime(v uint64) (store.SlimePlan, error) {
	return store.SlimePlan{}, errNoRenders
}
func (b *fakeStore) RenderSlime(v uint64) (store.SlimePlan, []store.RenderedFile, error) {
	return store.SlimePlan{}, nil, errNoRenders
}

var errNoRenders = fmt.Errorf("the fake store renders no views: %w", errors.ErrUnsupported)

func (b *fakeStore) Entries(v uint64) ([]store.Entry, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.damaged[v]; err != nil {
		return nil, err
	}
	es, ok := b.content[v]
	if !ok {
		return nil, fmt.Errorf("version %d: %w", v, store.ErrNoSuchVersion)
	}
	return append([]store.Entry(nil), es...), nil
}

func (b *fakeStore) OpenFile(v uint64, path string) (store.File, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.damaged[v]; err != nil {
		return nil, err
	}
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

// StreamFile: the fake's writer takes no streams; the mount stages every file.
func (w *fakeWriter) StreamFile(hint string) (*store.FileStream, error) {
	return nil, fmt.Errorf("the fake store takes no streams: %w", errors.ErrUnsupported)
}

func (w *fakeWriter) AddStream(path string, st *store.FileStream, mode iofs.FileMode) error {
	return fmt.Errorf("the fake store takes no streams: %w", errors.ErrUnsupported)
}

func (w *fakeWriter) MaterializeInBackground() {}

// Reset: the fake's writer does not start over; the mount aborts it after a failed seal.
func (w *fakeWriter) Reset() error {
	return fmt.Errorf("the fake store's writer cannot start over: %w", errors.ErrUnsupported)
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
