package gen

import "math"

// f32ToBF16 rounds a float32 to bfloat16 with round-to-nearest-even on the bits, as PyTorch's
// .to(torch.bfloat16) does: add 0x7fff plus the lowest kept bit, then truncate. Overflow
// rounds to infinity as IEEE requires. A NaN stays a NaN of the same sign (the quiet bit is
// set so that truncating the payload cannot turn it into an infinity).
func f32ToBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if b&0x7fffffff > 0x7f800000 {
		return uint16(b>>16) | 0x0040
	}
	return uint16((b + 0x7fff + (b>>16)&1) >> 16)
}

// bf16ToF32 widens a bfloat16 to the float32 with the same value (exact).
func bf16ToF32(h uint16) float32 {
	return math.Float32frombits(uint32(h) << 16)
}

// putBF16s writes the bf16 little-endian bytes of src into dst (2*len(src) bytes).
func putBF16s(dst []byte, src []float32) {
	dst = dst[:2*len(src)]
	for i, f := range src {
		h := f32ToBF16(f)
		dst[2*i] = byte(h)
		dst[2*i+1] = byte(h >> 8)
	}
}
