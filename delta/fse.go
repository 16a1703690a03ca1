package delta

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
)

// A decoder of the value-symbol streams of delta blocks, which klauspost/compress/fse writes
// (Yann Collet's FSE: a normalized-count header, then a bit stream read backward by two
// interleaved states). fse.Decompress stays the reference (symbolsReference, and the tests
// compare both on every stream they make and on fuzzed ones); this one keeps the bit reader
// and both states in registers, where the library's keep them in structs behind pointers:
// reading the value symbols of an old version's pages took as long as their positions.
//
// It accepts exactly the streams the library accepts and decodes them to the same bytes; its
// error messages are its own.

const (
	fseMinTableLog = 5
	fseMaxTableLog = 15 // the format's limit (the encoder uses at most 11)
	fseMaxSymbol   = 255
)

var errFSE = errors.New("FSE stream")

// fseEntry is one state of a decoding table, packed so that one load fetches it: bits 0-15
// the base of the next state (to which nbBits bits of the stream are added), 16-23 the
// symbol, 24-31 nbBits.
type fseEntry uint32

func packEntry(newState uint16, symbol, nbBits uint8) fseEntry {
	return fseEntry(newState) | fseEntry(symbol)<<16 | fseEntry(nbBits)<<24
}

func (e fseEntry) newState() uint32 { return uint32(e) & 0xFFFF }
func (e fseEntry) symbol() uint8    { return uint8(e >> 16) }
func (e fseEntry) nbBits() uint     { return uint(e >> 24) }

// tableMask masks a state to the table's full size: states are always below the size of the
// stream's table, so this only spares the bounds checks.
const tableMask = 1<<fseMaxTableLog - 1

// fseDecoder holds the tables of one stream at a time; reused from stream to stream.
type fseDecoder struct {
	norm     [fseMaxSymbol + 1]int16
	next     [fseMaxSymbol + 1]uint16
	table    [1 << fseMaxTableLog]fseEntry
	tableLog uint
	symbols  int // number of symbols with a count (the last one is symbols-1)
}

// decode decodes src into exactly len(dst) symbols.
func (d *fseDecoder) decode(dst, src []byte) error {
	n, err := d.readCounts(src)
	if err != nil {
		return err
	}
	if err := d.buildTable(); err != nil {
		return err
	}
	return d.decodeStream(dst, src[n:])
}

// readCounts parses the normalized counts and returns the header's length in bytes.
//
// The header is read through a 32-bit window, as the reference decoder (Collet's
// FSE_readNCount, which klauspost/compress/fse follows) reads it: the window moves forward a
// whole number of bytes at a time while at least four bytes remain past the new place;
// near the end it stays on the last four bytes, or, after a run of zero counts, does not move
// (bits shifted in from above are zeros). A header that needed a bit beyond its window is
// refused at the end. Reading it any other way would accept some damaged headers the
// reference refuses, or read others differently.
func (d *fseDecoder) readCounts(src []byte) (int, error) {
	end := len(src)
	if end < 4 {
		return 0, fmt.Errorf("%w: %d bytes, too short for a header", errFSE, end)
	}
	at := 0 // byte offset of the window
	window := func() uint32 { return binary.LittleEndian.Uint32(src[at:]) }
	// move advances the window by the whole bytes consumed, or onto the last four bytes.
	move := func(consumed uint) uint {
		if at <= end-7 || at+int(consumed>>3) <= end-4 {
			at += int(consumed >> 3)
			return consumed & 7
		}
		consumed -= uint(8 * (end - 4 - at))
		at = end - 4
		return consumed
	}
	stream := window()
	d.tableLog = uint(stream&0xF) + fseMinTableLog
	if d.tableLog > fseMaxTableLog {
		return 0, fmt.Errorf("%w: table log %d", errFSE, d.tableLog)
	}
	stream >>= 4
	used := uint(4) // bits of the window consumed
	remaining := int32(1)<<d.tableLog + 1
	threshold := int32(1) << d.tableLog
	nbBits := d.tableLog + 1
	total := int32(0)
	sym := 0
	previousZero := false
	for remaining > 1 {
		if previousZero {
			// A run of symbols without a count: 2-bit repeat flags, 3 meaning three more
			// and another flag (sixteen bits of ones: 24 more).
			run := sym
			for stream&0xFFFF == 0xFFFF {
				run += 24
				if at < end-5 {
					at += 2
					stream = window() >> used
				} else {
					stream >>= 16
					used += 16
				}
			}
			for stream&3 == 3 {
				run += 3
				stream >>= 2
				used += 2
			}
			run += int(stream & 3)
			used += 2
			if run > fseMaxSymbol {
				return 0, fmt.Errorf("%w: symbol %d out of range", errFSE, run)
			}
			for ; sym < run; sym++ {
				d.norm[sym] = 0
			}
			if at <= end-7 || at+int(used>>3) <= end-4 {
				at += int(used >> 3)
				used &= 7
				stream = window() >> used
			} else {
				stream >>= 2
			}
		}
		max := 2*threshold - 1 - remaining
		var count int32
		if int32(stream)&(threshold-1) < max {
			count = int32(stream) & (threshold - 1)
			used += nbBits - 1
		} else {
			count = int32(stream) & (2*threshold - 1)
			if count >= threshold {
				count -= max
			}
			used += nbBits
		}
		count-- // -1: a symbol of less than one slot's probability
		if count < 0 {
			remaining += count
			total -= count
		} else {
			remaining -= count
			total += count
		}
		if count > 1<<15-1 {
			return 0, fmt.Errorf("%w: count %d", errFSE, count)
		}
		d.norm[sym&fseMaxSymbol] = int16(count)
		sym++
		previousZero = count == 0
		for remaining < threshold {
			nbBits--
			threshold >>= 1
		}
		used = move(used)
		stream = window() >> (used & 31)
	}
	d.symbols = sym
	switch {
	case sym <= 1:
		return 0, fmt.Errorf("%w: %d symbols", errFSE, sym)
	case sym > fseMaxSymbol+1:
		return 0, fmt.Errorf("%w: %d symbols", errFSE, sym)
	case remaining != 1 || total != int32(1)<<d.tableLog:
		return 0, fmt.Errorf("%w: counts add up to %d of %d", errFSE, total, 1<<d.tableLog)
	case used > 32:
		return 0, fmt.Errorf("%w: header runs past the stream", errFSE)
	}
	return at + int((used+7)>>3), nil
}

// buildTable spreads the symbols over the states as the encoder does and derives each
// state's successor.
func (d *fseDecoder) buildTable() error {
	size := uint32(1) << d.tableLog
	mask := size - 1
	table := d.table[:size]
	high := size - 1 // symbols of less than one slot take the last states, one each
	for s, c := range d.norm[:d.symbols] {
		if c == -1 {
			table[high] = packEntry(0, uint8(s), 0)
			high--
			d.next[s] = 1
		} else {
			d.next[s] = uint16(c)
		}
	}
	step := size>>1 + size>>3 + 3
	pos := uint32(0)
	for s, c := range d.norm[:d.symbols] {
		for range int(c) {
			table[pos] = packEntry(0, uint8(s), 0)
			pos = (pos + step) & mask
			for pos > high {
				pos = (pos + step) & mask
			}
		}
	}
	if pos != 0 {
		return fmt.Errorf("%w: counts do not fill the table", errFSE)
	}
	for u, e := range table {
		sym := e.symbol()
		next := d.next[sym]
		d.next[sym]++
		nb := d.tableLog - uint(bits.Len16(next)-1)
		newState := next<<nb - uint16(size)
		if uint32(newState) >= size || (int(newState) == u && nb == 0) {
			return fmt.Errorf("%w: state %d leads to %d", errFSE, u, newState)
		}
		table[u] = packEntry(newState, sym, uint8(nb))
	}
	return nil
}

// fseReader is the backward bit reader of a stream: value holds the loaded bits, the next to
// read at the top; used counts the bits of value already read (64-used are left); in[:off]
// is still to load.
type fseReader struct {
	in    []byte
	value uint64
	used  uint
	off   int
}

// refill loads four bytes, or near the start every byte left, once 32 bits are used.
func (r *fseReader) refill() {
	if r.used < 32 {
		return
	}
	if r.off > 4 {
		r.value = r.value<<32 | uint64(binary.LittleEndian.Uint32(r.in[r.off-4:]))
		r.used -= 32
		r.off -= 4
		return
	}
	for ; r.off > 0; r.off-- {
		r.value = r.value<<8 | uint64(r.in[r.off-1])
		r.used -= 8
	}
}

// take reads n bits; past the end of the stream it reads nothing (the end test of
// decodeStream catches a stream that needed more).
func (r *fseReader) take(n uint) uint32 {
	if n == 0 || r.used >= 64 {
		return 0
	}
	v := uint32(r.value << (r.used & 63) >> ((64 - n) & 63))
	r.used += n
	return v
}

// decodeStream decodes the bit stream into exactly len(dst) symbols. The stream is read
// from its last byte backward; the highest one bit of that byte marks where it starts. It
// follows the reference decoder step for step (the same refills at the same places, the same
// end test), so that it ends where the reference ends and refuses what the reference refuses.
func (d *fseDecoder) decodeStream(dst, in []byte) error {
	if len(in) < 1 || in[len(in)-1] == 0 {
		return fmt.Errorf("%w: no end mark", errFSE)
	}
	table := &d.table
	r := fseReader{in: in, off: len(in)}
	if r.off >= 8 {
		r.value = binary.LittleEndian.Uint64(in[r.off-8:])
		r.off -= 8
	} else {
		r.used = 64
		r.refill()
		r.refill()
	}
	r.used += 8 - uint(bits.Len8(in[len(in)-1])-1)
	s1 := r.take(d.tableLog)
	s2 := r.take(d.tableLog)
	o, ok := fseBulk(dst, table, &r, &s1, &s2)
	if !ok {
		return fseTooMany(len(dst))
	}

	// The tail: one symbol at a time, each state checked for the end of the stream (all
	// bits read, and a next state that would need more). Written out without closures:
	// closures over the reader moved it to the heap, an allocation per stream.
	for {
		if r.used >= 64 && r.off == 0 && table[s1&tableMask].nbBits() > 0 {
			if o+2 > len(dst) {
				return fseTooMany(len(dst))
			}
			dst[o], dst[o+1] = table[s1&tableMask].symbol(), table[s2&tableMask].symbol()
			o += 2
			break
		}
		r.refill()
		if o >= len(dst) {
			return fseTooMany(len(dst))
		}
		e := table[s1&tableMask]
		s1 = e.newState() + r.take(e.nbBits())
		dst[o] = e.symbol()
		o++
		if r.used >= 64 && r.off == 0 && table[s2&tableMask].nbBits() > 0 {
			if o+2 > len(dst) {
				return fseTooMany(len(dst))
			}
			dst[o], dst[o+1] = table[s2&tableMask].symbol(), table[s1&tableMask].symbol()
			o += 2
			break
		}
		if o >= len(dst) {
			return fseTooMany(len(dst))
		}
		e = table[s2&tableMask]
		s2 = e.newState() + r.take(e.nbBits())
		dst[o] = e.symbol()
		o++
	}
	switch {
	case r.used > 64:
		return fmt.Errorf("%w: reads past the start of the stream", errFSE)
	case o != len(dst):
		return fmt.Errorf("%w: %d symbols, want %d", errFSE, o, len(dst))
	}
	return nil
}

// fseTooMany is the error of a stream that decodes to more than n symbols, built only when
// returned (built on every call, it was most of an old version's read allocations).
func fseTooMany(n int) error { return fmt.Errorf("%w: more than %d symbols", errFSE, n) }

// fseBulk decodes four symbols at a time while at least eight bytes are left to load, with
// the reader and both states in locals (registers): a refill, then one symbol per state, twice
// (the reference's schedule). While used < 64, reading n bits (n may be 0) is one expression
// without a test. It returns the number of symbols written, or false if dst would overflow.
func fseBulk(dst []byte, table *[1 << fseMaxTableLog]fseEntry, r *fseReader, s1p, s2p *uint32) (int, bool) {
	in, value, used, off := r.in, r.value, r.used, r.off
	s1, s2 := *s1p, *s2p
	o := 0
	ok := true
	for off >= 8 {
		if o+4 > len(dst) {
			ok = false
			break
		}
		out := dst[o : o+4 : o+4]
		for half := 0; half < 4; half += 2 {
			if used >= 32 {
				value = value<<32 | uint64(binary.LittleEndian.Uint32(in[off-4:]))
				used -= 32
				off -= 4
			}
			e1 := table[s1&tableMask]
			s1 = e1.newState() + uint32(value<<(used&63)>>1>>((63-e1.nbBits())&63))
			used += e1.nbBits()
			e2 := table[s2&tableMask]
			s2 = e2.newState() + uint32(value<<(used&63)>>1>>((63-e2.nbBits())&63))
			used += e2.nbBits()
			out[half], out[half+1] = e1.symbol(), e2.symbol()
		}
		o += 4
	}
	r.value, r.used, r.off = value, used, off
	*s1p, *s2p = s1, s2
	return o, ok
}
