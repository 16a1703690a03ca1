package delta

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"testing"
)

// TestChunkPatcher: the result read through a ChunkPatcher, in chunks of every size (cutting
// elements), in order, repeated and out of order, is the result byte for byte; a header that
// lacks a changed tensor, or holds it with another dtype or size, is refused.
func TestChunkPatcher(t *testing.T) {
	base, h := patchTestModel(t, 3)
	result := mutateElements(t, base, h, "model.embed_tokens.weight", 0, 1, 40, 90)
	result = mutateElements(t, result, h, "model.layers.0.mlp.up_proj.weight", 3, 44)
	result = mutateElements(t, result, h, "model.wide", 3)
	_, p := buildTestPatch(t, 2, 1, map[string][]byte{"m.safetensors": base}, map[string][]byte{"m.safetensors": result}, []string{"m.safetensors"})
	cp, err := p.NewChunkPatcher("m.safetensors", h)
	if err != nil {
		t.Fatal(err)
	}
	data, want := base[h.DataStart():], result[h.DataStart():]
	rng := rand.New(rand.NewPCG(1, 2))
	for _, size := range []int{1, 3, 7, 64, 1000, len(data)} {
		c := cp.Fork()
		got := bytes.Clone(data)
		for off := 0; off < len(got); off += size {
			if err := c.Patch(got[off:min(off+size, len(got))], int64(off)); err != nil {
				t.Fatal(err)
			}
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("chunks of %d: patched data differs from the result", size)
		}
		// Random pieces in any order, each read afresh from the base.
		for range 50 {
			off := rng.IntN(len(data))
			end := off + 1 + rng.IntN(len(data)-off)
			piece := bytes.Clone(data[off:end])
			if err := c.Patch(piece, int64(off)); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(piece, want[off:end]) {
				t.Fatalf("piece [%d, %d) after chunks of %d differs", off, end, size)
			}
		}
	}
	for _, other := range []Tensor{
		{Name: "model.other", DType: DTypeBF16, Shape: []int64{13, 7}},
		{Name: "model.embed_tokens.weight", DType: DTypeF16, Shape: []int64{13, 7}},
		{Name: "model.embed_tokens.weight", DType: DTypeBF16, Shape: []int64{13, 8}},
	} {
		tensors := []Tensor{other, {Name: "model.layers.0.mlp.up_proj.weight", DType: DTypeF32, Shape: []int64{5, 9}},
			{Name: "model.wide", DType: DTypeF64, Shape: []int64{4}}}
		hdr, err := EncodeHeader(nil, tensors)
		if err != nil {
			t.Fatal(err)
		}
		size := int64(len(hdr)) + tensors[len(tensors)-1].End
		oh, err := ParseHeader(hdr, size)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := p.NewChunkPatcher("m.safetensors", oh); !errors.Is(err, ErrBaseMismatch) {
			t.Fatalf("a header with %+v: %v", other, err)
		}
	}
}
