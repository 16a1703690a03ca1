package store

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestStreamKeepsWrittenDeltas: from version 3 on, the encoder codes each tensor's delta
// against the delta section that led to its base, the one the writer stored for the
// version before (writeContextOf). The stream keeps the sections it stores in the cache of
// loaded sections, as the batch path does (objectStore.wroteDelta), so a version reads none
// of the last version's delta objects back: a mixture of experts' version has thousands of
// small ones, each an open, a read and a CRC-32C (issue 29: version 3 on cost the MoE 40%
// more CPU than version 2). The versions still read back byte for byte.
func TestStreamKeepsWrittenDeltas(t *testing.T) {
	const files, perFile, elems = 2, 128, 512
	s, _ := newStore(t, Options{BaseMemory: 64 << 20})
	version := expertSeries(t, rand.New(rand.NewPCG(29, 3)), files, perFile, elems)
	trees := map[uint64]map[string][]byte{1: version(1)}
	commitTree(t, s, 1, trees[1])
	for v := uint64(2); v <= 4; v++ {
		tree := version(v)
		trees[v] = tree
		reads := s.objects.deltaReads.Load()
		w, err := s.NewVersion(v)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range slices.Sorted(maps.Keys(tree)) {
			streamBenchOne(t, w, p, tree[p], 1<<20)
		}
		if _, err := w.Seal(); err != nil {
			t.Fatalf("version %d: %v", v, err)
		}
		if n := s.objects.deltaReads.Load() - reads; n > 0 {
			t.Errorf("version %d read %d delta sections back from the store, want 0", v, n)
		}
	}
	// Read after every version is written, so that no read caches a section the next
	// version's encoder then finds.
	for v, tree := range trees {
		for p, want := range tree {
			mustEqualBytes(t, fmt.Sprintf("version %d: %s", v, p), readWhole(t, s, v, p), want)
		}
	}
}
