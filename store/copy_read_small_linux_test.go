package store

import (
	"math/rand/v2"
	"testing"

	"github.com/weightfs/weightfs/delta"
)

// TestSmallBaseReadsThroughPageCache reads, as a batch diff does (baseReader.checksWhole), a
// small tensor of the cold copy whole and a chunk of a large one: the small one goes through
// the page cache (the kernel holds its bytes afterwards: its read ahead serves the next
// tensors and the seal's bring-forward), the chunk with O_DIRECT (the kernel does not), and
// both give the copy's bytes.
func TestSmallBaseReadsThroughPageCache(t *testing.T) {
	rng := rand.New(rand.NewPCG(81, 82))
	const small, large = 24 << 10, 3 << 20 // elements: 48 KiB, 6 MiB
	s, _ := newStore(t, Options{})
	commitTree(t, s, 1, map[string][]byte{"model.safetensors": safetensorsFile(t,
		testTensor{"a", delta.DTypeBF16, []int64{small}, bf16Like(rng, small)},
		testTensor{"big", delta.DTypeBF16, []int64{large}, bf16Like(rng, large)},
		testTensor{"b", delta.DTypeBF16, []int64{small + 7}, bf16Like(rng, small+7)})})
	view := s.mat.view()
	if view == nil {
		t.Fatal("no materialized copy")
	}
	defer view.release()
	var smallID, largeID ID
	want := map[ID][]byte{}
	for id := range view.m.locs {
		m, err := s.objects.meta(id)
		if err != nil {
			t.Fatal(err)
		}
		switch m.ContentLen {
		case 2 * small:
			smallID = id
		case 2 * large:
			largeID = id
		default:
			continue
		}
		want[id] = make([]byte, m.ContentLen)
		if err := view.readAt(id, want[id], 0); err != nil {
			t.Fatal(err)
		}
	}
	if smallID.IsZero() || largeID.IsZero() {
		t.Fatal("tensors not found in the copy")
	}
	evictCopy(t, s.mat)
	f := mustFile(t, view, smallID)
	cached := func(id ID, off, n int64) bool {
		all, known := rangeCached(f, view.m.locs[id].off+off, n)
		if !known {
			t.Skip("the kernel has no cachestat(2)")
		}
		return all
	}
	if cached(smallID, 0, 2*small) || cached(largeID, 0, ingestChunk) {
		t.Skip("the copy's file system keeps its pages in memory (tmpfs?)")
	}
	r := baseReader{in: s.ingest, checksWhole: true}
	defer func() { r.release() }()
	b, err := r.read(view, largeID, 0, ingestChunk, nextRead{})
	if err != nil {
		t.Fatal(err)
	}
	mustEqualBytes(t, "large tensor's first chunk", b, want[largeID][:ingestChunk])
	if cached(largeID, 0, ingestChunk) && !view.m.noDirect {
		t.Fatal("the large tensor's chunk went through the page cache, not O_DIRECT")
	}
	r.release()
	r = baseReader{in: s.ingest, checksWhole: true} // a diff's reader is its tensor's alone
	b, err = r.read(view, smallID, 0, 2*small, nextRead{})
	if err != nil {
		t.Fatal(err)
	}
	mustEqualBytes(t, "small tensor", b, want[smallID])
	if !cached(smallID, 0, 2*small) {
		t.Fatal("the small tensor was not read through the page cache")
	}
}
