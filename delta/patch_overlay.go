package delta

import (
	"fmt"
	"slices"
)

// ChunkPatcher applies the changes a patch carries for one safetensors file to chunks of that
// file's data section, as they are read: what a reader of the result sees, without the result
// being written anywhere. The store's patch ingest (store/ingest_patch.go) reads a new
// version's files this way, from the base version's bytes, so that a patch written into
// MNT/patches/ costs no full copy. It is the apply's own patcher (patch_apply_scan.go: the
// same cursors and index checks), not a second reader of the format.
//
// Chunks are cheapest in ascending order (each change is read once); a chunk that starts
// before the end of the previous one starts the patcher over. Not safe for concurrent use:
// each reader of the file makes its own.
type ChunkPatcher struct {
	p       *Patch
	tensors []appliedTensor
	cp      *chunkPatcher
	next    int64 // data offset where the last chunk ended
}

// NewChunkPatcher finds the changed tensors of file name in h (the header of the bytes the
// changes go into). A tensor that h lacks, or holds with another dtype, element count or
// (when the patch records one) shape, is refused with an error wrapping ErrBaseMismatch that
// names the file and the tensor.
func (p *Patch) NewChunkPatcher(name string, h *Header) (*ChunkPatcher, error) {
	byName := tensorsByName(h)
	var tensors []appliedTensor
	for _, t := range p.TensorsOf(name) {
		th, ok := byName[t.Name]
		switch {
		case !ok:
			return nil, fmt.Errorf("%w: %s has no tensor %q", ErrBaseMismatch, name, t.Name)
		case th.DType != t.DType:
			return nil, fmt.Errorf("%w: tensor %q of %s is %s, the patch gives %s", ErrBaseMismatch, t.Name, name, th.DType, t.DType)
		case th.Elements() != t.Elements:
			return nil, fmt.Errorf("%w: tensor %q of %s has %d elements (shape %v), the patch gives %d", ErrBaseMismatch, t.Name, name, th.Elements(), th.Shape, t.Elements)
		case t.Shape != nil && !slices.Equal(t.Shape, th.Shape):
			return nil, fmt.Errorf("%w: tensor %q of %s has shape %v, the patch gives %v", ErrBaseMismatch, t.Name, name, th.Shape, t.Shape)
		}
		tensors = append(tensors, appliedTensor{plan: t, target: th})
	}
	slices.SortFunc(tensors, func(a, b appliedTensor) int { return cmpInt64(a.target.Begin, b.target.Begin) })
	return &ChunkPatcher{p: p, tensors: tensors}, nil
}

// Patch writes into chunk, the data section's bytes [off, off+len(chunk)), every change that
// falls in it. An index that does not ascend or lies outside its tensor is an error wrapping
// ErrMalformed.
func (c *ChunkPatcher) Patch(chunk []byte, off int64) error {
	if len(c.tensors) == 0 || len(chunk) == 0 {
		return nil
	}
	if c.cp == nil || off < c.next {
		c.cp = newChunkPatcher(c.p, c.tensors)
		c.next = 0
	}
	if off > c.next {
		if err := c.cp.seek(off); err != nil {
			return err
		}
	}
	if err := c.cp.patch(chunk, off); err != nil {
		return err
	}
	c.next = off + int64(len(chunk))
	return nil
}

// Fork returns a patcher of the same changes with a read position of its own, for another
// reader of the file (cheaper than NewChunkPatcher, which looks every tensor up again).
func (c *ChunkPatcher) Fork() *ChunkPatcher {
	return &ChunkPatcher{p: c.p, tensors: c.tensors}
}

// Changes reports whether the patch changes the tensor of that name in this file.
func (c *ChunkPatcher) Changes(name string) bool {
	for _, t := range c.tensors {
		if t.plan.Name == name {
			return true
		}
	}
	return false
}
