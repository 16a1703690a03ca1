package store

import (
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/weightfs/weightfs/delta"
)

// TestStatsFsyncsOfAManyTensorCommit pins issue 29's count on a local store of packs: a
// commit of a version whose ~1,000 small tensors all changed (a mixture of experts after one
// RL step) makes at most 8 + (packs written) fsyncs, and writes one pack index record. A
// test of counts (Stats.Fsyncs, files under packs/ and index/), not of time.
func TestStatsFsyncsOfAManyTensorCommit(t *testing.T) {
	const files, perFile, elems = 4, 256, 512
	s, root := newStore(t, Options{})
	version := expertSeries(t, rand.New(rand.NewPCG(29, 2)), files, perFile, elems)
	commitTree(t, s, 1, version(1))
	packsBefore, indexesBefore := countFilesUnder(t, root, "packs"), countFilesUnder(t, root, "index")
	before := s.Stats()
	looseStats := s.be.given.(*localBackend).StatObjectCalls()
	deltaReads := s.objects.deltaReads.Load()
	info, _ := commitTree(t, s, 2, version(2))
	// The seal brings the copy forward with the deltas the writer just put, not read back
	// from the pack (objectStore.wroteDelta).
	if n := s.objects.deltaReads.Load() - deltaReads; n > 0 {
		t.Errorf("commit of version 2 read %d delta sections back from the store, want 0", n)
	}
	// No stat of a loose object file per new object: the store has none (ingest_dedup.go).
	if n := s.be.given.(*localBackend).StatObjectCalls() - looseStats; n > 0 {
		t.Errorf("commit of version 2 stated %d loose object files, want 0 in a store of packs only", n)
	}
	after := s.Stats()
	packs := countFilesUnder(t, root, "packs") - packsBefore
	indexes := countFilesUnder(t, root, "index") - indexesBefore
	if info.ChangedElems == 0 {
		t.Fatalf("version 2 changed no element")
	}
	if packs < 1 {
		t.Fatalf("version 2 added %d packs, want its objects in at least one", packs)
	}
	if got, most := after.Fsyncs-before.Fsyncs, int64(8+packs); got > most {
		t.Errorf("commit of %d changed tensors: %d fsyncs, want at most 8 + %d packs = %d", files*perFile, got, packs, most)
	}
	if indexes != 1 {
		t.Errorf("commit of version 2 wrote %d pack index records, want 1", indexes)
	}
	t.Logf("version 2: %d fsyncs, %d packs, %d index writes of the node-local index", after.Fsyncs-before.Fsyncs, packs, after.IndexWrites-before.IndexWrites)
}

// countFilesUnder counts the regular files under root/dir (0 when there is no such directory).
func countFilesUnder(t *testing.T, root, dir string) int {
	t.Helper()
	n := 0
	err := filepath.WalkDir(filepath.Join(root, dir), func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			n++
		}
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	return n
}

// expertSeries returns the versions of a checkpoint of many small tensors, as a mixture of
// experts has them: files shards of perFile bf16 tensors of elems elements, version 1 drawn
// from rng and each later one an RL step on the one before (2% of elements moved). Versions
// must be asked for in order.
func expertSeries(t *testing.T, rng *rand.Rand, files, perFile, elems int) func(v uint64) map[string][]byte {
	ws := make([][]byte, files*perFile)
	return func(v uint64) map[string][]byte {
		tree := map[string][]byte{"config.json": []byte(`{"experts": 128}`)}
		for f := range files {
			ts := make([]testTensor, perFile)
			for i := range ts {
				k := f*perFile + i
				if v == 1 {
					ws[k] = bf16Like(rng, elems)
				} else {
					ws[k] = perturb(rng, ws[k], 2, 0.02)
				}
				ts[i] = testTensor{fmt.Sprintf("model.layers.%d.mlp.experts.%d.up_proj.weight", f, i), delta.DTypeBF16, []int64{int64(elems)}, ws[k]}
			}
			tree[fmt.Sprintf("model-%05d-of-%05d.safetensors", f+1, files)] = safetensorsFile(t, ts...)
		}
		return tree
	}
}
