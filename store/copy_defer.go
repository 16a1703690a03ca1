package store

import "fmt"

// The copy deferred (issue 30, decision 3; docs/design.md, "The base in memory"). A writer
// whose base in memory holds every tensor of the version it just sealed (ingest_basemem.go)
// needs no copy for its next diff: the bases come from memory. Bringing the copy forward at
// every seal would move the version's bytes through the trainer's disk (the seed written as
// the stream receives them, or the pages changed in place, read back and checked) when only
// the delta objects need to reach it. So the seal leaves the copy where it is, clean at an
// older version (or holding none), and says so here; the copy is brought forward, once, when
// a reader of this process reads a file of the latest version (wanted), when a diff needs a
// base the memory does not hold (ensure), or at the next Open. Nothing about the copy's
// invariants changes: it holds one version, vouched for, and its record in the index says
// which; a copy behind the latest version is one reads already serve right (what it does not
// hold is read from the objects), so a crash meanwhile costs the next Open a bring-forward
// (logged at info), never a byte.

// deferTo leaves the copy where it is after the seal of version v, whose tensors the base in
// memory holds: the next diffs read their bases from memory.
func (m *materialized) deferTo(v uint64) {
	m.deferred.Store(v)
	m.asked.Store(false)
	m.s.log.Debug(fmt.Sprintf("materialized copy: not brought forward to version %d (its bases are in memory); written when a reader needs it", v))
}

// deferredTo is the version the copy was deferred at (0: not deferred): the latest version
// sealed, which the copy does not hold.
func (m *materialized) deferredTo() uint64 { return m.deferred.Load() }

// ensureForWriter is ensure for a writer about to ingest: nothing while the copy is deferred
// (the bases are in memory; a base that is not brings the copy forward then: ensure).
func (m *materialized) ensureForWriter() error {
	if m.deferred.Load() != 0 {
		return nil
	}
	return m.ensure()
}

// reached ends the deferral once an ensure took the copy to version v or past it (or tried
// and dropped it: the copy is then rebuilt when next needed, as without the deferral).
func (m *materialized) reached(v uint64) {
	if d := m.deferred.Load(); d != 0 && v >= d {
		m.deferred.CompareAndSwap(d, 0)
	}
}

// wanted is called by a read of a file of version v from the copy: when the copy was deferred
// at v, it is brought forward now, in the background and once (ensureInBackground); the reads
// meanwhile take v's tensors from the base in memory, each checked against its identity
// (read_basemem.go), and the rest from the objects, checked as always.
func (m *materialized) wanted(v uint64) {
	d := m.deferred.Load()
	if d == 0 || v != d || m.closed.Load() || !m.asked.CompareAndSwap(false, true) {
		return
	}
	m.s.log.Info(fmt.Sprintf("materialized copy: a reader reads version %d, which the writer kept in memory only; writing its copy", v))
	m.ensureInBackground()
}
