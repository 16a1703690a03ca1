package delta

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"math/bits"
	"slices"
	"sync"
	"unsafe"

	"github.com/klauspost/compress/fse"
)

// One block of a version-2 body (docs/format.md Part II, "Version 2") holds the changes of a
// block coded against the same block of the context:
//
//	m        uvarint  the context block's change count
//	sum      u32le    CRC-32C of the context block's changes (contextSum)
//	flags    u8       bit c: class c's positions code the candidates that did NOT change
//	n1, n2   uvarint  changes of class A1 and A2 (class B has count-n1-n2)
//	P1 P2 PB uvarint  bytes of the three position streams
//	V1 V2 VB uvarint  bytes of the three value sections
//	then the three position streams and the three value sections, in that order
//
// The classes split the block's elements by what the context did to them: A1, changed by one
// step (value code 1 or 2); A2, changed by more; B, not changed. The changes of classes A are
// coded as Rice gaps (sparse_rice.go) over the class's candidates only, with their own
// statistics: measured on the generator's steps at lr 3e-6, an A2 element changes again 95%
// of the time, an A1 element 15%, a B element 2%. Class B's positions are gaps over the whole
// block, as in version 1: over the elements the context left alone they would be 0.5%
// smaller, but turning those indices into positions cost a merge with every context change,
// about a quarter of the decoding time. A value section is a version-1 symbol section (mode,
// uvarint length, symbols) followed by its escape stream. Class B stores value codes as
// version 1 does; classes A store the difference of the change from the context's change,
// turned so that the context's direction is positive: an element that moves by the same
// step as last time, the usual case, stores 0.

// The classes of a version-2 block.
const (
	classA1    = iota // the context changed the element by one step
	classA2           // the context changed it by more
	classB            // the context did not change it
	numClasses        // the number of classes
)

// contextClass is the class of an element the context changed with value code c.
func contextClass(c uint64) int {
	if c <= 2 {
		return classA1
	}
	return classA2
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// contextSum is the CRC-32C of the block's changes, what a version-2 block records of its
// context: every position (u32le), then every change's symbol (its value code, or 255 for a
// code of 255 or more), then every code of 255 or more (u64le), in order. That is the compact
// form the block holds, so the sum reads its slices as they are. Computed once per block.
func (b *DecodedBlock) contextSum() uint32 {
	if s := b.sum.Load(); s != 0 {
		return uint32(s)
	}
	crc := crc32.Update(0, castagnoli, uint32Bytes(b.pos))
	crc = crc32.Update(crc, castagnoli, b.symbols[:len(b.pos)])
	var buf [8]byte
	for _, c := range b.escCode {
		binary.LittleEndian.PutUint64(buf[:], c)
		crc = crc32.Update(crc, castagnoli, buf[:])
	}
	b.sum.Store(1<<32 | uint64(crc))
	return crc
}

// littleEndian is whether this machine stores integers low byte first.
var littleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// uint32Bytes returns the little-endian bytes of v: v's own memory where the machine is
// little-endian, else a copy.
func uint32Bytes(v []uint32) []byte {
	if littleEndian {
		return unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(v))), 4*len(v))
	}
	out := make([]byte, 0, 4*len(v))
	for _, x := range v {
		out = binary.LittleEndian.AppendUint32(out, x)
	}
	return out
}

// contextCodes returns the value codes of the block's changes, in order, appended to out.
func (b *DecodedBlock) contextCodes(out []uint64) []uint64 {
	out = slices.Grow(out[:0], len(b.pos))
	esc := 0
	for _, s := range b.symbols[:len(b.pos)] {
		code := uint64(s)
		if s == escapeSymbol {
			code = b.escCode[esc]
			esc++
		}
		out = append(out, code)
	}
	return out
}

// checkContext checks that ctx can be block b of the context of a delta of the given element
// type and block layout: errors wrap ErrContextMismatch.
func checkContext(ctx *DecodedBlock, b int64, shift uint, width int, float bool, blockLen uint64) error {
	switch {
	case ctx == nil:
		return fmt.Errorf("%w: no context block %d", ErrContextMismatch, b)
	case ctx.width != width || ctx.values.float != float:
		return fmt.Errorf("%w: context block of %d-byte elements (float %t), the delta's are %d-byte (float %t)",
			ErrContextMismatch, ctx.width, ctx.values.float, width, float)
	case ctx.start != b<<shift:
		return fmt.Errorf("%w: context block starts at element %d, block %d at %d", ErrContextMismatch, ctx.start, b, b<<shift)
	case len(ctx.pos) > 0 && uint64(ctx.pos[len(ctx.pos)-1]) >= blockLen:
		return fmt.Errorf("%w: context block has a change at %d, past the block's %d elements", ErrContextMismatch, ctx.pos[len(ctx.pos)-1], blockLen)
	}
	return nil
}

// toContext maps the value code of a change the context also changed, with code c, to the
// number a version-2 block stores for it: zigzag(s*d - |dc|), with d and dc the two ordered
// differences and s the sign of dc. It is a bijection on the codes of the width.
func (m valueMap) toContext(code, c uint64) uint64 {
	d := m.unzig(code)
	if c&1 != 0 {
		d = -d & m.mask
	}
	return m.zig((d - contextStep(c)) & m.mask)
}

// fromContext is the inverse of toContext.
func (m valueMap) fromContext(v, c uint64) uint64 {
	d := (m.unzig(v) + contextStep(c)) & m.mask
	if c&1 != 0 {
		d = -d & m.mask
	}
	return m.zig(d)
}

// contextStep is |dc| for the value code c of the context's change: (c+1)/2, without overflow.
func contextStep(c uint64) uint64 { return c>>1 + c&1 }

func (m valueMap) zig(d uint64) uint64 {
	z := (d << 1) & m.mask
	if d&m.sign != 0 {
		z ^= m.mask
	}
	return z
}

func (m valueMap) unzig(z uint64) uint64 {
	d := z >> 1
	if z&1 != 0 {
		d ^= m.mask
	}
	return d
}

// block2Encoders are the coders of version-2 blocks, reused across encoders (a tensor of one
// block would otherwise grow every list from nothing).
var block2Encoders = sync.Pool{New: func() any { return new(block2Encoder) }}

// block2Encoder codes blocks of a version-2 body. Its slices are reused from block to block.
type block2Encoder struct {
	pos      []uint32
	codes    []uint64
	ctxCodes []uint64
	ctxPos   []uint32
	idx      [numClasses][]uint32 // per class, the changes' indices among the class's candidates
	vals     [numClasses][]uint64 // per class, the numbers stored for its changes, in order
	gaps     []uint32
	rice     [numClasses]bitWriter
	syms     []byte
	esc      []byte
	sections [numClasses][]byte
	fse      fse.Scratch
}

// appendBlock codes the changes collected in cur (block-relative positions, of a block of
// blockLen elements) against ctx and appends the block to out.
func (e *block2Encoder) appendBlock(out []byte, cur *blockEncoder, ctx *DecodedBlock, blockLen uint64, values valueMap) ([]byte, error) {
	// The collected changes, back from gaps and symbols. The lists live in locals while they
	// grow: appended to in the struct, every change stored their headers again.
	pos := slices.Grow(e.pos[:0], len(cur.gaps))
	codes := slices.Grow(e.codes[:0], len(cur.gaps))
	p := int64(-1)
	escapes := cur.escapes
	for i, g := range cur.gaps {
		p += int64(g) + 1
		code := uint64(cur.symbols[i])
		if code == escapeSymbol {
			v, n := binary.Uvarint(escapes)
			escapes = escapes[n:]
			code += v
		}
		pos, codes = append(pos, uint32(p)), append(codes, code)
	}
	e.pos, e.codes = pos, codes
	// The changes by class, in one branch-free pass over the changes and the context's
	// (whether a change is the context's, and which class that is, are coin flips to a branch
	// predictor): both lists end with a sentinel, every step writes to every class's list and
	// advances by arithmetic.
	m, n := len(ctx.pos), len(pos)
	e.ctxCodes = append(ctx.contextCodes(e.ctxCodes), 0)
	ctxCodes := e.ctxCodes
	ctxPos := append(append(e.ctxPos[:0], ctx.pos...), math.MaxUint32)
	pos, codes = append(pos, math.MaxUint32), append(codes, 0)
	idx1 := slices.Grow(e.idx[classA1][:0], n+1)[:n+1]
	idx2 := slices.Grow(e.idx[classA2][:0], n+1)[:n+1]
	idxB := slices.Grow(e.idx[classB][:0], n+1)[:n+1]
	vals1 := slices.Grow(e.vals[classA1][:0], n+1)[:n+1]
	vals2 := slices.Grow(e.vals[classA2][:0], n+1)[:n+1]
	valsB := slices.Grow(e.vals[classB][:0], n+1)[:n+1]
	var cand1, cand2 uint32
	n1, n2, nb := 0, 0, 0
	mask, signShift := values.mask, uint(bits.TrailingZeros64(values.sign))
	for i, j := 0, 0; i < n || j < m; {
		p, q := pos[i], ctxPos[j]
		code, c := codes[i], ctxCodes[j]
		var ctxFirst, same, a1 int // the context's change comes first; it is this change
		if q < p {
			ctxFirst = 1
		}
		if q == p {
			same = 1
		}
		if c <= 2 {
			a1 = 1
		}
		// values.toContext(code, c), written out: the call was a fifth of the pass.
		d := code>>1 ^ mask&-(code&1)
		neg := -(c & 1)
		d = ((d ^ neg) - neg) & mask
		d = (d - (c>>1 + c&1)) & mask
		v := (d<<1)&mask ^ mask&-(d>>signShift&1)
		idx1[n1], vals1[n1] = cand1, v
		idx2[n2], vals2[n2] = cand2, v
		idxB[nb], valsB[nb] = p, code
		took := ctxFirst | same // the context's change is done with
		n1 += same & a1
		n2 += same &^ a1
		nb += 1 - took
		cand1 += uint32(took & a1)
		cand2 += uint32(took &^ a1)
		j += took
		i += 1 - ctxFirst
	}
	e.pos, e.codes, e.ctxPos = pos[:n], codes[:n], ctxPos
	var cand [numClasses]uint32
	cand[classA1], cand[classA2], cand[classB] = cand1, cand2, uint32(blockLen)
	e.idx = [numClasses][]uint32{idx1[:n1], idx2[:n2], idxB[:nb]}
	e.vals = [numClasses][]uint64{vals1[:n1], vals2[:n2], valsB[:nb]}

	var flags byte
	for c := range numClasses {
		members := e.idx[c]
		if uint32(len(members)) > cand[c]/2 {
			// More than half the candidates changed: their complement is the sparser set.
			flags |= 1 << c
			members = complementOf(members, cand[c], e.gaps[:0])
			e.gaps = members
		}
		e.rice[c].out = e.rice[c].out[:0]
		if len(members) > 0 {
			e.gaps = gapsOf(members, e.gaps[:0])
			appendRice(&e.rice[c], e.gaps)
		}
		section, err := e.valueSection(e.sections[c][:0], e.vals[c])
		if err != nil {
			return out, err
		}
		e.sections[c] = section
	}
	out = binary.AppendUvarint(out, uint64(len(ctx.pos)))
	out = binary.LittleEndian.AppendUint32(out, ctx.contextSum())
	out = append(out, flags)
	out = binary.AppendUvarint(out, uint64(len(e.idx[classA1])))
	out = binary.AppendUvarint(out, uint64(len(e.idx[classA2])))
	for c := range numClasses {
		out = binary.AppendUvarint(out, uint64(len(e.rice[c].out)))
	}
	for c := range numClasses {
		out = binary.AppendUvarint(out, uint64(len(e.sections[c])))
	}
	for c := range numClasses {
		out = append(out, e.rice[c].out...)
	}
	for c := range numClasses {
		out = append(out, e.sections[c]...)
	}
	return out, nil
}

// complementOf appends to out the numbers below n that are not in members (ascending).
func complementOf(members []uint32, n uint32, out []uint32) []uint32 {
	next := uint32(0)
	for _, m := range members {
		for ; next < m; next++ {
			out = append(out, next)
		}
		next = m + 1
	}
	for ; next < n; next++ {
		out = append(out, next)
	}
	return out
}

// gapsOf turns ascending indices into the gaps of the Rice coding, in place when out aliases
// idx.
func gapsOf(idx []uint32, out []uint32) []uint32 {
	prev := int64(-1)
	out = slices.Grow(out[:0], len(idx))[:len(idx)]
	for i, x := range idx {
		out[i] = uint32(int64(x) - prev - 1)
		prev = int64(x)
	}
	return out
}

// valueSection appends the value section of one class: the version-1 symbol section (mode,
// uvarint length, symbols) and then the escape stream. No changes, no bytes.
func (e *block2Encoder) valueSection(out []byte, vals []uint64) ([]byte, error) {
	if len(vals) == 0 {
		return out, nil
	}
	syms := slices.Grow(e.syms[:0], len(vals))[:len(vals)]
	esc := e.esc[:0]
	for i, v := range vals {
		syms[i] = byte(min(v, escapeSymbol))
		if v >= escapeSymbol {
			esc = binary.AppendUvarint(esc, v-escapeSymbol)
		}
	}
	e.syms, e.esc = syms, esc
	mode, section := byte(symbolsFSE), []byte(nil)
	compressed, err := fse.Compress(e.syms, &e.fse)
	switch {
	case err == nil:
		section = compressed
	case errors.Is(err, fse.ErrIncompressible):
		mode, section = symbolsRaw, e.syms
	case errors.Is(err, fse.ErrUseRLE):
		mode, section = symbolsRLE, e.syms[:1]
	default:
		return out, fmt.Errorf("entropy-code %d value symbols: %w", len(e.syms), err)
	}
	out = append(out, mode)
	out = binary.AppendUvarint(out, uint64(len(section)))
	out = append(out, section...)
	return append(out, e.esc...), nil
}
