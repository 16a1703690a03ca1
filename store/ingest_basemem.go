package store

import (
	"errors"
	"hash/crc32"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"

	"github.com/zeebo/xxh3"
)

// The base in memory (docs/design.md, "The base in memory"; Options.BaseMemory). Every
// version after the first diffs each tensor against the same tensor of the latest version,
// and read those bases from the materialized copy: the trainer's disk moved the previous
// version's bytes in (the base) for every byte it saved. The writer sees every byte of the
// version it ingests (the streaming worker, the batch path's reads of the source), so it
// keeps them, per tensor, in memory when the version's tensors fit Options.BaseMemory; the
// next version's diffs read their bases from there.
//
// What guards the bytes served:
//   - Identity. Entries are keyed by the object identity the bytes hashed to at ingest and
//     are installed at the seal only for the tensors the sealed manifest names with that
//     identity and size. A lookup names the base version (the one the diff's base tensor
//     comes from) and the base tensor's identity in that version's manifest: an entry of
//     another version, another identity or another size is never served.
//   - Content. An entry carries a digest of its bytes, computed as they were taken in (from
//     the bytes the object's SHA-256 was computed from): a tensor a stream took in carries its
//     xxh3-128, the one the hasher computes for the manifest anyway (memSum; the stream
//     computed a CRC-32C for this alone before, a pass over every byte), the batch and patch
//     paths a CRC-32C. The diff hashes the base bytes it used and compares them with that
//     digest before anything is stored (the batch path's baseCheck, the stream's
//     streamBaseCheck): an entry damaged in memory (a flipped bit, a bug) fails that check,
//     the whole memory is dropped and the tensor is diffed again from the materialized copy
//     (batch), or the stream fails and the file goes on through the batch path (the mount's
//     fallback), which reads the copy. Nothing damaged is stored.
//
// Budget: a version whose tensors' bytes exceed it is kept not at all (whole version or
// nothing, logged once at info). The entries of the latest version are dropped as the next
// version's tensors that diff against them are stored, so while a version is written the
// memory holds about one version's bytes (plus the tensors in flight), not two.

// errMemBase says that base bytes served from memory failed their check (the memory is
// dropped; the caller diffs again from the materialized copy).
var errMemBase = errors.New("the base in memory does not match its check")

// memTensor is one tensor's bytes in memory.
type memTensor struct {
	b   []byte
	sum memSum // of b, computed as b was taken in
	// refs counts the diffs reading b (base, release); gone: the entry left the memory by
	// use (used). Its buffer is taken in again by a tensor of the next version once both say
	// so (baseMemory.free), never while a diff may read it. (baseMemory.mu)
	refs int
	gone bool
	// verdict is the reads' check of b against the object's identity (read_basemem.go:
	// memUnchecked, memGood, memBad); chk lets one first read hash it.
	verdict atomic.Int32
	chk     sync.Mutex
}

// baseMemory is the writer's base in memory: the tensors of version ver (the latest sealed
// version this process wrote), by identity. Safe for concurrent use.
type baseMemory struct {
	budget int64 // Options.BaseMemory; <= 0: off
	log    *slog.Logger

	mu       sync.Mutex
	ver      uint64 // the version the entries are of; 0: none
	whole    bool   // every tensor of ver was installed (holds: the copy may be deferred)
	byID     map[ID]*memTensor
	uses     map[ID]int // tensors of ver with that identity not yet diffed against
	held     int64      // bytes of byID
	saidOver bool       // logged that a version exceeded the budget
	// free holds the buffers of entries that left by use and that no diff reads, by length:
	// the next version's tensors are taken into them, so that the process does not allocate
	// a version's bytes at every version (Go's collector would let the heap grow to about
	// twice them between collections). At most the budget; at install, what is left is kept
	// only while it fits beside the version installed (spareLocked): a version takes in its
	// tensors before the last of the same size of the version before it are used (its
	// largest tensor, the first of each size), so those buffers are the next version's.
	free      map[int][][]byte
	freeBytes int64
	reused    atomic.Int64 // bytes taken in into a free buffer (tests)

	served   atomic.Int64 // base bytes diffs read from memory since Open
	fromCopy atomic.Int64 // base bytes diffs read from the materialized copy since Open
	fromObjs atomic.Int64 // base bytes the batch path read through the objects (copy deferred)
	// readServed is the bytes reads of files took from the memory (read_basemem.go).
	readServed atomic.Int64
	// tamper, when set (tests), is applied to an entry as a lookup returns it.
	tamper func(id ID, b []byte)
}

func newBaseMemory(budget int64, log *slog.Logger) *baseMemory {
	return &baseMemory{budget: budget, log: log}
}

// memCapture is what one Writer took in of its version's tensors.
type memCapture struct {
	mem  *baseMemory
	mu   sync.Mutex
	byID map[ID]*memTensor
	size int64
	over bool // the version outgrew the budget: nothing is kept
}

// newCapture starts the capture of a Writer's tensors; nil when the memory is off.
func (m *baseMemory) newCapture() *memCapture {
	if m == nil || m.budget <= 0 {
		return nil
	}
	return &memCapture{mem: m, byID: map[ID]*memTensor{}}
}

// buffer returns a buffer for the bytes of a tensor of size bytes about to be ingested, or
// nil: not kept (the memory is off, the tensor is empty, or the version outgrew the budget).
func (c *memCapture) buffer(size int64) []byte {
	if c == nil || size <= 0 {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.over {
		return nil
	}
	if c.size+size > c.mem.budget {
		c.overflowLocked()
		return nil
	}
	if b := c.mem.takeFree(size); b != nil {
		return b
	}
	return make([]byte, size)
}

// takeFree returns a free buffer of size bytes, or nil. Every byte of it is written before
// it is kept (memCapture.add takes only a tensor's bytes read whole).
func (m *baseMemory) takeFree(size int64) []byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	list := m.free[int(size)]
	if len(list) == 0 {
		return nil
	}
	b := list[len(list)-1]
	m.free[int(size)] = list[:len(list)-1]
	m.freeBytes -= size
	m.reused.Add(size)
	return b
}

// recycleLocked gives e's buffer to the free list, if it fits the budget.
func (m *baseMemory) recycleLocked(e *memTensor) {
	n := len(e.b)
	if m.freeBytes+int64(n) > m.budget {
		return
	}
	if m.free == nil {
		m.free = map[int][][]byte{}
	}
	m.free[n] = append(m.free[n], e.b)
	m.freeBytes += int64(n)
	e.b = nil
}

// add keeps b, the content of object id (its bytes hashed to id), with crc its CRC-32C.
func (c *memCapture) add(id ID, b []byte, crc uint32) { c.addSum(id, b, memSum{crc: crc}) }

// addSum keeps b, the content of object id, with sum its digest.
func (c *memCapture) addSum(id ID, b []byte, sum memSum) {
	if c == nil || b == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.over || c.byID[id] != nil {
		return
	}
	if c.size+int64(len(b)) > c.mem.budget {
		c.overflowLocked()
		return
	}
	c.byID[id] = &memTensor{b: b, sum: sum}
	c.size += int64(len(b))
}

func (c *memCapture) overflowLocked() {
	c.over, c.byID, c.size = true, nil, 0
	c.mem.sayOver()
}

func (m *baseMemory) sayOver() {
	m.mu.Lock()
	said := m.saidOver
	m.saidOver = true
	m.mu.Unlock()
	if !said {
		m.log.Info("the version's tensors exceed the base memory (-o base_memory): the next version reads its bases from disk", "budget", m.budget)
	}
}

// install makes the tensors c took in the base in memory, as version man.Version (just
// sealed): only those the manifest names with the identity and size they were taken in as.
// c nil or over the budget: the memory holds nothing.
func (m *baseMemory) install(c *memCapture, man *manifest) {
	if m == nil || m.budget <= 0 {
		return
	}
	byID, uses := map[ID]*memTensor{}, map[ID]int{}
	var held int64
	whole := false
	if c != nil {
		c.mu.Lock()
		if !c.over {
			whole = true
			for i := range man.Files {
				f := &man.Files[i]
				if f.Kind != kindSafetensors {
					continue
				}
				for j := range f.Tensors {
					t := &f.Tensors[j]
					e := c.byID[t.ID]
					if e == nil || int64(len(e.b)) != t.End-t.Begin {
						whole = whole && t.End == t.Begin // an empty tensor is never kept
						continue
					}
					if uses[t.ID] == 0 {
						byID[t.ID] = e
						held += int64(len(e.b))
					}
					uses[t.ID]++
				}
			}
		}
		c.byID, c.over = nil, true // taken: the Writer keeps nothing
		c.mu.Unlock()
	}
	m.mu.Lock()
	// Entries of the version before that were not used (and buffers not taken in again) are
	// left to the collector: never marked gone, they are never recycled.
	m.ver, m.byID, m.uses, m.held = man.Version, byID, uses, held
	m.whole = whole
	m.spareLocked()
	m.mu.Unlock()
}

// spareLocked lets go of free buffers until they fit the budget beside the entries held: at
// rest, the memory holds no more than its budget.
func (m *baseMemory) spareLocked() {
	for n, list := range m.free {
		for len(list) > 0 && m.held+m.freeBytes > m.budget {
			list[len(list)-1] = nil // to the collector
			list = list[:len(list)-1]
			m.freeBytes -= int64(n)
		}
		if len(list) == 0 {
			delete(m.free, n)
		} else {
			m.free[n] = list
		}
	}
}

// holds says whether the memory was installed with every tensor of version v: the copy need
// not be brought forward to v for the next version's diffs (copy_defer.go). Entries used
// since, or a memory dropped, send a diff to the copy, which is then brought forward.
func (m *baseMemory) holds(v uint64) bool {
	if m == nil || m.budget <= 0 || v == 0 {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ver == v && m.whole
}

// base returns the content of object id, a tensor of version ver of size bytes, when the
// memory holds exactly that; else nil. The caller releases it when it no longer reads it.
func (m *baseMemory) base(ver uint64, id ID, size int64) *memTensor {
	if m == nil || m.budget <= 0 || ver == 0 || size <= 0 {
		return nil
	}
	m.mu.Lock()
	e := m.byID[id]
	if m.ver != ver || e == nil || int64(len(e.b)) != size {
		e = nil
	} else {
		e.refs++
	}
	tamper := m.tamper
	m.mu.Unlock()
	if e != nil && tamper != nil {
		tamper(id, e.b)
	}
	return e
}

// used says that a tensor diffed against object id of version ver was stored: once every
// tensor of ver with that identity was, the entry is dropped (readers of it keep its bytes).
func (m *baseMemory) used(ver uint64, id ID) {
	if m == nil || m.budget <= 0 {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.ver != ver || m.byID[id] == nil {
		return
	}
	if m.uses[id]--; m.uses[id] <= 0 {
		e := m.byID[id]
		m.held -= int64(len(e.b))
		delete(m.byID, id)
		delete(m.uses, id)
		e.gone = true
		if e.refs == 0 {
			m.recycleLocked(e)
		}
	}
}

// release says that a diff no longer reads e (from base; nil: none).
func (m *baseMemory) release(e *memTensor) {
	if e == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if e.refs--; e.refs == 0 && e.gone {
		m.recycleLocked(e)
	}
}

// drop forgets every entry: one failed its check.
func (m *baseMemory) drop(why string, id ID) {
	m.mu.Lock()
	m.ver, m.byID, m.uses, m.held = 0, nil, nil, 0 // none is marked gone: none is recycled
	m.whole = false
	m.free, m.freeBytes = nil, 0
	m.mu.Unlock()
	m.log.Warn("the base in memory failed its check: dropped, bases are read from the materialized copy", "object", id.String(), "why", why)
}

// note counts n base bytes read from memory.
func (m *baseMemory) note(n int64) { m.served.Add(n) }

// noteCopy counts n base bytes read from the materialized copy (stream_base.go).
func (m *baseMemory) noteCopy(n int64) { m.fromCopy.Add(n) }

// BaseMemoryStats says what the base in memory holds and did (Store.BaseMemory).
type BaseMemoryStats struct {
	Budget  int64  // Options.BaseMemory (0: off)
	Version uint64 // the version it holds (0: none)
	Bytes   int64  // the bytes it holds
	Served  int64  // base bytes diffs read from it since Open
	// FromCopy is the base bytes diffs read from the materialized copy since Open (with or
	// without the memory; a base read again counts again).
	FromCopy int64
	// FromObjects is the base bytes the batch path read through the store's read path while
	// the copy was deferred (copy_defer.go) and the memory did not hold the base.
	FromObjects int64
	// Read is the bytes reads of the latest version's files took from the memory while the
	// copy was deferred (read_basemem.go), since Open.
	Read int64
}

func (m *baseMemory) stats() BaseMemoryStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	return BaseMemoryStats{Budget: max(m.budget, 0), Version: m.ver, Bytes: m.held, Served: m.served.Load(), FromCopy: m.fromCopy.Load(), FromObjects: m.fromObjs.Load(), Read: m.readServed.Load()}
}

// BaseMemory reports the writer's base in memory (Options.BaseMemory).
func (s *Store) BaseMemory() BaseMemoryStats { return s.ingest.memory().stats() }

// memory is the ingester's base in memory.
func (in *ingester) memory() *baseMemory { return in.mem }

// memSum is the digest an entry's bytes are checked against: their xxh3-128 (byXXH: a
// stream's tensor, whose hasher computes it for the manifest) or their CRC-32C.
type memSum struct {
	crc   uint32
	xxh   xxh3Digest
	byXXH bool
}

// memBaseCheck is the check of base bytes served from e: their digest against e's.
func memBaseCheck(e *memTensor) *baseCheck {
	if e.sum.byXXH {
		return &baseCheck{Hash: xxh3.New128(), xxh: e.sum.xxh, useXXH: true}
	}
	return &baseCheck{Hash: crc32.New(castagnoli), crc: e.sum.crc, useCRC: true}
}

// captureReader reads r and copies every byte read, at its offset, into buf (a tensor's
// bytes taken in as the batch path reads them).
type captureReader struct {
	r   io.ReaderAt
	buf []byte
}

func (c captureReader) ReadAt(p []byte, off int64) (int, error) {
	n, err := c.r.ReadAt(p, off)
	if off >= 0 && off < int64(len(c.buf)) {
		copy(c.buf[off:], p[:n])
	}
	return n, err
}

// keptTensor notes a tensor the stream stored: its bytes, all taken in, are kept for the next
// version, and the base it was diffed against is used.
func (st *FileStream) keptTensor(ts *tensorState) {
	if ts.keep != nil && ts.kept == ts.size && !ts.t.XXH3.IsZero() {
		// Checked by the xxh3-128 of the bytes the hasher read: the bytes kept, or (not
		// routed: stream_keep.go) those the worker copied into them.
		st.w.mem.addSum(ts.t.ID, ts.keep, memSum{xxh: ts.t.XXH3, byXXH: true})
	}
	if ts.hasBase {
		if ts.mem != nil {
			st.w.in.mem.note(ts.size)
			st.w.in.mem.release(ts.mem)
			ts.mem = nil
		}
		st.w.in.mem.used(st.basis.m.Version, ts.base)
	}
}

// baseFor finds the base of tensor t (size bytes) of the file at path for the batch path:
// in the version the copy holds (*view), or, while the copy is deferred (copy_defer.go), in
// the latest version, whose tensors the memory holds. mem is the base's bytes in memory, if
// held (release it). While the copy is deferred, *view is let go of (nil): the base is read
// from memory, or, when the memory does not hold it (used by another diff of the same base,
// dropped), through the read path (readBaseAt), and the copy stays where it is. basis is nil
// (and ok false) when there is no base version.
func (w *Writer) baseFor(view **matView, path string, t *manifestTensor, size int64) (basis *version, base tensorRef, ok bool, mem *memTensor, err error) {
	s := w.s
	if v := *view; v != nil {
		basis = v.ver
	}
	if d := s.mat.deferredTo(); d != 0 && (basis == nil || basis.m.Version != d) {
		if latest, lerr := s.versions.latestVersion(); lerr == nil && latest != nil && latest.m.Version == d {
			(*view).release() // not read: a change of the copy must not wait for it
			*view, basis = nil, latest
		}
	}
	if basis == nil {
		return nil, base, false, nil, nil
	}
	if base, ok = basis.findBase(path, t.Name, t.DType, t.Shape); ok {
		mem = w.in.mem.base(basis.m.Version, base.tensor.ID, size)
	}
	return basis, base, ok, mem, nil
}

// readBaseAt reads bytes [off, off+n) (n <= ingestChunk) of base object id for a diff: from
// the copy (view), or, with no view (the copy is deferred and the memory does not hold the
// base: baseFor), through the store's read path, which checks every byte it serves.
func (w *Writer) readBaseAt(r *baseReader, view *matView, id ID, off, n int64) ([]byte, error) {
	if view != nil {
		return r.read(view, id, off, n, nextRead{})
	}
	b := r.buf(r.cur, n)[:n]
	if err := w.in.readBase(id, objHint{}, off, b, readOpts{}); err != nil {
		return nil, err
	}
	w.in.mem.fromObjs.Add(n)
	return b, nil
}

// seedFile starts the seed of a stream that diffs against basis (copy_seed.go): none (nil,
// nil) when the base in memory holds basis, since the seal will then most likely defer the
// copy (copy_defer.go) and the seed would be the whole file's bytes written for nothing. A
// version that does not fit the memory after all brings the copy forward in place.
func (w *Writer) seedFile(basis *version) (*os.File, error) {
	if basis != nil && w.s.groups.rank == nil && w.in.mem.holds(basis.m.Version) {
		return nil, nil
	}
	return w.s.mat.createSeed()
}

// carry moves the entry of object id, a tensor of version ver of size bytes, into c: the
// next version holds the same tensor and reads it from nowhere (a file or tensor a patch
// leaves alone: ingest_patch_fast.go). Only an entry that one tensor of ver uses and no
// diff reads moves, and it leaves the memory (never marked gone, its buffer is never
// recycled: it is c's now); otherwise nothing happens, and the tensor is not kept.
func (m *baseMemory) carry(c *memCapture, ver uint64, id ID, size int64) bool {
	if m == nil || m.budget <= 0 || c == nil {
		return false
	}
	m.mu.Lock()
	e := m.byID[id]
	if m.ver != ver || e == nil || int64(len(e.b)) != size || m.uses[id] != 1 || e.refs != 0 {
		m.mu.Unlock()
		return false
	}
	delete(m.byID, id)
	delete(m.uses, id)
	m.held -= size
	m.mu.Unlock()
	c.addSum(id, e.b, e.sum)
	return true
}
