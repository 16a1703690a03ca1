package delta

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"testing"
)

// diffReference is the element diff one element at a time, with no fast path.
func diffReference(base, cur []byte, width int) ([]uint32, []byte) {
	var idx []uint32
	var vals []byte
	for off := 0; off+width <= len(cur); off += width {
		if !bytes.Equal(base[off:off+width], cur[off:off+width]) {
			idx = append(idx, uint32(off/width))
			vals = append(vals, cur[off:off+width]...)
		}
	}
	return idx, vals
}

// FuzzDiffElements: the word-at-a-time diff and count find exactly the elements the plain
// loop finds, for every width a dtype has (and 3, which takes the plain loop), whatever the
// length and wherever the changes are.
func FuzzDiffElements(f *testing.F) {
	f.Add(uint64(1), uint16(100), uint8(10))
	f.Add(uint64(2), uint16(4096), uint8(1))
	f.Add(uint64(3), uint16(7), uint8(255))
	f.Fuzz(func(t *testing.T, seed uint64, n uint16, changes uint8) {
		rng := rand.New(rand.NewPCG(seed, 9))
		for _, width := range []int{1, 2, 3, 4, 8} {
			size := int(n) / width * width
			base := make([]byte, size)
			for i := range base {
				base[i] = byte(rng.Uint32())
			}
			cur := slices.Clone(base)
			for range changes {
				if size > 0 {
					cur[rng.IntN(size)] ^= byte(1 + rng.IntN(255))
				}
			}
			wantIdx, wantVals := diffReference(base, cur, width)
			idx, vals := diffElements(base, cur, width, nil, nil)
			if !slices.Equal(idx, wantIdx) || !bytes.Equal(vals, wantVals) {
				t.Fatalf("width %d, %d bytes: indices %v, want %v", width, size, idx, wantIdx)
			}
			if c := countChanged(base, cur, width); c != int64(len(wantIdx)) {
				t.Fatalf("width %d, %d bytes: counted %d, want %d", width, size, c, len(wantIdx))
			}
		}
	})
}

// TestDiffElementsAppends: the diff appends to what it is given.
func TestDiffElementsAppends(t *testing.T) {
	base := make([]byte, 64)
	cur := slices.Clone(base)
	cur[2], cur[17], cur[63] = 1, 2, 3
	idx, vals := diffElements(base, cur, 2, []uint32{99}, []byte{7, 7})
	if !slices.Equal(idx, []uint32{99, 1, 8, 31}) || !bytes.Equal(vals, []byte{7, 7, 1, 0, 0, 2, 0, 3}) {
		t.Fatalf("idx %v vals %v", idx, vals)
	}
}

func BenchmarkDiffElements(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	base := make([]byte, 4<<20)
	for i := range base {
		base[i] = byte(rng.Uint32())
	}
	cur := slices.Clone(base)
	for range len(cur) / 2 / 100 { // 1% of the bf16 elements
		cur[rng.IntN(len(cur))] ^= 1
	}
	b.SetBytes(int64(len(cur)))
	var idx []uint32
	var vals []byte
	for b.Loop() {
		idx, vals = diffElements(base, cur, 2, idx[:0], vals[:0])
	}
}

func BenchmarkDiffElementsPlain(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	base := make([]byte, 4<<20)
	for i := range base {
		base[i] = byte(rng.Uint32())
	}
	cur := slices.Clone(base)
	for range len(cur) / 2 / 100 {
		cur[rng.IntN(len(cur))] ^= 1
	}
	b.SetBytes(int64(len(cur)))
	var idx []uint32
	var vals []byte
	for b.Loop() {
		idx, vals = diffOld(base, cur, 2, idx[:0], vals[:0])
	}
}

// diffOld is the diff before the word-at-a-time path (kept for the benchmark's comparison).
func diffOld(base, cur []byte, width int, idx []uint32, vals []byte) ([]uint32, []byte) {
	for off := 0; off < len(cur); {
		if off%8 == 0 && off+8 <= len(cur) && string(base[off:off+8]) == string(cur[off:off+8]) {
			off += 8
			continue
		}
		end := off + width
		if string(base[off:end]) != string(cur[off:end]) {
			idx = append(idx, uint32(off/width))
			vals = append(vals, cur[off:end]...)
		}
		off = end
	}
	return idx, vals
}
