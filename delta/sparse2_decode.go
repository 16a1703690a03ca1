package delta

import (
	"bytes"
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

	cands   [numClasses][]uint32 // per class A: the indices of its candidates among the context's changes
	mark    []uint32             // per context change: 1 + the index of its value when it changes again, or 0
	ordered []uint64             // scratch: classes A's stored values
	idx     []uint32
	bpos    []uint32 // scratch of members
	akeys   []uint64 // the merge keys of classes A and a sentinel (mergeKeys)
	bkeys   []uint64 // class B's
	keys    []uint64 // both merged
	mvals   []uint64 // the value codes of classes A then B, by the keys' low halves
	ks      []uint32 // per change of classes A, the index of its context change
	vals    [numClasses][]uint64
	syms    []byte
	rle     []byte
	fast    fseDecoder
	fs      fastScratch // decodeFast's
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
	n1, n2 := d.contextCandidates(ctx)
	var cand [numClasses]uint64
	cand[classA1], cand[classA2], cand[classB] = uint64(n1), uint64(n2), blockLen

	streams := h.payload
	var posStream [numClasses][]byte
	for c := range numClasses {
		posStream[c], streams = streams[:h.posLen[c]], streams[h.posLen[c]:]
	}
	for c := range numClasses {
		section := streams[:h.valLen[c]]
		streams = streams[h.valLen[c]:]
		if err := d.valueSection(c, section, int(h.n[c])); err != nil {
			return fmt.Errorf("class %d values: %w", c, err)
		}
	}
	// Classes A: mark[k] is 1 + the index of the stored value of context change k when it
	// changes again, among its class's values (class A2's after class A1's), else 0.
	mark := slices.Grow(d.mark[:0], m)[:m]
	clear(mark)
	vals := append(d.mvals[:0], d.vals[classA1]...)
	vals = append(vals, d.vals[classA2]...)
	base := uint32(1)
	for _, c := range []int{classA1, classA2} {
		if h.n[c] > cand[c] {
			return fmt.Errorf("%w: class %d claims %d changes of %d candidates", ErrMalformed, c, h.n[c], cand[c])
		}
		if err := d.members(posStream[c], h.flags&(1<<c) != 0, h.n[c], cand[c]); err != nil {
			return fmt.Errorf("class %d positions: %w", c, err)
		}
		cands := d.cands[c]
		for t, x := range d.idx {
			mark[cands[x]] = base + uint32(t)
		}
		base += uint32(len(d.idx))
	}
	// Their merge keys (position << 32 | index of the value code in d.mvals), ascending,
	// between two sentinels (mergeKeys), and their value codes in that order after a dummy.
	nA := int(h.n[classA1] + h.n[classA2])
	akeys := slices.Grow(d.akeys[:0], m+2)[:m+2]
	ks := slices.Grow(d.ks[:0], m+1)[:m+1]
	na := 0
	for k, mk := range mark {
		akeys[na+1], ks[na] = uint64(ctx.pos[k])<<32|uint64(na+1), uint32(k)
		var member int // without a branch: which context changes change again is a coin flip
		if mk != 0 {
			member = 1
		}
		na += member
	}
	akeys[0], akeys[nA+1] = 0, mergeSentinel
	mvals := slices.Grow(d.ordered[:0], nA+1)[:nA+1]
	mvals[0] = 0
	for t, k := range ks[:nA] {
		c := uint64(ctx.symbols[k])
		if c == escapeSymbol {
			c = ctx.code(int(k))
		}
		code := d.values.fromContext(vals[mark[k]-1], c)
		if code == 0 {
			return fmt.Errorf("%w: a change that changes nothing (value code 0)", ErrMalformed)
		}
		mvals[t+1] = code
	}
	// Class B: positions in the whole block.
	if err := d.members(posStream[classB], h.flags&(1<<classB) != 0, h.n[classB], cand[classB]); err != nil {
		return fmt.Errorf("class B positions: %w", err)
	}
	nB := len(d.idx)
	bkeys := slices.Grow(d.bkeys[:0], nB+2)[:nB+2]
	for i, p := range d.idx {
		bkeys[i+1] = uint64(p)<<32 | uint64(nA+1+i)
	}
	bkeys[0], bkeys[nB+1] = 0, mergeSentinel
	mvals = append(mvals, d.vals[classB]...)
	keys := slices.Grow(d.keys[:0], count)[:count]
	ok := mergeKeys(keys, akeys[:nA+2], bkeys)
	d.akeys, d.bkeys, d.keys, d.mvals, d.ordered, d.ks, d.mark = akeys, bkeys, keys, mvals, vals, ks, mark
	if !ok {
		return fmt.Errorf("%w: a change in both class A and class B", ErrMalformed)
	}
	return nil
}

// unpack turns the merged keys of the block decoded last into d.pos and d.codes.
func (d *block2Decoder) unpack() {
	n := len(d.keys)
	pos := slices.Grow(d.pos[:0], n)[:n]
	codes := slices.Grow(d.codes[:0], n)[:n]
	all := d.mvals[:n+1]
	for i, k := range d.keys {
		pos[i], codes[i] = uint32(k>>32), all[uint32(k)]
	}
	d.pos, d.codes = pos, codes
}

// mergeSentinel ends the lists mergeKeys merges: above every key of a block's change. Key 0
// starts them: below every key, whose low half is at least 1.
const mergeSentinel = ^uint64(0)

// mergeKeys merges the ascending keys of a and b (position << 32 | a number from 1 up), each
// between the sentinels 0 and mergeSentinel, into out, which has room for exactly their keys.
// It reports false when a position is in both. Which list comes next is a coin flip to a
// branch predictor, so the loop has no branch on the data: it always writes, and advances by
// arithmetic. Each step waits on the one before (the next keys to compare depend on which was
// taken), so two merges run at once, one from the front taking the smaller key and one from the
// back taking the larger, each for half of out: they meet without overlapping, and any
// position in both lists is compared with itself by one of them.
func mergeKeys(out, a, b []uint64) bool {
	n := len(out)
	i, j := 1, 1                 // the front's next keys
	i2, j2 := len(a)-2, len(b)-2 // the back's
	var dup uint64
	half := n / 2
	for lo := range half {
		hi := n - 1 - lo
		x, y := a[i], b[j]
		x2, y2 := a[i2], b[j2]
		var t, t2 int // t: a's key is the smaller; t2: a's is the larger
		if x < y {
			t = 1
		}
		if x2 > y2 {
			t2 = 1
		}
		if x>>32 == y>>32 || x2>>32 == y2>>32 {
			dup = 1
		}
		out[lo] = y ^ (x^y)&-uint64(t)
		out[hi] = y2 ^ (x2^y2)&-uint64(t2)
		i += t
		j += 1 - t
		i2 -= t2
		j2 -= 1 - t2
	}
	if n%2 == 1 {
		x, y := a[i], b[j]
		if x>>32 == y>>32 {
			dup = 1
		}
		out[half] = min(x, y)
	}
	return dup == 0
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

// compact stores the block decoded last in db's compact form (positions, symbols and
// escapes), straight from the merged keys.
func (d *block2Decoder) compact(db *DecodedBlock) {
	n := len(d.keys)
	pos := slices.Grow(db.pos[:0], n)[:n]
	symbols := slices.Grow(db.symbols[:0], n)[:n]
	all := d.mvals[:n+1]
	for i, k := range d.keys {
		pos[i], symbols[i] = uint32(k>>32), byte(min(all[uint32(k)], escapeSymbol))
	}
	escAt, escCode := db.escAt[:0], db.escCode[:0]
	for i := 0; ; i++ {
		j := bytes.IndexByte(symbols[i:], escapeSymbol)
		if j < 0 {
			break
		}
		i += j
		escAt, escCode = append(escAt, uint32(i)), append(escCode, all[uint32(d.keys[i])])
	}
	db.pos, db.symbols, db.escAt, db.escCode = pos, symbols, escAt, escCode
}

// contextCandidates sets d.cands of classes A to the indices of ctx's changes of each class
// and returns their counts. Without a branch on the data: a context change's class is a coin
// flip to a branch predictor. (decode and decodeFast both.)
func (d *block2Decoder) contextCandidates(ctx *DecodedBlock) (n1, n2 int) {
	m := len(ctx.pos)
	c1 := slices.Grow(d.cands[classA1][:0], m)[:m]
	c2 := slices.Grow(d.cands[classA2][:0], m)[:m]
	for k, s := range ctx.symbols[:m] {
		var a1 int
		if s <= 2 {
			a1 = 1
		}
		c1[n1], c2[n2] = uint32(k), uint32(k)
		n1 += a1
		n2 += 1 - a1
	}
	d.cands[classA1], d.cands[classA2] = c1[:n1], c2[:n2]
	return n1, n2
}
