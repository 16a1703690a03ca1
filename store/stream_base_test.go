package store

import (
	"testing"
	"unsafe"
)

// TestBaseReaderBuffersAreReused pins what keeps a commit of many small tensors linear: the
// base reader of each tensor takes its O_DIRECT buffers from its ingester's free list and
// gives them back, instead of ~260 KiB of fresh memory per tensor (at 100,000 tensors, 26 GB
// allocated per commit and a garbage collector working 16x harder for 10x the tensors:
// docs/benchmarks-history.md, "Tensor count (issue 29 item 5)").
func TestBaseReaderBuffersAreReused(t *testing.T) {
	s, _ := newStore(t, Options{})
	first := baseReader{in: s.ingest}
	b1 := first.buf(0, 300)
	first.release()
	next := baseReader{in: s.ingest}
	b2 := next.buf(0, 300)
	defer next.release()
	if unsafe.SliceData(b1) != unsafe.SliceData(b2) {
		t.Fatalf("the next tensor's base buffer is fresh memory (%p, the last one's was %p): buffers are not given back", unsafe.SliceData(b2), unsafe.SliceData(b1))
	}
	if len(b2) < 300+copySlack {
		t.Fatalf("buffer of %d bytes for a read of 300: want at least %d", len(b2), 300+copySlack)
	}
	if uintptr(unsafe.Pointer(unsafe.SliceData(b2)))%directAlign != 0 {
		t.Fatalf("buffer not aligned to %d for O_DIRECT", directAlign)
	}
}
