//go:build cgo

package gpu

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"github.com/weightfs/weightfs/delta"
)

// benchInput is 64 MiB of bf16 weights in which ~2% of the elements changed, as on an RL step.
func benchInput() (base, cur []byte) {
	const size = 64 << 20
	r := rand.New(rand.NewPCG(1, 2))
	base = make([]byte, size)
	for i := 0; i < size; i += 8 {
		v := r.Uint64()
		for j := range 8 {
			base[i+j] = byte(v >> (8 * j))
		}
	}
	cur = bytes.Clone(base)
	for e := 0; e < size/2; e++ {
		if r.IntN(50) == 0 {
			cur[2*e] ^= 1 // one ULP-ish change in the low mantissa byte
		}
	}
	return base, cur
}

// BenchmarkDiff64MiBBF16 compares the CPU backend with the OpenCL backend (PoCL on the CPU
// here: expect it slower; on an NVIDIA GPU the kernel is bandwidth-bound).
func BenchmarkDiff64MiBBF16(b *testing.B) {
	base, cur := benchInput()
	run := func(b *testing.B, backend delta.DiffBackend) {
		var out delta.Changes
		b.SetBytes(int64(len(base)))
		b.ResetTimer()
		for b.Loop() {
			out.Reset()
			if err := backend.Diff(base, cur, 2, &out); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(len(out.Index)), "changes")
	}
	b.Run("cpu", func(b *testing.B) { run(b, delta.NewCPUDiff()) })
	b.Run("opencl", func(b *testing.B) {
		tb := openCLForTest(b)
		lib := tb.lib
		ob, err := newOpenCLBackend(lib, tb.device, DefaultChunkBytes)
		if err != nil {
			b.Fatal(err)
		}
		defer ob.Close()
		run(b, ob)
	})
}
