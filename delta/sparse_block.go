package delta

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/klauspost/compress/fse"
)

// One block of a delta body holds the changes of up to 2^blockShift consecutive elements:
//
//	mode   u8       how the value symbols are coded: symbolsRaw, symbolsRLE or symbolsFSE
//	P      uvarint  byte length of the Rice-coded positions
//	S      uvarint  byte length of the symbol section
//	P bytes         positions (sparse_rice.go)
//	S bytes         one symbol per change: raw bytes, one repeated byte, or an FSE stream
//	rest            escape stream: one uvarint per symbol 255, in order, to the block's end
//
// The symbol of a change is its value code (ordered.go) when that is below escapeSymbol,
// else escapeSymbol, and the escape stream carries code-escapeSymbol.

// Symbol coding modes of a block.
const (
	symbolsRaw = 0 // S == count: the symbols as they are (FSE judged them incompressible)
	symbolsRLE = 1 // S == 1: every symbol is this byte
	symbolsFSE = 2 // S bytes of klauspost/compress/fse output, decoding to count symbols
)

// escapeSymbol marks a value code too large for one symbol byte.
const escapeSymbol = 255

// blockEncoder collects the changes of the current block and codes them. Its slices are
// reused from block to block: this is the encoder's whole working set.
type blockEncoder struct {
	gaps    []uint32
	symbols []byte
	escapes []byte
	prev    int64 // position in the block of the last change, -1 before the first
	rice    bitWriter
	fse     fse.Scratch
}

// blockEncoders are the coders of version-1 blocks, reused across encoders: a MoE version
// encodes tens of thousands of small tensors, and each grew its lists and FSE tables anew.
var blockEncoders = sync.Pool{New: func() any { return new(blockEncoder) }}

func (b *blockEncoder) reset() {
	b.gaps = b.gaps[:0]
	b.symbols = b.symbols[:0]
	b.escapes = b.escapes[:0]
	b.prev = -1
}

// add records a change at position pos of the block (greater than the previous one) with
// value code code (non-zero).
func (b *blockEncoder) add(pos int64, code uint64) {
	b.gaps = append(b.gaps, uint32(pos-b.prev-1))
	b.prev = pos
	b.symbols, b.escapes = appendSymbol(b.symbols, b.escapes, code)
}

// appendSymbol appends the symbol of value code to symbols, and its escape to escapes when the
// code does not fit a symbol.
func appendSymbol(symbols, escapes []byte, code uint64) ([]byte, []byte) {
	if code < escapeSymbol {
		return append(symbols, byte(code)), escapes
	}
	return append(symbols, escapeSymbol), binary.AppendUvarint(escapes, code-escapeSymbol)
}

// appendTo codes the collected block and appends it to out.
func (b *blockEncoder) appendTo(out []byte) ([]byte, error) {
	b.rice.out = b.rice.out[:0]
	appendRice(&b.rice, b.gaps)

	mode, section := byte(symbolsFSE), []byte(nil)
	compressed, err := fse.Compress(b.symbols, &b.fse)
	switch {
	case err == nil:
		section = compressed
	case errors.Is(err, fse.ErrIncompressible):
		mode, section = symbolsRaw, b.symbols
	case errors.Is(err, fse.ErrUseRLE):
		mode, section = symbolsRLE, b.symbols[:1]
	default:
		return out, fmt.Errorf("entropy-code %d value symbols: %w", len(b.symbols), err)
	}
	out = append(out, mode)
	out = binary.AppendUvarint(out, uint64(len(b.rice.out)))
	out = binary.AppendUvarint(out, uint64(len(section)))
	out = append(out, b.rice.out...)
	out = append(out, section...)
	out = append(out, b.escapes...)
	return out, nil
}

// blockDecoder decodes blocks into positions and value codes, checking everything before a
// single element is touched. Its slices are reused from block to block.
type blockDecoder struct {
	width int
	pos   []uint32    // positions of the changes within the block, ascending
	codes []uint64    // their value codes, non-zero
	rle   []byte      // the symbols of a repeated-symbol block
	fse   fse.Scratch // the reference decoder of FSE symbols (ApplyDelta's path)
	fast  *fseDecoder // the fast one (compact: the read path), allocated when first used
	out   []byte      // its output

	// compact asks for the symbols and the escaped codes instead of codes (DecodedBlock's
	// form: 1 byte per change rather than 8).
	compact bool
	syms    []byte   // one per change (compact): the code, or escapeSymbol
	escAt   []uint32 // indices of the changes whose symbol is escapeSymbol (compact)
	escCode []uint64 // their codes (compact)
}

// decode parses one block of count (> 0) changes in a block of blockLen elements. Errors wrap
// ErrMalformed.
func (d *blockDecoder) decode(payload []byte, count int, blockLen uint64) error {
	if len(payload) < 1 {
		return fmt.Errorf("%w: empty block", ErrMalformed)
	}
	mode := payload[0]
	rest := payload[1:]
	posLen, n := binary.Uvarint(rest)
	if n <= 0 || posLen > uint64(len(rest)-n) {
		return fmt.Errorf("%w: position stream length runs past the block", ErrMalformed)
	}
	rest = rest[n:]
	symLen, n := binary.Uvarint(rest)
	if n <= 0 || symLen > uint64(len(rest)-n) || posLen > uint64(len(rest)-n)-symLen {
		return fmt.Errorf("%w: symbol section length runs past the block", ErrMalformed)
	}
	rest = rest[n:]
	posStream, symSection, escapes := rest[:posLen], rest[posLen:posLen+symLen], rest[posLen+symLen:]
	// Every gap costs at least its terminating one bit: refuse impossible counts before any
	// work or allocation in proportion to them.
	if uint64(count) > 8*posLen {
		return fmt.Errorf("%w: %d changes cannot fit in %d position bytes", ErrMalformed, count, posLen)
	}

	// Sized up front: growing them change by change was a third of a read's time.
	d.pos = slices.Grow(d.pos[:0], count)
	if !d.compact {
		d.codes = slices.Grow(d.codes[:0], count)
	}
	var ok bool
	if d.pos, ok = decodeRice(posStream, count, blockLen, d.pos); !ok {
		return fmt.Errorf("%w: bad position stream (%d bytes for %d changes)", ErrMalformed, len(posStream), count)
	}
	symbols, err := d.symbols(mode, symSection, count)
	if err != nil {
		return err
	}
	if err := d.valueCodes(symbols, escapes); err != nil {
		return err
	}
	if d.compact {
		d.syms = append(d.syms[:0], symbols...)
	}
	return nil
}

// symbols decodes the symbol section into exactly count symbols.
func (d *blockDecoder) symbols(mode byte, section []byte, count int) ([]byte, error) {
	switch mode {
	case symbolsRaw:
		if len(section) != count {
			return nil, fmt.Errorf("%w: raw symbol section of %d bytes for %d changes", ErrMalformed, len(section), count)
		}
		return section, nil
	case symbolsRLE:
		if len(section) != 1 {
			return nil, fmt.Errorf("%w: repeated-symbol section of %d bytes, want 1", ErrMalformed, len(section))
		}
		d.rle = slices.Grow(d.rle[:0], count)[:count]
		for i := range d.rle {
			d.rle[i] = section[0]
		}
		return d.rle, nil
	case symbolsFSE:
		if d.compact {
			if d.fast == nil {
				d.fast = new(fseDecoder)
			}
			d.out = slices.Grow(d.out[:0], count)[:count]
			if err := d.fast.decode(d.out, section); err != nil {
				return nil, fmt.Errorf("%w: value symbols: %v", ErrMalformed, err)
			}
			return d.out, nil
		}
		// The limit stops a corrupt stream from decoding more than it may; the decoder
		// reports an error once its output reaches the limit, so a correct one must stay
		// below it.
		d.fse.DecompressLimit = count + 1
		out, err := fse.Decompress(section, &d.fse)
		if err != nil {
			return nil, fmt.Errorf("%w: value symbols: %v", ErrMalformed, err)
		}
		if len(out) != count {
			return nil, fmt.Errorf("%w: %d value symbols decoded for %d changes", ErrMalformed, len(out), count)
		}
		return out, nil
	}
	return nil, fmt.Errorf("%w: unknown symbol mode %d", ErrMalformed, mode)
}

// escapedCodes is valueCodes for the compact form: it checks what valueCodes checks but
// decodes only the escaped codes, found by a byte search (they are rare), into escAt/escCode.
func (d *blockDecoder) escapedCodes(symbols, escapes []byte) error {
	// An escaped code is at least escapeSymbol: only a symbol 0 can be a code 0.
	if bytes.IndexByte(symbols, 0) >= 0 {
		return fmt.Errorf("%w: a change that changes nothing (value code 0)", ErrMalformed)
	}
	mask := widthMask(d.width)
	d.escAt, d.escCode = d.escAt[:0], d.escCode[:0]
	for i := 0; ; i++ {
		j := bytes.IndexByte(symbols[i:], escapeSymbol)
		if j < 0 {
			break
		}
		i += j
		code, err := d.nextEscape(&escapes, mask)
		if err != nil {
			return err
		}
		d.escAt, d.escCode = append(d.escAt, uint32(i)), append(d.escCode, code)
	}
	if len(escapes) != 0 {
		return fmt.Errorf("%w: %d bytes left over after the escape stream", ErrMalformed, len(escapes))
	}
	return nil
}

// nextEscape takes the next uvarint off the escape stream and returns the escaped value code
// it stands for (escapeSymbol plus it), checked against the element width's mask.
func (d *blockDecoder) nextEscape(escapes *[]byte, mask uint64) (uint64, error) {
	v, n := binary.Uvarint(*escapes)
	if n <= 0 {
		return 0, fmt.Errorf("%w: escape stream ends early or overflows", ErrMalformed)
	}
	*escapes = (*escapes)[n:]
	if v > mask-escapeSymbol {
		return 0, fmt.Errorf("%w: escaped value code %d+%d exceeds %d-byte elements", ErrMalformed, escapeSymbol, v, d.width)
	}
	return escapeSymbol + v, nil
}

// valueCodes turns symbols and the escape stream into value codes, checking every code is
// non-zero and fits the element width, and that the escape stream is used up exactly.
func (d *blockDecoder) valueCodes(symbols, escapes []byte) error {
	if d.compact {
		return d.escapedCodes(symbols, escapes)
	}
	mask := widthMask(d.width)
	d.codes = d.codes[:0]
	for _, s := range symbols {
		code := uint64(s)
		if s == escapeSymbol {
			var err error
			if code, err = d.nextEscape(&escapes, mask); err != nil {
				return err
			}
		}
		if code == 0 {
			return fmt.Errorf("%w: a change that changes nothing (value code 0)", ErrMalformed)
		}
		d.codes = append(d.codes, code)
	}
	if len(escapes) != 0 {
		return fmt.Errorf("%w: %d bytes left over after the escape stream", ErrMalformed, len(escapes))
	}
	return nil
}
