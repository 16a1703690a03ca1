//go:build cgo

package gpu

import (
	"bytes"

	"github.com/weightfs/weightfs/delta"
)

// modelDiff is the kernel's algorithm (tiles, per-tile counts, prefix sum, scatter) in plain
// Go, with the kernel's geometry. Comparing it with delta.ReferenceDiff checks the tiling
// arithmetic (tails, chunk offsets) on any machine, OpenCL or not; comparing the device with
// both checks the device.
func modelDiff(base, cur []byte, width, chunkBytes int, out *delta.Changes) error {
	if err := checkDiffArgs(base, cur, width, out); err != nil {
		return err
	}
	chunk := normalizeChunk(chunkBytes)
	for off := 0; off < len(base); off += chunk {
		n := min(chunk, len(base)-off)
		modelChunk(base[off:off+n], cur[off:off+n], width, uint32(off/width), out)
	}
	return nil
}

// modelChunk is one chunk: count_changes, scan_counts, scatter_changes.
func modelChunk(base, cur []byte, width int, first uint32, out *delta.Changes) {
	n := len(base)
	groups := (n + tileBytes - 1) / tileBytes
	itemRange := func(g, lid int) (int, int) {
		start := g*tileBytes + lid*itemBytes
		return min(start, n), min(start+itemBytes, n)
	}
	changedIn := func(p, e int) int {
		c := 0
		for i := p; i < e; i += width {
			if !bytes.Equal(base[i:i+width], cur[i:i+width]) {
				c++
			}
		}
		return c
	}
	counts := make([]uint32, groups) // count_changes
	for g := range counts {
		for lid := 0; lid < workGroupSize; lid++ {
			p, e := itemRange(g, lid)
			counts[g] += uint32(changedIn(p, e))
		}
	}
	offsets := make([]uint32, groups+1) // scan_counts
	for g, c := range counts {
		offsets[g+1] = offsets[g] + c
	}
	total := int(offsets[groups])
	idx := make([]uint32, total) // scatter_changes
	vals := make([]byte, total*width)
	for g := 0; g < groups; g++ {
		o := int(offsets[g])
		for lid := 0; lid < workGroupSize; lid++ {
			p, e := itemRange(g, lid)
			for i := p; i < e; i += width {
				if !bytes.Equal(base[i:i+width], cur[i:i+width]) {
					idx[o] = first + uint32(i/width)
					copy(vals[o*width:], cur[i:i+width])
					o++
				}
			}
		}
	}
	out.Index = append(out.Index, idx...)
	out.Values = append(out.Values, vals...)
}
