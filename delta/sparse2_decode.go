package delta

import (
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
)

// block2Decoder decodes the blocks of version-2 bodies (layout in sparse2_block.go) into
// positions and value codes, checking everything, the context included, before a single
// element is touched. Its slices are reused from block to block.
type block2Decoder struct {
	width  int
	values valueMap
	pos    []uint32 // the block's changes, ascending
	codes  []uint64 // their value codes

	ctxCodes []uint64
	ctxClass []uint8              // per context change: its class, or +numClasses once it is a member
	cands    [numClasses][]uint32 // per class A: the indices of its candidates among the context's changes
	idx      []uint32
	bpos     []uint32 // the positions of class B's changes
	vals     [numClasses][]uint64
	syms     []byte
	rle      []byte
	fast     fseDecoder
}

var block2Decoders = sync.Pool{New: func() any { return new(block2Decoder) }}

// v2Header is the fixed part of a version-2 block.
type v2Header struct {
	m, sum  uint64
	flags   byte
	n       [numClasses]uint64
	posLen  [numClasses]uint64
	valLen  [numClasses]uint64
	payload []byte // the streams and sections, exactly their lengths' sum
}

// parseV2Header reads the fixed part of a block of count changes.
func parseV2Header(payload []byte, count int) (v2Header, error) {
	var h v2Header
	rest := payload
	uv := func(what string) (uint64, error) {
		v, n := binary.Uvarint(rest)
		if n <= 0 {
			return 0, fmt.Errorf("%w: block's %s runs past the block or overflows", ErrMalformed, what)
		}
		rest = rest[n:]
		return v, nil
	}
	var err error
	if h.m, err = uv("context change count"); err != nil {
		return h, err
	}
	if len(rest) < 5 {
		return h, fmt.Errorf("%w: block ends in its context checksum", ErrMalformed)
	}
	h.sum, h.flags, rest = uint64(binary.LittleEndian.Uint32(rest)), rest[4], rest[5:]
	if h.flags&^(1<<numClasses-1) != 0 {
		return h, fmt.Errorf("%w: unknown block flags %#x", ErrMalformed, h.flags)
	}
	if h.n[classA1], err = uv("class A1 count"); err != nil {
		return h, err
	}
	if h.n[classA2], err = uv("class A2 count"); err != nil {
		return h, err
	}
	if h.n[classA1] > uint64(count) || h.n[classA2] > uint64(count)-h.n[classA1] {
		return h, fmt.Errorf("%w: classes A1 and A2 claim %d and %d of %d changes", ErrMalformed, h.n[classA1], h.n[classA2], count)
	}
	h.n[classB] = uint64(count) - h.n[classA1] - h.n[classA2]
	var total uint64
	for c := range numClasses {
		if h.posLen[c], err = uv("position stream length"); err != nil {
			return h, err
		}
		total += min(h.posLen[c], 1<<40)
	}
	for c := range numClasses {
		if h.valLen[c], err = uv("value section length"); err != nil {
			return h, err
		}
		total += min(h.valLen[c], 1<<40)
	}
	if total != uint64(len(rest)) {
		return h, fmt.Errorf("%w: streams of %d bytes in %d", ErrMalformed, total, len(rest))
	}
	h.payload = rest
	return h, nil
}

// decode parses one block of count (> 0) changes in a block of blockLen elements coded
// against ctx (checked already by checkContext). Errors wrap ErrMalformed, and
// ErrContextMismatch when ctx is not the block's context.
func (d *block2Decoder) decode(payload []byte, count int, blockLen uint64, ctx *DecodedBlock) error {
	h, err := parseV2Header(payload, count)
	if err != nil {
		return err
	}
	m := len(ctx.pos)
	if h.m != uint64(m) || uint32(h.sum) != ctx.contextSum() {
		return fmt.Errorf("%w (%w): the block was coded against a context block of %d changes with checksum %08x, this one has %d with %08x",
			ErrContextMismatch, ErrMalformed, h.m, h.sum, m, ctx.contextSum())
	}
	// The context's changes by class.
	d.ctxCodes = ctx.contextCodes(d.ctxCodes)
	d.ctxClass = slices.Grow(d.ctxClass[:0], m)[:m]
	d.cands[classA1], d.cands[classA2] = d.cands[classA1][:0], d.cands[classA2][:0]
	for k, c := range d.ctxCodes {
		cl := contextClass(c)
		d.ctxClass[k] = uint8(cl)
		d.cands[cl] = append(d.cands[cl], uint32(k))
	}
	var cand [numClasses]uint64
	cand[classA1], cand[classA2], cand[classB] = uint64(len(d.cands[classA1])), uint64(len(d.cands[classA2])), blockLen-uint64(m)

	streams := h.payload
	var posStream [numClasses][]byte
	for c := range numClasses {
		posStream[c], streams = streams[:h.posLen[c]], streams[h.posLen[c]:]
	}
	// Positions of classes A: mark the context's changes that change again.
	for _, c := range []int{classA1, classA2} {
		if h.n[c] > cand[c] {
			return fmt.Errorf("%w: class %d claims %d changes of %d candidates", ErrMalformed, c, h.n[c], cand[c])
		}
		if err := d.members(posStream[c], h.flags&(1<<c) != 0, h.n[c], cand[c]); err != nil {
			return fmt.Errorf("class %d positions: %w", c, err)
		}
		for _, x := range d.idx {
			d.ctxClass[d.cands[c][x]] += numClasses
		}
	}
	// Positions of class B: indices among the elements the context left alone, to positions.
	if h.n[classB] > cand[classB] {
		return fmt.Errorf("%w: class B claims %d changes of %d candidates", ErrMalformed, h.n[classB], cand[classB])
	}
	if err := d.members(posStream[classB], h.flags&(1<<classB) != 0, h.n[classB], cand[classB]); err != nil {
		return fmt.Errorf("class B positions: %w", err)
	}
	d.bpos = slices.Grow(d.bpos[:0], len(d.idx))
	j := 0
	for _, x := range d.idx {
		p := uint64(x) + uint64(j)
		for j < m && uint64(ctx.pos[j]) <= p {
			j++
			p++
		}
		d.bpos = append(d.bpos, uint32(p))
	}
	// Values.
	for c := range numClasses {
		section := streams[:h.valLen[c]]
		streams = streams[h.valLen[c]:]
		if err := d.valueSection(c, section, int(h.n[c])); err != nil {
			return fmt.Errorf("class %d values: %w", c, err)
		}
	}
	// Merge: the context's members in order with class B's positions.
	d.pos = slices.Grow(d.pos[:0], count)
	d.codes = slices.Grow(d.codes[:0], count)
	var next [numClasses]int
	b := 0
	for k, cl := range d.ctxClass {
		if cl < numClasses {
			continue
		}
		cl -= numClasses
		p := ctx.pos[k]
		for ; b < len(d.bpos) && d.bpos[b] < p; b++ {
			d.pos, d.codes = append(d.pos, d.bpos[b]), append(d.codes, d.vals[classB][b])
		}
		code := d.values.fromContext(d.vals[cl][next[cl]], d.ctxCodes[k])
		next[cl]++
		if code == 0 {
			return fmt.Errorf("%w: a change that changes nothing (value code 0)", ErrMalformed)
		}
		d.pos, d.codes = append(d.pos, p), append(d.codes, code)
	}
	for ; b < len(d.bpos); b++ {
		d.pos, d.codes = append(d.pos, d.bpos[b]), append(d.codes, d.vals[classB][b])
	}
	return nil
}

// members decodes a class's position stream into d.idx: the ascending indices, among the
// class's cand candidates, of its n changes; inverted, the stream holds the others.
func (d *block2Decoder) members(stream []byte, inverted bool, n, cand uint64) error {
	coded := n
	if inverted {
		coded = cand - n
	}
	// Every gap costs at least its terminating one bit: refuse impossible counts before any
	// work or allocation in proportion to them.
	if coded > 8*uint64(len(stream)) {
		return fmt.Errorf("%w: %d positions cannot fit in %d bytes", ErrMalformed, coded, len(stream))
	}
	if coded == 0 && len(stream) != 0 {
		return fmt.Errorf("%w: %d bytes of positions for none", ErrMalformed, len(stream))
	}
	var ok bool
	if d.idx, ok = decodeRice(stream, int(coded), cand, d.idx[:0]); !ok {
		return fmt.Errorf("%w: bad position stream (%d bytes for %d positions)", ErrMalformed, len(stream), coded)
	}
	if inverted {
		// The stream is at most 8 bits per candidate... of the complement: bounded by cand,
		// which the caller bounded by the block's length.
		members := complementOf(d.idx, uint32(cand), d.bpos[:0])
		d.idx, d.bpos = members, d.idx
	}
	return nil
}

// valueSection decodes the value section of class c, n changes, into d.vals[c].
func (d *block2Decoder) valueSection(c int, section []byte, n int) error {
	d.vals[c] = d.vals[c][:0]
	if n == 0 {
		if len(section) != 0 {
			return fmt.Errorf("%w: %d bytes of values for no change", ErrMalformed, len(section))
		}
		return nil
	}
	if len(section) < 1 {
		return fmt.Errorf("%w: empty value section", ErrMalformed)
	}
	mode := section[0]
	symLen, k := binary.Uvarint(section[1:])
	if k <= 0 || symLen > uint64(len(section)-1-k) {
		return fmt.Errorf("%w: symbol section length runs past the value section", ErrMalformed)
	}
	syms := section[1+k : 1+k+int(symLen)]
	escapes := section[1+k+int(symLen):]
	switch mode {
	case symbolsRaw:
		if len(syms) != n {
			return fmt.Errorf("%w: raw symbol section of %d bytes for %d changes", ErrMalformed, len(syms), n)
		}
	case symbolsRLE:
		if len(syms) != 1 {
			return fmt.Errorf("%w: repeated-symbol section of %d bytes, want 1", ErrMalformed, len(syms))
		}
		d.rle = slices.Grow(d.rle[:0], n)[:n]
		for i := range d.rle {
			d.rle[i] = syms[0]
		}
		syms = d.rle
	case symbolsFSE:
		d.syms = slices.Grow(d.syms[:0], n)[:n]
		if err := d.fast.decode(d.syms, syms); err != nil {
			return fmt.Errorf("%w: value symbols: %v", ErrMalformed, err)
		}
		syms = d.syms
	default:
		return fmt.Errorf("%w: unknown symbol mode %d", ErrMalformed, mode)
	}
	mask := d.values.mask
	vals := slices.Grow(d.vals[c], n)
	for _, s := range syms {
		v := uint64(s)
		if s == escapeSymbol {
			e, k := binary.Uvarint(escapes)
			if k <= 0 {
				return fmt.Errorf("%w: escape stream ends early or overflows", ErrMalformed)
			}
			escapes = escapes[k:]
			if e > mask-escapeSymbol {
				return fmt.Errorf("%w: escaped value %d+%d exceeds %d-byte elements", ErrMalformed, escapeSymbol, e, d.width)
			}
			v += e
		}
		if v == 0 && c == classB {
			return fmt.Errorf("%w: a change that changes nothing (value code 0)", ErrMalformed)
		}
		vals = append(vals, v)
	}
	if len(escapes) != 0 {
		return fmt.Errorf("%w: %d bytes left over after the escape stream", ErrMalformed, len(escapes))
	}
	d.vals[c] = vals
	return nil
}

// compact stores the decoded block in db's compact form (symbols and escapes).
func (d *block2Decoder) compact(db *DecodedBlock) {
	db.pos = append(db.pos[:0], d.pos...)
	db.symbols = slices.Grow(db.symbols[:0], len(d.codes))
	db.escAt, db.escCode = db.escAt[:0], db.escCode[:0]
	for i, code := range d.codes {
		if code < escapeSymbol {
			db.symbols = append(db.symbols, byte(code))
			continue
		}
		db.symbols = append(db.symbols, escapeSymbol)
		db.escAt, db.escCode = append(db.escAt, uint32(i)), append(db.escCode, code)
	}
}
