package delta

import (
	"encoding/binary"
	"fmt"
)

// API CONTRACT (implemented here; the body layout is in docs/format.md (Part II)).
//
// A sparse delta turns one tensor's raw bytes (the base) into another of the same dtype and
// shape (the new bytes) and back. It stores, per changed element, its position (Rice-coded
// gaps, sparse_rice.go) and the difference of its value from the base in ordered-integer
// space (ordered.go), entropy-coded (sparse_block.go). Elements are grouped in blocks of
// 2^20 that are coded independently behind a table (sparse_format.go), so ApplyDelta over a
// range decodes only the blocks it touches. That is format version 1; version 2 (sparse2*.go)
// codes the same changes against the previous step's delta of the tensor, block by block.

// Direction says which way a delta is applied.
type Direction int

const (
	// Forward turns base bytes into the new bytes.
	Forward Direction = iota
	// Backward turns the new bytes back into the base bytes.
	Backward
)

// DeltaEncoder builds the sparse delta of one tensor. Not safe for concurrent use.
//
// It streams: changes arrive in ascending order through Add and each block is coded as soon
// as a change beyond it arrives, so memory is the encoded output plus one block's working
// set. Errors are sticky: after the first, every call returns it.
type DeltaEncoder struct {
	width    int
	elements int64
	shift    uint
	values   valueMap // the value arithmetic of the element type

	out     []byte // header, block table, and the blocks coded so far
	block   int64  // the block being collected, -1 before the first change
	next    int64  // the smallest element index the next change may take
	changed int64
	cur     *blockEncoder  // from blockEncoders, back there at Finish
	ctx     ContextFunc    // the context of a version-2 body (SetContext), nil for version 1
	cur2    *block2Encoder // the coder of version-2 blocks

	err  error
	done bool
}

// NewDeltaEncoder starts the delta of a tensor of elements elements of width bytes each; float
// selects the ordered-integer mapping of sign-magnitude floats for the value differences.
// Invalid arguments (a width other than 1, 2, 4, 8; elements negative or above 2^40) make
// every later call fail with ErrInvalidArgument.
func NewDeltaEncoder(width int, float bool, elements int64) *DeltaEncoder {
	return newDeltaEncoderShift(width, float, elements, defaultBlockShift)
}

// newDeltaEncoderShift is NewDeltaEncoder with blocks of 2^shift elements (tests use small
// blocks to get many of them from little data).
func newDeltaEncoderShift(width int, float bool, elements int64, shift uint) *DeltaEncoder {
	e := &DeltaEncoder{width: width, elements: elements, shift: shift, block: -1,
		values: newValueMap(width, float), cur: blockEncoders.Get().(*blockEncoder)}
	e.cur.reset()
	switch {
	case !validWidth(width):
		e.err = fmt.Errorf("new delta encoder: %w: element width %d is not 1, 2, 4 or 8", ErrInvalidArgument, width)
	case elements < 0 || elements > maxDeltaElements:
		e.err = fmt.Errorf("new delta encoder: %w: %d elements outside 0..2^40", ErrInvalidArgument, elements)
	case shift < minBlockShift || shift > maxBlockShift:
		e.err = fmt.Errorf("new delta encoder: %w: block shift %d outside %d..%d", ErrInvalidArgument, shift, minBlockShift, maxBlockShift)
	default:
		blocks := (elements + 1<<shift - 1) >> shift
		e.out = appendDeltaHeader(nil, width, float, shift, elements, blocks)
		e.cur.reset()
	}
	return e
}

// Add records changed elements: first is the absolute element index of chunk-relative index
// 0, idx the ascending chunk-relative indices, base and cur the old and new values (width
// bytes each, in the order of idx). Calls must come in ascending order of element index.
// An element whose base and cur bytes are equal is refused (ErrInvalidArgument): the delta
// stores changes only.
func (e *DeltaEncoder) Add(first int64, idx []uint32, base, cur []byte) error {
	if err := e.checkAdd(first, len(idx), len(base), len(cur)); err != nil {
		return err
	}
	w := e.width
	for i, rel := range idx {
		if err := e.add(first+int64(rel), loadElement(base[i*w:], w), loadElement(cur[i*w:], w)); err != nil {
			return err
		}
	}
	return nil
}

// AddChanges records the output of a Diff of one chunk: first is the absolute element index
// of the chunk's start, baseChunk the chunk's base bytes (the base values are taken from it
// at c.Index), c the changes with their new values.
func (e *DeltaEncoder) AddChanges(first int64, baseChunk []byte, c *Changes) error {
	if err := e.checkAdd(first, len(c.Index), len(c.Values), len(c.Values)); err != nil {
		return err
	}
	w := e.width
	for i, rel := range c.Index {
		if (uint64(rel)+1)*uint64(w) > uint64(len(baseChunk)) {
			e.err = fmt.Errorf("delta encoder: %w: change at chunk index %d beyond the %d-byte base chunk", ErrInvalidArgument, rel, len(baseChunk))
			return e.err
		}
		err := e.add(first+int64(rel), loadElement(baseChunk[int(rel)*w:], w), loadElement(c.Values[i*w:], w))
		if err != nil {
			return err
		}
	}
	return nil
}

// checkAdd checks the arguments common to Add and AddChanges: n changes with baseLen and
// curLen value bytes, starting at element first.
func (e *DeltaEncoder) checkAdd(first int64, n, baseLen, curLen int) error {
	if e.err != nil {
		return e.err
	}
	if e.done {
		return fmt.Errorf("delta encoder: %w: Add after Finish", ErrInvalidArgument)
	}
	if baseLen != n*e.width || curLen != baseLen {
		e.err = fmt.Errorf("delta encoder: %w: %d indices with %d base and %d new value bytes at width %d",
			ErrInvalidArgument, n, baseLen, curLen, e.width)
		return e.err
	}
	if first < 0 || first > e.elements {
		e.err = fmt.Errorf("delta encoder: %w: chunk start %d outside the tensor's %d elements", ErrInvalidArgument, first, e.elements)
		return e.err
	}
	return nil
}

// add records one change at element at, from value base to value cur.
func (e *DeltaEncoder) add(at int64, base, cur uint64) error {
	if at < e.next || at >= e.elements {
		e.err = fmt.Errorf("delta encoder: %w: element %d out of order or out of range (next allowed %d, elements %d)",
			ErrInvalidArgument, at, e.next, e.elements)
		return e.err
	}
	code := e.values.code(base, cur)
	if code == 0 {
		e.err = fmt.Errorf("delta encoder: %w: element %d is unchanged", ErrInvalidArgument, at)
		return e.err
	}
	if block := at >> e.shift; block != e.block {
		if err := e.flushBlock(); err != nil {
			return err
		}
		e.block = block
	}
	e.cur.add(at-e.block<<e.shift, code)
	e.next = at + 1
	e.changed++
	return nil
}

// flushBlock codes the block being collected, appends it to the output and fills in its
// table entry.
func (e *DeltaEncoder) flushBlock() error {
	count := len(e.cur.gaps)
	if count == 0 {
		return nil
	}
	start := len(e.out)
	var out []byte
	var err error
	if e.ctx != nil {
		out, err = e.appendBlock2()
	} else {
		out, err = e.cur.appendTo(e.out)
	}
	if err != nil {
		e.err = fmt.Errorf("delta encoder: block %d: %w", e.block, err)
		return e.err
	}
	e.out = out
	entry := e.out[deltaHeaderSize+e.block*blockEntrySize:]
	binary.LittleEndian.PutUint32(entry, uint32(count))
	binary.LittleEndian.PutUint32(entry[4:], uint32(len(e.out)-start))
	e.cur.reset()
	return nil
}

// Finish returns the encoded delta body (format in docs/format.md (Part II)). The encoder cannot
// be used afterwards.
func (e *DeltaEncoder) Finish() ([]byte, error) {
	if e.err != nil {
		return nil, e.err
	}
	if e.done {
		return nil, fmt.Errorf("delta encoder: %w: Finish called twice", ErrInvalidArgument)
	}
	if err := e.flushBlock(); err != nil {
		return nil, err
	}
	binary.LittleEndian.PutUint64(e.out[16:], uint64(e.changed))
	body := e.out
	e.out, e.done = nil, true
	blockEncoders.Put(e.cur)
	e.cur = nil // every later call stops at e.done
	if e.cur2 != nil {
		block2Encoders.Put(e.cur2)
		e.cur2 = nil
	}
	return body, nil
}

// Changed is the number of changes added so far.
func (e *DeltaEncoder) Changed() int64 { return e.changed }

// DeltaInfo describes an encoded delta body.
type DeltaInfo struct {
	Version  int // body format version: 1, or 2 (coded against a context: NeedsContext)
	Width    int
	Float    bool
	Elements int64
	Changed  int64
}

// ApplyDelta applies the changes of body that fall in elements [first, first+len(dst)/width)
// to dst in place, in the given direction. Only blocks touching that range are decoded.
//
// Each block is decoded and checked completely before any element of dst is written, so a
// corrupt block is reported (ErrMalformed) without touching dst; blocks before it in the range
// have been applied by then, so on error the caller must treat dst as garbage. Out-of-range
// arguments are ErrInvalidArgument. A version-2 body needs its context: ApplyDelta returns
// ErrNoContext for it, ApplyDeltaContext applies it.
func ApplyDelta(body []byte, dst []byte, first int64, dir Direction) error {
	return applyDelta(body, nil, dst, first, dir)
}

// applyDelta is ApplyDelta and ApplyDeltaContext.
func applyDelta(body []byte, ctx ContextFunc, dst []byte, first int64, dir Direction) error {
	l, err := parseLayout(body)
	if err != nil {
		return fmt.Errorf("apply sparse delta: %w", err)
	}
	if l.Version >= 2 {
		if ctx == nil {
			return fmt.Errorf("apply sparse delta: %w", ErrNoContext)
		}
	}
	w := l.Width
	n := int64(len(dst) / w)
	switch {
	case dir != Forward && dir != Backward:
		return fmt.Errorf("apply sparse delta: %w: direction %d", ErrInvalidArgument, dir)
	case len(dst)%w != 0:
		return fmt.Errorf("apply sparse delta: %w: %d bytes are not a whole number of %d-byte elements", ErrInvalidArgument, len(dst), w)
	case first < 0 || first > l.Elements || n > l.Elements-first:
		return fmt.Errorf("apply sparse delta: %w: elements [%d, %d) outside the tensor's %d", ErrInvalidArgument, first, first+n, l.Elements)
	case n == 0 || l.Changed == 0:
		return nil
	}
	end := first + n
	firstBlock, lastBlock := first>>l.shift, (end-1)>>l.shift
	offset := l.payloadStart()
	for b := range firstBlock {
		_, size := l.entry(b)
		offset += int64(size)
	}
	dec := blockDecoder{width: w}
	values := newValueMap(w, l.Float)
	var dec2 *block2Decoder
	if l.Version >= 2 {
		dec2 = block2Decoders.Get().(*block2Decoder)
		defer block2Decoders.Put(dec2)
		dec2.width, dec2.values = w, values
	}
	for b := firstBlock; b <= lastBlock; b++ {
		count, size := l.entry(b)
		payload := body[offset : offset+int64(size)]
		offset += int64(size)
		if count == 0 {
			continue
		}
		if dec2 != nil {
			if err := dec2.decodeWith(ctx, b, &l, payload, int(count), nil); err != nil {
				return fmt.Errorf("apply sparse delta: block %d: %w", b, err)
			}
			dec2.unpack()
			dec.pos, dec.codes = dec2.pos, dec2.codes
		} else if err := dec.decode(payload, int(count), l.blockLen(b)); err != nil {
			return fmt.Errorf("apply sparse delta: block %d: %w", b, err)
		}
		blockStart := b << l.shift
		for i, p := range dec.pos {
			at := blockStart + int64(p)
			if at < first || at >= end {
				continue
			}
			elem := dst[(at-first)*int64(w):]
			storeElement(elem, values.apply(loadElement(elem, w), dec.codes[i], dir), w)
		}
	}
	return nil
}
