package store

import (
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/weightfs/weightfs/delta"
)

// TestMetaFlushesDouble: a process that touches many objects writes their metas to the index
// in batches that double (metaFlushAt), not one read-write transaction per 4,096 objects,
// each of which rewrote nearly every leaf of the index (figure 11: the index's writes grew
// 20x for 10.6x the tensors). Every meta is found in the index afterwards.
func TestMetaFlushesDouble(t *testing.T) {
	s, _ := newStore(t, Options{})
	const n = 60_000
	id := func(i int) ID { return ID(sha256.Sum256(fmt.Appendf(nil, "meta %d", i))) }
	before := s.ix.writeCount()
	for i := range n {
		s.objects.putMeta(id(i), objMeta{Kind: kindFull, Width: 2, ContentLen: int64(i)})
	}
	// Doubling: flushes at 4,096, 8,192, 16,384 and 32,768 new metas; fixed batches of 4,096
	// made 14.
	if got := s.ix.writeCount() - before; got > 5 {
		t.Errorf("%d metas put: %d index write transactions, want at most 5 (batches that double)", n, got)
	}
	s.objects.flushMetas()
	s.objects.dropMetas()
	for i := 0; i < n; i += 101 {
		if m, ok := s.objects.cachedMeta(id(i)); !ok || m.ContentLen != int64(i) {
			t.Fatalf("meta %d: %+v %v", i, m, ok)
		}
	}
}

// TestSweepForgetsInOneIndexWrite: gc's sweep forgets the objects it deleted with one index
// transaction for them all (forgetGone), not one each: a read-write transaction's commit
// costs with the size of the index, so one per object made gc of a version of n tensors grow
// as n times the index (figure 11).
func TestSweepForgetsInOneIndexWrite(t *testing.T) {
	s, _ := newStore(t, Options{})
	const tensors = 300
	rng := rand.New(rand.NewPCG(29, 5))
	for v := uint64(1); v <= 2; v++ {
		var ts []testTensor
		for i := range tensors {
			// Random bytes each version: stored whole, so that gc drops version 1's objects
			// without re-anchoring anything.
			ts = append(ts, testTensor{fmt.Sprintf("model.layers.%d.mlp.experts.%d.up_proj.weight", i/64, i%64), delta.DTypeF32, []int64{64}, randomBytes(rng, 256)})
		}
		commitTree(t, s, v, map[string][]byte{"model.safetensors": safetensorsFile(t, ts...)})
	}
	before := s.ix.writeCount()
	st, err := s.GC(1)
	if err != nil {
		t.Fatal(err)
	}
	writes := s.ix.writeCount() - before
	t.Logf("gc: %d objects deleted, %d index write transactions", st.DeletedObjects, writes)
	if st.DeletedObjects < tensors {
		t.Fatalf("gc deleted %d objects, want at least version 1's %d tensors", st.DeletedObjects, tensors)
	}
	if writes > 16 {
		t.Errorf("gc deleting %d objects: %d index write transactions, want a few (one for the sweep's)", st.DeletedObjects, writes)
	}
	if _, err := s.Verify(nil); err != nil {
		t.Fatal(err)
	}
}
