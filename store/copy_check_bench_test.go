package store

import (
	"fmt"
	"github.com/weightfs/weightfs/internal/logtest"
	"math/rand/v2"
	"testing"

	bolt "go.etcd.io/bbolt"

	"github.com/weightfs/weightfs/delta"
)

// The cost of the read checks (docs/format.md §8): reads of the latest version, served from
// the copy (each read expands to whole 64 KiB chunks and CRC-32C-checks them), and of the
// version before it, rebuilt backward from the copy. Run with the same benchmarks on a tree
// without the checks to compare.

func benchStore(b *testing.B) (*Store, int64) {
	b.Helper()
	rng := rand.New(rand.NewPCG(1, 2))
	const elems = 32 << 20 // 64 MiB of bf16
	data := bf16Like(rng, elems)
	s, _ := newStore(b, Options{Logger: logtest.New(func(string, ...any) {})})
	for v := uint64(1); v <= 2; v++ {
		if v == 2 {
			data = perturb(rng, data, 2, 0.01)
		}
		commitTree(b, s, v, map[string][]byte{"model.safetensors": safetensorsFile(b,
			testTensor{"w", delta.DTypeBF16, []int64{elems}, data})})
	}
	f, err := s.OpenFile(2, "model.safetensors")
	if err != nil {
		b.Fatal(err)
	}
	return s, f.Size()
}

func BenchmarkCopyRead(b *testing.B) {
	s, size := benchStore(b)
	for _, v := range []uint64{2, 1} {
		for _, n := range []int{128 << 10, 1 << 20} {
			b.Run(fmt.Sprintf("v%d/%dKiB", v, n>>10), func(b *testing.B) {
				f, err := s.OpenFile(v, "model.safetensors")
				if err != nil {
					b.Fatal(err)
				}
				buf := make([]byte, n)
				f.ReadAt(buf, 0) // the first read checks its tensor where that is needed
				b.SetBytes(int64(n))
				b.ResetTimer()
				off := int64(0)
				for i := 0; i < b.N; i++ {
					if off+int64(n) > size {
						off = 0
					}
					if _, err := f.ReadAt(buf, off); err != nil {
						b.Fatal(err)
					}
					off += int64(n)
				}
			})
		}
	}
}

// BenchmarkVouch is the reference's (verify_vouch.go) first read of a file not vouched for: the whole file read
// through the read path and hashed. Version 1 is rebuilt backward from the copy.
func BenchmarkVouch(b *testing.B) {
	s, size := benchStore(b)
	ver, err := s.versions.sealedVersion(1)
	if err != nil {
		b.Fatal(err)
	}
	f := ver.files["model.safetensors"]
	b.SetBytes(size)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		s.mat.chk = newChecks(s.ix)
		s.mat.chk.db(true, func(tx *bolt.Tx) error { tx.DeleteBucket(bucketVouched); return nil })
		b.StartTimer()
		if err := s.checker.vouchFile(ver, f); err != nil {
			b.Fatal(err)
		}
	}
}
