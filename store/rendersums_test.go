package store

import (
	"bytes"
	"errors"
	"fmt"
	"github.com/weightfs/weightfs/internal/logtest"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/weightfs/weightfs/delta"
)

// renderStore is a store with a version 2 that has a patch and a slime delta; one tensor
// spans several sum chunks.
func renderStore(t testing.TB, logf func(string, ...any)) *Store {
	s, _ := newStore(t, Options{Logger: logtest.New(logf)})
	rng := rand.New(rand.NewPCG(9, 10))
	m := newSlimeModel(rng)
	big := 3*sumChunk/2 + 6
	m.files["model-00001-of-00002.safetensors"][1] = testTensor{name: "layers.0.w", dtype: delta.DTypeBF16, shape: []int64{int64(big)}, data: bf16Like(rng, big)}
	commitTree(t, s, 1, m.tree(t))
	m.perturbAll(rng, 0.5)
	commitTree(t, s, 2, m.tree(t))
	return s
}

// readRendered reads a rendered file through its checks, in reads of n bytes.
func readRendered(rf RenderedFile, n int) ([]byte, error) {
	f, err := os.Open(rf.Path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	out := make([]byte, rf.Size)
	for off := int64(0); off < rf.Size; off += int64(n) {
		p := out[off:min(off+int64(n), rf.Size)]
		if got, err := rf.ReadAt(f, p, off); err != nil || got != len(p) {
			return nil, fmt.Errorf("at %d: %d of %d bytes: %w", off, got, len(p), err)
		}
	}
	return out, nil
}

// TestRenderedReadsAreChecked flips a byte of every file of a patch and a delta render in
// turn: a read over it fails with ErrDamagedRender and logs it, the render is dropped (a
// reader holding the damaged file keeps it), and rendering again gives the render's bytes. A
// removed file drops the whole delta render, which renders again (never EEXIST).
func TestRenderedReadsAreChecked(t *testing.T) {
	var mu sync.Mutex
	var logged []string
	s := renderStore(t, func(f string, a ...any) {
		mu.Lock()
		logged = append(logged, fmt.Sprintf(f, a...))
		mu.Unlock()
	})
	renders := func() []RenderedFile {
		t.Helper()
		rf, err := s.RenderPatch(2)
		if err != nil {
			t.Fatal(err)
		}
		_, files, err := s.RenderSlime(2)
		if err != nil {
			t.Fatal(err)
		}
		return append([]RenderedFile{rf}, files...)
	}
	want := map[string][]byte{}
	for _, rf := range renders() {
		want[rf.Path] = readFile(t, rf.Path)
		for _, n := range []int{1 << 20, 128 << 10, 4096, 333} {
			got, err := readRendered(rf, n)
			if err != nil || !bytes.Equal(got, want[rf.Path]) {
				t.Fatalf("%s in reads of %d: %v", rf.Name, n, err)
			}
		}
	}
	for i := range len(want) {
		rf := renders()[i]
		held, err := os.Open(rf.Path)
		if err != nil {
			t.Fatal(err)
		}
		pos := rf.Size - 1
		if rf.Size > sumChunk {
			pos = sumChunk + 17
		}
		b := append([]byte(nil), want[rf.Path]...)
		b[pos] ^= 0x04
		os.Chmod(rf.Path, 0o600)
		if err := os.WriteFile(rf.Path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		logged = nil
		_, err = rf.ReadAt(held, make([]byte, 10), pos-3)
		if !errors.Is(err, ErrDamagedRender) {
			t.Fatalf("read over a flipped byte of %s: %v", rf.Path, err)
		}
		if len(logged) != 1 || !strings.Contains(logged[0], "damaged") {
			t.Errorf("logged %q", logged)
		}
		if _, err := os.Stat(rf.Path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("damaged render %s not dropped: %v", rf.Path, err)
		}
		if _, err := held.ReadAt(make([]byte, 1), 0); err != nil {
			t.Errorf("a reader's file of the dropped render: %v", err)
		}
		held.Close()
		again := renders()[i]
		if got, err := readRendered(again, 128<<10); err != nil || !bytes.Equal(got, want[rf.Path]) || again.Path != rf.Path {
			t.Fatalf("%s rendered again: %v", rf.Path, err)
		}
		// The new render damaged too, read with the check the old one was loaded with (a
		// mount keeps RenderedFiles): found and dropped again.
		if err := os.WriteFile(rf.Path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := readRendered(rf, 128<<10); !errors.Is(err, ErrDamagedRender) {
			t.Fatalf("second damage of %s: %v", rf.Path, err)
		}
		if _, err := os.Stat(rf.Path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("second damaged render %s not dropped: %v", rf.Path, err)
		}
	}
	// A file of the delta gone: the whole render is dropped and rendered again.
	for _, rf := range renders()[1:] {
		if err := os.Remove(rf.Path); err != nil {
			t.Fatal(err)
		}
		for _, again := range renders()[1:] {
			if got, err := readRendered(again, 64<<10); err != nil || !bytes.Equal(got, want[again.Path]) {
				t.Fatalf("%s after %s was removed: %v", again.Name, rf.Name, err)
			}
		}
	}
	// Sums gone: the patch is rendered again.
	rf := renders()[0]
	if err := os.Remove(strings.TrimSuffix(rf.Path, ".safetensors") + patchSumsSuffix); err != nil {
		t.Fatal(err)
	}
	if got, err := readRendered(renders()[0], 64<<10); err != nil || !bytes.Equal(got, want[rf.Path]) {
		t.Fatalf("patch after its sums were removed: %v", err)
	}
}

// BenchmarkRenderedRead reads a 64 MiB render in 128 KiB reads (the FUSE size) through its
// checks, against a plain ReadAt of the same file (both from the page cache).
func BenchmarkRenderedRead(b *testing.B) {
	dir := b.TempDir()
	p := filepath.Join(dir, "render")
	data := randomBytes(rand.New(rand.NewPCG(1, 2)), 64<<20)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		b.Fatal(err)
	}
	var w sumWriter
	w.Write(data)
	rf := RenderedFile{Path: p, Size: int64(len(data)), check: &renderCheck{s: &Store{objects: &objectStore{bufs: newRecycler()}}, sums: w.sums()}}
	f, err := os.Open(p)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	for _, bc := range []struct {
		name string
		skew int64
		read func(buf []byte, off int64) (int, error)
	}{
		{"plain", 0, f.ReadAt},
		{"checked", 0, func(buf []byte, off int64) (int, error) { return rf.ReadAt(f, buf, off) }},
		{"checked-unaligned", 4096, func(buf []byte, off int64) (int, error) { return rf.ReadAt(f, buf, off) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			buf := make([]byte, 128<<10)
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				for off := bc.skew; off < int64(len(data)); off += int64(len(buf)) {
					if _, err := bc.read(buf, off); err != nil && err != io.EOF {
						b.Fatal(err)
					}
				}
			}
		})
	}
}
