package store

import (
	"io"

	"github.com/zeebo/xxh3"
)

// xxh3Reader is a tensor's bytes as the batch path (Writer.ingestTensor) reads them, taking
// their xxh3-128 for the manifest (format 4) in the pass that takes their SHA-256: bytes read
// in order from 0 are hashed once, bytes read again (an anchor's second pass) are not. A read
// that skips ahead leaves no digest (the manifest then records none, and readers check the
// tensor by its id).
type xxh3Reader struct {
	r      io.ReaderAt
	size   int64
	h      *xxh3.Hasher128
	next   int64 // the first byte not hashed yet
	broken bool  // a read skipped bytes: no digest
}

func newXXH3Reader(r io.ReaderAt, size int64) *xxh3Reader {
	return &xxh3Reader{r: r, size: size, h: xxh3.New128()}
}

func (x *xxh3Reader) ReadAt(p []byte, off int64) (int, error) {
	n, err := x.r.ReadAt(p, off)
	switch {
	case off == x.next:
		x.h.Write(p[:n])
		x.next += int64(n)
	case off > x.next:
		x.broken = true
	}
	return n, err
}

// sum is the xxh3-128 of the whole tensor when every byte was read in order, else zero.
func (x *xxh3Reader) sum() xxh3Digest {
	if x.broken || x.next != x.size {
		return xxh3Digest{}
	}
	return xxh3Sum(x.h.Sum128())
}
