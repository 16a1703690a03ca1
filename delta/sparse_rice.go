package delta

import (
	"encoding/binary"
	"math/bits"
	"slices"
)

// Positions of changed elements are coded as gaps (the number of unchanged elements before
// each change), Rice-coded in groups of riceGroup gaps, each group with its own parameter k
// chosen by exact cost. Bits are packed least-significant first: bit i of the stream is bit
// i%8 of byte i/8, and a k-bit number is written low bit first. A group is
//
//	k (riceParamBits bits) | per gap: q zero bits, a one bit, then the low k bits of the gap
//
// where q = gap >> k. The last byte is padded with zero bits.

const (
	// riceGroup is the number of gaps sharing one Rice parameter: small enough to follow
	// rows that change more or less often, large enough that the 5-bit parameter costs
	// under 0.04 bits per change.
	riceGroup = 128
	// riceParamBits is the width of the per-group parameter; k ranges over 0..31.
	riceParamBits = 5
	// maxRiceParam is the largest k the encoder considers (gaps stay below 2^maxBlockShift).
	maxRiceParam = 31
)

// bitWriter appends bits, least-significant first, to a byte slice.
type bitWriter struct {
	out []byte
	acc uint64 // pending bits, the oldest in bit 0
	n   uint   // number of pending bits, < 32 between calls
}

// writeBits appends the low k bits of v (k <= 32). Pending bits leave four bytes at a time:
// a byte at a time cost a tenth of the encoder's time.
func (w *bitWriter) writeBits(v uint64, k uint) {
	w.acc |= (v & (1<<k - 1)) << w.n
	w.n += k
	if w.n >= 32 {
		w.out = binary.LittleEndian.AppendUint32(w.out, uint32(w.acc))
		w.acc >>= 32
		w.n -= 32
	}
}

// writeUnary appends q zero bits and a one bit.
func (w *bitWriter) writeUnary(q uint64) {
	for q >= 32 {
		w.writeBits(0, 32)
		q -= 32
	}
	w.writeBits(1<<q, uint(q)+1)
}

// flush writes the pending bits, the last byte padded with zero bits.
func (w *bitWriter) flush() {
	for ; w.n > 0; w.n -= min(w.n, 8) {
		w.out = append(w.out, byte(w.acc))
		w.acc >>= 8
	}
	w.acc = 0
}

// riceCost is the exact number of bits the gaps cost with parameter k, without the parameter.
func riceCost(gaps []uint32, k uint) uint64 {
	cost := uint64(len(gaps)) * uint64(k+1)
	for _, g := range gaps {
		cost += uint64(g >> k)
	}
	return cost
}

// bestRiceParam returns the smallest k with the least exact cost for gaps. The cost is convex
// in k: cost(k+1) - cost(k) = n - sum(ceil((g>>k)/2)), and the sum shrinks as k grows. So the
// search starts at the k of the mean gap, walks down while the cost does not grow (ties go
// to the smaller k), else up while it shrinks: three or four costs, where a walk up from 0
// took k+2 (bestRiceParamLinear in the tests is that walk, the reference). The costs next to
// the start are summed in one pass over the gaps; a walk that goes further sums again.
func bestRiceParam(gaps []uint32) uint {
	if len(gaps) == 0 {
		return 0
	}
	var sum uint64
	for _, g := range gaps {
		sum += uint64(g)
	}
	k := uint(0)
	if mean := sum / uint64(len(gaps)); mean > 0 {
		k = min(uint(bits.Len64(mean))-1, maxRiceParam)
	}
	start, near := k, nearRiceCosts(gaps, k)
	cost := func(k2 uint) uint64 {
		if i := int(k2) - int(start) + 2; i >= 0 && i < len(near) {
			return near[i]
		}
		return riceCost(gaps, k2)
	}
	best := cost(k)
	moved := false
	for k > 0 {
		c := cost(k - 1)
		if c > best {
			break
		}
		k, best, moved = k-1, c, true
	}
	for !moved && k < maxRiceParam {
		c := cost(k + 1)
		if c >= best {
			break
		}
		k, best = k+1, c
	}
	return k
}

// nearRiceCosts returns riceCost(gaps, k+i-2) for i = 0..3 (a k+i-2 below zero is computed as
// for 0, and never asked for), in one pass.
func nearRiceCosts(gaps []uint32, k uint) [4]uint64 {
	lo := max(int(k)-2, 0)
	s0, s1, s2, s3 := uint(lo), uint(max(int(k)-1, 0)), k, min(k+1, 63)
	var c0, c1, c2, c3 uint64
	for _, g := range gaps {
		g := uint64(g)
		c0 += g >> s0
		c1 += g >> s1
		c2 += g >> s2
		c3 += g >> s3
	}
	n := uint64(len(gaps))
	return [4]uint64{c0 + n*uint64(s0+1), c1 + n*uint64(s1+1), c2 + n*uint64(s2+1), c3 + n*uint64(s3+1)}
}

// appendRice Rice-codes gaps in groups of riceGroup and appends the padded stream to w.out.
func appendRice(w *bitWriter, gaps []uint32) {
	for start := 0; start < len(gaps); start += riceGroup {
		group := gaps[start:min(start+riceGroup, len(gaps))]
		k := bestRiceParam(group)
		w.writeBits(uint64(k), riceParamBits)
		low := uint64(1)<<k - 1
		for _, g := range group {
			q := uint(g >> k)
			if q+k < 32 {
				// The usual gap: its q zero bits, the one and the low k bits in one write.
				w.writeBits(1<<q|(uint64(g)&low)<<(q+1), q+1+k)
				continue
			}
			w.writeUnary(uint64(q))
			w.writeBits(uint64(g), k)
		}
	}
	w.flush()
}

// bitReader reads bits least-significant first. Bits of acc above n are always zero, and n is
// at most 63 (so bit 63 of acc is never a bit of the stream: riceRun relies on it).
type bitReader struct {
	buf []byte
	pos int    // next byte of buf to load
	acc uint64 // loaded bits, the oldest in bit 0
	n   uint   // number of loaded bits
}

// refill loads whole bytes until acc holds more than 55 bits or buf is exhausted.
func (r *bitReader) refill() {
	if r.pos+8 <= len(r.buf) {
		take := (63 - r.n) / 8
		if take == 0 {
			return
		}
		w := binary.LittleEndian.Uint64(r.buf[r.pos:])
		if take < 8 {
			w &= 1<<(8*take) - 1
		}
		r.acc |= w << r.n
		r.pos += int(take)
		r.n += 8 * take
		return
	}
	for r.n <= 55 && r.pos < len(r.buf) {
		r.acc |= uint64(r.buf[r.pos]) << r.n
		r.pos++
		r.n += 8
	}
}

// readBits reads k bits (k <= 32); ok is false when the stream ends first. The common case
// (enough bits loaded) is small enough to inline; loading is left to fill.
func (r *bitReader) readBits(k uint) (v uint64, ok bool) {
	if r.n < k && !r.fill(k) {
		return 0, false
	}
	v = r.acc & (1<<k - 1)
	r.acc >>= k
	r.n -= k
	return v, true
}

// fill loads more bytes and reports whether at least k bits are now loaded.
func (r *bitReader) fill(k uint) bool {
	r.refill()
	return r.n >= k
}

// readUnary reads zero bits up to and including a one bit and returns how many zeros there
// were; ok is false when the stream ends first or the count exceeds limit. The common case (the
// one bit already loaded) inlines.
func (r *bitReader) readUnary(limit uint64) (q uint64, ok bool) {
	if r.acc != 0 {
		z := uint(bits.TrailingZeros64(r.acc)) // < n, since bits above n are zero
		r.acc >>= z + 1
		r.n -= z + 1
		return uint64(z), uint64(z) <= limit
	}
	return r.readUnarySlow(limit)
}

// readUnarySlow is readUnary when the loaded bits are all zero: it counts them, loads more and
// goes on until the one bit.
func (r *bitReader) readUnarySlow(limit uint64) (q uint64, ok bool) {
	for {
		if r.acc == 0 {
			q += uint64(r.n)
			r.n = 0
			if q > limit {
				return 0, false
			}
			r.refill()
			if r.n == 0 {
				return 0, false
			}
			continue
		}
		z := uint(bits.TrailingZeros64(r.acc))
		q += uint64(z)
		r.acc >>= z + 1
		r.n -= z + 1
		return q, q <= limit
	}
}

// atCleanEnd reports whether the stream is used up but for zero padding in its last byte.
func (r *bitReader) atCleanEnd() bool {
	return r.pos == len(r.buf) && r.n < 8 && r.acc == 0
}

// decodeRice decodes count gaps from stream (which must be exactly the padded Rice stream)
// into the positions of changed elements within a block of blockLen elements, appending them
// to pos. It checks every position is inside the block and that the stream holds nothing
// else; ok is false on any violation.
func decodeRice(stream []byte, count int, blockLen uint64, pos []uint32) ([]uint32, bool) {
	r := bitReader{buf: stream}
	have := len(pos)
	pos = slices.Grow(pos, count)[:have+count]
	out := pos[have:]
	next := uint64(0) // the smallest position the next change may take
	for done := 0; done < count; {
		k64, ok := r.readBits(riceParamBits)
		if !ok {
			return pos[:have+done], false
		}
		k := uint(k64) & 31 // riceParamBits bits: the mask lets the compiler drop shift checks
		for end := min(done+riceGroup, count); done < end; done++ {
			// The codes that are whole in the loaded bits, away from the stream's end:
			// riceRun, a loop without calls, whose state stays in registers.
			var bad bool
			var run int
			run, r.pos, r.acc, r.n, next, bad = riceRun(r.buf, r.pos, r.acc, r.n, k, out[done:end], next, blockLen)
			if bad {
				return pos[:have+done+run], false
			}
			if done += run; done == end {
				break
			}
			// One code the slow way: it is longer than the loaded bits, or the stream
			// ends within 8 bytes.
			r.refill()
			q, ok := r.readUnary((blockLen - next) >> k)
			if !ok {
				return pos[:have+done], false
			}
			low, ok := r.readBits(k)
			if !ok {
				return pos[:have+done], false
			}
			// The position must stay inside the block (next <= blockLen, so this is
			// gap < blockLen - next).
			p := next + (q<<k | low)
			if p >= blockLen {
				return pos[:have+done], false
			}
			out[done] = uint32(p)
			next = p + 1
		}
	}
	return pos, r.atCleanEnd()
}

// riceRun decodes gaps of parameter k into out, positions from next on, while each code is
// whole in the loaded bits (refilled while 8 bytes of buf remain from p). It returns how many
// it decoded, the reader's state after them, and bad when a position fell outside the block.
// The positions ascend, so one test after the run, of the last, stands for a test of each
// (measured: 0.91-0.93x the CPU per code of a test per code): a run that goes outside the
// block is refused whole (a caller drops its positions).
func riceRun(buf []byte, p int, acc uint64, n uint, k uint, out []uint32, next, blockLen uint64) (done int, p2 int, acc2 uint64, n2 uint, next2 uint64, bad bool) {
	k &= 31
	mask := uint64(1)<<k - 1
	i := 0
	for ; i < len(out); i++ {
		if n < 32 {
			// Most codes are under 16 bits: a refill every few codes is enough, one
			// unaligned load of which the whole bytes that fit are kept.
			if p+8 > len(buf) {
				break
			}
			take := (63 - n) >> 3
			acc |= (binary.LittleEndian.Uint64(buf[p:]) & (^uint64(0) >> (64 - 8*take))) << n
			p += int(take)
			n += 8 * take
		}
		// Bit 63 is never a stream bit (n <= 63): with it set the search needs no case for
		// an empty acc (z = 63 fails the test below).
		z := uint(bits.TrailingZeros64(acc | 1<<63))
		used := z + 1 + k
		if used > n {
			break
		}
		// used <= n <= 63: the shifts need no out-of-range handling. A gap is below 2^37
		// and a run at most riceGroup codes: next cannot overflow.
		next += uint64(z)<<k | acc>>((z+1)&63)&mask
		acc >>= used & 63
		n -= used
		out[i] = uint32(next)
		next++
	}
	// next is one past the last position (or, before the first, at most blockLen): every
	// position is inside the block when next <= blockLen.
	return i, p, acc, n, next, next > blockLen
}
