package store

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/weightfs/weightfs/delta"
	"github.com/weightfs/weightfs/gen"
)

// TestCatchupPatch takes 11 versions at RL density (about 1% of elements per step) and checks
// the catch-up patches to version 11 from K = 10, 9, 6 and 1: applied to a directory holding
// version K (delta.ApplyPatchDir) each gives version 11 bit for bit; each carries exactly the
// elements that differ between K and 11 (the union of the steps' changes, less any that came
// back); and its size is logged beside the sum of the one-step patches it replaces. The
// rendered file equals the written one, the one-step case equals WritePatch, and a pair with
// another tensor layout has no patch.
func TestCatchupPatch(t *testing.T) {
	rng := rand.New(rand.NewPCG(18, 1))
	s, _ := newStore(t, Options{})
	m := newSlimeModel(rng)
	m.files["model-00002-of-00002.safetensors"] = append(m.files["model-00002-of-00002.safetensors"],
		testTensor{name: "big", dtype: delta.DTypeBF16, shape: []int64{256, 256}, data: bf16Like(rng, 1<<16)})
	const last = 11
	trees := map[uint64]map[string][]byte{}
	for v := uint64(1); v <= last; v++ {
		if v > 1 {
			m.perturbAll(rng, 0.01)
		}
		if v == 4 {
			m.other["config.json"] = []byte(`{"hidden_size": 32, "step": 4}`)
		}
		trees[v] = m.tree(t)
		commitTree(t, s, v, trees[v])
	}
	oneStep := map[uint64]int64{}
	for v := uint64(2); v <= last; v++ {
		var b bytes.Buffer
		n, err := s.WritePatch(v, &writerAtBuffer{&b})
		if err != nil {
			t.Fatal(err)
		}
		oneStep[v] = n
	}
	for _, k := range []uint64{last - 1, last - 2, last - 5, last - 10} {
		var b bytes.Buffer
		size, err := s.WritePatchFrom(last, k, &writerAtBuffer{&b})
		if err != nil {
			t.Fatalf("patch from %d: %v", k, err)
		}
		if k == last-1 {
			var one bytes.Buffer
			if _, err := s.WritePatch(last, &writerAtBuffer{&one}); err != nil {
				t.Fatal(err)
			}
			mustEqualBytes(t, "catch-up patch from the predecessor", b.Bytes(), one.Bytes())
		}
		p, err := delta.OpenPatch(bytes.NewReader(b.Bytes()), int64(b.Len()))
		if err != nil {
			t.Fatal(err)
		}
		if p.Plan.BaseVersion != k || p.Plan.ModelVersion != last {
			t.Fatalf("patch from %d says %d -> %d", k, p.Plan.BaseVersion, p.Plan.ModelVersion)
		}
		if got, want := p.Plan.TotalChanged(), differingElements(t, trees[k], trees[last]); got != want {
			t.Errorf("patch from %d carries %d elements, versions differ in %d", k, got, want)
		}
		var sum int64
		for v := k + 1; v <= last; v++ {
			sum += oneStep[v]
		}
		t.Logf("catch-up %2d -> %d: %7d bytes, %6d elements; %d one-step patches: %7d bytes",
			k, last, size, p.Plan.TotalChanged(), last-k, sum)

		rf, err := s.RenderPatchFrom(last, k)
		if err != nil {
			t.Fatal(err)
		}
		mustEqualBytes(t, "rendered catch-up patch", readFile(t, rf.Path), b.Bytes())

		dir := writeTree(t, t.TempDir(), trees[k])
		pp := filepath.Join(t.TempDir(), "patch.safetensors")
		if err := os.WriteFile(pp, b.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := delta.ApplyPatchDir(pp, dir, delta.ApplyOptions{}); err != nil {
			t.Fatalf("apply patch from %d: %v", k, err)
		}
		for name, want := range trees[last] {
			mustEqualBytes(t, "version "+name+" patched from an earlier version", readFile(t, filepath.Join(dir, name)), want)
		}
	}

	// Another layout at the far end: no patch; a base that is not below: none either.
	m.files["model-00002-of-00002.safetensors"][1].shape = []int64{2, 16}
	commitTree(t, s, last+1, m.tree(t))
	if err := s.PatchBaseFrom(last+1, 3); !errors.Is(err, ErrLayoutChanged) {
		t.Errorf("patch across a layout change: %v, want ErrLayoutChanged", err)
	}
	if _, err := s.RenderPatchFrom(last, last); !errors.Is(err, ErrNoPrevious) {
		t.Errorf("patch from itself: %v, want ErrNoPrevious", err)
	}
	if _, err := s.RenderPatchFrom(last, 0); !errors.Is(err, ErrNoSuchVersion) {
		t.Errorf("patch from a missing version: %v, want ErrNoSuchVersion", err)
	}
}

// differingElements counts the tensor elements that differ between two trees of one layout.
func differingElements(t *testing.T, a, b map[string][]byte) int64 {
	t.Helper()
	var n int64
	for name, bb := range b {
		ab := a[name]
		h, err := delta.ReadHeader(bytes.NewReader(bb), int64(len(bb)))
		if err != nil {
			continue
		}
		for _, tn := range h.Tensors {
			w := int64(tn.DType.Size())
			for off := h.DataStart() + tn.Begin; off < h.DataStart()+tn.End; off += w {
				if !bytes.Equal(ab[off:off+w], bb[off:off+w]) {
					n++
				}
			}
		}
	}
	return n
}

// TestCatchupPatchSizesRL logs, at RL densities (gen's model, lr 1e-6 and 3e-6, 11 versions),
// the size of the catch-up patch to version 11 from K = 10, 9, 6, 1 beside the sum of the
// one-step patches it replaces, and requires it never to exceed that sum.
func TestCatchupPatchSizesRL(t *testing.T) {
	for _, lr := range []float64{1e-6, 3e-6} {
		s, _ := newStore(t, Options{})
		cfg := gen.ConfigForParams(1_000_000, lr, 5)
		m, err := gen.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		const last = 11
		for v := uint64(1); v <= last; v++ {
			if v > 1 {
				m.Step()
			}
			dir := filepath.Join(t.TempDir(), "ckpt")
			if err := m.WriteCheckpoint(dir); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Commit(dir, CommitOptions{Version: v}); err != nil {
				t.Fatal(err)
			}
		}
		sum := int64(0)
		for k := uint64(last - 1); k >= 1; k-- {
			n, err := s.WritePatch(k+1, &writerAtBuffer{&bytes.Buffer{}})
			if err != nil {
				t.Fatal(err)
			}
			sum += n
			if k != last-1 && k != last-2 && k != last-5 && k != last-10 {
				continue
			}
			var b bytes.Buffer
			size, err := s.WritePatchFrom(last, k, &writerAtBuffer{&b})
			if err != nil {
				t.Fatal(err)
			}
			p, err := delta.OpenPatch(bytes.NewReader(b.Bytes()), int64(b.Len()))
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("lr %g, k = %2d: catch-up patch %8d bytes (%7d elements, %.3f%% of %d); %2d one-step patches %8d bytes (%.2fx)",
				lr, last-k, size, p.Plan.TotalChanged(), 100*float64(p.Plan.TotalChanged())/float64(p.Plan.TotalElements),
				p.Plan.TotalElements, last-k, sum, float64(sum)/float64(size))
			if size > sum {
				t.Errorf("catch-up patch from %d (%d bytes) is larger than the %d one-step patches (%d bytes)", k, size, last-k, sum)
			}
		}
	}
}
