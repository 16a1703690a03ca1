package store

import (
	"math/rand/v2"
	"testing"

	"github.com/weightfs/weightfs/delta"
)

// TestBlockReferences follows decoded blocks through the block cache: a block pushed out while
// a page build holds it is not decoded into again until that build lets go, and a released
// block's buffers are reused.
func TestBlockReferences(t *testing.T) {
	rng := rand.New(rand.NewPCG(61, 62))
	const elems = 3 << 20 // three blocks
	base := bf16Like(rng, elems)
	body, err := delta.EncodeDelta(nil, base, perturb(rng, base, 2, 0.02), 2, true)
	if err != nil {
		t.Fatal(err)
	}
	parsed, err := delta.OpenDelta(body)
	if err != nil {
		t.Fatal(err)
	}
	s := &Store{objects: &objectStore{blocks: newBlockCache(1), bufs: newRecycler()}} // too small for any block: each is pushed out at once
	d := &deltaObject{body: body, info: parsed.Info(), parsed: parsed}
	var id ID
	held, err := s.objects.decodedBlock(id, d, 0)
	if err != nil {
		t.Fatal(err)
	}
	if got := held.refs.Load(); got != 1 {
		t.Fatalf("a block pushed out of the cache at once: %d references, want the caller's 1", got)
	}
	for b := int64(1); b <= 2; b++ {
		cb, err := s.objects.decodedBlock(id, d, b)
		if err != nil {
			t.Fatal(err)
		}
		if cb.db == held.db {
			t.Fatal("a block still held was decoded into")
		}
		cb.release()
	}
	want := held.db.Changes()
	held.release()
	free := &s.objects.bufs.blocks
	free.mu.Lock()
	recycled := len(free.items) > 0 && free.items[len(free.items)-1] == held.db
	free.mu.Unlock()
	if !recycled {
		t.Fatal("a released block was not kept for reuse")
	}
	again, err := s.objects.decodedBlock(id, d, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer again.release()
	if again.db != held.db || again.db.Changes() != want {
		t.Fatalf("block 0 decoded again: same buffers %v, %d changes, want %d", again.db == held.db, again.db.Changes(), want)
	}
}
