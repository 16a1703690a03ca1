package delta

import "encoding/binary"

// The first phase of AddDiff: a bitmap of the elements that differ, 64 elements to a word.
// Building it has no branch that depends on the data, so on sparse RL changes, where about a
// third of 32-byte groups hold a change at random, the scan no longer mispredicts on every
// third group; the second phase then walks only the set bits.

// maskGroupElems is the number of elements one mask word covers.
const maskGroupElems = 64

// maskChunkGroups is how many mask words scanChanged builds before they are walked: 8192
// elements, so the bytes the walk reads again are still in cache.
const maskChunkGroups = 128

// scanChanged builds the bitmap of the changed elements of base and cur, maskChunkGroups words
// at a time, and hands each part to walk with the byte offset of its first element. It
// returns the byte offset of the last elements, fewer than a group, which it leaves to the
// caller.
func scanChanged(base, cur []byte, width int, walk func(mask []uint64, lo int)) int {
	groupBytes := maskGroupElems * width
	groups := len(base) / groupBytes
	var maskBuf [maskChunkGroups]uint64
	for g := 0; g < groups; g += maskChunkGroups {
		mask := maskBuf[:min(maskChunkGroups, groups-g)]
		lo := g * groupBytes
		changedMask(base[lo:], cur[lo:], width, mask)
		walk(mask, lo)
	}
	return groups * groupBytes
}

// changedMask sets bit j of mask[k] exactly when element 64k+j of base and cur differs, for
// len(mask) whole groups: len(base) and len(cur) must be at least 64*width*len(mask). It uses
// the vector kernel where there is one (changedmask_amd64.s), else changedMaskGo.
func changedMask(base, cur []byte, width int, mask []uint64) {
	if width == 2 && haveMaskKernel16 && len(mask) > 0 {
		n := len(mask) * maskGroupElems * 2
		_, _ = base[n-1], cur[n-1] // the kernel reads n bytes of each
		changedMask16(&base[0], &cur[0], len(mask), &mask[0])
		return
	}
	changedMaskGo(base, cur, width, mask)
}

// changedMaskGo is changedMask in Go: the reference of the kernels, and the path for the
// other widths and machines.
func changedMaskGo(base, cur []byte, width int, mask []uint64) {
	groupBytes := maskGroupElems * width
	perWord := uint(8 / width) // elements in an 8-byte word
	for k := range mask {
		b := base[k*groupBytes : (k+1)*groupBytes]
		c := cur[k*groupBytes : (k+1)*groupBytes]
		var m uint64
		if width == 2 {
			for i := 0; i < 128; i += 8 {
				x := binary.LittleEndian.Uint64(b[i:]) ^ binary.LittleEndian.Uint64(c[i:])
				m |= lanes16(x) << (uint(i) / 2)
			}
		} else {
			for i := 0; i < groupBytes; i += 8 {
				x := binary.LittleEndian.Uint64(b[i:]) ^ binary.LittleEndian.Uint64(c[i:])
				m |= changedLanes(x, width) << (uint(i/8) * perWord)
			}
		}
		mask[k] = m
	}
}
