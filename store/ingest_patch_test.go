package store

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"math/rand/v2"
	"os"
	"reflect"
	"slices"
	"testing"

	"github.com/weightfs/weightfs/delta"
)

// patchVersions are the two versions the patch tests go between: in v2 tensor a changes by
// about 1% (a delta), c by half (an anchor), b not at all, config.json changes (carried
// whole), notes.txt is new, and other.safetensors does not change.
func patchVersions(t testing.TB) (v1, v2 map[string][]byte) {
	rng := rand.New(rand.NewPCG(31, 1))
	a, b, c := bf16Like(rng, 40_000), bf16Like(rng, 30_000), bf16Like(rng, 20_000)
	o := bf16Like(rng, 10_000)
	model := func(a, b, c []byte) []byte {
		return safetensorsFile(t,
			testTensor{"a", delta.DTypeBF16, []int64{200, 200}, a},
			testTensor{"b", delta.DTypeBF16, []int64{30_000}, b},
			testTensor{"c", delta.DTypeBF16, []int64{20_000}, c})
	}
	other := safetensorsFile(t, testTensor{"o", delta.DTypeBF16, []int64{10_000}, o})
	// A file whose header changes in place (its metadata), patched by tensor with the new
	// header (docs/format.md Part III §2, header_files).
	stepped := func(step string, m []byte) []byte {
		hdr, err := delta.EncodeHeader(map[string]string{"step": step}, []delta.Tensor{{Name: "m", DType: delta.DTypeBF16, Shape: []int64{5_000}}})
		if err != nil {
			t.Fatal(err)
		}
		return append(hdr, m...)
	}
	m := bf16Like(rng, 5_000)
	v1 = map[string][]byte{"model.safetensors": model(a, b, c), "sub/other.safetensors": other, "config.json": []byte(`{"step":1}`),
		"meta.safetensors": stepped("1", m)}
	v2 = map[string][]byte{"model.safetensors": model(perturb(rng, a, 2, 0.01), b, perturb(rng, c, 2, 0.5)),
		"sub/other.safetensors": other, "config.json": []byte(`{"step":2}`), "notes.txt": []byte("two\n"),
		"meta.safetensors": stepped("2", perturb(rng, m, 2, 0.01))}
	return v1, v2
}

// renderedPatch is the patch from v1 to v2 as a store that holds both serves it.
func renderedPatch(t testing.TB, v1, v2 map[string][]byte) (*Store, []byte) {
	a, _ := newStore(t, Options{})
	commitTree(t, a, 1, v1)
	commitTree(t, a, 2, v2)
	var buf bytes.Buffer
	if _, err := a.WritePatch(2, &writerAtBuffer{&buf}); err != nil {
		t.Fatal(err)
	}
	return a, buf.Bytes()
}

// TestCommitPatchEqualsIngest: a patch written into a store that holds only its base seals
// the version with the manifest and the objects a full ingest of the same files stores (so no
// full copy: only the deltas and the anchor a full ingest writes), and reads back its bytes.
func TestCommitPatchEqualsIngest(t *testing.T) {
	v1, v2 := patchVersions(t)
	a, patch := renderedPatch(t, v1, v2)
	b, _ := newStore(t, Options{})
	commitTree(t, b, 1, v1)

	info, err := b.CommitPatch(bytes.NewReader(patch), int64(len(patch)), 2)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := a.Version(2)
	if info.Number != 2 || info.StoredBytes != want.StoredBytes || info.ChangedElems != want.ChangedElems || info.Files != want.Files {
		t.Fatalf("sealed %+v, a full ingest sealed %+v", info, want)
	}
	ma, mb := manifestOf(t, a, 2), manifestOf(t, b, 2)
	if !reflect.DeepEqual(ma.Files, mb.Files) || !reflect.DeepEqual(ma.Dirs, mb.Dirs) || ma.Previous != mb.Previous {
		t.Fatalf("manifest of the patched version differs from the ingested one:\n%+v\n%+v", mb.Files, ma.Files)
	}
	if ma.Stats != mb.Stats {
		t.Fatalf("stats %+v, ingest %+v", mb.Stats, ma.Stats)
	}
	for p, content := range v2 {
		mustEqualBytes(t, p, readWhole(t, b, 2, p), content)
	}
	if ka, kb := objectKinds(t, a), objectKinds(t, b); !reflect.DeepEqual(ka, kb) {
		t.Fatalf("objects %v, a full ingest stores %v", kb, ka)
	}
	// The version serves its own patch, equal to the one it came from.
	var again bytes.Buffer
	if _, err := b.WritePatch(2, &writerAtBuffer{&again}); err != nil {
		t.Fatal(err)
	}
	mustEqualBytes(t, "patch of the patched version", again.Bytes(), patch)
	p, err := delta.OpenPatch(bytes.NewReader(patch), int64(len(patch)))
	if err != nil {
		t.Fatal(err)
	}
	if f, ok := p.File("meta.safetensors"); !ok || f.NewHeader == nil || f.Whole {
		t.Fatalf("the test's patch does not change meta.safetensors's header in place: %+v", f)
	}
}

func manifestOf(t testing.TB, s *Store, v uint64) *manifest {
	t.Helper()
	ver, err := s.versions.sealedVersion(v)
	if err != nil {
		t.Fatal(err)
	}
	return ver.m
}

// TestCommitPatchRefusals: each kind of bad patch is refused with ErrBadPatch, naming what is
// wrong, and leaves the store as it was: no version, no object; the good patch then commits.
func TestCommitPatchRefusals(t *testing.T) {
	v1, v2 := patchVersions(t)
	_, good := renderedPatch(t, v1, v2)
	s, root := newStore(t, Options{})
	commitTree(t, s, 1, v1)
	objects := func() []string {
		var ids []string
		if err := s.be.ListObjects(func(id ID, _ int64) error { ids = append(ids, id.String()); return nil }); err != nil {
			t.Fatal(err)
		}
		slices.Sort(ids)
		return ids
	}
	before := objects()

	// build writes a patch from base to result files of model.safetensors, then lets forge
	// rewrite its header (same length) so that it claims v1's file as its base.
	build := func(model, baseV uint64, base, result []byte) []byte {
		var buf bytes.Buffer
		_, err := delta.BuildPatchWith(&writerAtBuffer{&buf}, model, baseV, []delta.PatchSource{{Name: "model.safetensors",
			Base: bytes.NewReader(base), BaseSize: int64(len(base)), Result: bytes.NewReader(result), ResultSize: int64(len(result))}},
			delta.PatchBuildOptions{Shapes: true})
		if err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	forgeBase := func(p, claimed, real []byte) []byte {
		from, to := IDOf(claimed), IDOf(real)
		return bytes.Replace(p, []byte(hex.EncodeToString(from[:])), []byte(hex.EncodeToString(to[:])), 1)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	x := bf16Like(rng, 40_000)
	renamed := safetensorsFile(t, testTensor{"z", delta.DTypeBF16, []int64{200, 200}, x},
		testTensor{"b", delta.DTypeBF16, []int64{30_000}, x[:60_000]}, testTensor{"c", delta.DTypeBF16, []int64{20_000}, x[:40_000]})
	retyped := safetensorsFile(t, testTensor{"a", delta.DTypeF16, []int64{200, 200}, x},
		testTensor{"b", delta.DTypeBF16, []int64{30_000}, x[:60_000]}, testTensor{"c", delta.DTypeBF16, []int64{20_000}, x[:40_000]})
	reshaped := safetensorsFile(t, testTensor{"a", delta.DTypeBF16, []int64{100, 400}, x},
		testTensor{"b", delta.DTypeBF16, []int64{30_000}, x[:60_000]}, testTensor{"c", delta.DTypeBF16, []int64{20_000}, x[:40_000]})
	change := func(f []byte) []byte {
		g := slices.Clone(f)
		g[len(g)-1] ^= 1
		g[len(g)-100_001] ^= 1 // the last byte of the first tensor
		return g
	}
	p, err := delta.OpenPatch(bytes.NewReader(good), int64(len(good)))
	if err != nil {
		t.Fatal(err)
	}
	at := func(name string) int64 {
		e, ok := p.Header.Tensor(name)
		if !ok {
			t.Fatalf("no %s in the patch", name)
		}
		return p.Header.DataStart() + e.Begin
	}
	outside := slices.Clone(good)
	binary.LittleEndian.PutUint32(outside[at("a.indices"):], 40_000)
	wrongValue := slices.Clone(good)
	wrongValue[at("a.values")] ^= 0x40

	cases := []struct {
		name, patch []byte
		v           uint64
		says        string
	}{
		{[]byte("another version's name"), good, 3, "model_version is 2, its name says 3"},
		{[]byte("base not the latest"), build(8, 7, v1["model.safetensors"], change(v1["model.safetensors"])), 8, "base_version is 7, the latest version is 1"},
		{[]byte("base identity"), build(2, 1, change(v1["model.safetensors"]), v1["model.safetensors"]), 2, "base_sha256"},
		{[]byte("a tensor the base lacks"), forgeBase(build(2, 1, renamed, change(renamed)), renamed, v1["model.safetensors"]), 2, `no tensor "z"`},
		{[]byte("another dtype"), forgeBase(build(2, 1, retyped, change(retyped)), retyped, v1["model.safetensors"]), 2, `tensor "a" of model.safetensors is BF16, the patch gives F16`},
		{[]byte("another shape"), forgeBase(build(2, 1, reshaped, change(reshaped)), reshaped, v1["model.safetensors"]), 2, "has shape [200 200], the patch gives [100 400]"},
		{[]byte("truncated"), good[:len(good)-3], 2, "read the patch"},
		{[]byte("a position outside the tensor"), outside, 2, `tensor "a": index 40000`},
		{[]byte("a result that is not its result_sha256"), wrongValue, 2, "its result_sha256 is"},
		{[]byte("not a patch"), v1["model.safetensors"], 2, "read the patch"},
	}
	for _, c := range cases {
		_, err := s.CommitPatch(bytes.NewReader(c.patch), int64(len(c.patch)), c.v)
		if !errors.Is(err, ErrBadPatch) || !bytes.Contains([]byte(err.Error()), []byte(c.says)) {
			t.Fatalf("%s: got %v, want ErrBadPatch saying %q", c.name, err, c.says)
		}
		if latest, _ := s.Latest(); latest != 1 || len(s.Versions()) != 1 {
			t.Fatalf("%s: versions %v after a refusal", c.name, s.Versions())
		}
	}
	// What a refused patch had stored is swept when the store next opens for writing (or at
	// gc), as after any aborted version.
	if err := closeStore(t, s); err != nil {
		t.Fatal(err)
	}
	s = openStore(t, root, Options{})
	if after := objects(); !slices.Equal(after, before) {
		t.Fatalf("objects after the refusals: %d, before: %d", len(after), len(before))
	}
	if _, err := s.CommitPatch(bytes.NewReader(good), int64(len(good)), 2); err != nil {
		t.Fatalf("the good patch after the refusals: %v", err)
	}
	for p, content := range v2 {
		mustEqualBytes(t, p, readWhole(t, s, 2, p), content)
	}
}

// TestCommitPatchCrash: a process that dies while a patch's version is written or sealed
// leaves no version and no object behind before the manifest is durable, and the whole version
// after; the store opens, verifies and takes the patch again.
func TestCommitPatchCrash(t *testing.T) {
	v1, v2 := patchVersions(t)
	_, patch := renderedPatch(t, v1, v2)
	for _, point := range []string{"seal-objects-written", "seal-objects-synced", "seal-manifest-written"} {
		t.Run(point, func(t *testing.T) {
			s, root := newStore(t, Options{})
			commitTree(t, s, 1, v1)
			s.hook = func(p string) error {
				if p == point {
					return errInjected
				}
				return nil
			}
			if _, err := s.CommitPatch(bytes.NewReader(patch), int64(len(patch)), 2); !errors.Is(err, errInjected) {
				t.Fatalf("commit with a failure at %s: %v", point, err)
			}
			crash(s)
			s = openStore(t, root, Options{})
			sealed := point == "seal-manifest-written"
			if s.versions.isSealed(2) != sealed {
				t.Fatalf("after a crash at %s: version 2 sealed %v", point, !sealed)
			}
			if _, err := s.Verify(nil); err != nil {
				t.Fatal(err)
			}
			s.writeMu.Lock()
			n, _, err := s.collector.sweepLocked()
			s.writeMu.Unlock()
			if err != nil || n != 0 {
				t.Fatalf("after reopen, a sweep still finds %d unreferenced objects (%v)", n, err)
			}
			if !sealed {
				if _, err := s.CommitPatch(bytes.NewReader(patch), int64(len(patch)), 2); err != nil {
					t.Fatal(err)
				}
			}
			for p, content := range v2 {
				mustEqualBytes(t, p, readWhole(t, s, 2, p), content)
			}
		})
	}
}

// TestPatchedVersionsLikeAnyOther: versions that came in as patches are versions like the
// rest: with store a's versions 2..5 given to store b as their patches, b verifies clean,
// serves the same catch-up patches and slime deltas, and gc leaves both stores the same
// versions with the same bytes.
func TestPatchedVersionsLikeAnyOther(t *testing.T) {
	versions, _ := deltaInSeries(t, 5)
	a, _ := newStore(t, Options{})
	commitAll(t, a, versions)
	b, _ := newStore(t, Options{})
	commitTree(t, b, 1, versions[0])
	for v := uint64(2); v <= 5; v++ {
		var buf bytes.Buffer
		if _, err := a.WritePatch(v, &writerAtBuffer{&buf}); err != nil {
			t.Fatal(err)
		}
		if _, err := b.CommitPatch(bytes.NewReader(buf.Bytes()), int64(buf.Len()), v); err != nil {
			t.Fatalf("patch to version %d: %v", v, err)
		}
	}
	if rep, err := b.Verify(nil); err != nil || len(rep.Damaged) != 0 || rep.Versions != 5 {
		t.Fatalf("verify of the store whose versions came as patches: %+v %v", rep, err)
	}
	mustEqualBytes(t, "catch-up patch 1 -> 5", catchupPatch(t, b, 5, 1), catchupPatch(t, a, 5, 1))
	mustEqualBytes(t, "catch-up patch 3 -> 5", catchupPatch(t, b, 5, 3), catchupPatch(t, a, 5, 3))
	_, fa, err := a.RenderSlime(4)
	if err != nil {
		t.Fatal(err)
	}
	_, fb, err := b.RenderSlime(4)
	if err != nil || len(fa) != len(fb) {
		t.Fatalf("slime delta of version 4: %d files, %d wanted (%v)", len(fb), len(fa), err)
	}
	renderBytes := func(rf RenderedFile) []byte {
		if rf.Data != nil {
			return rf.Data
		}
		b, err := os.ReadFile(rf.Path)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	for i := range fa {
		if fa[i].Name != fb[i].Name {
			t.Fatalf("slime delta of version 4: file %q, %q wanted", fb[i].Name, fa[i].Name)
		}
		mustEqualBytes(t, "slime delta file "+fa[i].Name, renderBytes(fb[i]), renderBytes(fa[i]))
	}
	for _, s := range []*Store{a, b} {
		if _, err := s.GC(2); err != nil {
			t.Fatal(err)
		}
	}
	if va, vb := a.Versions(), b.Versions(); len(va) != 2 || len(vb) != 2 || va[0].Number != vb[0].Number {
		t.Fatalf("after gc: %v and %v", vb, va)
	}
	for _, v := range []uint64{4, 5} {
		mustEqualBytes(t, "version after gc", readWhole(t, b, v, "model.safetensors"), versions[v-1]["model.safetensors"])
	}
	if rep, err := b.Verify(nil); err != nil || len(rep.Damaged) != 0 {
		t.Fatalf("verify after gc: %+v %v", rep, err)
	}
}
