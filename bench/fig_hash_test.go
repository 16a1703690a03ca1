package main

import (
	"crypto/rand"
	"testing"

	zeebo "github.com/zeebo/blake3"
	luke "lukechampine.com/blake3"
)

// TestBlake3TreeMatchesSum256: the parallel tree of figure 12 is BLAKE3, equal to both
// libraries' one-core Sum256 at every length around chunk and subtree boundaries.
func TestBlake3TreeMatchesSum256(t *testing.T) {
	for _, n := range []int{0, 1, 1023, 1024, 1025, 2048, 4096, 5000, 1 << 20, 3<<20 + 17} {
		b := make([]byte, n)
		if _, err := rand.Read(b); err != nil {
			t.Fatal(err)
		}
		want := luke.Sum256(b)
		if z := zeebo.Sum256(b); z != want {
			t.Fatalf("%d bytes: zeebo %x, lukechampine %x", n, z, want)
		}
		for par := 1; par <= 4; par++ {
			if got := blake3Tree(b, par); got != want {
				t.Errorf("%d bytes, %d goroutines: tree %x, Sum256 %x", n, par, got, want)
			}
		}
	}
}
