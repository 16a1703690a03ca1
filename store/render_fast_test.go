package store

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/weightfs/weightfs/delta"
	"github.com/weightfs/weightfs/gen"
	"github.com/weightfs/weightfs/internal/logtest"
	"github.com/weightfs/weightfs/internal/testfiles"
)

// fastAndReference writes the patch of v from its predecessor both ways: from the deltas
// (which must apply) and by the reference path (delta.BuildPatchWith over both versions).
func fastAndReference(t *testing.T, s *Store, v uint64) (fast, ref []byte) {
	t.Helper()
	cur, base, err := s.renders.patchVersions(v)
	if err != nil {
		t.Fatal(err)
	}
	var fb bytes.Buffer
	if _, err := s.renders.writeFastPatch(base, cur, &writerAtBuffer{&fb}, delta.PatchBuildOptions{Shapes: true}); err != nil {
		t.Fatalf("version %d: fast path: %v", v, err)
	}
	s.renders.referencePatch = true
	defer func() { s.renders.referencePatch = false }()
	var rb bytes.Buffer
	if _, err := s.WritePatch(v, &writerAtBuffer{&rb}); err != nil {
		t.Fatalf("version %d: reference path: %v", v, err)
	}
	return fb.Bytes(), rb.Bytes()
}

// TestFastPatchMatchesReference renders every patch of a generated series from the deltas
// and by the reference path, on a series whose delta sections are of body versions 1 and 2
// and with a non-safetensors file that changes in some versions (carried whole): the bytes
// must be equal, for the writer and for a reader whose copy holds the newest version.
func TestFastPatchMatchesReference(t *testing.T) {
	trees := testfiles.ShardedSeries(t, 7, 21)
	for k := range trees {
		trees[k]["notes.txt"] = fmt.Appendf(nil, "step %d\n", k/2) // changes every other version
	}
	s, root := newStore(t, Options{})
	s.objects.contextChain = 3
	for k, files := range trees {
		commitTree(t, s, uint64(k+1), files)
	}
	var sections [3]int64
	for v := uint64(2); v <= uint64(len(trees)); v++ {
		st := versionSections(t, s, v)
		sections[1] += st.sections[1]
		sections[2] += st.sections[2]
	}
	if sections[1] == 0 || sections[2] == 0 {
		t.Fatalf("the series has %d version-1 and %d version-2 delta sections, want both", sections[1], sections[2])
	}
	r := openStore(t, root, Options{ReadOnly: true, CacheDir: t.TempDir()})
	for _, st := range []*Store{s, r} {
		for v := uint64(2); v <= uint64(len(trees)); v++ {
			fast, ref := fastAndReference(t, st, v)
			mustEqualBytes(t, fmt.Sprintf("read-only %v: patch of version %d", st.readOnly, v), fast, ref)
			p, err := delta.OpenPatch(bytes.NewReader(fast), int64(len(fast)))
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Verify(); err != nil {
				t.Fatal(err)
			}
			if v == 2 && (len(p.Plan.Tensors) == 0 || len(p.Plan.Files) < 4) {
				t.Errorf("patch of version 2 changes %d tensors in %d files", len(p.Plan.Tensors), len(p.Plan.Files))
			}
		}
	}
	// The render takes the fast path and gives the same file.
	rf, err := r.RenderPatch(uint64(len(trees)))
	if err != nil {
		t.Fatal(err)
	}
	_, ref := fastAndReference(t, r, uint64(len(trees)))
	mustEqualBytes(t, "rendered patch", readFile(t, rf.Path), ref)
}

// TestFastPatchFallsBack: where the deltas cannot give the patch (a tensor stored whole, with
// no delta section against its base) the fast path says so and the patch is the reference.
func TestFastPatchFallsBack(t *testing.T) {
	trees := testfiles.ShardedSeries(t, 2, 22)
	// Version 2 changes every element of one tensor: more than an eighth changed is stored
	// whole, without a link past a quarter of the content.
	second := map[string][]byte{}
	for name, b := range trees[1] {
		second[name] = b
	}
	trees[0]["extra.safetensors"] = safetensorsFile(t, testTensor{name: "w", dtype: delta.DTypeU8, shape: []int64{4096}, data: make([]byte, 4096)})
	s2, _ := newStore(t, Options{})
	commitTree(t, s2, 1, trees[0])
	w2 := safetensorsFile(t, testTensor{name: "w", dtype: delta.DTypeU8, shape: []int64{4096}, data: bytes.Repeat([]byte{7}, 4096)})
	second["extra.safetensors"] = w2
	commitTree(t, s2, 2, second)
	cur, base, err := s2.renders.patchVersions(2)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if _, err := s2.renders.writeFastPatch(base, cur, &writerAtBuffer{&b}, delta.PatchBuildOptions{Shapes: true}); !errors.Is(err, errNoFastPatch) {
		t.Fatalf("fast path with a tensor stored whole: %v, want errNoFastPatch", err)
	}
	var got bytes.Buffer
	if _, err := s2.WritePatch(2, &writerAtBuffer{&got}); err != nil {
		t.Fatal(err)
	}
	s2.renders.referencePatch = true
	var ref bytes.Buffer
	if _, err := s2.WritePatch(2, &writerAtBuffer{&ref}); err != nil {
		t.Fatal(err)
	}
	mustEqualBytes(t, "patch after the fallback", got.Bytes(), ref.Bytes())
}

// TestFastPatchDamagedDelta: a delta object damaged on disk makes the patch fail with
// ErrCorrupt and leaves no render behind, never a wrong patch.
func TestFastPatchDamagedDelta(t *testing.T) {
	trees := testfiles.ShardedSeries(t, 3, 23)
	s, root := newLooseStore(t, Options{})
	for k, files := range trees {
		commitTree(t, s, uint64(k+1), files)
	}
	ver, err := s.versions.loadVersion(3)
	if err != nil {
		t.Fatal(err)
	}
	var victim ID
	for i := range ver.m.Files {
		for _, tn := range ver.m.Files[i].Tensors {
			if m, err := s.objects.meta(tn.ID); err == nil && m.Kind == kindDelta && victim == (ID{}) {
				victim = tn.ID
			}
		}
	}
	if victim == (ID{}) {
		t.Fatal("version 3 has no delta object")
	}
	_, want := fastAndReference(t, s, 3)
	obj := s.be.given.(*localBackend).ObjectPath(victim)
	data := readFile(t, obj)
	data[len(data)-10] ^= 0x01 // in the delta section
	os.Chmod(obj, 0o644)
	if err := os.WriteFile(obj, data, 0o444); err != nil {
		t.Fatal(err)
	}
	// The writer's copy holds version 3 and its memory the sections it checked: the patch is
	// the one from before the damage, or ErrCorrupt, never another.
	expectDamage(s)
	var b bytes.Buffer
	if _, err := s.WritePatch(3, &writerAtBuffer{&b}); err != nil && !errors.Is(err, ErrCorrupt) {
		t.Errorf("WritePatch with a damaged delta object: %v; want ErrCorrupt or the patch", err)
	} else if err == nil {
		mustEqualBytes(t, "patch after the damage", b.Bytes(), want)
	}
	closeStore(t, s)
	cache := t.TempDir()
	r := openLoose(t, root, Options{ReadOnly: true, CacheDir: cache})
	expectDamage(r)
	if rf, err := r.RenderPatch(3); !errors.Is(err, ErrCorrupt) {
		t.Errorf("RenderPatch with a damaged delta object = %+v, %v; want ErrCorrupt", rf, err)
	}
	if ents, _ := os.ReadDir(r.renders.renderDir("patches")); len(ents) != 0 {
		t.Errorf("render/patches holds %d entries after a failed render", len(ents))
	}
}

// TestFastPatchChecksBaseDigest: the base digest a patch derives through the deltas must
// equal the one an earlier render computed from the base's own bytes, else ErrCorrupt.
func TestFastPatchChecksBaseDigest(t *testing.T) {
	trees := testfiles.ShardedSeries(t, 3, 24)
	s, _ := newStore(t, Options{})
	for k, files := range trees {
		commitTree(t, s, uint64(k+1), files)
	}
	cur2, base1, err := s.renders.patchVersions(2)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if _, err := s.renders.writeFastPatch(base1, cur2, &writerAtBuffer{&b}, delta.PatchBuildOptions{Shapes: true}); err != nil {
		t.Fatal(err)
	}
	fast, ref := fastAndReference(t, s, 3) // checked against version 2's digests, which agree
	mustEqualBytes(t, "patch of version 3", fast, ref)
	// A digest that does not agree (as a delta section that passed its checks but leads
	// elsewhere would give) fails the patch.
	for i := range cur2.m.Files {
		f := &cur2.m.Files[i]
		if _, ok := s.renders.fileXXH3.get(f.SHA256); ok {
			s.renders.fileXXH3.add(f.SHA256, [16]byte{1, 2, 3}, 64)
		}
	}
	cur3, _, err := s.renders.patchVersions(3)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.renders.writeFastPatch(cur2, cur3, &writerAtBuffer{&b}, delta.PatchBuildOptions{Shapes: true}); !errors.Is(err, ErrCorrupt) {
		t.Errorf("patch whose base digest disagrees: %v, want ErrCorrupt", err)
	}
}

// BenchmarkPatchRender measures the CPU time of the one-step patch of a generated checkpoint
// (32M bf16 parameters, 64 MiB, lr 3e-6: ~2.5% of the elements change per step) by a reader
// whose copy holds the newest version, as the follower's mount renders it: from the deltas
// and by the reference path. Reported as CPU-seconds per GiB of checkpoint; run with
// -benchtime=1x (docs/benchmarks.md, figure 9).
func BenchmarkPatchRender(b *testing.B) {
	cfg := gen.ConfigForParams(32_000_000, 3e-6, 40)
	m, err := gen.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	s, root := newStore(b, Options{Logger: logtest.New(func(string, ...any) {})})
	var logical int64
	for v := uint64(1); v <= 3; v++ {
		if v > 1 {
			m.Step()
		}
		files, err := m.CheckpointFiles()
		if err != nil {
			b.Fatal(err)
		}
		if v == 3 {
			for _, f := range files {
				logical += int64(len(f))
			}
		}
		commitTree(b, s, v, files)
	}
	r := openStore(b, root, Options{ReadOnly: true, Materialize: true, CacheDir: b.TempDir(), Logger: logtest.New(func(string, ...any) {})})
	for _, ref := range []bool{false, true} {
		b.Run(map[bool]string{false: "deltas", true: "reference"}[ref], func(b *testing.B) {
			r.renders.referencePatch = ref
			var cpu float64
			for range b.N {
				p := filepath.Join(b.TempDir(), "patch")
				start := cpuSeconds()
				if err := r.renders.writePatchFile(3, p); err != nil {
					b.Fatal(err)
				}
				cpu += cpuSeconds() - start
			}
			b.ReportMetric(cpu/float64(b.N)/(float64(logical)/(1<<30)), "CPU-s/GiB")
		})
	}
}
