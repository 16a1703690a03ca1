package store

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/weightfs/weightfs/delta"
)

// objectFiles lists the object files of a local store and the fan-out directories they are in.
func objectFiles(t *testing.T, root string) (files, fans map[string]bool) {
	t.Helper()
	files, fans = map[string]bool{}, map[string]bool{}
	top := filepath.Join(root, "objects")
	dirs, err := os.ReadDir(top)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range dirs {
		fans[d.Name()] = true
		ents, err := os.ReadDir(filepath.Join(top, d.Name()))
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			files[d.Name()+"/"+e.Name()] = true
		}
	}
	return files, fans
}

// TestStatsFsyncsOfACommit: Stats.Fsyncs counts every fsync the local backend makes, and a
// commit of a version on a predecessor makes, as the code is today, one per new object file,
// one per object directory that gained a file (and one of objects/ when a directory was made),
// and two for the manifest (its file, then versions/). The expectation is computed from what
// the commit wrote, so that a change of layout (packs) changes this sum, not a number. The
// index's transactions are counted apart (IndexWrites): the seal writes the version there.
func TestStatsFsyncsOfACommit(t *testing.T) {
	rng := rand.New(rand.NewPCG(29, 1))
	s, root := newLooseStore(t, Options{}) // the sum counts object files: the format-2 layout
	var ws [][]byte
	v1 := map[string][]byte{"config.json": []byte(`{"layers": 8}`)}
	for i := range 8 {
		ws = append(ws, bf16Like(rng, 2048))
		v1[fmt.Sprintf("model-%05d.safetensors", i)] = safetensorsFile(t, testTensor{"w", delta.DTypeBF16, []int64{2048}, ws[i]})
	}
	commitTree(t, s, 1, v1)
	filesBefore, fansBefore := objectFiles(t, root)
	before := s.Stats()

	v2 := map[string][]byte{"config.json": v1["config.json"]}
	for i := range 8 {
		v2[fmt.Sprintf("model-%05d.safetensors", i)] = safetensorsFile(t, testTensor{"w", delta.DTypeBF16, []int64{2048}, perturb(rng, ws[i], 2, 0.02)})
	}
	commitTree(t, s, 2, v2)
	after := s.Stats()
	filesAfter, fansAfter := objectFiles(t, root)

	newObjects, gained := 0, map[string]bool{}
	for f := range filesAfter {
		if !filesBefore[f] {
			newObjects++
			gained[filepath.Dir(f)] = true
		}
	}
	for f := range filesBefore {
		if !filesAfter[f] {
			t.Fatalf("object %s went away during the commit", f)
		}
	}
	madeDirs := 0
	if len(fansAfter) > len(fansBefore) {
		madeDirs = 1 // objects/ gained directories
	}
	if newObjects < 8 {
		t.Fatalf("version 2 added %d object files, want at least one per changed file (8)", newObjects)
	}
	want := int64(newObjects + len(gained) + madeDirs + 2)
	if got := after.Fsyncs - before.Fsyncs; got != want {
		t.Errorf("commit of version 2: %d fsyncs counted, want %d (%d objects + %d object directories + %d for objects/ + 2 for the manifest)",
			got, want, newObjects, len(gained), madeDirs)
	}
	if after.IndexWrites <= before.IndexWrites {
		t.Errorf("commit of version 2: index writes %d -> %d, want the seal's", before.IndexWrites, after.IndexWrites)
	}
	r := openStore(t, root, Options{ReadOnly: true, CacheDir: t.TempDir()})
	readWhole(t, r, 2, "model-00000.safetensors")
	if got := r.Stats().Fsyncs; got != 0 {
		t.Errorf("a reader made %d fsyncs in the store, want none", got)
	}
}
