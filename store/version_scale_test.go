package store

import (
	"fmt"
	"testing"

	"github.com/weightfs/weightfs/delta"
)

// tinyTensorManifest is a manifest of version v: one safetensors file of n tensors of four
// BF16 elements each (the shape of the 10^6-tensor file that made commit quadratic).
func tinyTensorManifest(v uint64, n int) *manifest {
	f := manifestFile{Path: "model.safetensors", Kind: kindSafetensors, Header: ID{1}, HeaderLen: 8}
	f.Tensors = make([]manifestTensor, n)
	for i := range f.Tensors {
		f.Tensors[i] = manifestTensor{Name: fmt.Sprintf("w%d", i), DType: delta.DTypeBF16, Shape: []int64{4},
			Begin: int64(8 * i), End: int64(8*i + 8), ID: ID{byte(i), byte(i >> 8), byte(i >> 16), 2}}
	}
	f.Size = f.HeaderLen + int64(8*n)
	return &manifest{Version: v, Files: []manifestFile{f}}
}

// TestFindBaseIsLinear finds the base of each of 10^5 tensors in a version of 10^5 (what a
// commit of the next version does) and counts the tensor entries findBase looks at: a small
// constant per lookup, not a scan of the file's tensors (which made such a commit take 46 s).
func TestFindBaseIsLinear(t *testing.T) {
	const n = 100_000
	ver := newVersion(tinyTensorManifest(1, n))
	for _, path := range []string{"model.safetensors", "renamed.safetensors"} {
		ver.probes.Store(0)
		for i := range n {
			ref, ok := ver.findBase(path, fmt.Sprintf("w%d", i), delta.DTypeBF16, []int64{4})
			if !ok || ref.tensor.Name != fmt.Sprintf("w%d", i) {
				t.Fatalf("%s: base of w%d: %v %v", path, i, ref.tensor, ok)
			}
		}
		if _, ok := ver.findBase(path, "w1", delta.DTypeBF16, []int64{5}); ok {
			t.Fatalf("%s: a base of another shape was found", path)
		}
		if got, limit := ver.probes.Load(), int64(4*n); got > limit {
			t.Errorf("%s: findBase looked at %d tensor entries for %d lookups (limit %d): not linear", path, got, n, limit)
		}
	}
}
