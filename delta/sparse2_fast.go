package delta

import (
	"bytes"
	"encoding/binary"
	"math"
	"math/bits"
	"slices"
)

// The fast decoder of version-2 blocks, the read path's (DecodeBlock). decode
// (sparse2_decode.go) stays the reference: it builds a key per change and merges them, marks
// every change of the context, holds every value code as eight bytes, and then compacts. This
// one writes the block's compact form (positions, symbols, escaped codes) straight from a
// merge of classes A's few changes into class B's many, touches the context's changes only
// to find the candidates, and keeps class B's symbols as the bytes they are (a class-B symbol
// is its change's compact symbol). No allocation once its lists have grown. Measured by
// BenchmarkDecodeBlockV2 and BenchmarkDecodeBlockV2Ref (0.61-0.67x the reference's CPU per
// change): docs/benchmarks.md, "Figure 4: reads".
//
// It accepts exactly what the reference accepts and decodes it to the same block; to keep
// the errors the same without a second copy of every check's message, it only reports
// whether a block is good, and on a block it refuses, the reference decodes it again and
// returns its error (a damaged block is rare; its cost does not matter). Tests compare both
// on every input they make and on fuzzed ones.

// decodeInto decodes a block like decode and stores it in db's compact form, as decode and
// then compact would.
func (d *block2Decoder) decodeInto(payload []byte, count int, blockLen uint64, ctx, db *DecodedBlock) error {
	if d.decodeFast(payload, count, blockLen, ctx, db) {
		return nil
	}
	if err := d.decode(payload, count, blockLen, ctx); err != nil {
		return err
	}
	d.compact(db)
	return nil
}

// fastScratch holds the fast decoder's lists, reused from block to block.
type fastScratch struct {
	syms   [numClasses][]byte // per class, its value symbols (class B's with a sentinel)
	vals   [numClasses][]uint64
	escB   []uint64 // class B's escaped codes, in order
	idx    [classB][]uint32
	spare  []uint32
	idxB   []uint32
	ks     [classB][]uint32 // per class A, its members' context indices and a sentinel
	posA   []uint32         // the changes of classes A, by position
	symA   []byte
	escPos []uint32 // classes A's escaped changes: positions and codes
	escA   []uint64
}

// decodeFast decodes into db and reports true, or reports false for a block the reference
// refuses (db's lists are then not to be used).
func (d *block2Decoder) decodeFast(payload []byte, count int, blockLen uint64, ctx, db *DecodedBlock) bool {
	s := &d.fs
	h, err := parseV2Header(payload, count)
	if err != nil {
		return false
	}
	m := len(ctx.pos)
	if h.m != uint64(m) || uint32(h.sum) != ctx.contextSum() {
		return false
	}
	n1, n2 := d.contextCandidates(ctx)
	cand := [numClasses]uint64{uint64(n1), uint64(n2), blockLen}

	streams := h.payload
	var posStream [numClasses][]byte
	for c := range numClasses {
		posStream[c], streams = streams[:h.posLen[c]], streams[h.posLen[c]:]
	}
	for c := range numClasses {
		section := streams[:h.valLen[c]]
		streams = streams[h.valLen[c]:]
		if !d.fastValues(c, section, int(h.n[c])) {
			return false
		}
	}
	// Classes A: each member's context index, then the changes of both in position order
	// (a merge by context index: the context's changes are in position order).
	for c := range classB {
		if h.n[c] > cand[c] {
			return false
		}
		idx, spare, ok := decodeMembers(posStream[c], h.flags&(1<<c) != 0, h.n[c], cand[c], s.idx[c][:0], s.spare[:0])
		s.idx[c], s.spare = idx, spare
		if !ok {
			return false
		}
		cands := d.cands[c]
		ks := slices.Grow(s.ks[c][:0], len(idx)+1)[:len(idx)+1]
		for t, x := range idx {
			ks[t] = cands[x]
		}
		ks[len(idx)] = math.MaxUint32
		s.ks[c] = ks
	}
	if !d.mergeA(ctx, int(h.n[classA1]+h.n[classA2])) {
		return false
	}
	// Class B.
	idxB, spare, ok := decodeMembers(posStream[classB], h.flags&(1<<classB) != 0, h.n[classB], cand[classB], s.idxB[:0], s.spare[:0])
	s.spare = spare
	if !ok {
		s.idxB = idxB
		return false
	}
	s.idxB = append(idxB, math.MaxUint32) // a sentinel above every position
	return s.mergeAB(count, db)
}

// decodeMembers is members: the ascending indices among cand candidates of a class's n
// changes, in out; spare is scratch for an inverted stream. It reports false where members
// errs.
func decodeMembers(stream []byte, inverted bool, n, cand uint64, out, spare []uint32) ([]uint32, []uint32, bool) {
	coded := n
	if inverted {
		coded = cand - n
	}
	if coded > 8*uint64(len(stream)) || coded == 0 && len(stream) != 0 {
		return out, spare, false
	}
	if !inverted {
		idx, ok := decodeRice(stream, int(coded), cand, out)
		return idx, spare, ok
	}
	others, ok := decodeRice(stream, int(coded), cand, spare)
	if !ok {
		return out, others, false
	}
	return complementOf(others, uint32(cand), out), others, true
}

// fastValues is valueSection for the fast decoder: class B keeps its symbols (and a
// sentinel) and its escaped codes apart; classes A get their stored numbers in s.vals.
func (d *block2Decoder) fastValues(c int, section []byte, n int) bool {
	s := &d.fs
	if n == 0 {
		s.syms[c], s.vals[c] = s.syms[c][:0], s.vals[c][:0]
		if c == classB {
			s.syms[c], s.escB = append(s.syms[c], 0), s.escB[:0]
		}
		return len(section) == 0
	}
	if len(section) < 1 {
		return false
	}
	mode := section[0]
	symLen, k := binary.Uvarint(section[1:])
	if k <= 0 || symLen > uint64(len(section)-1-k) {
		return false
	}
	in := section[1+k : 1+k+int(symLen)]
	escapes := section[1+k+int(symLen):]
	syms := slices.Grow(s.syms[c][:0], n+1)[:n+1]
	s.syms[c] = syms
	syms[n] = 0
	switch mode {
	case symbolsRaw:
		if len(in) != n {
			return false
		}
		copy(syms, in)
	case symbolsRLE:
		if len(in) != 1 {
			return false
		}
		b := in[0]
		for i := range syms[:n] {
			syms[i] = b
		}
	case symbolsFSE:
		if d.fast.decode(syms[:n], in) != nil {
			return false
		}
	default:
		return false
	}
	syms = syms[:n]
	mask := d.values.mask
	if c == classB {
		// Value code 0 changes nothing; an escaped code is at least escapeSymbol.
		if bytes.IndexByte(syms, 0) >= 0 {
			return false
		}
		esc := s.escB[:0]
		ok := eachEscape(syms, escapes, mask, func(_ int, e uint64) { esc = append(esc, escapeSymbol+e) })
		s.escB = esc
		return ok
	}
	vals := slices.Grow(s.vals[c][:0], n)[:n]
	for i, sy := range syms {
		vals[i] = uint64(sy)
	}
	ok := eachEscape(syms, escapes, mask, func(i int, e uint64) { vals[i] += e })
	s.vals[c] = vals
	return ok
}

// eachEscape gives fn the position and the varint of each escaped symbol of syms, the
// varints read in order from escapes; false when a varint is missing or out of range, or
// when escapes holds more than the symbols escape.
func eachEscape(syms, escapes []byte, mask uint64, fn func(i int, e uint64)) bool {
	for i := 0; ; i++ {
		j := bytes.IndexByte(syms[i:], escapeSymbol)
		if j < 0 {
			break
		}
		i += j
		e, k := binary.Uvarint(escapes)
		if k <= 0 || e > mask-escapeSymbol {
			return false
		}
		escapes = escapes[k:]
		fn(i, e)
	}
	return len(escapes) == 0
}

// mergeA merges the nA members of classes A by context index into s.posA and s.symA, their value codes from the numbers stored and the context's codes; the codes of
// escapeSymbol or more go to s.escPos and s.escA. It reports false for a code 0.
func (d *block2Decoder) mergeA(ctx *DecodedBlock, nA int) bool {
	s := &d.fs
	k1, k2 := s.ks[classA1], s.ks[classA2]
	v1, v2 := s.vals[classA1], s.vals[classA2]
	posA := slices.Grow(s.posA[:0], nA)[:nA]
	symA := slices.Grow(s.symA[:0], nA)[:nA]
	symA = symA[:len(posA)]
	escPos, escA := s.escPos[:0], s.escA[:0]
	mask, signShift := d.values.mask, uint(bits.TrailingZeros64(d.values.sign))
	cpos, csym := ctx.pos, ctx.symbols[:len(ctx.pos)]
	i, j := 0, 0
	for o := range posA {
		// Which class comes next is a coin flip to a branch predictor: select by arithmetic.
		// A class's list ends in a sentinel above every index; the other is taken then.
		a, b := k1[i], k2[j]
		var t int // class A1's comes first
		if a < b {
			t = 1
		}
		k := b ^ (a^b)&-uint32(t)
		var va, vb uint64
		if i < len(v1) {
			va = v1[i]
		}
		if j < len(v2) {
			vb = v2[j]
		}
		v := vb ^ (va^vb)&-uint64(t)
		i += t
		j += 1 - t
		c := uint64(csym[k])
		if c == escapeSymbol {
			c = ctx.code(int(k))
		}
		// values.fromContext(v, c), written out (the call was not inlined).
		d := v>>1 ^ mask&-(v&1)
		d = (d + (c>>1 + c&1)) & mask
		neg := -(c & 1)
		d = ((d ^ neg) - neg) & mask
		code := (d<<1)&mask ^ mask&-(d>>signShift&1)
		if code == 0 {
			return false
		}
		p := cpos[k]
		posA[o], symA[o] = p, byte(min(code, escapeSymbol))
		if code >= escapeSymbol {
			escPos, escA = append(escPos, p), append(escA, code)
		}
	}
	s.posA, s.symA, s.escPos, s.escA = posA, symA, escPos, escA
	return true
}

// mergeAB merges the changes of classes A (s.posA, s.symA) and B (s.idxB, ending in a
// sentinel, and s.syms[classB]) into db's compact form. It reports false for a position in
// both. Class B's changes are most of them: they are copied in runs, one per change of
// classes A, whose ends are the only branches that miss.
func (s *fastScratch) mergeAB(count int, db *DecodedBlock) bool {
	posA, symA := s.posA, s.symA
	posB, symB := s.idxB, s.syms[classB]
	nB := len(posB) - 1
	if len(posA)+nB != count || len(symB) < len(posB) || len(symA) != len(posA) {
		return false
	}
	symB = symB[:len(posB)] // equal lengths: one bounds check serves both
	pos := slices.Grow(db.pos[:0], count)[:count]
	symbols := slices.Grow(db.symbols[:0], count)[:count]
	symbols = symbols[:len(pos)]
	db.pos, db.symbols = pos, symbols
	// Each change is written once: o = t + j stays below count = len(posA) + nB.
	o, j := 0, 0
	for t, a := range posA {
		for posB[j] < a {
			pos[o], symbols[o] = posB[j], symB[j]
			o++
			j++
		}
		if posB[j] == a {
			return false
		}
		pos[o], symbols[o] = a, symA[t]
		o++
	}
	copy(pos[o:], posB[j:nB])
	copy(symbols[o:], symB[j:nB])
	// The escaped codes, found by a byte search (they are rare): each is the next of class
	// A's or of class B's, whichever is at its position.
	escAt, escCode := db.escAt[:0], db.escCode[:0]
	ia, ib := 0, 0
	for o := 0; ; o++ {
		k := bytes.IndexByte(symbols[o:], escapeSymbol)
		if k < 0 {
			break
		}
		o += k
		var code uint64
		if ia < len(s.escPos) && s.escPos[ia] == pos[o] {
			code = s.escA[ia]
			ia++
		} else {
			if ib >= len(s.escB) {
				return false
			}
			code = s.escB[ib]
			ib++
		}
		escAt, escCode = append(escAt, uint32(o)), append(escCode, code)
	}
	db.escAt, db.escCode = escAt, escCode
	return true
}
