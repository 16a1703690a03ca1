package store

import (
	"math/rand/v2"
	"os"
	"path/filepath"
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
