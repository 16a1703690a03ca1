package store

import (
	"hash/crc32"
	"sync"
)

// castagnoli is the CRC-32C table; the standard library uses the SSE4.2 instruction for it.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// castagnoliReversed is the bit-reversed CRC-32C polynomial, the form crc32Combine needs.
const castagnoliReversed = 0x82f63b78

func crc32c(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// crc32Combine returns the CRC-32C of A||B from crcA = CRC(A), crcB = CRC(B) and len(B).
//
// Object files carry a CRC of header||body, but the header (which names the content's
// SHA-256) is only known once the body has streamed to disk; combining lets the writer CRC the
// body as it streams and never read it back. The method is the classic one of multiplying by
// x^(8*lenB) modulo the polynomial with repeated squaring of a GF(2) operator matrix.
//
// The operators for 2^k zero bytes are squared once (zeroBytesOps) and applied for each bit
// set in lenB: a stream writes an object per tensor, and squaring them again at every call
// was a per-tensor cost of a mixture of experts' ingest (issue 29).
func crc32Combine(crcA, crcB uint32, lenB int64) uint32 {
	if lenB <= 0 {
		return crcA
	}
	ops := zeroBytesOps()
	for k := 0; lenB != 0; k, lenB = k+1, lenB>>1 {
		if lenB&1 != 0 {
			crcA = gf2Times(&ops[k], crcA)
		}
	}
	return crcA ^ crcB
}

// zeroBytesOps returns the GF(2) operators that append 2^k zero bytes to a CRC-32C, k < 63.
var zeroBytesOps = sync.OnceValue(func() *[63][32]uint32 {
	var ops [63][32]uint32
	var odd, even [32]uint32
	// odd: the operator for one zero bit.
	odd[0] = castagnoliReversed
	row := uint32(1)
	for n := 1; n < 32; n++ {
		odd[n] = row
		row <<= 1
	}
	gf2Square(&even, &odd)   // two zero bits
	gf2Square(&odd, &even)   // four zero bits
	gf2Square(&ops[0], &odd) // one zero byte
	for k := 1; k < len(ops); k++ {
		gf2Square(&ops[k], &ops[k-1])
	}
	return &ops
})

func gf2Times(mat *[32]uint32, vec uint32) uint32 {
	var sum uint32
	for i := 0; vec != 0; i, vec = i+1, vec>>1 {
		if vec&1 != 0 {
			sum ^= mat[i]
		}
	}
	return sum
}

func gf2Square(square, mat *[32]uint32) {
	for n := 0; n < 32; n++ {
		square[n] = gf2Times(mat, mat[n])
	}
}

// crcSet is the objects whose file's CRC-32C this process checked (objectStore.crcChecked).
// A plain map of ids under a lock, not a sync.Map: each object is added once and looked up
// a few times, and a sync.Map boxed every id and kept a node of pointers per object, heap the
// collector walked at every cycle (Verify of 100,000 tensors, issue 29); this map holds no
// pointers.
type crcSet struct {
	mu  sync.Mutex
	ids map[ID]struct{}
}

func (c *crcSet) has(id ID) bool {
	c.mu.Lock()
	_, ok := c.ids[id]
	c.mu.Unlock()
	return ok
}

func (c *crcSet) add(id ID) {
	c.mu.Lock()
	if c.ids == nil {
		c.ids = map[ID]struct{}{}
	}
	c.ids[id] = struct{}{}
	c.mu.Unlock()
}

func (c *crcSet) remove(id ID) {
	c.mu.Lock()
	delete(c.ids, id)
	c.mu.Unlock()
}

// clear forgets every object (the map's memory too: a Verify of a large store filled it).
func (c *crcSet) clear() {
	c.mu.Lock()
	c.ids = nil
	c.mu.Unlock()
}
