package delta

import (
	"encoding/hex"
	"fmt"
	"math/bits"
)

// The optional per-tensor extension of the patch (docs/format.md Part III §2, "Optional
// per-tensor digests and shapes"): in params:FILE, next to a changed tensor's dtype and
// element count, "xxh3" (the xxh3-128 of the tensor's new raw bytes) and "shape" (its full
// shape). TRL's readers never read params:FILE, and weightfs readers before the extension
// ignore unknown fields there, so patches with and without it are read alike.

// addTensorInfo fills the extension's fields of the params entries: the digest for every
// tensor of a file that records xxh3, the shape where the plan has one.
func (p *PatchPlan) addTensorInfo(params map[string]map[string]patchParam) {
	xxh3Files := make(map[string]bool, len(p.Files))
	for _, f := range p.Files {
		xxh3Files[f.Name] = f.HasXXH3
	}
	for _, t := range p.Tensors {
		prm := params[t.File][t.Name]
		if xxh3Files[t.File] {
			prm.XXH3 = hex.EncodeToString(t.ResultXXH3[:])
		}
		if t.Shape != nil {
			shape := append([]int64{}, t.Shape...)
			prm.Shape = &shape
		}
		params[t.File][t.Name] = prm
	}
}

// checkShape reports whether shape is a valid shape of a tensor of the given element count.
func checkShape(shape []int64, elements int64) error {
	n := uint64(1)
	for _, d := range shape {
		if d < 0 {
			return fmt.Errorf("shape %v has a negative dimension", shape)
		}
		hi, lo := bits.Mul64(n, uint64(d))
		if hi != 0 || lo > 1<<63-1 {
			return fmt.Errorf("shape %v overflows int64", shape)
		}
		n = lo
	}
	if int64(n) != elements {
		return fmt.Errorf("shape %v has %d elements, not %d", shape, n, elements)
	}
	return nil
}

// readTensorInfo checks a params entry's extension fields and copies them into t. A tensor
// digest is read whether or not its file records xxh3-128 digests: they are independent
// checks (weightfs writes both or neither).
func readTensorInfo(t *PatchTensor, prm patchParam) error {
	if prm.XXH3 != "" {
		b, err := hex.DecodeString(prm.XXH3)
		if err != nil || len(b) != 16 || hex.EncodeToString(b) != prm.XXH3 {
			return malformedPatch("tensor %q: \"xxh3\" is %q, not a lowercase hex xxh3-128", t.Name, prm.XXH3)
		}
		copy(t.ResultXXH3[:], b)
	}
	if prm.Shape != nil {
		if err := checkShape(*prm.Shape, prm.Elements); err != nil {
			return malformedPatch("tensor %q: %v", t.Name, err)
		}
		t.Shape = append([]int64{}, *prm.Shape...)
	}
	return nil
}
