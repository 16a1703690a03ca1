package store

import (
	"math/rand/v2"
	"path/filepath"
	"testing"

	"github.com/weightfs/weightfs/delta"
	"github.com/weightfs/weightfs/internal/logtest"
)

// BenchmarkOldFileRead is figure 4 in process (docs/benchmarks.md): a fresh reader (its own
// cache directory, the copy of the latest version built before the timer starts) reads a
// file of a version ten deltas behind the latest whole, in 1 MiB reads, with file copies
// allowed and without, and the latest version's file for comparison. Since the per-tensor
// checks (read_check.go) a file read once gets no copy, so the two old cases read alike: each
// tensor rebuilt and hashed once, its pages served from the page cache.
func BenchmarkOldFileRead(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 4))
	const elems = 16 << 20 // 32 MiB of bf16
	data := bf16Like(rng, elems)
	w, root := newStore(b, Options{Logger: logtest.New(func(string, ...any) {})})
	for v := uint64(1); v <= 21; v++ {
		if v > 1 {
			data = perturb(rng, data, 2, 0.0247)
		}
		commitTree(b, w, v, map[string][]byte{"model.safetensors": safetensorsFile(b,
			testTensor{"w", delta.DTypeBF16, []int64{elems}, data})})
	}
	w.Close()
	for _, c := range []struct {
		name      string
		v         uint64
		copyBytes int64
	}{{"latest", 21, 0}, {"v11/copies", 11, 0}, {"v11/no-copies", 11, -1}} {
		b.Run(c.name, func(b *testing.B) {
			buf := make([]byte, 1<<20)
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				r, err := Open(root, Options{ReadOnly: true, Materialize: true, FileCopyBytes: c.copyBytes,
					CacheDir: filepath.Join(b.TempDir(), "cache"), Logger: logtest.New(func(string, ...any) {})})
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				f, err := r.OpenFile(c.v, "model.safetensors")
				if err != nil {
					b.Fatal(err)
				}
				b.SetBytes(f.Size())
				for off := int64(0); off < f.Size(); off += int64(len(buf)) {
					if _, err := f.ReadAt(buf, off); err != nil && off+int64(len(buf)) < f.Size() {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				r.Close()
				b.StartTimer()
			}
		})
	}
}
