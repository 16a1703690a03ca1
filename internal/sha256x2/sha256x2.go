// Package sha256x2 computes SHA-256 digests, and two of them over the same bytes in one pass.
//
// Ingest hashes every byte twice: once for the tensor it belongs to (the object's name) and
// once for the whole file (the manifest's file hash). Those are two independent SHA-256
// streams over the same bytes, at different offsets within their 64-byte blocks. With the
// x86 SHA extensions one stream is bound by the latency of SHA256RNDS2, so WriteBoth runs
// both streams interleaved in one instruction stream (blocks2_amd64.s), where the second
// fills the first one's waits, and reads the bytes once: 1.25x the throughput of two
// crypto/sha256 passes on the development machine (the instruction's own throughput caps the
// gain there; BenchmarkWriteBoth). Elsewhere, or without the extensions, it writes each
// digest in turn with a portable implementation (block.go), which is also the reference the
// fast path is tested against; callers that can use two cores should then prefer
// crypto/sha256 on each (Accelerated says which).
package sha256x2

import (
	"encoding/binary"
	"hash"
)

// Size is the length of a SHA-256 digest in bytes; BlockSize its block size.
const (
	Size      = 32
	BlockSize = 64
)

var initial = [8]uint32{0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19}

// Digest is a SHA-256 computation (a hash.Hash). The zero value is not ready: use New.
type Digest struct {
	h   [8]uint32
	x   [BlockSize]byte // a partial block
	nx  int
	len uint64
}

var _ hash.Hash = (*Digest)(nil)

// New returns a Digest ready for writing.
func New() *Digest {
	d := &Digest{}
	d.Reset()
	return d
}

// Accelerated reports whether WriteBoth hashes both streams in one pass on this machine.
func Accelerated() bool { return useKernel }

// Reset starts the digest again.
func (d *Digest) Reset() {
	d.h, d.nx, d.len = initial, 0, 0
}

// Size is Size.
func (d *Digest) Size() int { return Size }

// BlockSize is BlockSize.
func (d *Digest) BlockSize() int { return BlockSize }

// Write adds p to the digest; it never fails.
func (d *Digest) Write(p []byte) (int, error) {
	d.len += uint64(len(p))
	d.rest(d.fill(p))
	return len(p), nil
}

// WriteBoth adds p to a and to b, as a.Write(p) and b.Write(p) would, reading p once.
func WriteBoth(a, b *Digest, p []byte) {
	if !useKernel || a == b {
		a.Write(p)
		b.Write(p)
		return
	}
	a.len += uint64(len(p))
	b.len += uint64(len(p))
	pa, pb := a.fill(p), b.fill(p)
	if n := min(len(pa), len(pb)) / BlockSize; n > 0 {
		blocks2(&a.h, &pa[0], &b.h, &pb[0], n)
		pa, pb = pa[n*BlockSize:], pb[n*BlockSize:]
	}
	a.rest(pa)
	b.rest(pb)
}

// fill completes a partial block from the start of p, hashing it if it fills, and returns the
// bytes of p it did not take.
func (d *Digest) fill(p []byte) []byte {
	if d.nx == 0 {
		return p
	}
	n := copy(d.x[d.nx:], p)
	d.nx += n
	if d.nx == BlockSize {
		d.blocks(d.x[:])
		d.nx = 0
	}
	return p[n:]
}

// rest hashes the whole blocks of p and keeps the tail. Bytes left by fill mean the partial
// block was completed (and is empty now); none left, and it stays as fill made it.
func (d *Digest) rest(p []byte) {
	if len(p) == 0 {
		return
	}
	if n := len(p) &^ (BlockSize - 1); n > 0 {
		d.blocks(p[:n])
		p = p[n:]
	}
	d.nx = copy(d.x[:], p)
}

// blocks hashes whole blocks into d alone.
func (d *Digest) blocks(p []byte) {
	if useKernel {
		// The kernel is as fast for one stream as the one-stream kernels: the second
		// stream (the same bytes into a scratch state) rides in the gaps of the first.
		var scratch [8]uint32
		blocks2(&d.h, &p[0], &scratch, &p[0], len(p)/BlockSize)
		return
	}
	blockGeneric(&d.h, p)
}

// Sum appends the digest of the bytes written so far to b; d is unchanged.
func (d *Digest) Sum(b []byte) []byte {
	c := *d
	var pad [BlockSize + 8]byte
	pad[0] = 0x80
	n := BlockSize - (int(c.len)+8)%BlockSize // 1..64 bytes: 0x80, then zeros
	binary.BigEndian.PutUint64(pad[n:], c.len<<3)
	c.Write(pad[:n+8])
	for _, v := range c.h {
		b = binary.BigEndian.AppendUint32(b, v)
	}
	return b
}
