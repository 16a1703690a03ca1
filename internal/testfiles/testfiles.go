// Package testfiles makes the bytes that store tests commit: random and bf16-like tensors,
// small perturbations of them as a training step makes, and trees of files on disk. It is
// shared by the tests of store and store/s3, and imports nothing of weightfs, so that store's
// own tests can use it.
package testfiles

import (
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

// RandomBytes returns n random bytes.
func RandomBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// BF16Like returns n bf16 elements with realistic exponents (compressible high bytes).
func BF16Like(rng *rand.Rand, n int) []byte {
	b := make([]byte, 2*n)
	for i := 0; i < n; i++ {
		b[2*i] = byte(rng.Uint32())
		b[2*i+1] = byte(0x3c + rng.IntN(3))
		if rng.IntN(2) == 0 {
			b[2*i+1] |= 0x80
		}
	}
	return b
}

// Perturb returns a copy of b with about frac of its width-byte elements changed by one ULP
// of the low byte.
func Perturb(rng *rand.Rand, b []byte, width int, frac float64) []byte {
	out := append([]byte(nil), b...)
	for i := 0; i < len(b)/width; i++ {
		if rng.Float64() < frac {
			out[i*width]++
		}
	}
	return out
}

// WriteTree writes files (slash-separated paths to contents) under dir and returns dir.
func WriteTree(t testing.TB, dir string, files map[string][]byte) string {
	t.Helper()
	for name, b := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}
