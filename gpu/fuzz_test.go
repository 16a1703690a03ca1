//go:build cgo

package gpu

import (
	"testing"

	"github.com/weightfs/weightfs/delta"
)

// fuzzInput turns fuzzer bytes into a diff input: base is data repeated (1 + stretch%16)
// times, cut to whole elements of width w; cur flips, at positions taken from data, the bits
// given by data. stretch lets short fuzz inputs span several 8 KiB test chunks.
func fuzzInput(data []byte, widthSel, stretch uint8) (base, cur []byte, w int) {
	w = []int{1, 2, 4, 8}[widthSel%4]
	n := len(data) * (1 + int(stretch%16))
	n -= n % w
	base = make([]byte, n)
	for i := range base {
		base[i] = data[i%len(data)] ^ byte(i/len(data)) // repeats differ from each other
	}
	cur = append([]byte(nil), base...)
	if n == 0 {
		return base, cur, w
	}
	for j := 0; j+1 < len(data); j += 2 {
		pos := (int(data[j])<<8 | int(data[j+1])) * 131 % n
		cur[pos] ^= data[j+1] | 1
	}
	return base, cur, w
}

func addFuzzSeeds(f *testing.F) {
	f.Add([]byte{}, uint8(0), uint8(0))
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8}, uint8(3), uint8(0))
	f.Add([]byte("unaligned tail of seventeen bytes"), uint8(1), uint8(15))
	long := make([]byte, 3000)
	for i := range long {
		long[i] = byte(i * 7)
	}
	for sel := range uint8(4) {
		f.Add(long, sel, uint8(15)) // ~48 KB: six chunks of the test backend
	}
	f.Add(make([]byte, 4096), uint8(2), uint8(5)) // all zeros: nothing but the flipped bits
}

// FuzzOpenCLDiff: on any input, the OpenCL backend's output equals the CPU backend's.
func FuzzOpenCLDiff(f *testing.F) {
	addFuzzSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte, widthSel, stretch uint8) {
		if len(data) == 0 {
			return
		}
		b := openCLForTest(t)
		base, cur, w := fuzzInput(data, widthSel, stretch)
		var got, want delta.Changes
		if err := b.Diff(base, cur, w, &got); err != nil {
			t.Fatalf("opencl: %v", err)
		}
		if err := delta.NewCPUDiff().Diff(base, cur, w, &want); err != nil {
			t.Fatalf("cpu: %v", err)
		}
		assertSameChanges(t, "opencl vs cpu", got, want)
	})
}

// FuzzModelDiff: the kernel's algorithm, run in Go, equals the reference on any input (this
// one needs no OpenCL).
func FuzzModelDiff(f *testing.F) {
	addFuzzSeeds(f)
	f.Fuzz(func(t *testing.T, data []byte, widthSel, stretch uint8) {
		if len(data) == 0 {
			return
		}
		base, cur, w := fuzzInput(data, widthSel, stretch)
		var got, want delta.Changes
		if err := modelDiff(base, cur, w, testChunk, &got); err != nil {
			t.Fatalf("model: %v", err)
		}
		if err := delta.ReferenceDiff(base, cur, w, &want); err != nil {
			t.Fatalf("reference: %v", err)
		}
		assertSameChanges(t, "model vs reference", got, want)
	})
}
