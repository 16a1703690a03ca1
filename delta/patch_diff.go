package delta

import "encoding/binary"

// The element diff of a patch build (patch_build.go): which elements of a chunk differ between
// the base and the result. A patch's steps change about 1% of the elements, scattered, so most
// 8-byte words are equal and the rest differ in one element or two. The words are compared as
// integers (one load and one XOR each, where a byte-slice comparison is a call), and only a
// word that differs is looked at element by element. Element widths that do not divide 8 take
// the plain loop, which FuzzDiffElements checks the fast path against.

// diffElements appends the index and new value of every element (width bytes) that differs
// between base and cur (the same length, a multiple of width).
func diffElements(base, cur []byte, width int, idx []uint32, vals []byte) ([]uint32, []byte) {
	if width <= 0 || 8%width != 0 {
		return diffElementsPlain(base, cur, width, 0, idx, vals)
	}
	base = base[:len(cur)]
	lane := laneMask(width)
	off := 0
	for ; off+8 <= len(cur); off += 8 {
		x := binary.LittleEndian.Uint64(base[off:]) ^ binary.LittleEndian.Uint64(cur[off:])
		if x == 0 {
			continue
		}
		for e := 0; e < 8; e += width {
			if x>>(8*e)&lane != 0 {
				idx = append(idx, uint32((off+e)/width))
				vals = append(vals, cur[off+e:off+e+width]...)
			}
		}
	}
	return diffElementsPlain(base, cur, width, off, idx, vals)
}

// countChanged is the number of elements diffElements would find.
func countChanged(base, cur []byte, width int) int64 {
	if width <= 0 || 8%width != 0 {
		idx, _ := diffElementsPlain(base, cur, width, 0, nil, nil)
		return int64(len(idx))
	}
	base = base[:len(cur)]
	lane := laneMask(width)
	var n int64
	off := 0
	for ; off+8 <= len(cur); off += 8 {
		x := binary.LittleEndian.Uint64(base[off:]) ^ binary.LittleEndian.Uint64(cur[off:])
		if x == 0 {
			continue
		}
		for e := 0; e < 8; e += width {
			if x>>(8*e)&lane != 0 {
				n++
			}
		}
	}
	idx, _ := diffElementsPlain(base, cur, width, off, nil, nil)
	return n + int64(len(idx))
}

// laneMask is the mask of one element of width bytes at the bottom of a word.
func laneMask(width int) uint64 {
	if width >= 8 {
		return ^uint64(0)
	}
	return uint64(1)<<(8*width) - 1
}

// diffElementsPlain is diffElements from byte offset off (a multiple of width), one element
// at a time: the reference, and the tail of the fast path.
func diffElementsPlain(base, cur []byte, width, off int, idx []uint32, vals []byte) ([]uint32, []byte) {
	for ; off+width <= len(cur); off += width {
		if string(base[off:off+width]) != string(cur[off:off+width]) {
			idx = append(idx, uint32(off/width))
			vals = append(vals, cur[off:off+width]...)
		}
	}
	return idx, vals
}
