// Package xxh3s is a streaming XXH3-128 (the default secret, seed 0) that reads the bytes
// written in place: the same digest as github.com/zeebo/xxh3's Hash128 of all the bytes.
//
// Why: zeebo's Hasher128 copies every byte after its first Write into a 1 KiB buffer before
// it hashes it; on the ingest's path (a tensor's bytes in 256 KiB pieces) that copy cost
// more than the hashing (0.22 against 0.06 CPU-ns a byte). XXH3 needs, of the bytes already
// seen, only the last stripe (the final stripe is the input's last 64 bytes) and, for inputs
// of at most 240 bytes, all of them; every other stripe can be taken from the caller's
// buffer as soon as a byte after it is known (a stripe is accumulated when it ends before
// the input's last byte, and a block of 16 stripes is scrambled as its last stripe is). So
// Write copies at most 64 bytes of each call, plus the first 240 bytes of the input.
//
// Whole blocks in the caller's buffer go through zeebo's AVX2 block function (copied into
// accum_amd64.s: it is not exported); stripes of a block cut by a Write, and machines
// without AVX2, take scalar Go (the algorithm of the XXH3 specification). Tests compare the
// digest with zeebo's Hash128 for every length up to a few blocks and for random splits of
// large inputs, on both paths.
package xxh3s

import (
	"encoding/binary"
	"math/bits"

	"github.com/zeebo/xxh3"
)

const (
	stripe     = 64
	perBlock   = 16 // stripes per block: (len(secret) - stripe) / 8
	block      = stripe * perBlock
	shortLimit = 240

	prime32_1 = 2654435761
	prime32_2 = 2246822519
	prime32_3 = 3266489917
	prime64_1 = 11400714785074694791
	prime64_2 = 14029467366897019727
	prime64_3 = 1609587929392839161
	prime64_4 = 9650029242287828579
	prime64_5 = 2870177450012600261
)

// secret is XXH3's default secret (kSecret).
var secret = [192]byte{
	0xb8, 0xfe, 0x6c, 0x39, 0x23, 0xa4, 0x4b, 0xbe, 0x7c, 0x01, 0x81, 0x2c, 0xf7, 0x21, 0xad, 0x1c,
	0xde, 0xd4, 0x6d, 0xe9, 0x83, 0x90, 0x97, 0xdb, 0x72, 0x40, 0xa4, 0xa4, 0xb7, 0xb3, 0x67, 0x1f,
	0xcb, 0x79, 0xe6, 0x4e, 0xcc, 0xc0, 0xe5, 0x78, 0x82, 0x5a, 0xd0, 0x7d, 0xcc, 0xff, 0x72, 0x21,
	0xb8, 0x08, 0x46, 0x74, 0xf7, 0x43, 0x24, 0x8e, 0xe0, 0x35, 0x90, 0xe6, 0x81, 0x3a, 0x26, 0x4c,
	0x3c, 0x28, 0x52, 0xbb, 0x91, 0xc3, 0x00, 0xcb, 0x88, 0xd0, 0x65, 0x8b, 0x1b, 0x53, 0x2e, 0xa3,
	0x71, 0x64, 0x48, 0x97, 0xa2, 0x0d, 0xf9, 0x4e, 0x38, 0x19, 0xef, 0x46, 0xa9, 0xde, 0xac, 0xd8,
	0xa8, 0xfa, 0x76, 0x3f, 0xe3, 0x9c, 0x34, 0x3f, 0xf9, 0xdc, 0xbb, 0xc7, 0xc7, 0x0b, 0x4f, 0x1d,
	0x8a, 0x51, 0xe0, 0x4b, 0xcd, 0xb4, 0x59, 0x31, 0xc8, 0x9f, 0x7e, 0xc9, 0xd9, 0x78, 0x73, 0x64,
	0xea, 0xc5, 0xac, 0x83, 0x34, 0xd3, 0xeb, 0xc3, 0xc5, 0x81, 0xa0, 0xff, 0xfa, 0x13, 0x63, 0xeb,
	0x17, 0x0d, 0xdd, 0x51, 0xb7, 0xf0, 0xda, 0x49, 0xd3, 0x16, 0x55, 0x26, 0x29, 0xd4, 0x68, 0x9e,
	0x2b, 0x16, 0xbe, 0x58, 0x7d, 0x47, 0xa1, 0xfc, 0x8f, 0xf8, 0xb8, 0xd1, 0x7a, 0xd0, 0x31, 0xce,
	0x45, 0xcb, 0x3a, 0x8f, 0x95, 0x16, 0x04, 0x28, 0xaf, 0xd7, 0xfb, 0xca, 0xbb, 0x4b, 0x40, 0x7e,
}

// keys holds the secret read as little-endian words at every byte offset the stripes use
// (8*s for stripe s of a block, and the scramble's at 128): keys[i] is the word at 8*i.
var keys = func() (k [24]uint64) {
	for i := range k {
		k[i] = binary.LittleEndian.Uint64(secret[8*i:])
	}
	return k
}()

// Hasher128 is a streaming XXH3-128. The zero value is not ready: use New or Reset.
type Hasher128 struct {
	acc   [8]uint64
	n     uint64 // bytes written
	inBlk int    // stripes of the current block accumulated
	// pend holds bytes not yet accumulated (a stripe is accumulated only when a byte after
	// it is known): pend[:npend], npend <= 64, all bytes before them accumulated.
	pend  [stripe]byte
	npend int
	// last is the last stripe accumulated (the final stripe's bytes before pend).
	last [stripe]byte
	// head is the input's first bytes, for inputs of at most 240 bytes.
	head [shortLimit]byte
}

// New returns a Hasher128 for a new input.
func New() *Hasher128 {
	h := &Hasher128{}
	h.Reset()
	return h
}

// Reset starts a new input.
func (h *Hasher128) Reset() {
	h.acc = [8]uint64{prime32_3, prime64_1, prime64_2, prime64_3, prime64_4, prime32_2, prime64_5, prime32_1}
	h.n, h.inBlk, h.npend = 0, 0, 0
}

// Write adds p to the input. It never fails.
func (h *Hasher128) Write(p []byte) (int, error) {
	n := len(p)
	if h.n < shortLimit {
		copy(h.head[h.n:], p)
	}
	h.n += uint64(n)
	if h.npend > 0 {
		k := copy(h.pend[h.npend:], p)
		h.npend += k
		p = p[k:]
		if h.npend < stripe || len(p) == 0 {
			return n, nil
		}
		h.stripes(h.pend[:])
		h.last = h.pend
		h.npend = 0
	}
	// Every whole stripe with a byte after it, in place: up to a block boundary stripe by
	// stripe, then whole blocks, then the stripes of the last block begun.
	if m := (len(p) - 1) / stripe * stripe; m > 0 {
		q := p[:m]
		if h.inBlk > 0 {
			k := min(len(q), (perBlock-h.inBlk)*stripe)
			h.stripes(q[:k])
			q = q[k:]
		}
		if b := len(q) / block * block; b > 0 {
			blocks(&h.acc, q[:b])
			q = q[b:]
		}
		h.stripes(q)
		copy(h.last[:], p[m-stripe:m])
		p = p[m:]
	}
	h.npend = copy(h.pend[:], p)
	return n, nil
}

// stripes accumulates whole stripes, scrambling at the end of each block.
func (h *Hasher128) stripes(p []byte) {
	acc := h.acc
	for len(p) >= stripe {
		k := keys[h.inBlk : h.inBlk+8 : h.inBlk+8]
		s := p[:stripe:stripe]
		for i := 0; i < 8; i += 2 {
			v0 := binary.LittleEndian.Uint64(s[8*i:])
			v1 := binary.LittleEndian.Uint64(s[8*i+8:])
			k0 := v0 ^ k[i]
			k1 := v1 ^ k[i+1]
			acc[i] += uint64(uint32(k0))*(k0>>32) + v1
			acc[i+1] += uint64(uint32(k1))*(k1>>32) + v0
		}
		p = p[stripe:]
		if h.inBlk++; h.inBlk == perBlock {
			for i := range acc {
				a := acc[i]
				a ^= a >> 47
				a ^= keys[16+i]
				acc[i] = a * prime32_1
			}
			h.inBlk = 0
		}
	}
	h.acc = acc
}

// Sum128 returns the digest of the input so far; the Hasher128 can go on.
func (h *Hasher128) Sum128() xxh3.Uint128 {
	if h.n <= shortLimit {
		return xxh3.Hash128(h.head[:h.n])
	}
	acc := h.acc
	// The last stripe: the input's last 64 bytes, with the secret at 121 (not word aligned).
	var fin [stripe]byte
	copy(fin[:], h.last[h.npend:])
	copy(fin[stripe-h.npend:], h.pend[:h.npend])
	if h.npend == stripe { // a whole stripe pending: it is the last one, never accumulated
		fin = h.pend
	}
	for i := 0; i < 8; i += 2 {
		v0 := binary.LittleEndian.Uint64(fin[8*i:])
		v1 := binary.LittleEndian.Uint64(fin[8*i+8:])
		k0 := v0 ^ binary.LittleEndian.Uint64(secret[121+8*i:])
		k1 := v1 ^ binary.LittleEndian.Uint64(secret[121+8*i+8:])
		acc[i] += uint64(uint32(k0))*(k0>>32) + v1
		acc[i+1] += uint64(uint32(k1))*(k1>>32) + v0
	}
	return xxh3.Uint128{
		Lo: merge(&acc, 11, h.n*prime64_1),
		Hi: merge(&acc, 192-64-11, ^(h.n * prime64_2)),
	}
}

// blocksGeneric is blocks in scalar Go.
func blocksGeneric(acc *[8]uint64, p []byte) {
	var h Hasher128
	h.acc = *acc
	h.stripes(p)
	*acc = h.acc
}

// merge folds the accumulators with the secret at off (XXH3's mergeAccs).
func merge(acc *[8]uint64, off int, start uint64) uint64 {
	r := start
	for i := 0; i < 4; i++ {
		a := acc[2*i] ^ binary.LittleEndian.Uint64(secret[off+16*i:])
		b := acc[2*i+1] ^ binary.LittleEndian.Uint64(secret[off+16*i+8:])
		hi, lo := bits.Mul64(a, b)
		r += hi ^ lo
	}
	r ^= r >> 37
	r *= 0x165667919E3779F9
	return r ^ r>>32
}

// Sum appends the digest (Sum128's Hi then Lo, big-endian: zeebo's Hasher128.Sum) to b.
func (h *Hasher128) Sum(b []byte) []byte {
	u := h.Sum128()
	return binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(b, u.Hi), u.Lo)
}

// Size is the digest's length in bytes.
func (h *Hasher128) Size() int { return 16 }

// BlockSize is the size of the stripes Write reads in place.
func (h *Hasher128) BlockSize() int { return stripe }
