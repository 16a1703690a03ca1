//go:build cgo

package gpu

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/weightfs/weightfs/delta"
)

// TestModelMatchesReference checks the kernel's tiling arithmetic without OpenCL: the model
// and the reference agree for every width, case and chunk size (including chunks that are
// not the default and inputs that end inside a tile, a work-item or a 16-byte block).
func TestModelMatchesReference(t *testing.T) {
	for _, chunk := range []int{tileBytes, 3 * tileBytes, DefaultChunkBytes} {
		for _, tc := range diffCases() {
			if tc.size > 64<<10 && chunk != DefaultChunkBytes {
				continue // the large cases only once: the model is slow
			}
			for _, w := range []int{1, 2, 4, 8} {
				t.Run(fmt.Sprintf("chunk%d/%s/width%d", chunk, tc.name, w), func(t *testing.T) {
					r := rand.New(rand.NewPCG(uint64(tc.size), uint64(w)))
					base := make([]byte, tc.size)
					for i := range base {
						base[i] = byte(r.Uint32())
					}
					cur := tc.make(base, r)
					var got, want delta.Changes
					if err := modelDiff(base, cur, w, chunk, &got); err != nil {
						t.Fatal(err)
					}
					if err := delta.ReferenceDiff(base, cur, w, &want); err != nil {
						t.Fatal(err)
					}
					assertSameChanges(t, "model vs reference", got, want)
				})
			}
		}
	}
}

func TestSelfTestInputShape(t *testing.T) {
	size := 2*tileBytes*4 + tileBytes + 40
	base, cur := selfTestInput(size)
	if len(base) != size || len(cur) != size {
		t.Fatalf("sizes %d %d", len(base), len(cur))
	}
	if !bytes.Equal(base[3*tileBytes:4*tileBytes], cur[3*tileBytes:4*tileBytes]) {
		t.Error("the fourth tile should be unchanged")
	}
	for i := tileBytes; i < 2*tileBytes; i++ {
		if base[i] == cur[i] {
			t.Fatalf("byte %d of the second tile unchanged", i)
		}
	}
	if base[size-1] == cur[size-1] {
		t.Error("last byte unchanged")
	}
	b2, c2 := selfTestInput(size)
	if !bytes.Equal(base, b2) || !bytes.Equal(cur, c2) {
		t.Error("self-test input is not deterministic")
	}
}
