package gpu

import (
	"bytes"
	"fmt"
	"slices"

	"github.com/weightfs/weightfs/delta"
)

// selfTest runs b and the CPU backend on a fixed input at every element width and fails unless
// the outputs are identical. The input spans three chunks of b (the last one partial, ending
// in a tail shorter than one 16-byte block) and holds sparse byte changes, a fully changed
// tile, an unchanged tile and a changed last byte: each path of the kernel is exercised.
func selfTest(b *OpenCLBackend, cpu delta.DiffBackend) error {
	base, cur := selfTestInput(2*b.ChunkBytes() + tileBytes + 40)
	for _, w := range []int{1, 2, 4, 8} {
		if err := compareBackends(b, cpu, base, cur, w); err != nil {
			return fmt.Errorf("%w on %s: %w", ErrSelfTest, b.device, err)
		}
	}
	return nil
}

// selfTestInput builds a deterministic base and a cur that differs from it in about 3% of the
// bytes, in all of the second tile and in the last byte, and not at all in the fourth tile.
func selfTestInput(size int) (base, cur []byte) {
	base = make([]byte, size)
	state := uint64(0x9E3779B97F4A7C15)
	next := func() uint64 { // xorshift64: fixed, fast, good enough for a test pattern
		state ^= state << 13
		state ^= state >> 7
		state ^= state << 17
		return state
	}
	for i := range base {
		base[i] = byte(next())
	}
	cur = bytes.Clone(base)
	for i := range cur {
		if next()%32 == 0 {
			cur[i] ^= byte(next()%255) + 1 // never zero: the byte really changes
		}
	}
	for i := tileBytes; i < min(2*tileBytes, size); i++ {
		cur[i] = ^base[i]
	}
	if size >= 4*tileBytes {
		copy(cur[3*tileBytes:4*tileBytes], base[3*tileBytes:])
	}
	if size > 0 {
		cur[size-1] = ^base[size-1]
	}
	return base, cur
}

// compareBackends diffs base and cur with both backends at width w and describes the first
// difference of their outputs.
func compareBackends(got, want delta.DiffBackend, base, cur []byte, w int) error {
	var g, r delta.Changes
	gerr, rerr := got.Diff(base, cur, w, &g), want.Diff(base, cur, w, &r)
	if rerr != nil {
		return fmt.Errorf("width %d: %s: %w", w, want.Name(), rerr)
	}
	if gerr != nil {
		return fmt.Errorf("width %d: %s: %w", w, got.Name(), gerr)
	}
	if slices.Equal(g.Index, r.Index) && bytes.Equal(g.Values, r.Values) {
		return nil
	}
	if len(g.Index) != len(r.Index) {
		return fmt.Errorf("width %d: %d changes, %s finds %d", w, len(g.Index), want.Name(), len(r.Index))
	}
	for i := range g.Index {
		gv, rv := g.Values[i*w:(i+1)*w], r.Values[i*w:(i+1)*w]
		if g.Index[i] != r.Index[i] || !bytes.Equal(gv, rv) {
			return fmt.Errorf("width %d: change %d is element %d = %x, %s says element %d = %x",
				w, i, g.Index[i], gv, want.Name(), r.Index[i], rv)
		}
	}
	return fmt.Errorf("width %d: outputs differ in length of values (%d vs %d bytes)", w, len(g.Values), len(r.Values))
}
