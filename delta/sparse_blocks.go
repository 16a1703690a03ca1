package delta

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
)

// The block-at-a-time read path of sparse deltas. ApplyDelta (sparse.go) parses the body,
// decodes every block its range touches and walks all of each block's changes, on every call:
// simple, and the reference. A reader that rebuilds a tensor page by page (the store's read
// path) calls it many times per block and per delta, so Delta parses a body once, and a
// DecodedBlock is a block decoded once that applies to any range inside it by a binary
// search to the range's first change. Tests check both paths against each other.

// Delta is a parsed sparse delta body. It refers to the body, which must not change. Safe for
// concurrent use.
type Delta struct {
	l       deltaLayout
	offsets []int64     // offsets[b] is where block b's bytes start in the body; one entry more
	ctx     ContextFunc // a version-2 body's context (SetContext)
}

// OpenDelta validates the framing of an encoded delta body: magic, version
// (ErrUnsupportedVersion if unknown), header fields and the block table (ErrMalformed); and it
// indexes its blocks. It does not decode the blocks: ApplyDelta and DecodeBlock check those as
// they decode them.
func OpenDelta(body []byte) (*Delta, error) {
	l, err := parseLayout(body)
	if err != nil {
		return nil, fmt.Errorf("open sparse delta: %w", err)
	}
	d := &Delta{l: l, offsets: make([]int64, l.blocks+1)}
	off := l.payloadStart()
	for b := range l.blocks {
		d.offsets[b] = off
		_, size := l.entry(b)
		off += int64(size)
	}
	d.offsets[l.blocks] = off
	return d, nil
}

// Info describes the delta.
func (d *Delta) Info() DeltaInfo { return d.l.DeltaInfo }

// BlockRange returns the blocks that hold elements [first, first+n): lo..hi inclusive, or
// hi < lo when the range is empty or lies outside the tensor.
func (d *Delta) BlockRange(first, n int64) (lo, hi int64) {
	if n <= 0 || first < 0 || first >= d.l.Elements {
		return 0, -1
	}
	end := min(first+n, d.l.Elements)
	return first >> d.l.shift, (end - 1) >> d.l.shift
}

// DecodeBlock decodes block b completely and checks it (errors wrap ErrMalformed; a block
// number outside the table is ErrInvalidArgument). A block without changes decodes to an
// empty DecodedBlock.
func (d *Delta) DecodeBlock(b int64) (*DecodedBlock, error) { return d.DecodeBlockInto(b, nil) }

// DecodeBlockInto is DecodeBlock decoding into the buffers of into, a block of any delta that
// nobody uses any more, and returns it; with into nil, a new block. After an error into is
// not to be used again. A version-2 body decodes against the context SetContext gave
// (ErrNoContext without one; ErrContextMismatch when it is not the body's context).
func (d *Delta) DecodeBlockInto(b int64, into *DecodedBlock) (*DecodedBlock, error) {
	return d.decodeBlock(b, d.ctx, into)
}

// decodeBlock is DecodeBlockInto with the context ctx.
func (d *Delta) decodeBlock(b int64, ctx ContextFunc, into *DecodedBlock) (*DecodedBlock, error) {
	if b < 0 || b >= d.l.blocks {
		return nil, fmt.Errorf("decode sparse delta block: %w: block %d of %d", ErrInvalidArgument, b, d.l.blocks)
	}
	db := into
	if db == nil {
		db = new(DecodedBlock)
	}
	db.start, db.width, db.values = b<<d.l.shift, d.l.Width, newValueMap(d.l.Width, d.l.Float)
	db.pos, db.symbols, db.escAt, db.escCode = db.pos[:0], db.symbols[:0], db.escAt[:0], db.escCode[:0]
	db.sum.Store(0)
	count, _ := d.l.entry(b)
	if count == 0 {
		return db, nil
	}
	if d.l.Version >= 2 {
		if ctx == nil {
			return nil, fmt.Errorf("decode sparse delta block %d: %w", b, ErrNoContext)
		}
		dec := block2Decoders.Get().(*block2Decoder)
		defer block2Decoders.Put(dec)
		dec.width, dec.values = d.l.Width, db.values
		if err := dec.decodeWith(ctx, b, &d.l, d.l.body[d.offsets[b]:d.offsets[b+1]], int(count), db); err != nil {
			return nil, fmt.Errorf("decode sparse delta block %d: %w", b, err)
		}
		return db, nil
	}
	dec := compactDecoders.Get().(*blockDecoder)
	defer compactDecoders.Put(dec)
	// The slices the block keeps are handed over; the decoder keeps its FSE tables and
	// buffers for the next block (new ones cost a fifth of the decoding).
	dec.width, dec.compact = d.l.Width, true
	dec.pos, dec.syms, dec.escAt, dec.escCode = db.pos, db.symbols, db.escAt, db.escCode
	err := dec.decode(d.l.body[d.offsets[b]:d.offsets[b+1]], int(count), d.l.blockLen(b))
	db.pos, db.symbols, db.escAt, db.escCode = dec.pos, dec.syms, dec.escAt, dec.escCode
	dec.pos, dec.syms, dec.escAt, dec.escCode = nil, nil, nil, nil
	if err != nil {
		return nil, fmt.Errorf("decode sparse delta block %d: %w", b, err)
	}
	return db, nil
}

// compactDecoders are the block decoders of DecodeBlock, reused across calls and goroutines.
var compactDecoders = sync.Pool{New: func() any { return new(blockDecoder) }}

// DecodedBlock is one block of a delta, decoded and checked: the positions of its changes and
// their value codes. Immutable; safe for concurrent use.
type DecodedBlock struct {
	start  int64 // element index of the block's first element
	width  int
	values valueMap
	pos    []uint32 // ascending, relative to start
	// The value code of change i is symbols[i], or, where that is escapeSymbol, escCode[j]
	// for the j with escAt[j] == i: five bytes per change instead of twelve keep the blocks
	// of ten deltas of a page in the cache beside the page.
	symbols []byte
	escAt   []uint32
	escCode []uint64
	sum     atomic.Uint64 // bit 32 set: the low 32 bits are contextSum
}

// code is the value code of change i.
func (b *DecodedBlock) code(i int) uint64 {
	if s := b.symbols[i]; s != escapeSymbol {
		return uint64(s)
	}
	j, _ := slices.BinarySearch(b.escAt, uint32(i))
	return b.escCode[j]
}

// Changes is the number of changes in the block.
func (b *DecodedBlock) Changes() int { return len(b.pos) }

// MemoryBytes is roughly the memory the block holds, for caches.
func (b *DecodedBlock) MemoryBytes() int64 {
	return 128 + 4*int64(cap(b.pos)) + int64(cap(b.symbols)) + 12*int64(cap(b.escAt))
}

// Apply applies the block's changes that fall in elements [first, first+len(dst)/width) to
// dst in place, in direction dir; changes outside the range are skipped. len(dst) must be a
// whole number of elements (ErrInvalidArgument).
func (b *DecodedBlock) Apply(dst []byte, first int64, dir Direction) error {
	w := b.width
	switch {
	case dir != Forward && dir != Backward:
		return fmt.Errorf("apply sparse delta block: %w: direction %d", ErrInvalidArgument, dir)
	case len(dst)%w != 0:
		return fmt.Errorf("apply sparse delta block: %w: %d bytes are not a whole number of %d-byte elements", ErrInvalidArgument, len(dst), w)
	case first < 0:
		return fmt.Errorf("apply sparse delta block: %w: negative first element %d", ErrInvalidArgument, first)
	}
	end := first + int64(len(dst)/w)
	if len(b.pos) == 0 || end <= b.start || first > b.start+int64(b.pos[len(b.pos)-1]) {
		return nil
	}
	i := 0
	if first > b.start {
		i, _ = slices.BinarySearch(b.pos, uint32(first-b.start))
	}
	if w == 2 && b.values.float {
		b.applyBF16(dst, first, end, i, dir)
	} else {
		b.applyRange(dst, first, end, i, dir)
	}
	return nil
}

// BlockStep is one decoded block applied in one direction: a step of ApplySteps.
type BlockStep struct {
	Block *DecodedBlock
	Dir   Direction
}

// applyTile is how many elements ApplySteps takes through all steps before moving on: small
// enough that they stay in the first-level cache while every step passes over them.
const applyTile = 8 << 10

// ApplySteps applies the steps in order to dst, which holds elements [first,
// first+len(dst)/width): the same bytes as calling Apply for each step in turn, but tile by
// tile, so that each part of dst is loaded into the cache once rather than once per step.
// Every block must have the same element width (ErrInvalidArgument otherwise, dst untouched).
func ApplySteps(dst []byte, first int64, steps []BlockStep) error {
	if len(steps) == 0 {
		return nil
	}
	w := steps[0].Block.width
	for _, st := range steps {
		switch {
		case st.Block.width != w:
			return fmt.Errorf("apply sparse delta steps: %w: blocks of %d- and %d-byte elements", ErrInvalidArgument, w, st.Block.width)
		case st.Dir != Forward && st.Dir != Backward:
			return fmt.Errorf("apply sparse delta steps: %w: direction %d", ErrInvalidArgument, st.Dir)
		}
	}
	switch {
	case len(dst)%w != 0:
		return fmt.Errorf("apply sparse delta steps: %w: %d bytes are not a whole number of %d-byte elements", ErrInvalidArgument, len(dst), w)
	case first < 0:
		return fmt.Errorf("apply sparse delta steps: %w: negative first element %d", ErrInvalidArgument, first)
	}
	end := first + int64(len(dst)/w)
	next := make([]int, len(steps)) // per step, its first change not yet applied
	for i, st := range steps {
		if b := st.Block; first > b.start && len(b.pos) > 0 {
			next[i], _ = slices.BinarySearch(b.pos, uint32(min(first-b.start, int64(b.pos[len(b.pos)-1])+1)))
		}
	}
	for lo := first; lo < end; lo += applyTile {
		hi := min(lo+applyTile, end)
		// dst usually comes from a direct read of the disk, so none of it is in the CPU's
		// caches, and the steps touch nearly every cache line of a tile in scattered order,
		// each miss a stall. Read in order first, the tile streams in (the hardware
		// prefetcher follows): an old version's read took ~10% less CPU.
		runtime.KeepAlive(touchLines(dst[(lo-first)*int64(w) : (hi-first)*int64(w)]))
		for i, st := range steps {
			b := st.Block
			if b.width == 2 && b.values.float {
				next[i] = b.applyBF16(dst, first, hi, next[i], st.Dir)
			} else {
				next[i] = b.applyRange(dst, first, hi, next[i], st.Dir)
			}
		}
	}
	return nil
}

// touchLines loads one byte of every 64-byte cache line of b, in order.
func touchLines(b []byte) byte {
	var x byte
	for i := 0; i < len(b); i += 64 {
		x ^= b[i]
	}
	return x
}

// applyRange applies changes i, i+1, ... that lie before element end to dst (which starts at
// element first) and returns the index of the first change it left.
func (b *DecodedBlock) applyRange(dst []byte, first, end int64, i int, dir Direction) int {
	w := b.width
	for ; i < len(b.pos); i++ {
		at := b.start + int64(b.pos[i])
		if at >= end {
			break
		}
		elem := dst[(at-first)*int64(w):]
		storeElement(elem, b.values.apply(loadElement(elem, w), b.code(i), dir), w)
	}
	return i
}

// applyBF16 is applyRange for 2-byte floats (bf16 and fp16: most of a model), with the
// ordered-integer arithmetic written out for 16 bits and without branches on the data: the
// signs of weights and of their steps are coin flips, and mispredicted branches on them cost
// more than the arithmetic.
func (b *DecodedBlock) applyBF16(dst []byte, first, end int64, i int, dir Direction) int {
	var neg uint16 // all ones: negate the difference (Backward)
	if dir == Backward {
		neg = 0xFFFF
	}
	// Block-relative positions against a block-relative end, and slices of equal length, so
	// the loop carries no conversions and the compiler drops most bounds checks.
	if end <= b.start {
		return i
	}
	relEnd := uint64(end - b.start)
	shift := (b.start - first) * 2 // byte offset in dst of the block's element 0
	pos := b.pos[i:]
	syms := b.symbols[i:len(b.pos)]
	syms = syms[:len(pos)]
	for k, p := range pos {
		if uint64(p) >= relEnd {
			return i + k
		}
		j := int64(p)*2 + shift
		e := dst[j : j+2]
		x := binary.LittleEndian.Uint16(e)
		// toOrd: negative values are complemented, the others get the sign bit.
		o := x ^ (uint16(int16(x)>>15) | 0x8000)
		code := uint16(syms[k])
		if code == escapeSymbol {
			code = uint16(b.code(i + k))
		}
		d := code>>1 ^ -(code & 1) // unzigzag
		o += (d ^ neg) - neg
		// fromOrd: the inverse of toOrd.
		binary.LittleEndian.PutUint16(e, o^(^uint16(int16(o)>>15)|0x8000))
	}
	return len(b.pos)
}
