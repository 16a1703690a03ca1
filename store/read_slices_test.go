package store

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/weightfs/weightfs/delta"
)

// TestReadSlicesMatchesReadAt reads versions of a store through ReadSlices and ReadAt at random
// places and requires the same bytes, counts and errors. A version rebuilt from deltas must be
// answered with parts of cached pages (not copies in p) when it has no file copy (filecopy.go),
// from its file copy into p when it has one, the latest from the copy as one part per MiB
// (copy_read_file.go: not one read per tensor), and a read across many small tensors with one
// part; a tiny cache pushes pages out while their parts are still
// held.
func TestReadSlicesMatchesReadAt(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	const elems = 3 << 20 // 6 MiB of bf16
	cur := bf16Like(rng, elems)
	w, root := newStore(t, Options{})
	var versions [][]byte
	for v := uint64(1); v <= 4; v++ {
		tensors := []testTensor{{"a", delta.DTypeBF16, []int64{elems}, cur}}
		for i := range 40 { // small tensors: a read across them has many parts
			tensors = append(tensors, testTensor{fmt.Sprintf("n%02d", i), delta.DTypeF32, []int64{256},
				bytes.Repeat([]byte{byte(v), byte(i), 0x80, 0x3f}, 256)})
		}
		file := safetensorsFile(t, tensors...)
		commitTree(t, w, v, map[string][]byte{"m.safetensors": file})
		versions = append(versions, file)
		cur = perturb(rng, cur, 2, 0.02)
	}
	closeStore(t, w)

	for _, c := range []struct{ cacheBytes, copyBytes int64 }{{0, -1}, {3 * pageSize, -1}, {0, 0}} {
		r := openStore(t, root, Options{ReadOnly: true, Materialize: true, CacheBytes: c.cacheBytes, FileCopyBytes: c.copyBytes})
		if c.copyBytes >= 0 {
			// A file read from the objects by a second open file gets its copy (filecopy.go).
			mustEqualBytes(t, "version 2, first read", readWhole(t, r, 2, "m.safetensors"), versions[1])
			mustEqualBytes(t, "version 2, second read", readWhole(t, r, 2, "m.safetensors"), versions[1])
			r.files.bg.Wait()
		}
		for _, v := range []uint64{2, 4} {
			want := versions[v-1]
			f, err := r.OpenFile(v, "m.safetensors")
			if err != nil {
				t.Fatal(err)
			}
			sr := f.(SliceReader)
			fromPages := 0
			var held []func()
			for trial := range 60 {
				off := rng.Int64N(int64(len(want)) + 10)
				size := 1 + rng.IntN(2<<20)
				if trial == 0 {
					off, size = int64(len(want))-40*1024-100, 40*1024 // the small tensors
				}
				p := make([]byte, size)
				parts, release, n, err := sr.ReadSlices(p, off)
				q := make([]byte, size)
				wn, werr := f.ReadAt(q, off)
				if n != wn || !errors.Is(err, werr) && (err == nil || werr == nil) {
					t.Fatalf("v%d at %d+%d: ReadSlices %d, %v; ReadAt %d, %v", v, off, size, n, err, wn, werr)
				}
				if got := bytes.Join(parts, nil); !bytes.Equal(got, q[:wn]) {
					t.Fatalf("v%d at %d+%d: the parts differ from ReadAt's bytes", v, off, size)
				}
				for _, part := range parts {
					if len(part) > 0 && !inside(part, p) {
						fromPages++
					}
				}
				if v == 4 && len(parts) > (n+pageSize-1)/pageSize {
					t.Fatalf("the latest version at %d+%d: %d bytes in %d parts, want one per MiB", off, size, n, len(parts))
				}
				if trial == 0 && len(parts) != 1 {
					t.Fatalf("v%d: a read across 40 small tensors in %d parts", v, len(parts))
				}
				if trial%3 == 0 {
					held = append(held, release) // let go later: pages are pushed out meanwhile
				} else {
					release()
					release() // a second call does nothing
				}
				if err != nil && err != io.EOF {
					t.Fatal(err)
				}
			}
			for _, release := range held {
				release()
			}
			switch {
			case v == 2 && c.copyBytes < 0 && fromPages == 0:
				t.Fatal("version 2: no part came from a page")
			case v == 2 && c.copyBytes >= 0 && fromPages != 0:
				t.Fatalf("version 2 with a file copy: %d parts outside p, want every byte read from the copy into p", fromPages)
			}
		}
		if err := closeStore(t, r); err != nil {
			t.Fatal(err)
		}
	}
}

// inside reports whether part lies within p's memory.
func inside(part, p []byte) bool {
	if len(p) == 0 {
		return false
	}
	a, b := uintptr(unsafe.Pointer(&part[0])), uintptr(unsafe.Pointer(&p[0]))
	return a >= b && a < b+uintptr(cap(p))
}
