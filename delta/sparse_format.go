package delta

import (
	"bytes"
	"encoding/binary"
	"fmt"
)

// The body of a sparse delta (docs/format.md (Part II) has the full layout with an example):
//
//	off  len   field
//	0    4     magic "WFSD"
//	4    1     format version (deltaVersion)
//	5    1     element width in bytes: 1, 2, 4 or 8
//	6    1     flags: bit 0 = float (ordered-integer mapping); other bits must be 0
//	7    1     block shift: log2 of the elements per block (minBlockShift..maxBlockShift)
//	8    8     elements, u64le
//	16   8     changed elements, u64le
//	24   8*B   block table, B = ceil(elements / 2^shift): per block u32le count, u32le size
//	...        the blocks' bytes, in block order, each exactly size bytes (sparse_block.go)

const (
	deltaMagic      = "WFSD"
	deltaVersion    = 1 // a body coded without context
	deltaVersion2   = 2 // a body coded against a context (sparse2.go)
	deltaHeaderSize = 24
	blockEntrySize  = 8 // u32le count, u32le byte size

	flagFloat = 1 << 0

	// defaultBlockShift gives blocks of 2^20 elements: a read of a small range decodes at most
	// a few MiB of tensor's worth of changes, and per-block overhead stays negligible.
	defaultBlockShift = 20
	// The range of block shifts a body may declare. Small blocks exist for tests (many blocks
	// from little data); the upper bound caps the decoder's working set per block.
	minBlockShift = 6
	maxBlockShift = 24

	// maxDeltaElements bounds a tensor's element count (2^40, 2 TiB of bf16): it keeps the
	// block table of a 2^20-element-block body under 8 MiB.
	maxDeltaElements = 1 << 40
)

// deltaLayout is the validated framing of a body.
type deltaLayout struct {
	DeltaInfo
	shift  uint
	blocks int64 // number of entries in the block table
	body   []byte
}

// blockLen is the number of elements of block b (the last block may be short).
func (l *deltaLayout) blockLen(b int64) uint64 {
	start := b << l.shift
	return uint64(min(int64(1)<<l.shift, l.Elements-start))
}

// entry returns the change count and byte size of block b from the table.
func (l *deltaLayout) entry(b int64) (count, size uint32) {
	e := l.body[deltaHeaderSize+b*blockEntrySize:]
	return binary.LittleEndian.Uint32(e), binary.LittleEndian.Uint32(e[4:])
}

// payloadStart is the offset of the first block's bytes.
func (l *deltaLayout) payloadStart() int64 {
	return deltaHeaderSize + l.blocks*blockEntrySize
}

// parseLayout checks magic, version, header fields and the block table of body. It reads
// only the header and the table, O(number of blocks). Errors wrap ErrMalformed or
// ErrUnsupportedVersion.
func parseLayout(body []byte) (deltaLayout, error) {
	var l deltaLayout
	if len(body) < len(deltaMagic) || !bytes.Equal(body[:len(deltaMagic)], []byte(deltaMagic)) {
		return l, fmt.Errorf("%w: not a sparse delta (magic %q, want %q)", ErrMalformed, body[:min(len(body), len(deltaMagic))], deltaMagic)
	}
	if len(body) < 5 {
		return l, fmt.Errorf("%w: sparse delta of %d bytes has no version", ErrMalformed, len(body))
	}
	if body[4] != deltaVersion && body[4] != deltaVersion2 {
		return l, fmt.Errorf("%w: sparse delta version %d (this build reads %d and %d)", ErrUnsupportedVersion, body[4], deltaVersion, deltaVersion2)
	}
	if len(body) < deltaHeaderSize {
		return l, fmt.Errorf("%w: sparse delta of %d bytes is shorter than its %d-byte header", ErrMalformed, len(body), deltaHeaderSize)
	}
	width, flags, shift := int(body[5]), body[6], uint(body[7])
	elements := binary.LittleEndian.Uint64(body[8:])
	changed := binary.LittleEndian.Uint64(body[16:])
	switch {
	case !validWidth(width):
		return l, fmt.Errorf("%w: element width %d", ErrMalformed, width)
	case flags&^flagFloat != 0:
		return l, fmt.Errorf("%w: unknown flags %#x", ErrMalformed, flags)
	case shift < minBlockShift || shift > maxBlockShift:
		return l, fmt.Errorf("%w: block shift %d outside %d..%d", ErrMalformed, shift, minBlockShift, maxBlockShift)
	case elements > maxDeltaElements:
		return l, fmt.Errorf("%w: %d elements exceed the limit of %d", ErrMalformed, elements, uint64(maxDeltaElements))
	case changed > elements:
		return l, fmt.Errorf("%w: %d changed of %d elements", ErrMalformed, changed, elements)
	}
	l = deltaLayout{
		DeltaInfo: DeltaInfo{Version: int(body[4]), Width: width, Float: flags&flagFloat != 0, Elements: int64(elements), Changed: int64(changed)},
		shift:     shift,
		blocks:    int64((elements + 1<<shift - 1) >> shift),
		body:      body,
	}
	if l.blocks > (int64(len(body))-deltaHeaderSize)/blockEntrySize {
		return l, fmt.Errorf("%w: block table of %d entries runs past the %d-byte body", ErrMalformed, l.blocks, len(body))
	}
	var sumCount, sumSize uint64
	for b := range l.blocks {
		count, size := l.entry(b)
		switch {
		case uint64(count) > l.blockLen(b):
			return l, fmt.Errorf("%w: block %d claims %d changes in %d elements", ErrMalformed, b, count, l.blockLen(b))
		case (count == 0) != (size == 0):
			return l, fmt.Errorf("%w: block %d has %d changes in %d bytes", ErrMalformed, b, count, size)
		}
		sumCount += uint64(count)
		sumSize += uint64(size)
	}
	if sumCount != changed {
		return l, fmt.Errorf("%w: blocks hold %d changes, header says %d", ErrMalformed, sumCount, changed)
	}
	if payload := uint64(int64(len(body)) - l.payloadStart()); sumSize != payload {
		return l, fmt.Errorf("%w: blocks claim %d bytes, body holds %d after the table", ErrMalformed, sumSize, payload)
	}
	return l, nil
}

// appendDeltaHeader appends the header and a zeroed block table for blocks blocks; the
// encoder fills in the changed count and the table as it goes.
func appendDeltaHeader(out []byte, width int, float bool, shift uint, elements int64, blocks int64) []byte {
	out = append(out, deltaMagic...)
	var flags byte
	if float {
		flags |= flagFloat
	}
	out = append(out, deltaVersion, byte(width), flags, byte(shift))
	out = binary.LittleEndian.AppendUint64(out, uint64(elements))
	out = binary.LittleEndian.AppendUint64(out, 0) // changed, set by Finish
	return append(out, make([]byte, blocks*blockEntrySize)...)
}
