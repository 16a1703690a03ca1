package store

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/weightfs/weightfs/delta"
	"github.com/weightfs/weightfs/internal/logtest"
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

// TestReadAheadChecksTheNextTensors reads the first bytes of a file of a version three deltas
// behind the latest: the read-ahead starts the checks of the tensors after them (checkAhead),
// so they are checked before the reader reaches them, and the whole file then reads exactly.
// With a byte of one tensor's object flipped, the check ahead finds it and the reads of that
// tensor fail with ErrCorrupt, never other bytes, while the tensor before it reads exactly.
func TestReadAheadChecksTheNextTensors(t *testing.T) {
	for _, damaged := range []bool{false, true} {
		t.Run(fmt.Sprintf("damaged=%v", damaged), func(t *testing.T) {
			versions := modelVersions(t, 4, 85)
			w, root := newLooseStore(t, Options{}) // object files: one to flip a byte of
			commitAll(t, w, versions)
			closeStore(t, w)
			r := openLoose(t, root, Options{ReadOnly: true, Materialize: true, FileCopyBytes: -1, Logger: logtest.New(func(string, ...any) {})})
			emb, embBytes := tensorOf(t, r, 1, "model.embed_tokens.weight", versions[0])
			mlp, _ := tensorOf(t, r, 1, "model.layers.0.mlp.weight", versions[0])
			if damaged {
				expectDamage(r)
				flipByte(t, r.be.given.(*localBackend).ObjectPath(mlp.ID))
			}
			f, err := r.OpenFile(1, "model.safetensors")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.ReadAt(make([]byte, 4096), 0); err != nil {
				t.Fatal(err)
			}
			r.objects.ra.wait()
			checked := checkedObjects(r)
			if !checked[emb.ID] || (!damaged && !checked[mlp.ID]) {
				t.Fatalf("after a read of the file's first 4096 bytes: embed checked %v, mlp checked %v; want both checked ahead of the reader",
					checked[emb.ID], checked[mlp.ID])
			}
			if !damaged {
				mustEqualBytes(t, "version 1", readWhole(t, r, 1, "model.safetensors"), versions[0]["model.safetensors"])
				return
			}
			if checked[mlp.ID] {
				t.Fatal("the damaged tensor's object was recorded as checked")
			}
			b, err := readTensor(r, 1, emb)
			if err != nil {
				t.Fatalf("the tensor before the damaged one: %v", err)
			}
			mustEqualBytes(t, "embed", b, embBytes)
			for i := 0; i < 2; i++ {
				if b, err := readTensor(r, 1, mlp); !errors.Is(err, ErrCorrupt) {
					t.Fatalf("read %d of the damaged tensor: %d bytes, %v, want ErrCorrupt", i, len(b), err)
				}
			}
		})
	}
}
