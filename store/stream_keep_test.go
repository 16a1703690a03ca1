package store

import (
	"bytes"
	"fmt"
	"hash/crc32"
	"math/rand/v2"
	"testing"

	"github.com/zeebo/xxh3"

	"github.com/weightfs/weightfs/internal/logtest"
)

// TestStreamFastEqualsReference streams the same versions into two stores with the base in
// memory: one on the streams' fast path (tensors routed into their buffers in the memory, the
// worker's passes piece by piece: stream_keep.go), one on the reference path
// (ingester.streamReference). Every version must store the same manifest and objects byte for
// byte, and leave the same base in memory (the same identities, bytes and CRC-32C); the fast
// store must have routed the streams of every version with a base (no seed then).
func TestStreamFastEqualsReference(t *testing.T) {
	quiet := logtest.New(func(string, ...any) {})
	ref, _ := newStore(t, Options{MaxChain: 2, BaseMemory: 64 << 20, Logger: quiet})
	fast, _ := newStore(t, Options{MaxChain: 2, BaseMemory: 64 << 20, Logger: quiet})
	ref.ingest.streamReference = true
	rng := rand.New(rand.NewPCG(7, 8))
	for i, files := range streamSeries(t, 6, 3) {
		v := uint64(i + 1)
		sealStreamed(t, ref, v, files, rng)
		routed := sealStreamedRouted(t, fast, v, files, rng)
		if want := v > 1; routed != want {
			t.Fatalf("v%d: streams routed into the memory: %v, want %v", v, routed, want)
		}
		sameStores(t, fmt.Sprintf("v%d", v), ref, fast, v)
		sameBaseMemory(t, fmt.Sprintf("v%d", v), ref, fast, v)
	}
	if fast.BaseMemory().Served == 0 {
		t.Fatal("no base was read from memory")
	}
	if _, err := fast.Verify(nil); err != nil {
		t.Fatal(err)
	}
}

// sealStreamedRouted is sealStreamed, and says whether every stream routed its tensors into
// the base in memory.
func sealStreamedRouted(t *testing.T, s *Store, v uint64, files map[string][]byte, rng *rand.Rand) bool {
	t.Helper()
	w, err := s.NewVersion(v)
	if err != nil {
		t.Fatal(err)
	}
	routed := true
	for _, p := range sortedPaths(files) {
		st, err := w.StreamFile(p)
		if err != nil {
			t.Fatal(err)
		}
		routed = routed && st.keepRoute
		streamWrites(t, rng, st, files[p])
		if err := st.Close(); err != nil {
			t.Fatalf("close %s: %v", p, err)
		}
		if err := w.AddStream(p, st, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := w.Seal(); err != nil {
		t.Fatal(err)
	}
	return routed
}

// sameBaseMemory requires the two stores' base in memory to hold version v with the same
// entries: bytes, and a digest that is theirs (a stream's entries: their xxh3-128).
func sameBaseMemory(t *testing.T, what string, a, b *Store, v uint64) {
	t.Helper()
	ma, mb := a.ingest.mem, b.ingest.mem
	ma.mu.Lock()
	defer ma.mu.Unlock()
	mb.mu.Lock()
	defer mb.mu.Unlock()
	if ma.ver != v || mb.ver != v || len(ma.byID) == 0 || len(ma.byID) != len(mb.byID) {
		t.Fatalf("%s: the memories hold versions %d and %d, %d and %d entries", what, ma.ver, mb.ver, len(ma.byID), len(mb.byID))
	}
	for id, ea := range ma.byID {
		eb := mb.byID[id]
		switch {
		case eb == nil:
			t.Fatalf("%s: entry %s only in the reference's memory", what, id)
		case !bytes.Equal(ea.b, eb.b):
			t.Fatalf("%s: entry %s holds other bytes", what, id)
		case !ea.sum.byXXH || !eb.sum.byXXH:
			t.Fatalf("%s: entry %s of a stream is not checked by its xxh3-128: %+v, %+v", what, id, ea.sum, eb.sum)
		case ea.sum != eb.sum || memSumOf(eb.b, eb.sum.byXXH) != eb.sum:
			t.Fatalf("%s: entry %s: sums %+v and %+v, its bytes' %+v", what, id, ea.sum, eb.sum, memSumOf(eb.b, eb.sum.byXXH))
		}
	}
}

// memSumOf is the digest of b an entry would carry: its xxh3-128 (byXXH) or its CRC-32C.
func memSumOf(b []byte, byXXH bool) memSum {
	if byXXH {
		return memSum{xxh: xxh3Sum(xxh3.Hash128(b)), byXXH: true}
	}
	return memSum{crc: crc32.Checksum(b, castagnoli)}
}
