package store

import (
	"fmt"
	"runtime"

	"github.com/klauspost/compress/zstd"
)

// codec holds the zstd encoder and decoder of a Store, built once: both are safe for
// concurrent EncodeAll/DecodeAll, and building them per chunk would cost more than the chunk.
type codec struct {
	enc *zstd.Encoder
	dec *zstd.Decoder
}

func newCodec() (*codec, error) {
	enc, err := zstd.NewWriter(nil,
		// The default level: shuffled bf16 exponent planes compress nearly as well as at
		// higher levels, at several times the speed; the mantissa planes do not compress at
		// any level.
		zstd.WithEncoderLevel(zstd.SpeedDefault),
		// One encoder per core for concurrent EncodeAll calls (ingest runs a worker per core).
		zstd.WithEncoderConcurrency(runtime.GOMAXPROCS(0)),
		// A frame never holds more than one chunk, so a larger window buys nothing and costs
		// memory per encoder.
		zstd.WithWindowSize(fullChunkSize),
		// Every frame carries a checksum of its decoded content: a random-access read of one
		// chunk is checked without reading the whole object.
		zstd.WithEncoderCRC(true),
	)
	if err != nil {
		return nil, fmt.Errorf("build zstd encoder: %w", err)
	}
	dec, err := zstd.NewReader(nil,
		// One decoder per core for concurrent DecodeAll calls (concurrent reads of the mount).
		zstd.WithDecoderConcurrency(0),
		// A frame may not decode to more than the largest chunk a reader accepts, nor ask for
		// a bigger window: a damaged or hostile frame cannot make us allocate more.
		zstd.WithDecoderMaxMemory(maxChunkSize),
		zstd.WithDecoderMaxWindow(maxChunkSize),
		// Decoded output is written into our own buffers; keep the decoders' own small.
		zstd.WithDecoderLowmem(true),
	)
	if err != nil {
		enc.Close()
		return nil, fmt.Errorf("build zstd decoder: %w", err)
	}
	return &codec{enc: enc, dec: dec}, nil
}

func (c *codec) close() {
	c.enc.Close()
	c.dec.Close()
}

// compressChunk shuffles content at width and appends one zstd frame of it to dst. scratch
// must hold len(content) bytes.
func (c *codec) compressChunk(dst, content, scratch []byte, width int) []byte {
	scratch = scratch[:len(content)]
	shuffleBytes(scratch, content, width)
	return c.enc.EncodeAll(scratch, dst)
}

// decompressChunk decodes one frame into dst (which must be exactly the chunk's content
// length) and unshuffles it. scratch is reused between calls; the grown one is returned.
func (c *codec) decompressChunk(dst, frame, scratch []byte, width int) ([]byte, error) {
	out, err := c.dec.DecodeAll(frame, scratch[:0])
	if err != nil {
		return scratch, fmt.Errorf("decompress chunk: %v: %w", err, ErrCorrupt)
	}
	if len(out) != len(dst) {
		return out, fmt.Errorf("chunk decodes to %d bytes, want %d: %w", len(out), len(dst), ErrCorrupt)
	}
	unshuffleBytes(dst, out, width)
	return out, nil
}
