package store

import (
	"crypto/sha256"
	"testing"

	"github.com/weightfs/weightfs/delta"
)

// TestAbsentOnlyWithoutLooseObjects pins when the dedup check skips the stat of a loose
// object file (packedObjects.absent): only for an id in no pack while objects/ is empty. A
// packed id is present; once a loose object is put, no id is absent any more (each is
// stated).
func TestAbsentOnlyWithoutLooseObjects(t *testing.T) {
	s, _ := newStore(t, Options{})
	p := s.be.packs
	if p == nil {
		t.Fatal("a new local store has no pack layer")
	}
	info, _ := commitTree(t, s, 1, map[string][]byte{
		"model.safetensors": safetensorsFile(t, testTensor{"w", delta.DTypeBF16, []int64{256}, make([]byte, 512)}),
	})
	m, err := s.versions.loadVersion(info.Number)
	if err != nil {
		t.Fatal(err)
	}
	packedID := m.m.Files[0].Tensors[0].ID
	other := ID(sha256.Sum256([]byte("not stored")))
	if p.absent(packedID) {
		t.Errorf("a packed object %s is said absent", packedID)
	}
	if !p.absent(other) {
		t.Errorf("an object in no pack of a store without loose objects is not said absent: its loose file is stated")
	}
	if !s.ingest.existsToWrite(packedID) || s.ingest.existsToWrite(other) {
		t.Errorf("existsToWrite: packed %v, unstored %v; want true, false", s.ingest.existsToWrite(packedID), s.ingest.existsToWrite(other))
	}
	// A loose object put by this process: every id not in a pack is stated again.
	loose := ID(sha256.Sum256([]byte("loose")))
	lb := s.be.given.(*localBackend)
	tmp, err := lb.CreateTemp()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tmp.Write(make([]byte, 128)); err != nil {
		t.Fatal(err)
	}
	if err := lb.PutObject(loose, tmp); err != nil {
		t.Fatal(err)
	}
	if p.absent(loose) || p.absent(other) {
		t.Errorf("after a loose object was put: absent(loose) %v, absent(other) %v; want false, false", p.absent(loose), p.absent(other))
	}
	if !s.ingest.existsToWrite(loose) {
		t.Errorf("the loose object is not found by existsToWrite")
	}
	if err := lb.DeleteObject(loose); err != nil { // not an object file: verify at close
		t.Fatal(err)
	}
}
