package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"testing"

	"github.com/weightfs/weightfs/delta"
)

// slimeModel is a small two-file model whose tensors the tests change one by one.
type slimeModel struct {
	files map[string][]testTensor
	other map[string][]byte
}

func newSlimeModel(rng *rand.Rand) *slimeModel {
	return &slimeModel{
		files: map[string][]testTensor{
			"model-00001-of-00002.safetensors": {
				{name: "embed.weight", dtype: delta.DTypeBF16, shape: []int64{64, 32}, data: bf16Like(rng, 64*32)},
				{name: "layers.0.w", dtype: delta.DTypeBF16, shape: []int64{32, 32}, data: bf16Like(rng, 32*32)},
			},
			"model-00002-of-00002.safetensors": {
				{name: "layers.1.w", dtype: delta.DTypeF32, shape: []int64{16, 8}, data: randomBytes(rng, 16*8*4)},
				{name: "norm.weight", dtype: delta.DTypeBF16, shape: []int64{32}, data: bf16Like(rng, 32)},
			},
		},
		other: map[string][]byte{"config.json": []byte(`{"hidden_size": 32}`)},
	}
}

func (m *slimeModel) clone() *slimeModel {
	c := &slimeModel{files: map[string][]testTensor{}, other: map[string][]byte{}}
	for f, ts := range m.files {
		for _, t := range ts {
			t.data = append([]byte(nil), t.data...)
			t.shape = append([]int64(nil), t.shape...)
			c.files[f] = append(c.files[f], t)
		}
	}
	for k, v := range m.other {
		c.other[k] = append([]byte(nil), v...)
	}
	return c
}

func (m *slimeModel) tree(t testing.TB) map[string][]byte {
	out := map[string][]byte{}
	for f, ts := range m.files {
		out[f] = safetensorsFile(t, ts...)
	}
	for k, v := range m.other {
		out[k] = v
	}
	return out
}

// perturbAll changes about frac of every tensor's elements.
func (m *slimeModel) perturbAll(rng *rand.Rand, frac float64) {
	names := make([]string, 0, len(m.files))
	for f := range m.files {
		names = append(names, f)
	}
	sort.Strings(names) // the same draws on every run
	for _, f := range names {
		ts := m.files[f]
		for i := range ts {
			ts[i].data = perturb(rng, ts[i].data, ts[i].dtype.Size(), frac)
		}
	}
}

// TestPlanSlime walks a history through every case of docs/format.md Part III §5 and checks how each
// number is served, and which versions have a patch.
func TestPlanSlime(t *testing.T) {
	s, _ := newStore(t, Options{})
	rng := rand.New(rand.NewPCG(1, 2))
	m := newSlimeModel(rng)
	commit := func(v uint64) { commitTree(t, s, v, m.tree(t)) }

	commit(1) // first
	m.perturbAll(rng, 0.05)
	commit(2) // delta
	m.perturbAll(rng, 0.05)
	commit(5) // delta against 2 (3 and 4 are empty)
	commit(6) // nothing changed: a delta with no tensors
	m.other["config.json"] = []byte(`{"hidden_size": 33}`)
	commit(7) // non-safetensors file changed
	m.files["model-00002-of-00002.safetensors"][1].shape = []int64{2, 16}
	commit(8) // reshaped: new layout
	m.files["model-00002-of-00002.safetensors"][1].dtype = delta.DTypeF16
	commit(9) // retyped
	m.files["model-00002-of-00002.safetensors"][1].dtype = delta.DTypeBF16
	m.perturbAll(rng, 0.01)
	commit(10) // dtype back: another layout change
	m.perturbAll(rng, 0.01)
	commit(11) // delta
	delete(m.other, "config.json")
	commit(12) // non-safetensors file removed
	m.files["extra.safetensors"] = []testTensor{{name: "norm.weight", dtype: delta.DTypeBF16, shape: []int64{4}, data: bf16Like(rng, 4)}}
	commit(13) // a new safetensors file, and a tensor name in two files
	m.perturbAll(rng, 0.01)
	commit(14) // same layout, but the weight map cannot name norm.weight
	delete(m.files, "extra.safetensors")
	commit(15)

	tests := []struct {
		v       uint64
		kind    SlimeKind
		base    uint64
		noPatch error // nil: the version has a patch against the one before
	}{
		{1, SlimeFull, 0, ErrNoPrevious},
		{2, SlimeDelta, 1, nil},
		{3, SlimeEmpty, 0, ErrNoSuchVersion},
		{4, SlimeEmpty, 0, ErrNoSuchVersion},
		{5, SlimeDelta, 2, nil},
		{6, SlimeDelta, 5, nil},
		{7, SlimeFull, 0, nil},
		{8, SlimeFull, 0, ErrLayoutChanged},
		{9, SlimeFull, 0, ErrLayoutChanged},
		{10, SlimeFull, 0, ErrLayoutChanged},
		{11, SlimeDelta, 10, nil},
		{12, SlimeFull, 0, nil},
		{13, SlimeFull, 0, ErrLayoutChanged},
		{14, SlimeFull, 0, nil},
		{15, SlimeFull, 0, ErrLayoutChanged},
	}
	for _, tt := range tests {
		plan, err := s.PlanSlime(tt.v)
		if err != nil {
			t.Errorf("PlanSlime(%d): %v", tt.v, err)
			continue
		}
		if plan.Kind != tt.kind || plan.Base != tt.base || plan.Version != tt.v {
			t.Errorf("PlanSlime(%d) = %+v, want %s with base %d", tt.v, plan, tt.kind, tt.base)
		}
		if (plan.Kind == SlimeFull) != (plan.Reason != "") {
			t.Errorf("PlanSlime(%d): kind %s with reason %q", tt.v, plan.Kind, plan.Reason)
		}
		base, err := s.PatchBase(tt.v)
		switch {
		case tt.noPatch == nil && (err != nil || base != tt.v-1 && tt.v != 5):
			t.Errorf("PatchBase(%d) = %d, %v; want a patch", tt.v, base, err)
		case tt.noPatch != nil && !errors.Is(err, tt.noPatch):
			t.Errorf("PatchBase(%d) = %d, %v; want %v", tt.v, base, err, tt.noPatch)
		}
	}
	for _, v := range []uint64{0, 16, 1000} {
		if plan, err := s.PlanSlime(v); !errors.Is(err, ErrNoSuchVersion) {
			t.Errorf("PlanSlime(%d) = %+v, %v; want ErrNoSuchVersion", v, plan, err)
		}
	}

	// An empty delta is the index alone, in memory; a full one has no files.
	plan, files, err := s.RenderSlime(3)
	if err != nil || plan.Kind != SlimeEmpty || len(files) != 1 || files[0].Path != "" {
		t.Fatalf("RenderSlime(3) = %+v, %+v, %v", plan, files, err)
	}
	want, _ := delta.EncodeSlimeIndex(3, nil)
	mustEqualBytes(t, "index of empty delta 3", files[0].Data, want)
	if plan, files, err := s.RenderSlime(7); err != nil || plan.Kind != SlimeFull || files != nil {
		t.Fatalf("RenderSlime(7) = %+v, %+v, %v", plan, files, err)
	}
	// A version where nothing changed is the index alone with an empty weight map.
	_, files, err = s.RenderSlime(6)
	if err != nil || len(files) != 1 || files[0].Name != delta.SlimeIndexName {
		t.Fatalf("RenderSlime(6) = %+v, %v", files, err)
	}
	want, _ = delta.EncodeSlimeIndex(6, nil)
	mustEqualBytes(t, "index of unchanged version 6", readFile(t, files[0].Path), want)
}

func readFile(t testing.TB, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestRenderSlimeMatchesReference renders deltas whose tensors span several read chunks and
// compares the fast path with the reference byte for byte; applying each delta to the base
// version's tensors with delta.ApplySlimeDelta gives the new version's tensors.
func TestRenderSlimeMatchesReference(t *testing.T) {
	s, _ := newStore(t, Options{})
	rng := rand.New(rand.NewPCG(3, 4))
	m := newSlimeModel(rng)
	big := 3*slimeChunk/2 + 6 // bf16 elements: the tensor spans three chunks
	m.files["model-00001-of-00002.safetensors"][1] = testTensor{name: "layers.0.w", dtype: delta.DTypeBF16, shape: []int64{int64(big)}, data: bf16Like(rng, big)}
	commitTree(t, s, 1, m.tree(t))
	prev := m.clone()
	m.perturbAll(rng, 0.02)
	// Changes right at the chunk boundaries.
	w := m.files["model-00001-of-00002.safetensors"][1].data
	for _, p := range []int{0, slimeChunk - 1, slimeChunk, 2*slimeChunk - 1, 2 * slimeChunk, len(w) - 1} {
		w[p] ^= 0x5a
	}
	commitTree(t, s, 3, m.tree(t))

	plan, files, err := s.RenderSlime(3)
	if err != nil || plan.Kind != SlimeDelta || plan.Base != 1 {
		t.Fatalf("RenderSlime(3) = %+v, %v", plan, err)
	}
	cur, _ := s.versions.sealedVersion(3)
	base, _ := s.versions.sealedVersion(1)
	refDir := t.TempDir()
	ref, err := s.renders.writeSlimeDeltaReference(cur, base, refDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(ref) != len(files) {
		t.Fatalf("fast path wrote %d files, the reference %d", len(files), len(ref))
	}
	for i := range ref {
		if files[i].Name != ref[i].Name || files[i].Size != ref[i].Size {
			t.Fatalf("file %d: %s (%d bytes), reference %s (%d bytes)", i, files[i].Name, files[i].Size, ref[i].Name, ref[i].Size)
		}
		mustEqualBytes(t, files[i].Name, readFile(t, files[i].Path), readFile(t, ref[i].Path))
	}

	// WriteSlimeDelta writes the same files and nothing else.
	out := t.TempDir()
	names, err := s.WriteSlimeDelta(3, out)
	if err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(out)
	if len(ents) != len(names) || len(names) != len(files) {
		t.Fatalf("WriteSlimeDelta wrote %d files, named %v", len(ents), names)
	}
	for _, f := range files {
		mustEqualBytes(t, "WriteSlimeDelta "+f.Name, readFile(t, filepath.Join(out, f.Name)), readFile(t, f.Path))
	}
	if _, err := s.WriteSlimeDelta(1, t.TempDir()); err == nil {
		t.Error("WriteSlimeDelta of the first version succeeded")
	}

	// Apply: base tensors + delta = new tensors.
	tensors := map[string][]byte{}
	for _, ts := range prev.files {
		for _, tt := range ts {
			tensors[tt.name] = append([]byte(nil), tt.data...)
		}
	}
	index := readFile(t, files[0].Path)
	open := func(name string) (io.ReaderAt, int64, error) {
		rf, ok := findFile(files, name)
		if !ok {
			return nil, 0, os.ErrNotExist
		}
		return bytes.NewReader(readFile(t, rf.Path)), rf.Size, nil
	}
	if _, err := delta.ApplySlimeDelta(index, open, func(name string) ([]byte, error) { return tensors[name], nil }); err != nil {
		t.Fatalf("apply delta: %v", err)
	}
	for _, ts := range m.files {
		for _, tt := range ts {
			mustEqualBytes(t, "applied "+tt.name, tensors[tt.name], tt.data)
		}
	}
	var idx struct {
		Metadata  map[string]string `json:"metadata"`
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(index, &idx); err != nil {
		t.Fatal(err)
	}
	changed := 0
	for f, ts := range m.files {
		for i, tt := range ts {
			if !bytes.Equal(tt.data, prev.files[f][i].data) {
				changed++
			}
		}
	}
	if idx.Metadata["version"] != "000003" || idx.Metadata["base_version"] != "000002" || len(idx.WeightMap) != changed || changed == 0 {
		t.Errorf("index: %s", index)
	}
}

func findFile(files []RenderedFile, name string) (RenderedFile, bool) {
	for _, f := range files {
		if f.Name == name {
			return f, true
		}
	}
	return RenderedFile{}, false
}

// FuzzLoadRenderedDir feeds arbitrary render.json contents: a list is accepted only if every
// file it names is a plain name in the directory with the listed size.
func FuzzLoadRenderedDir(f *testing.F) {
	f.Add([]byte(`[{"name":"model.safetensors.index.json","size":5},{"name":"a.safetensors","size":3}]`))
	f.Add([]byte(`[{"name":"../x","size":1}]`))
	f.Add([]byte(`[{"name":"render.json","size":1}]`))
	f.Add([]byte(`[{"name":"a.safetensors","size":-1}]`))
	f.Add([]byte(`[{"name":"a.safetensors","size":3,"crc32c":[7]}]`))
	f.Add([]byte(`[{"name":"a.safetensors","size":3,"crc32c":[7,8]}]`))
	f.Add([]byte(`{}`))
	f.Add([]byte(`null`))
	dir := f.TempDir()
	for name, size := range map[string]int{"model.safetensors.index.json": 5, "a.safetensors": 3} {
		if err := os.WriteFile(filepath.Join(dir, name), make([]byte, size), 0o644); err != nil {
			f.Fatal(err)
		}
	}
	f.Fuzz(func(t *testing.T, list []byte) {
		if err := os.WriteFile(filepath.Join(dir, slimeRenderFile), list, 0o644); err != nil {
			t.Fatal(err)
		}
		files, err := (&renders{}).loadRenderedDir(dir)
		if err != nil {
			return
		}
		for _, rf := range files {
			st, err := os.Stat(rf.Path)
			if err != nil || st.Size() != rf.Size || filepath.Dir(rf.Path) != dir || rf.Name == slimeRenderFile ||
				rf.check == nil || int64(len(rf.check.sums.crcs)) != chunkCount(rf.Size, sumChunk) {
				t.Fatalf("accepted %+v from %q: %v", rf, list, err)
			}
		}
	})
}
