package store

import (
	"bytes"
	"crypto/sha256"
	"testing"

	"github.com/weightfs/weightfs/internal/logtest"
)

// memReadBytes is the bytes a read of every file of version v takes from the base in memory:
// its tensors that the materialized copy does not hold.
func memReadBytes(t *testing.T, s *Store, v uint64) int64 {
	t.Helper()
	ver, err := s.versions.sealedVersion(v)
	if err != nil {
		t.Fatal(err)
	}
	view := s.mat.view()
	defer view.release()
	var n int64
	for i := range ver.m.Files {
		f := &ver.m.Files[i]
		for j := range f.Tensors {
			tt := &f.Tensors[j]
			if tt.End > tt.Begin && (view == nil || !view.holds(tt.ID)) {
				n += tt.End - tt.Begin
			}
		}
	}
	return n
}

// readAllSHA reads every file of version v and compares its SHA-256 with want's.
func readAllSHA(t *testing.T, what string, s *Store, v uint64, want map[string][]byte) {
	t.Helper()
	for p, b := range want {
		if sha256.Sum256(readWhole(t, s, v, p)) != sha256.Sum256(b) {
			t.Fatalf("%s: %s of v%d: wrong bytes", what, p, v)
		}
	}
}

// TestCopyDeferredReadsFromMemory: while the copy is deferred (its writing held back here, so
// that every read meets it deferred), reads of the latest version are served from the base in
// memory, byte-exact; they stay right while the next version is written (the entries used and
// their buffers taken in again); an entry damaged in memory is caught by the read's check,
// logged, and the read served from the objects.
func TestCopyDeferredReadsFromMemory(t *testing.T) {
	versions := streamSeries(t, 3, 17)
	var lines logLines
	s, _ := newStore(t, Options{MaxChain: 2, BaseMemory: 64 << 20, Logger: logtest.New(lines.logf)})
	sealBatch(t, s, 1, versions[0])
	sealBatch(t, s, 2, versions[1])
	if s.mat.deferredTo() != 2 || s.ingest.memory().version() != 2 {
		t.Fatalf("the copy is deferred at %d, the memory holds %d; want 2 and 2", s.mat.deferredTo(), s.ingest.memory().version())
	}
	s.mat.asked.Store(true) // the copy is not written in the background: every read below meets it deferred
	want := memReadBytes(t, s, 2)
	readAllSHA(t, "from memory", s, 2, versions[1])
	if got := s.BaseMemory().Read; got != want || want == 0 {
		t.Fatalf("reads took %d bytes from the memory, want %d (every tensor the copy does not hold)", got, want)
	}

	// A read holding an entry keeps its buffer from the next version's tensors (spare buffers
	// of its size, kept across versions, may be given; the entry's never).
	m := s.ingest.memory()
	var id ID
	var size int
	m.mu.Lock()
	for k, e := range m.byID {
		if len(e.b) > size {
			id, size = k, len(e.b)
		}
	}
	uses := m.uses[id]
	m.mu.Unlock()
	e := m.forRead(2, id)
	if e == nil || len(e.b) == 0 {
		t.Fatalf("no entry of version 2 for object %s to read", id)
	}
	held := &e.b[0]
	for range uses {
		m.used(2, id)
	}
	for b := m.takeFree(int64(size)); b != nil; b = m.takeFree(int64(size)) {
		if &b[0] == held {
			t.Fatal("the buffer of an entry a read holds was given to the next version")
		}
	}
	if ID(sha256.Sum256(e.b)) != id {
		t.Fatal("the bytes of an entry a read holds changed")
	}
	m.release(e)
	if b := m.takeFree(int64(size)); b == nil || &b[0] != held {
		t.Fatal("the entry's buffer was not freed once the read let go of it")
	}

	// Reads of v2 while v3 is written: the entries are used and their buffers taken in again.
	w, err := s.NewVersion(3)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range sortedPaths(versions[2]) {
		if err := w.AddFile(p, bytes.NewReader(versions[2][p]), int64(len(versions[2][p])), 0o644); err != nil {
			t.Fatal(err)
		}
		readAllSHA(t, "during the commit of v3", s, 2, versions[1])
	}
	if _, err := w.Seal(); err != nil {
		t.Fatal(err)
	}
	if s.mat.deferredTo() != 3 || m.version() != 3 {
		t.Fatalf("v3: the copy is deferred at %d, the memory holds %d; want 3 and 3", s.mat.deferredTo(), m.version())
	}
	s.mat.asked.Store(true)
	readAllSHA(t, "v2 after v3", s, 2, versions[1])

	// A flipped byte in the memory: caught by the read's check, served from the objects.
	m.mu.Lock()
	id, size = ID{}, 0
	for k, e := range m.byID {
		if len(e.b) > size {
			id, size = k, len(e.b)
		}
	}
	m.byID[id].b[size/2] ^= 0x10
	m.mu.Unlock()
	read0 := s.BaseMemory().Read
	readAllSHA(t, "a damaged entry", s, 3, versions[2])
	if !lines.has("the base in memory holds bytes that hash to", "not its object "+id.String()) {
		t.Errorf("the damaged entry was not logged; log:\n%s", lines.String())
	}
	if got := s.BaseMemory(); got.Version != 0 {
		t.Errorf("the memory holds version %d after a failed check, want it dropped", got.Version)
	}
	readAllSHA(t, "after the drop", s, 3, versions[2])
	if got := s.BaseMemory().Read - read0; got >= memReadBytes(t, s, 3) {
		t.Errorf("reads took %d bytes from a damaged memory, want fewer than %d", got, memReadBytes(t, s, 3))
	}
	checkAllVersions(t, "at the end", s, versions)
}
