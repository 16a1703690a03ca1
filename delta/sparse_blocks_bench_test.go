package delta

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkReadPath rebuilds a 1 MiB bf16 page through ten 1% deltas, as the store does for
// a version ten deltas from a whole copy: decoding the blocks (a block is two pages) and
// applying them.
func BenchmarkReadPath(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 1 << 20
	var deltas []*Delta
	for range 10 {
		// Ten unrelated steps: applying them in a row costs what a chain does.
		base, cur := rlBF16Step(rng, n, 0.01)
		body, err := EncodeDelta(nil, base, cur, 2, true)
		if err != nil {
			b.Fatal(err)
		}
		d, _ := OpenDelta(body)
		deltas = append(deltas, d)
	}
	page := make([]byte, 1<<20)
	b.Run("decode", func(b *testing.B) {
		b.SetBytes(int64(len(page)) * 2)
		for range b.N {
			for _, d := range deltas {
				if _, err := d.DecodeBlock(0); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	var steps []BlockStep
	for _, d := range deltas {
		db, _ := d.DecodeBlock(0)
		steps = append(steps, BlockStep{db, Forward})
	}
	b.Run("apply", func(b *testing.B) {
		b.SetBytes(int64(len(page)))
		for range b.N {
			if err := ApplySteps(page, 0, steps); err != nil {
				b.Fatal(err)
			}
		}
	})
}
