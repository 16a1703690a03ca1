package delta

import "fmt"

// DiffChunkBytes is the chunk size in which EncodeDelta diffs a tensor: big enough that the
// per-call overhead vanishes, small enough that the changes of one chunk stay in cache.
const DiffChunkBytes = 4 << 20

// EncodeDelta diffs base and cur (one tensor's raw bytes, equal lengths, elements of width
// bytes) with backend in DiffChunkBytes chunks and returns the encoded delta body. A nil
// backend means NewCPUDiff(). It is the whole-tensor convenience over DeltaEncoder; callers
// that receive a tensor piecewise use the encoder directly.
func EncodeDelta(backend DiffBackend, base, cur []byte, width int, float bool) ([]byte, error) {
	return encodeDeltaShift(backend, base, cur, width, float, defaultBlockShift)
}

// encodeDeltaShift is EncodeDelta with blocks of 2^shift elements.
func encodeDeltaShift(backend DiffBackend, base, cur []byte, width int, float bool, shift uint) ([]byte, error) {
	if backend == nil {
		backend = NewCPUDiff()
	}
	if !validWidth(width) || len(base) != len(cur) || len(base)%width != 0 {
		return nil, fmt.Errorf("encode delta: %w: %d and %d bytes at width %d", ErrInvalidArgument, len(base), len(cur), width)
	}
	enc := newDeltaEncoderShift(width, float, int64(len(base)/width), shift)
	if IsCPUDiff(backend) {
		for off := 0; off < len(base); off += DiffChunkBytes {
			end := min(off+DiffChunkBytes, len(base))
			if _, err := enc.AddDiff(int64(off/width), base[off:end], cur[off:end]); err != nil {
				return nil, fmt.Errorf("encode delta: %w", err)
			}
		}
		return enc.Finish()
	}
	var changes Changes
	for off := 0; off < len(base); off += DiffChunkBytes {
		end := min(off+DiffChunkBytes, len(base))
		changes.Reset()
		if err := backend.Diff(base[off:end], cur[off:end], width, &changes); err != nil {
			return nil, fmt.Errorf("encode delta: %s diff at byte %d: %w", backend.Name(), off, err)
		}
		if err := enc.AddChanges(int64(off/width), base[off:end], &changes); err != nil {
			return nil, fmt.Errorf("encode delta: %w", err)
		}
	}
	return enc.Finish()
}
