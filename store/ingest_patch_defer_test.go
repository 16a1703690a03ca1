package store

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"

	"github.com/weightfs/weightfs/delta"
)

// TestCommitPatchLeavesTheCopyDeferred: a trainer's steady state, version after version
// through CommitPatch with the base in memory holding the latest version. No patch brings the
// materialized copy forward inside its seal (no byte of the copy written after the first
// version: the copy stays deferred, copy_defer.go), every patched file is made by the fast
// path, and each version is a full ingest's, byte for byte. Then, with the memory dropped
// (a failed check), the next patch reads its bases through the store's read path (the copy
// still deferred, behind) and seals the same version too (the seal, whose memory is not
// whole, brings the copy forward, right). One pass and the split pass.
//
// Before this, CommitPatch brought a deferred copy forward as it began (startFrom): the whole
// previous version written to the trainer's disk inside every seal but the first.
func TestCommitPatchLeavesTheCopyDeferred(t *testing.T) {
	for _, split := range []int{1, 2} {
		t.Run(fmt.Sprintf("split=%d", split), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(7, uint64(split)))
			versions := randomPatchModels(t, rng, 5)
			full, _ := newStore(t, Options{})
			commitAll(t, full, versions)
			s, _ := newStore(t, Options{BaseMemory: 64 << 20})
			s.ingest.patchSplit = split
			commitTree(t, s, 1, versions[0])
			was := copyFiles(t, s)
			for v := uint64(2); v <= 5; v++ {
				if v == 5 {
					s.ingest.mem.drop("the test drops it", ID{})
				}
				var patch bytes.Buffer
				if _, err := full.WritePatch(v, &writerAtBuffer{&patch}); err != nil {
					t.Fatal(err)
				}
				pp, err := delta.OpenPatch(bytes.NewReader(patch.Bytes()), int64(patch.Len()))
				if err != nil {
					t.Fatal(err)
				}
				byTensor := int64(0)
				for _, f := range pp.Plan.Files {
					if !f.Whole {
						byTensor++
					}
				}
				before := s.ingest.patchFast.Load()
				if _, err := s.CommitPatch(bytes.NewReader(patch.Bytes()), int64(patch.Len()), v); err != nil {
					t.Fatalf("version %d: %v", v, err)
				}
				if n := s.ingest.patchFast.Load() - before; n != byTensor || n == 0 {
					t.Errorf("version %d: the fast path made %d files of the %d patched by tensor", v, n, byTensor)
				}
				if v < 5 {
					sameCopyFiles(t, fmt.Sprintf("v%d", v), was, copyFiles(t, s))
					if got := s.mat.deferredTo(); got != v {
						t.Errorf("version %d: the copy is deferred at %d, want %d", v, got, v)
					}
				} else if got := s.ix.materialized(); got != (matState{Version: 5, Clean: true}) {
					// The memory no longer held version 4's unchanged tensors, so version 5's
					// capture is not whole: its seal brings the copy forward, as any seal would.
					t.Errorf("version 5: the copy's record is %+v, want version 5, clean", got)
				}
				if mf, mi := manifestOf(t, s, v), manifestOf(t, full, v); !reflect.DeepEqual(mf.Files, mi.Files) {
					t.Fatalf("version %d: the patched version's manifest is not a full ingest's", v)
				}
			}
			if got := s.BaseMemory().FromObjects; got == 0 {
				t.Errorf("with the memory dropped, no base was read through the store's read path")
			}
			for v := uint64(1); v <= 5; v++ {
				for p, b := range versions[v-1] {
					mustEqualBytes(t, fmt.Sprintf("%s of v%d", p, v), readWhole(t, s, v, p), b)
				}
			}
			for p, b := range versions[4] {
				mustEqualBytes(t, "the copy of "+p, readMaterialized(t, s, p), b)
			}
		})
	}
}
