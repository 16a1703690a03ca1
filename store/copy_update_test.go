package store

import (
	"errors"
	"github.com/weightfs/weightfs/internal/logtest"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// TestWriteChangedRuns checks the page-wise in-place update of the materialized copy against
// its definition (the file ends up holding now), for changes sparse and dense, at the edges
// of pages and of the buffer, at an offset in the file that is not page-aligned.
func TestWriteChangedRuns(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for i, tc := range []struct {
		size    int
		changes int
	}{{0, 0}, {1, 1}, {4096, 1}, {4097, 2}, {3*4096 + 5, 0}, {100_000, 3}, {100_000, 5000}, {1 << 20, 40}} {
		was := randomBytes(rng, tc.size)
		now := append([]byte(nil), was...)
		for range tc.changes {
			now[rng.IntN(len(now))] ^= byte(1 + rng.IntN(255))
		}
		if tc.size > 1 {
			now[0] ^= 1 // the first and the last byte
			now[len(now)-1] ^= 1
		}
		const base = 777
		p := filepath.Join(t.TempDir(), "f")
		file := append(randomBytes(rng, base), was...)
		file = append(file, "tail"...)
		if err := os.WriteFile(p, file, 0o644); err != nil {
			t.Fatal(err)
		}
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := writeChangedRuns(f, was, now, base); err != nil {
			t.Fatal(err)
		}
		f.Close()
		got, _ := os.ReadFile(p)
		want := append(append(append([]byte(nil), file[:base]...), now...), "tail"...)
		mustEqualBytes(t, "case "+string(rune('a'+i)), got, want)
	}
}

// TestStreamMemoryIsBounded streams a 96 MiB tensor, whole and then as a delta: what the
// stream allocates is a bounded pipeline (chunks, buffers): at most the Writer's chunk pool
// (64 MiB, whatever the file's size; how much of it a stream fills depends on which stage is
// slowest, the seed's disk writes included) and a few MiB besides.
func TestStreamMemoryIsBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("streams a 96 MiB file")
	}
	const elems = 48 << 20 // bf16: 96 MiB
	rng := rand.New(rand.NewPCG(23, 24))
	data := bf16Like(rng, elems)
	s, _ := newStore(t, Options{Logger: logtest.New(func(string, ...any) {})})
	for v := uint64(1); v <= 2; v++ {
		if v == 2 {
			data = perturb(rng, data, 2, 0.01)
		}
		file := safetensorsFile(t, testTensor{"w", "BF16", []int64{elems}, data})
		w, err := s.NewVersion(v)
		if err != nil {
			t.Fatal(err)
		}
		if err := s.mat.ensure(); err != nil { // outside the measurement
			t.Fatal(err)
		}
		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		st, err := w.StreamFile("model.safetensors")
		if err != nil {
			t.Fatal(err)
		}
		for off := 0; off < len(file); off += 1 << 20 {
			if _, err := st.Write(file[off:min(off+1<<20, len(file))]); err != nil {
				t.Fatal(err)
			}
		}
		if err := st.Close(); err != nil {
			t.Fatal(err)
		}
		runtime.ReadMemStats(&after)
		alloc := after.TotalAlloc - before.TotalAlloc
		t.Logf("v%d: streaming %d bytes allocated %d bytes", v, len(file), alloc)
		if bound := uint64(streamPoolChunks*(streamChunkSize+2*directAlign) + 8<<20); alloc > bound {
			t.Errorf("v%d: streaming a %d-byte file allocated %d bytes", v, len(file), alloc)
		}
		if err := w.AddStream("model.safetensors", st, 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := w.Seal(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestReaderOpensOverDamagedVersion damages an object of the latest version: a read-only
// store that keeps a materialized copy still opens, reads of the damaged file fail with
// ErrCorrupt, and the other files read exactly.
func TestReaderOpensOverDamagedVersion(t *testing.T) {
	w, root := newLooseStore(t, Options{Logger: logtest.New(func(string, ...any) {})})
	files := map[string][]byte{"a": []byte("the damaged file"), "b": []byte("the good file")}
	commitTree(t, w, 1, files)
	closeStore(t, w)
	ver, err := w.versions.loadVersion(1)
	if err != nil {
		t.Fatal(err)
	}
	obj := filepath.Join(root, "objects")
	id := ver.files["a"].ID.String()
	p := filepath.Join(obj, id[:2], id)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x40
	os.Chmod(p, 0o644)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	r := openLoose(t, root, Options{ReadOnly: true, Materialize: true, CacheDir: t.TempDir(), Logger: logtest.New(func(string, ...any) {})})
	expectDamage(r)
	f, err := r.OpenFile(1, "a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.ReadAt(make([]byte, len(files["a"])), 0); !errors.Is(err, ErrCorrupt) {
		t.Errorf("read of the damaged file: %v, want ErrCorrupt", err)
	}
	mustEqualBytes(t, "the good file", readWhole(t, r, 1, "b"), files["b"])
	if err := r.Refresh(); err != nil {
		t.Errorf("refresh over a damaged version: %v", err)
	}
}
