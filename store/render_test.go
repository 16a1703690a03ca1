package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/weightfs/weightfs/delta"
)

// twoSlimeVersions commits two versions of a slime model (seeded by a, b), the second with 3%
// of its elements perturbed, and returns version 2's patch written directly (WritePatch), the
// reference a render must match.
func twoSlimeVersions(t *testing.T, s *Store, a, b uint64) []byte {
	t.Helper()
	rng := rand.New(rand.NewPCG(a, b))
	m := newSlimeModel(rng)
	commitTree(t, s, 1, m.tree(t))
	m.perturbAll(rng, 0.03)
	commitTree(t, s, 2, m.tree(t))
	var direct bytes.Buffer
	if _, err := s.WritePatch(2, &writerAtBuffer{&direct}); err != nil {
		t.Fatal(err)
	}
	return direct.Bytes()
}

// TestRenderCache checks the cache: a second render returns the same file, a damaged cached
// render is made again, and a reader renders into its own cache directory, not the store.
func TestRenderCache(t *testing.T) {
	s, root := newStore(t, Options{})
	direct := twoSlimeVersions(t, s, 5, 6)
	first, err := s.RenderPatch(2)
	if err != nil {
		t.Fatal(err)
	}
	mustEqualBytes(t, "rendered patch", readFile(t, first.Path), direct)
	if first.Size != int64(len(direct)) {
		t.Errorf("size %d, want %d", first.Size, len(direct))
	}
	again, err := s.RenderPatch(2)
	if err != nil || again.Path != first.Path || again.Size != first.Size {
		t.Fatalf("second RenderPatch = %+v, %v; want %+v", again, err, first)
	}
	// Damage the cached patch: it is rendered again, to the same bytes.
	if err := os.Truncate(first.Path, first.Size/2); err != nil {
		t.Fatal(err)
	}
	again, err = s.RenderPatch(2)
	if err != nil || again.Size != first.Size {
		t.Fatalf("RenderPatch after damage = %+v, %v", again, err)
	}
	mustEqualBytes(t, "re-rendered patch", readFile(t, again.Path), direct)

	_, files, err := s.RenderSlime(2)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(files[len(files)-1].Path, 10); err != nil {
		t.Fatal(err)
	}
	_, files2, err := s.RenderSlime(2)
	if err != nil || len(files2) != len(files) || files2[len(files2)-1].Size != files[len(files)-1].Size {
		t.Fatalf("RenderSlime after damage = %+v, %v", files2, err)
	}

	if _, err := s.RenderPatch(1); !errors.Is(err, ErrNoPrevious) {
		t.Errorf("RenderPatch(1): %v, want ErrNoPrevious", err)
	}
	if _, err := s.RenderPatch(3); !errors.Is(err, ErrNoSuchVersion) {
		t.Errorf("RenderPatch(3): %v, want ErrNoSuchVersion", err)
	}

	// A reader renders the same bytes into its own cache directory.
	closeStore(t, s)
	before := dirListing(t, root)
	cache := t.TempDir()
	r := openStore(t, root, Options{ReadOnly: true, CacheDir: cache})
	rf, err := r.RenderPatch(2)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(filepath.Dir(filepath.Dir(rf.Path))) != cache {
		t.Errorf("reader rendered into %s, not its cache directory %s", rf.Path, cache)
	}
	mustEqualBytes(t, "reader's patch", readFile(t, rf.Path), direct)
	if _, _, err := r.RenderSlime(2); err != nil {
		t.Fatal(err)
	}
	if after := dirListing(t, root); after != before {
		t.Errorf("a reader's render changed the store:\nbefore %s\nafter  %s", before, after)
	}
}

// dirListing lists every path under dir except the writer's cache.
func dirListing(t *testing.T, dir string) string {
	t.Helper()
	var paths []string
	filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err == nil {
			rel, _ := filepath.Rel(dir, p)
			if info.IsDir() && rel == "cache" {
				return filepath.SkipDir
			}
			paths = append(paths, rel)
		}
		return nil
	})
	sort.Strings(paths)
	b, _ := json.Marshal(paths)
	return string(b)
}

// writerAtBuffer is an io.WriterAt over a bytes.Buffer.
type writerAtBuffer struct{ b *bytes.Buffer }

func (w *writerAtBuffer) WriteAt(p []byte, off int64) (int, error) {
	for int64(w.b.Len()) < off+int64(len(p)) {
		w.b.WriteByte(0)
	}
	copy(w.b.Bytes()[off:], p)
	return len(p), nil
}

// TestRenderCorruptStore damages every object: renders fail with ErrCorrupt and leave no
// file behind, never a wrong one.
func TestRenderCorruptStore(t *testing.T) {
	t.Setenv(looseObjectsEnv, "1") // loose objects: it damages object files, or needs gc of packs (not yet)
	s, root := newStore(t, Options{})
	rng := rand.New(rand.NewPCG(7, 8))
	m := newSlimeModel(rng)
	commitTree(t, s, 1, m.tree(t))
	m.perturbAll(rng, 0.03)
	commitTree(t, s, 2, m.tree(t))
	closeStore(t, s)
	lister := openStore(t, root, Options{ReadOnly: true})
	expectDamage(lister) // verified at the end of the test, when every object is damaged
	for _, obj := range allObjectFiles(t, lister) {
		data := readFile(t, obj)
		data[len(data)/2] ^= 0x10
		os.Chmod(obj, 0o644)
		if err := os.WriteFile(obj, data, 0o444); err != nil {
			t.Fatal(err)
		}
	}
	cache := t.TempDir()
	r := openStore(t, root, Options{ReadOnly: true, CacheDir: cache})
	expectDamage(r)
	if rf, err := r.RenderPatch(2); !errors.Is(err, ErrCorrupt) {
		t.Errorf("RenderPatch of a damaged store = %+v, %v; want ErrCorrupt", rf, err)
	}
	if _, files, err := r.RenderSlime(2); !errors.Is(err, ErrCorrupt) {
		t.Errorf("RenderSlime of a damaged store = %+v, %v; want ErrCorrupt", files, err)
	}
	for _, kind := range []string{"patches", "deltas"} {
		if ents, _ := os.ReadDir(filepath.Join(cache, "render", kind)); len(ents) != 0 {
			t.Errorf("render/%s holds %d entries after failed renders", kind, len(ents))
		}
	}
}

// TestRendersAfterGC: when gc drops a version's predecessor, the version has no patch and is
// a full checkpoint in deltas/; renders of dropped versions leave the cache; the renders of
// the versions after it are unchanged.
func TestRendersAfterGC(t *testing.T) {
	s, _ := newStore(t, Options{})
	rng := rand.New(rand.NewPCG(9, 10))
	m := newSlimeModel(rng)
	for v := uint64(1); v <= 3; v++ {
		if v > 1 {
			m.perturbAll(rng, 0.03)
		}
		commitTree(t, s, v, m.tree(t))
	}
	var patches [4][]byte
	for v := 2; v <= 3; v++ {
		rf, err := s.RenderPatch(uint64(v))
		if err != nil {
			t.Fatal(err)
		}
		patches[v] = readFile(t, rf.Path)
		if _, _, err := s.RenderSlime(uint64(v)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.GC(2); err != nil {
		t.Fatal(err)
	}
	if _, err := s.PatchBase(2); !errors.Is(err, ErrNoPrevious) {
		t.Errorf("PatchBase(2) after gc: %v, want ErrNoPrevious", err)
	}
	if plan, err := s.PlanSlime(2); err != nil || plan.Kind != SlimeFull {
		t.Errorf("PlanSlime(2) after gc = %+v, %v; want full", plan, err)
	}
	if plan, err := s.PlanSlime(1); !errors.Is(err, ErrNoSuchVersion) {
		t.Errorf("PlanSlime(1) after gc = %+v, %v; want ErrNoSuchVersion", plan, err)
	}
	rf, err := s.RenderPatch(3)
	if err != nil {
		t.Fatal(err)
	}
	mustEqualBytes(t, "patch of v3 after gc", readFile(t, rf.Path), patches[3])
	if _, _, err := s.RenderSlime(3); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"patches", "deltas"} {
		ents, _ := os.ReadDir(s.renders.renderDir(kind))
		for _, e := range ents {
			if e.Name()[:7] == "v000002" {
				t.Errorf("render/%s/%s of a version without a patch or delta is still cached", kind, e.Name())
			}
		}
	}
}

// TestRenderCacheKeepsRecentVersions: the cache keeps the renders of the newest
// renderKeepVersions versions only; an older one is rendered again, to the same bytes.
func TestRenderCacheKeepsRecentVersions(t *testing.T) {
	s, _ := newStore(t, Options{})
	rng := rand.New(rand.NewPCG(11, 12))
	data := bf16Like(rng, 64)
	last := uint64(renderKeepVersions + 3)
	for v := uint64(1); v <= last; v++ {
		data = perturb(rng, data, 2, 0.2)
		commitTree(t, s, v, map[string][]byte{"model.safetensors": safetensorsFile(t, testTensor{name: "w", dtype: delta.DTypeBF16, shape: []int64{64}, data: data})})
	}
	first, err := s.RenderPatch(2)
	if err != nil {
		t.Fatal(err)
	}
	want := readFile(t, first.Path)
	for v := uint64(3); v <= last; v++ {
		if _, err := s.RenderPatch(v); err != nil {
			t.Fatal(err)
		}
	}
	ents, _ := os.ReadDir(s.renders.renderDir("patches"))
	if len(ents) != 2*renderKeepVersions { // each patch and its sums
		t.Errorf("the cache holds %d patches and sums, want %d", len(ents), 2*renderKeepVersions)
	}
	if _, err := os.Stat(first.Path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the oldest patch is still cached: %v", err)
	}
	again, err := s.RenderPatch(2)
	if err != nil {
		t.Fatal(err)
	}
	mustEqualBytes(t, "patch of v2 rendered again", readFile(t, again.Path), want)
}
