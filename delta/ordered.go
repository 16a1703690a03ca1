package delta

import "encoding/binary"

// The value differences of the delta codec live in "ordered-integer" space: every element of
// width w bytes is read as a little-endian w-byte unsigned integer and, for float dtypes, its
// sign-magnitude bits are mapped to an unsigned integer that grows monotonically with the
// float value. A change of one ULP is then a difference of +-1 whatever the sign, and the
// difference of two elements, taken modulo 2^(8w), is exact in both directions:
// ord(base)+d = ord(new) and ord(new)-d = ord(base), for every bit pattern (NaN payloads, -0).

// widthMask is 2^(8w)-1: the bits of one element of width w.
func widthMask(width int) uint64 {
	if width >= 8 {
		return ^uint64(0)
	}
	return 1<<(8*uint(width)) - 1
}

// signBit is the top bit of an element of width w.
func signBit(width int) uint64 {
	return 1 << (8*uint(width) - 1)
}

// toOrdered maps the raw bits x of one element to ordered-integer space. Floats: negative
// values (sign bit set) are complemented, so larger magnitudes come first; non-negative values
// get the sign bit set, so they sort above every negative value. Integers keep their bits.
func toOrdered(x uint64, width int, float bool) uint64 {
	if !float {
		return x
	}
	if x&signBit(width) != 0 {
		return ^x & widthMask(width)
	}
	return x | signBit(width)
}

// fromOrdered is the inverse of toOrdered.
func fromOrdered(o uint64, width int, float bool) uint64 {
	if !float {
		return o
	}
	if o&signBit(width) != 0 {
		return o &^ signBit(width)
	}
	return ^o & widthMask(width)
}

// zigzag maps the w-bit two's-complement difference d to an unsigned code in which small
// magnitudes of either sign are small: 0, -1, +1, -2, +2, ... become 0, 1, 2, 3, 4, ...
func zigzag(d uint64, width int) uint64 {
	mask := widthMask(width)
	z := (d << 1) & mask
	if d&signBit(width) != 0 {
		z ^= mask
	}
	return z
}

// unzigzag is the inverse of zigzag.
func unzigzag(z uint64, width int) uint64 {
	d := z >> 1
	if z&1 != 0 {
		d ^= widthMask(width)
	}
	return d
}

// valueCode returns the zigzag code of the ordered difference from base to cur, the number the
// codec stores for one changed element. It is 0 exactly when base == cur.
func valueCode(base, cur uint64, width int, float bool) uint64 {
	return newValueMap(width, float).code(base, cur)
}

// applyValueCode turns x by the difference coded as code: Forward adds it (base -> new),
// Backward subtracts it (new -> base).
func applyValueCode(x, code uint64, width int, float bool, dir Direction) uint64 {
	return newValueMap(width, float).apply(x, code, dir)
}

// valueMap is the value arithmetic of one element type with its constants worked out once, so
// the per-element methods are a few branch-light instructions that inline. They compute
// exactly what toOrdered, fromOrdered, zigzag and unzigzag define.
type valueMap struct {
	mask, sign uint64
	float      bool
}

func newValueMap(width int, float bool) valueMap {
	return valueMap{mask: widthMask(width), sign: signBit(width), float: float}
}

func (m valueMap) toOrd(x uint64) uint64 {
	if !m.float {
		return x
	}
	if x&m.sign != 0 {
		return ^x & m.mask
	}
	return x | m.sign
}

func (m valueMap) fromOrd(o uint64) uint64 {
	if !m.float {
		return o
	}
	if o&m.sign != 0 {
		return o &^ m.sign
	}
	return ^o & m.mask
}

// code is valueCode.
func (m valueMap) code(base, cur uint64) uint64 {
	d := (m.toOrd(cur) - m.toOrd(base)) & m.mask
	z := (d << 1) & m.mask
	if d&m.sign != 0 {
		z ^= m.mask
	}
	return z
}

// apply is applyValueCode.
func (m valueMap) apply(x, code uint64, dir Direction) uint64 {
	d := code >> 1
	if code&1 != 0 {
		d ^= m.mask
	}
	if dir == Backward {
		d = -d
	}
	return m.fromOrd((m.toOrd(x) + d) & m.mask)
}

// loadElement reads the little-endian element of width bytes at the start of b.
func loadElement(b []byte, width int) uint64 {
	switch width {
	case 1:
		return uint64(b[0])
	case 2:
		return uint64(binary.LittleEndian.Uint16(b))
	case 4:
		return uint64(binary.LittleEndian.Uint32(b))
	default:
		return binary.LittleEndian.Uint64(b)
	}
}

// storeElement writes x as a little-endian element of width bytes at the start of b.
func storeElement(b []byte, x uint64, width int) {
	switch width {
	case 1:
		b[0] = byte(x)
	case 2:
		binary.LittleEndian.PutUint16(b, uint16(x))
	case 4:
		binary.LittleEndian.PutUint32(b, uint32(x))
	default:
		binary.LittleEndian.PutUint64(b, x)
	}
}

// validWidth reports whether width is an element width the diff and the codec handle.
func validWidth(width int) bool {
	return width == 1 || width == 2 || width == 4 || width == 8
}
