package gen

import "math"

// The generator's randomness is counter-based: every random number is a pure function of
// (tensor key, purpose, step, element index). That is what makes the output independent of
// how work is split among goroutines, and what lets the streaming writer replay the history
// of any range of elements without touching the rest of the model.

// golden is the Weyl increment of splitmix64 (2^64 / golden ratio, odd).
const golden = 0x9e3779b97f4a7c15

// Purposes separate the independent random streams of one tensor.
const (
	purposeInit    = 1 // initial weights
	purposeSignal  = 2 // persistent per-element gradient signal
	purposeNoise   = 3 // per-step gradient noise (one stream per step)
	purposeRow     = 4 // per-row signal strength
	purposeTensor  = 5 // per-tensor constants (gradient scale, signal-to-noise ratio)
	purposeMoments = 6 // noise in the warm Adam moments of version 1
	purposeRoute   = 7 // an MoE router's scores (keyed by the router, one stream per step)
)

// mix64 is the splitmix64 output function: a bijective avalanche of 64 bits.
func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// stream is one counter-based random sequence: element i is mix64(base + (i+1)*golden), which is
// exactly the i-th output of a splitmix64 generator seeded with base.
type stream uint64

// newStream derives the stream of (key, purpose, step). Two mixing rounds make streams of
// neighbouring steps or purposes start at unrelated points of the Weyl sequence.
func newStream(key uint64, purpose, step uint64) stream {
	return stream(mix64(mix64(key^(purpose*0xd1b54a32d192ed03)) + step*golden))
}

// at returns the i-th 64-bit value of the stream.
func (s stream) at(i uint64) uint64 {
	return mix64(uint64(s) + (i+1)*golden)
}

// Constants of the approximate normal: the sum of four uniform 16-bit integers has mean
// 4*32767.5 and variance 4*(65536^2-1)/12.
const (
	irwinHallMean = 131070
)

var irwinHallInvStd = float32(1 / math.Sqrt(4*(65536.0*65536.0-1)/12))

// normal maps 64 random bits to an approximately standard normal float32: the Irwin-Hall sum
// of four 16-bit uniforms, centred and scaled. It is smooth to 2^-16 of a standard deviation
// and bounded by +-sqrt(12) = +-3.46 (real weights and gradients need no farther tails), and it
// costs a handful of integer operations and one multiplication, with no math library calls
// whose results could differ between platforms.
func normal(u uint64) float32 {
	s := int32(u&0xffff) + int32(u>>16&0xffff) + int32(u>>32&0xffff) + int32(u>>48)
	return float32(float32(s-irwinHallMean) * irwinHallInvStd) // rounded here: no FMA with the caller's add
}

// uniform maps 64 random bits to a float32 uniform on [0, 1) (24 bits of resolution).
func uniform(u uint64) float32 {
	return float32(float32(u>>40) * (1.0 / (1 << 24)))
}

// nameKey derives a tensor's key from the run seed and the tensor's name (FNV-1a), so that a
// tensor's values do not depend on which other tensors the model has.
func nameKey(seed uint64, name string) uint64 {
	h := uint64(0xcbf29ce484222325)
	for i := 0; i < len(name); i++ {
		h ^= uint64(name[i])
		h *= 0x100000001b3
	}
	return mix64(mix64(seed+golden) ^ h)
}
