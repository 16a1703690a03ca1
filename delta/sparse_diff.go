package delta

import (
	"encoding/binary"
	"fmt"
	"math/bits"
)

// AddDiff is the encoder's fused fast path: it compares base and cur (the base and new bytes
// of elements [first, first+len(base)/width) of the tensor) and records every element that
// differs, as a CPU Diff followed by AddChanges would, without the list of changes between
// them. That list, and the per-change checks of AddChanges, were half of ingest's encoding
// time. It returns the number of changes found. Chunks must come in ascending order and not
// overlap anything added before; after AddDiff the whole range counts as added.
//
// The output is byte for byte that of ReferenceDiff + AddChanges on the same chunks
// (TestAddDiffMatchesReference).
func (e *DeltaEncoder) AddDiff(first int64, base, cur []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	if e.done {
		return 0, fmt.Errorf("delta encoder: %w: AddDiff after Finish", ErrInvalidArgument)
	}
	w := e.width
	if len(base) != len(cur) || len(base)%w != 0 {
		e.err = fmt.Errorf("delta encoder: %w: diff of %d and %d bytes at width %d", ErrInvalidArgument, len(base), len(cur), w)
		return 0, e.err
	}
	n := int64(len(base) / w)
	if first < e.next || first > e.elements || n > e.elements-first {
		e.err = fmt.Errorf("delta encoder: %w: elements [%d, %d) out of order or out of range (next allowed %d, elements %d)",
			ErrInvalidArgument, first, first+n, e.next, e.elements)
		return 0, e.err
	}
	found := 0
	for n > 0 {
		// One block at a time: positions are relative to the block, and a block is coded
		// once nothing more can fall into it.
		block := first >> e.shift
		if block != e.block {
			if err := e.flushBlock(); err != nil {
				return found, err
			}
			e.block = block
		}
		seg := min(n, (block+1)<<e.shift-first)
		nb := int(seg) * w
		found += e.cur.addDiff(first-block<<e.shift, base[:nb], cur[:nb], w, e.values)
		base, cur = base[nb:], cur[nb:]
		first += seg
		n -= seg
	}
	e.next = first
	e.changed += int64(found)
	return found, nil
}

// addDiff records the elements that differ between base and cur, the first of which is at
// position start of the block, and returns how many it found: a bitmap of the changed
// elements first (changedMask), then a walk of its set bits.
func (b *blockEncoder) addDiff(start int64, base, cur []byte, width int, values valueMap) int {
	before := len(b.gaps)
	shift := uint(bits.TrailingZeros(uint(width)))
	tail := scanChanged(base, cur, width, func(mask []uint64, lo int) {
		b.walkMask(mask, start+int64(lo>>shift), base[lo:], cur[lo:], width, values)
	})
	// The last elements, fewer than a group, one by one.
	for i := tail; i < len(base); i += width {
		old, now := loadElement(base[i:], width), loadElement(cur[i:], width)
		if old != now {
			b.add(start+int64(i>>shift), values.code(old, now))
		}
	}
	return len(b.gaps) - before
}

// walkMask records the elements whose bits are set in mask (bit j of word k: element 64k+j of
// base and cur, at position pos+64k+j of the block). The block's lists are held in locals
// for the walk: kept in the struct, every change loaded and stored them again.
func (b *blockEncoder) walkMask(mask []uint64, pos int64, base, cur []byte, width int, values valueMap) {
	gaps, symbols, prev := b.gaps, b.symbols, b.prev
	for k, m := range mask {
		groupPos := pos + int64(k)*maskGroupElems
		bg := base[k*maskGroupElems*width : (k+1)*maskGroupElems*width]
		cg := cur[k*maskGroupElems*width : (k+1)*maskGroupElems*width]
		for m != 0 {
			j := bits.TrailingZeros64(m)
			m &= m - 1
			var old, now uint64
			switch width { // the same case every time: predicted
			case 2:
				old, now = uint64(binary.LittleEndian.Uint16(bg[2*j:])), uint64(binary.LittleEndian.Uint16(cg[2*j:]))
			default:
				old, now = loadElement(bg[j*width:], width), loadElement(cg[j*width:], width)
			}
			at := groupPos + int64(j)
			gaps = append(gaps, uint32(at-prev-1))
			prev = at
			symbols, b.escapes = appendSymbol(symbols, b.escapes, values.code(old, now))
		}
	}
	b.gaps, b.symbols, b.prev = gaps, symbols, prev
}
