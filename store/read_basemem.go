package store

import (
	"crypto/sha256"
	"fmt"
)

// Reads of the latest version from the base in memory. While the writer's seal deferred the
// materialized copy (copy_defer.go), the copy does not hold the latest version's tensors, and
// a reader of the process (a colocated engine reading every version the trainer saves) would
// rebuild each of them from the objects: a chain of deltas replayed, 10-30x slower than a read
// of a settled copy. The base in memory (ingest_basemem.go) holds exactly those tensors'
// bytes. So a checked read (readOpts.check: OpenFile's) of an object the memory holds, while
// the copy is deferred at the version the memory holds, is served from memory; the copy is
// still written in the background (materialized.wanted), and reads go to it once it is.
//
// Never a byte unchecked: the memory's bytes of a tensor are served only once they were hashed
// whole and found equal to the tensor's identity (the per-tensor check of read_check.go, on
// the memory's bytes rather than the objects'), and the verdict is kept with the entry. An
// entry that does not hash to its identity is never served: the read goes to the objects,
// the damage is logged at warn and the memory is dropped (its bytes are the next diffs' bases).
//
// Entries stay valid while read: a read takes a reference under the memory's lock (as a diff
// does), and an entry's buffer is given to the next version's tensors only once it left the
// memory by use and no one holds it (baseMemory.used, release). An entry used by the next
// version's diffs, or of a version no longer the memory's (the next one installed), is not
// found: those reads go to the objects, checked as always.

// Verdicts of the reads' check of an entry (memTensor.verdict).
const (
	memUnchecked int32 = iota
	memGood            // hashes to its identity: served
	memBad             // does not: never served
)

// readFromMemory reads content bytes [off, off+len(p)) of object id from the base in memory,
// when the copy is deferred at the version the memory holds and the memory holds the object.
// served is false when it does not, or when the entry fails its check (the caller reads from
// the objects).
func (s *Store) readFromMemory(id ID, hint objHint, off int64, p []byte, opts readOpts) (served bool) {
	if !opts.check || opts.noMaterialized || opts.pages != nil || len(p) == 0 || off < 0 {
		return false
	}
	d := s.mat.deferredTo()
	if d == 0 {
		return false
	}
	m := s.ingest.memory()
	e := m.forRead(d, id)
	if e == nil {
		return false
	}
	defer m.release(e)
	if off+int64(len(p)) > int64(len(e.b)) || !m.checkForRead(e, id, hint) {
		return false
	}
	copy(p, e.b[off:])
	m.readServed.Add(int64(len(p)))
	return true
}

// memServes says whether reads of objects of version v may be served from the base in memory
// (readFromMemory): the copy is deferred at v and the memory holds v. A file read from there is
// not copied to the file copies' cache (copyLater), nor are its pages built ahead.
func (s *Store) memServes(v uint64) bool {
	d := s.mat.deferredTo()
	return d != 0 && d == v && s.ingest.memory().version() == d
}

// memHolds says whether the base in memory would serve object id to a read (prefetch: no
// page of it is built ahead from the objects).
func (s *Store) memHolds(id ID) bool {
	d := s.mat.deferredTo()
	return d != 0 && s.ingest.memory().has(d, id)
}

// forRead returns the entry holding object id's content when the memory holds version ver
// and the entry did not fail its check, with a reference taken (release it); else nil.
func (m *baseMemory) forRead(ver uint64, id ID) *memTensor {
	if m == nil || m.budget <= 0 || ver == 0 {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.byID[id]
	if m.ver != ver || e == nil || e.verdict.Load() == memBad {
		return nil
	}
	e.refs++
	return e
}

// has says whether the memory holds object id of version ver, not known to be damaged.
func (m *baseMemory) has(ver uint64, id ID) bool {
	if m == nil || m.budget <= 0 || ver == 0 {
		return false
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	e := m.byID[id]
	return m.ver == ver && e != nil && e.verdict.Load() != memBad
}

// version is the version the memory holds (0: none).
func (m *baseMemory) version() uint64 {
	if m == nil || m.budget <= 0 {
		return 0
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.ver
}

// checkForRead returns whether e's bytes hash to id, hashing them on the first read only
// (concurrent first reads hash once). The caller holds a reference to e. A mismatch is logged
// and drops the memory, if it still holds e.
func (m *baseMemory) checkForRead(e *memTensor, id ID, hint objHint) bool {
	if v := e.verdict.Load(); v != memUnchecked {
		return v == memGood
	}
	e.chk.Lock()
	defer e.chk.Unlock()
	if v := e.verdict.Load(); v != memUnchecked {
		return v == memGood
	}
	if got := ID(sha256.Sum256(e.b)); got != id {
		e.verdict.Store(memBad)
		what := describeObject(hint)
		m.log.Warn(fmt.Sprintf("%s: the base in memory holds bytes that hash to %s, not its object %s: read from the objects", what, got, id))
		m.dropIfHolds(e, id)
		return false
	}
	e.verdict.Store(memGood)
	return true
}

// dropIfHolds drops the memory if entry e is still its entry for id (a memory installed since
// is not dropped for a damaged entry of the version before).
func (m *baseMemory) dropIfHolds(e *memTensor, id ID) {
	m.mu.Lock()
	holds := m.byID[id] == e
	m.mu.Unlock()
	if holds {
		m.drop("a read's check: its bytes do not hash to their identity", id)
	}
}
