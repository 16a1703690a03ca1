package store

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/weightfs/weightfs/delta"
)

// TestOldVersionReadsWithReadAhead reads a version several deltas behind the latest through
// a read-only store with the materialized copy (pages rebuilt backward from it, read-ahead
// and page builds shared between readers) in 128 KiB pieces, in order and out of order, from
// several goroutines at once, and compares every byte with what was committed. It does so with
// the default cache and with one so small that pages are pushed out while readers still copy
// from them (the pages are recycled only after their last reader is done).
func TestOldVersionReadsWithReadAhead(t *testing.T) {
	for _, cacheBytes := range []int64{0, 3 * pageSize} {
		t.Run(fmt.Sprintf("cache=%d", cacheBytes), func(t *testing.T) { testOldVersionReads(t, cacheBytes) })
	}
}

func testOldVersionReads(t *testing.T, cacheBytes int64) {
	rng := rand.New(rand.NewPCG(11, 12))
	const elems = 3 << 20 // 6 MiB of bf16: pages across three delta blocks
	cur := bf16Like(rng, elems)
	w, root := newStore(t, Options{})
	var versions [][]byte
	for v := uint64(1); v <= 6; v++ {
		file := safetensorsFile(t,
			testTensor{"a", delta.DTypeBF16, []int64{elems}, cur},
			testTensor{"b", delta.DTypeF32, []int64{1000}, bytes.Repeat([]byte{byte(v), 0, 0x80, 0x3f}, 1000)})
		commitTree(t, w, v, map[string][]byte{"model.safetensors": file})
		versions = append(versions, file)
		cur = perturb(rng, cur, 2, 0.02)
	}
	closeStore(t, w)

	r := openStore(t, root, Options{ReadOnly: true, Materialize: true, CacheBytes: cacheBytes})
	for _, v := range []uint64{2, 4, 1} {
		want := versions[v-1]
		f, err := r.OpenFile(v, "model.safetensors")
		if err != nil {
			t.Fatal(err)
		}
		// In order, one reader: the read-ahead runs ahead of it.
		got := make([]byte, len(want))
		for off := 0; off < len(got); off += 128 << 10 {
			end := min(off+128<<10, len(got))
			if n, err := f.ReadAt(got[off:end], int64(off)); n != end-off {
				t.Fatalf("version %d at %d: %d bytes: %v", v, off, n, err)
			}
		}
		mustEqualBytes(t, "sequential read", got, want)

		// Out of order, four readers at once, on a fresh handle.
		f2, err := r.OpenFile(v, "model.safetensors")
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		errs := make(chan string, 4)
		for g := range 4 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(g), v))
				buf := make([]byte, 200<<10)
				for range 40 {
					off := rng.IntN(len(want))
					n, _ := f2.ReadAt(buf[:min(len(buf), len(want)-off)], int64(off))
					if !bytes.Equal(buf[:n], want[off:off+n]) || n == 0 {
						errs <- "wrong bytes"
						return
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for e := range errs {
			t.Fatalf("version %d, concurrent reads: %s", v, e)
		}
	}
	// Close waits for background builds still under way.
	if err := closeStore(t, r); err != nil {
		t.Fatal(err)
	}
}

// TestLatestReadAdvisesCopyAhead reads the latest version (served straight from the
// materialized copy) in order with ReadAt, which reads the copy through the page cache: the
// kernel must have been asked to read the copy ahead of the reader, as far as
// copyReadAheadBytes past the reads. (ReadSlices reads cold bytes with O_DIRECT instead:
// TestWholeCopyReadsMatchReference.)
func TestLatestReadAdvisesCopyAhead(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	const elems = 24 << 20 // 48 MiB of bf16: more than one advice window
	w, root := newStore(t, Options{})
	file := safetensorsFile(t, testTensor{"a", delta.DTypeBF16, []int64{elems}, bf16Like(rng, elems)})
	commitTree(t, w, 1, map[string][]byte{"model.safetensors": file})
	closeStore(t, w)

	r := openStore(t, root, Options{ReadOnly: true, Materialize: true})
	f, err := r.OpenFile(1, "model.safetensors")
	if err != nil {
		t.Fatal(err)
	}
	advisedTo := func() int64 {
		r.mat.adviceMu.Lock()
		defer r.mat.adviceMu.Unlock()
		var most int64
		for _, to := range r.mat.advised {
			most = max(most, to)
		}
		return most
	}
	if got := advisedTo(); got != 0 {
		t.Fatalf("advised %d bytes before any read", got)
	}
	buf := make([]byte, 128<<10)
	for off := 0; off < 4<<20; off += len(buf) {
		if _, err := f.ReadAt(buf, int64(off)); err != nil {
			t.Fatal(err)
		}
		mustEqualBytes(t, "latest", buf, file[off:off+len(buf)])
	}
	if got, want := advisedTo(), int64(4<<20)+copyReadAheadBytes-pageSize; got < want {
		t.Fatalf("after reading 4 MiB in order the copy is advised up to %d, want at least %d", got, want)
	}
}
