package delta

import (
	"bytes"
	"fmt"
	"io"

	"github.com/klauspost/compress/zstd"
)

// A slime delta checkpoint written in (docs/format.md Part III §4, "Writing a delta in"):
// slime's sender writes either encoding, so the decoder of an incoming delta takes both. What
// weightfs renders stays overwrite-only (ParseSlimeIndex).

// The two delta_encoding values slime's sender writes.
const (
	// SlimeOverwrite: a tensor's frame holds u32le count | positions | new bytes.
	SlimeOverwrite = "overwrite"
	// SlimeXOR: a tensor's frame holds new XOR old, as many bytes as the tensor has.
	SlimeXOR = "xor"
)

// ParseSlimeIndexIn parses the index of a delta written in: as ParseSlimeIndex, but
// delta_encoding may also be xor (Encoding says which).
func ParseSlimeIndexIn(data []byte) (*SlimeIndex, error) { return parseSlimeIndex(data, true) }

// slimeXORChunk is the read size when scanning a decoded xor payload.
const slimeXORChunk = 1 << 20

// DecodeSlimeChanges decodes the frame of a tensor of tensorLen bytes in the given encoding
// and returns the byte positions it changes, ascending, with for SlimeOverwrite the new bytes
// there and for SlimeXOR the (nonzero) bytes to XOR there. An xor frame must be exactly one
// zstd frame carrying its content size, which must be tensorLen; it is decoded as a stream, so
// memory holds the changed positions, not the tensor.
func DecodeSlimeChanges(frame []byte, tensorLen int64, encoding string) (positions []uint32, values []byte, err error) {
	switch encoding {
	case SlimeOverwrite:
		return DecodeSlimeFrame(frame, tensorLen)
	case SlimeXOR:
	default:
		return nil, nil, fmt.Errorf("%w: slime delta_encoding %q", ErrUnsupportedVersion, encoding)
	}
	if tensorLen > SlimeMaxTensorBytes {
		return nil, nil, fmt.Errorf("%w: slime xor frame for a tensor of %d bytes, beyond u32 positions", ErrMalformed, tensorLen)
	}
	n, fcs, err := zstdFrameLen(frame)
	if err != nil {
		return nil, nil, fmt.Errorf("%w: slime frame: %v", ErrMalformed, err)
	}
	if n != len(frame) {
		return nil, nil, fmt.Errorf("%w: slime frame: %d bytes follow the zstd frame", ErrMalformed, len(frame)-n)
	}
	if fcs != uint64(tensorLen) {
		return nil, nil, fmt.Errorf("%w: slime xor frame holds %d bytes, the tensor has %d (another dtype or shape?)", ErrMalformed, fcs, tensorLen)
	}
	dec, err := zstd.NewReader(bytes.NewReader(frame), zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(1<<27))
	if err != nil {
		return nil, nil, fmt.Errorf("%w: slime frame: %v", ErrMalformed, err)
	}
	defer dec.Close()
	buf := make([]byte, min(int64(slimeXORChunk), max(tensorLen, 1)))
	var off int64
	for {
		k, rerr := io.ReadFull(dec, buf)
		for i, b := range buf[:k] {
			if b != 0 {
				positions = append(positions, uint32(off+int64(i)))
				values = append(values, b)
			}
		}
		off += int64(k)
		if off > tensorLen {
			return nil, nil, fmt.Errorf("%w: slime xor frame decodes past the tensor's %d bytes", ErrMalformed, tensorLen)
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			return nil, nil, fmt.Errorf("%w: slime frame: %v", ErrMalformed, rerr)
		}
	}
	if off != tensorLen {
		return nil, nil, fmt.Errorf("%w: slime xor frame decodes to %d bytes, the tensor has %d", ErrMalformed, off, tensorLen)
	}
	return positions, values, nil
}
