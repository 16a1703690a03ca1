package delta

import (
	"math/rand/v2"
	"testing"
)

// BenchmarkDecodeBlockVersions decodes one block of 2^20 bf16 elements, about 2.5% of them
// changed, coded as version 1 and as version 2 against the step before (whose decoded block,
// as a reader holding it would have it, is the context; "fresh context" also pays the
// context's checksum, as the first use of a newly decoded context does). And the encoders of
// both versions on the same step.
func BenchmarkDecodeBlockVersions(b *testing.B) {
	rng := rand.New(rand.NewPCG(20, 9))
	const n = 1 << 20
	versions := driftChain(rng, n, 2, true, 2, 0.025)
	prev, err := EncodeDelta(nil, versions[0], versions[1], 2, true)
	if err != nil {
		b.Fatal(err)
	}
	pd, _ := OpenDelta(prev)
	ctxBlock, err := pd.DecodeBlock(0)
	if err != nil {
		b.Fatal(err)
	}
	ctx := func(int64) (*DecodedBlock, error) { return ctxBlock, nil }
	v1, err := EncodeDelta(nil, versions[1], versions[2], 2, true)
	if err != nil {
		b.Fatal(err)
	}
	v2 := encodeAgainst(b, versions[1], versions[2], 2, true, defaultBlockShift, ctx)
	d1, _ := OpenDelta(v1)
	d2, _ := OpenDelta(v2)
	d2.SetContext(ctx)
	info := d1.Info()
	b.Logf("%d changes: version 1 %d bytes (%.3f B/change), version 2 %d bytes (%.3f B/change)",
		info.Changed, len(v1), float64(len(v1))/float64(info.Changed), len(v2), float64(len(v2))/float64(info.Changed))
	for _, bc := range []struct {
		name  string
		d     *Delta
		fresh bool
	}{{"v1", d1, false}, {"v2", d2, false}, {"v2-fresh-context", d2, true}} {
		b.Run("decode-"+bc.name, func(b *testing.B) {
			b.SetBytes(2 * n)
			var into *DecodedBlock
			for range b.N {
				if bc.fresh {
					ctxBlock.sum.Store(0)
				}
				if into, err = bc.d.DecodeBlockInto(0, into); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	for _, bc := range []struct {
		name string
		ctx  ContextFunc
	}{{"v1", nil}, {"v2", ctx}} {
		b.Run("encode-"+bc.name, func(b *testing.B) {
			b.SetBytes(2 * n)
			for range b.N {
				enc := NewDeltaEncoder(2, true, n)
				enc.SetContext(bc.ctx)
				if _, err := enc.AddDiff(0, versions[1], versions[2]); err != nil {
					b.Fatal(err)
				}
				if _, err := enc.Finish(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
