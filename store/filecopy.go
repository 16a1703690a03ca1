package store

import (
	"container/list"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"

	"golang.org/x/sync/singleflight"
)

// File copies: checked local copies of the files of older versions, in CACHE/files/
// (docs/format.md §6). A file of a version that the materialized copy does not hold is read
// by rebuilding its pages from the objects, each tensor checked once (read_check.go); without a
// copy, every read of it after the page cache let go rebuilds the same bytes again. So when a
// file is opened and read from the objects a second time (copyLater: a file read once, as a
// fresh reader of an old version reads it, gets none), one pass in the background rebuilds it
// whole, writes the bytes into a file of this cache, computes their sums (the CRC-32C of each
// 64 KiB chunk, as the materialized copy's: copy_sums.go) and keeps the file only if the
// SHA-256 of the same bytes is the manifest's. Reads of the file are then checked preads of it
// (preadChecked: every chunk under a read is checked on every read), not replays.
//
// It is a cache. A chunk that fails its check, or a read that fails, is logged, the copy is
// dropped and the read served from the objects, and the copy is written again in the
// background by the same pass. Its disk use is bounded (Options.FileCopyBytes): the least
// recently read copies are removed to make room before a new one is written, and a file larger
// than the bound is not copied (its reads replay). Copies are named by the content they hold
// (SHA-256 and size), so files of several versions with equal content share one. Copies live
// as long as the process: Open removes the directory (the copies' sums are kept in memory
// only).

// DefaultFileCopyBytes bounds the disk used by the copies of old files (Options.FileCopyBytes).
const DefaultFileCopyBytes = 16 << 30

// minCopiedFile is the smallest file that gets a copy: a smaller one costs little to rebuild,
// and a model's small files (configs, tokenizers) would each hold a descriptor.
const minCopiedFile = pageSize

// maxFileCopies bounds how many copies are kept at once (each holds an open descriptor).
const maxFileCopies = 256

// maxReadOnce bounds the contents remembered as read once (fileCopies.readOnce).
const maxReadOnce = 4096

// maxCopyDamage is how many copies of one content may fail a read before it gets no more.
const maxCopyDamage = 2

// fileCopies is the cache of file copies of one Store.
type fileCopies struct {
	s     *Store
	dir   string
	limit int64 // bytes on disk; <= 0: no copies

	mu      sync.Mutex
	used    int64 // bytes of the copies held and of the ones being written
	entries map[contentKey]*list.Element
	order   *list.List // of *fileCopy, front: most recently read
	closed  bool
	// damaged counts the copies of each content that failed a read: after maxCopyDamage a
	// content gets no copy again in this process (a disk that keeps damaging them would
	// otherwise cost a whole pass per read).
	damaged map[contentKey]int
	// readOnce are the contents that one open file read from the objects (copyLater).
	readOnce map[contentKey]bool
	// stop is set by close: a rebuild in the background stops at its next read.
	stop atomic.Bool

	flight  singleflight.Group // rebuilds of one content, one at a time
	writing sync.Map           // contentKey -> true: a rebuild of it is under way
	bg      sync.WaitGroup     // rebuilds in the background
}

// fileCopy is one checked copy, held by the cache and by the reads using it.
type fileCopy struct {
	key  contentKey
	path string
	f    *os.File
	sums *fileSums
	refs atomic.Int32 // the cache's (until it drops the copy) and each reader's
}

func (c *fileCopy) release() {
	if c.refs.Add(-1) == 0 {
		c.f.Close()
	}
}

// newFileCopies sets up the copies in dir, removing whatever an earlier process left there.
func newFileCopies(s *Store, dir string, limit int64) *fileCopies {
	fc := &fileCopies{s: s, dir: dir, limit: limit, entries: map[contentKey]*list.Element{}, order: list.New(), damaged: map[contentKey]int{}, readOnce: map[contentKey]bool{}}
	if err := os.RemoveAll(dir); err != nil {
		s.log.Warn(fmt.Sprintf("file copies: remove %s: %v; old versions are read without copies", dir, err))
		fc.limit = 0
	}
	return fc
}

// close removes every copy, after the rebuilds in the background.
func (fc *fileCopies) close() {
	fc.stop.Store(true)
	fc.mu.Lock()
	fc.closed = true
	fc.mu.Unlock()
	fc.bg.Wait()
	fc.mu.Lock()
	for e := fc.order.Front(); e != nil; e = e.Next() {
		c := e.Value.(*fileCopy)
		os.Remove(c.path)
		c.release()
	}
	fc.order.Init()
	clear(fc.entries)
	fc.used = 0
	fc.mu.Unlock()
}

// FileCopyUsage reports the disk used by the copies of old files and how many there are.
func (s *Store) FileCopyUsage() (bytes int64, files int) { return s.files.usage() }

// usage is the disk the copies use and how many there are.
func (fc *fileCopies) usage() (bytes int64, files int) {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	return fc.used, fc.order.Len()
}

// get returns the copy of content k with a reference the caller releases, or nil.
func (fc *fileCopies) get(k contentKey) *fileCopy {
	fc.mu.Lock()
	defer fc.mu.Unlock()
	e := fc.entries[k]
	if e == nil {
		return nil
	}
	fc.order.MoveToFront(e)
	c := e.Value.(*fileCopy)
	c.refs.Add(1)
	return c
}

// dropLocked removes copy e from the cache and its file from the disk (readers still holding
// it finish on the open descriptor).
func (fc *fileCopies) dropLocked(e *list.Element) {
	c := e.Value.(*fileCopy)
	fc.order.Remove(e)
	delete(fc.entries, c.key)
	fc.used -= c.sums.size
	os.Remove(c.path)
	c.release()
}

// reserve makes room for a copy of size bytes, removing the least recently read copies, and
// counts it as used. ok is false when the file gets no copy (too large, the cache off).
func (fc *fileCopies) reserve(k contentKey) (ok bool) {
	size := k.size
	fc.mu.Lock()
	defer fc.mu.Unlock()
	if fc.closed || fc.limit <= 0 || size < minCopiedFile || size > fc.limit || fc.damaged[k] >= maxCopyDamage {
		return false
	}
	for fc.order.Len() > 0 && (fc.used+size > fc.limit || fc.order.Len() >= maxFileCopies) {
		fc.dropLocked(fc.order.Back())
	}
	if fc.used+size > fc.limit {
		return false // the rest is being written by other passes
	}
	fc.used += size
	return true
}

func (fc *fileCopies) unreserve(size int64) {
	fc.mu.Lock()
	fc.used -= size
	fc.mu.Unlock()
}

// copyWriter writes one copy being made. A failed write (a full disk) abandons the copy and
// is logged once; the pass it is part of goes on.
type copyWriter struct {
	fc   *fileCopies
	f    *os.File
	size int64
	sums sumWriter
	err  error
}

// create starts a copy of content k, or returns nil when it gets none.
func (fc *fileCopies) create(k contentKey) *copyWriter {
	size := k.size
	if fc == nil || !fc.reserve(k) {
		return nil
	}
	err := os.MkdirAll(fc.dir, cacheDirPerm)
	var f *os.File
	if err == nil {
		f, err = os.CreateTemp(fc.dir, ".tmp-*")
	}
	if err != nil {
		fc.unreserve(size)
		fc.s.log.Warn(fmt.Sprintf("file copies: %v; this file is read without a copy", err))
		return nil
	}
	return &copyWriter{fc: fc, f: f, size: size}
}

func (w *copyWriter) Write(p []byte) (int, error) {
	if w == nil || w.err != nil {
		return len(p), nil
	}
	if _, err := w.f.Write(p); err != nil {
		w.err = err
		w.fc.s.log.Warn(fmt.Sprintf("file copies: write %s: %v; this file is read without a copy", w.f.Name(), err))
		return len(p), nil
	}
	w.sums.Write(p)
	return len(p), nil
}

// abort removes the copy being made.
func (w *copyWriter) abort() {
	if w == nil {
		return
	}
	w.f.Close()
	os.Remove(w.f.Name())
	w.fc.unreserve(w.size)
}

// commit keeps the copy as the content k, whose SHA-256 the caller checked over the same
// bytes written here.
func (w *copyWriter) commit(k contentKey, what string) {
	if w == nil {
		return
	}
	fc := w.fc
	sums := w.sums.sums()
	if w.err != nil || sums.size != k.size || k.size != w.size {
		w.abort()
		return
	}
	path := filepath.Join(fc.dir, hex.EncodeToString(k.sha[:])+"-"+strconv.FormatInt(k.size, 10))
	// Under the lock, so that the name is never renamed over a copy in use.
	fc.mu.Lock()
	if fc.entries[k] != nil || fc.closed {
		// Two passes over equal content (or the store closing): keep the first.
		fc.mu.Unlock()
		w.abort()
		return
	}
	if err := os.Rename(w.f.Name(), path); err != nil {
		fc.mu.Unlock()
		fc.s.log.Warn(fmt.Sprintf("file copies: %v; %s is read without a copy", err, what))
		w.abort()
		return
	}
	c := &fileCopy{key: k, path: path, f: w.f, sums: sums}
	c.refs.Store(1)
	fc.entries[k] = fc.order.PushFront(c)
	used, n := fc.used, fc.order.Len()
	fc.mu.Unlock()
	fc.s.log.Debug(fmt.Sprintf("file copies: %s copied (%d bytes, checked); %d copies use %d of %d bytes",
		what, k.size, n, used, fc.limit))
}

// readAt serves bytes [off, off+len(p)) of the file from copy c, every chunk under them
// checked. A chunk that fails its check, or a failed read, drops the copy (logged) and
// returns an error: the caller reads from the objects, and the copy is written again.
func (fc *fileCopies) readAt(c *fileCopy, ver *version, f *manifestFile, p []byte, off int64) error {
	err := preadChecked(c.f, c.sums, p, off, &fc.s.objects.buffers().edges)
	if err == nil {
		return nil
	}
	fc.mu.Lock()
	dropped := false
	if e := fc.entries[c.key]; e != nil && e.Value.(*fileCopy) == c {
		fc.dropLocked(e)
		fc.damaged[c.key]++
		dropped = true
	}
	again := dropped && !fc.closed && fc.damaged[c.key] < maxCopyDamage
	if again {
		fc.bg.Add(1)
	}
	fc.mu.Unlock()
	what := "copied again"
	if !again {
		what = "not copied again"
	}
	var bad *chunkMismatch
	if errors.As(err, &bad) {
		fc.s.log.Warn(fmt.Sprintf("file copies: %s of version %d: %v: not served; read from the objects, %s", f.Path, ver.m.Version, bad, what))
	} else {
		fc.s.log.Warn(fmt.Sprintf("file copies: %s of version %d: %v; read from the objects, %s", f.Path, ver.m.Version, err, what))
	}
	if again {
		go func() {
			defer fc.bg.Done()
			fc.rebuild(ver, f)
		}()
	}
	return err
}

// copyLater is called by a checked read of file f of ver that is served from the objects
// (versionFile.copyLater, once per open file). The first open of a content that asks gets no
// copy: a file read once, as a fresh reader of an old version reads it, would pay a second
// rebuild, a second hash and a write for nothing. From the second on, the copy is written in
// the background (rebuild), unless the file has one, gets none (too small or too large, the
// cache off, damaged too often) or is being written.
func (fc *fileCopies) copyLater(ver *version, f *manifestFile) {
	k := keyOf(f)
	fc.mu.Lock()
	skip := fc.closed || fc.limit <= 0 || k.size < minCopiedFile || k.size > fc.limit || fc.damaged[k] >= maxCopyDamage || fc.entries[k] != nil
	if !skip && !fc.readOnce[k] {
		if len(fc.readOnce) >= maxReadOnce {
			clear(fc.readOnce)
		}
		fc.readOnce[k] = true
		skip = true
	}
	if !skip {
		fc.bg.Add(1)
	}
	fc.mu.Unlock()
	if skip {
		return
	}
	go func() {
		defer fc.bg.Done()
		fc.rebuild(ver, f)
	}()
}

// rebuild writes the copy of file f of ver (one pass over the whole file, hashed against its
// SHA-256).
func (fc *fileCopies) rebuild(ver *version, f *manifestFile) {
	k := keyOf(f)
	if _, busy := fc.writing.LoadOrStore(k, true); busy {
		return // written by a pass under way
	}
	defer fc.writing.Delete(k)
	fc.flight.Do(string(sumsKey(k)), func() (any, error) {
		if c := fc.get(k); c != nil {
			c.release()
			return nil, nil
		}
		if got, err := fc.s.passFile(ver, f, &fc.stop); err != nil {
			fc.s.log.Warn(fmt.Sprintf("file copies: copy %s of version %d again: %v", f.Path, ver.m.Version, err))
		} else if got != f.SHA256 {
			fc.s.log.Warn(fmt.Sprintf("file copies: copy %s of version %d again: its objects hash to %s, the manifest says %s", f.Path, ver.m.Version, got, f.SHA256))
		}
		return nil, nil
	})
}

// passFile reads file f of ver whole through the read path (the objects and the caches in
// front of them, never a file copy), hashes it and, where the file copies take it, writes it
// into a new copy, kept only if the hash is the manifest's SHA-256. It returns the hash.
// A pass stops with ErrClosed once stop (if not nil) is set.
//
// The hash is one serial stream and the first read of the file waits for all of it, so it
// gets a core of its own: the pages are rebuilt ahead of it by the read-ahead's builders
// (read_ahead.go), and the copy is written and summed behind it by another goroutine, from the
// same pages (SliceReader: no copy of the bytes in between).
func (s *Store) passFile(ver *version, f *manifestFile, stop *atomic.Bool) (ID, error) {
	h := sha256.New()
	w := s.files.create(keyOf(f))
	vf := s.newVersionFile(ver, f, readOpts{})
	var got ID
	if err := pipePass(vf, f.Size, h, w, stop); err != nil {
		w.abort()
		return got, err
	}
	h.Sum(got[:0])
	if got != f.SHA256 {
		w.abort()
		return got, nil
	}
	w.commit(keyOf(f), fmt.Sprintf("%s of version %d", f.Path, ver.m.Version))
	return got, nil
}

// passDepth is how many MiB of a pass the hash may be ahead of the copy's writer.
const passDepth = 4

// passPiece is one read of a pass, on its way to the copy's writer.
type passPiece struct {
	parts   [][]byte
	release func()
	buf     []byte
}

// pipePass reads bytes [0, size) of vf in order and writes them to h, and behind it (another
// goroutine) to w when w is not nil. It stops with ErrClosed once stop (if not nil) is set.
func pipePass(vf *versionFile, size int64, h io.Writer, w *copyWriter, stop *atomic.Bool) error {
	free := make(chan []byte, passDepth+1)
	for range passDepth + 1 {
		free <- make([]byte, pageSize)
	}
	var todo chan passPiece
	done := make(chan struct{})
	if w != nil {
		todo = make(chan passPiece, passDepth)
		go func() {
			defer close(done)
			for pc := range todo {
				for _, part := range pc.parts {
					w.Write(part)
				}
				pc.release()
				free <- pc.buf
			}
		}()
	} else {
		close(done)
	}
	var err error
	for off := int64(0); off < size; {
		if stop != nil && stop.Load() {
			err = ErrClosed
			break
		}
		buf := <-free
		parts, release, n, rerr := vf.ReadSlices(buf[:min(int64(len(buf)), size-off)], off)
		if rerr == nil && n == 0 {
			rerr = io.EOF // never spin on a read that makes no progress
		}
		if rerr != nil && (rerr != io.EOF || off+int64(n) < size) {
			release()
			err = rerr
			if rerr == io.EOF {
				err = fmt.Errorf("%s: %d bytes, the manifest says %d: %w", vf.f.Path, off+int64(n), size, ErrCorrupt)
			}
			break
		}
		for _, part := range parts {
			h.Write(part)
		}
		off += int64(n)
		if todo == nil {
			release()
			free <- buf
			continue
		}
		todo <- passPiece{parts, release, buf}
	}
	if todo != nil {
		close(todo)
	}
	<-done
	return err
}

// copyLater asks, once per open file, for the file's copy to be written in the background: a
// checked read (readOpts.check) served from the objects calls it. The reads do not wait for
// the copy; the ones after it is written are served from it.
func (f *versionFile) copyLater() {
	if !f.opts.check || f.s.files == nil || f.copyAsked.Swap(true) {
		return
	}
	f.s.files.copyLater(f.ver, f.f)
}

// readCopy serves a read of f from its file copy, if it has one: ok is false when it has none
// or the copy failed its check (dropped and logged: the caller reads from the objects). Only
// checked reads use copies (readOpts.check: OpenFile's).
func (f *versionFile) readCopy(p []byte, off int64) (n int, ok bool, err error) {
	if !(f.opts.check || f.opts.vouch) || f.s.files == nil || off < 0 || off >= f.f.Size {
		return 0, false, nil
	}
	c := f.s.files.get(keyOf(f.f))
	if c == nil {
		return 0, false, nil
	}
	defer c.release()
	want := len(p)
	if rest := f.f.Size - off; int64(len(p)) > rest {
		p = p[:rest]
	}
	if f.s.files.readAt(c, f.ver, f.f, p, off) != nil {
		return 0, false, nil
	}
	if len(p) < want {
		return len(p), true, io.EOF
	}
	return len(p), true, nil
}
