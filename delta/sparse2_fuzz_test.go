package delta

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
)

// fuzzContext is a context for the version-2 fuzzer: a decoded step of a small tensor, and the
// version-2 body of the next step coded against it (a seed).
type fuzzContext struct {
	ctx  ContextFunc
	body []byte
}

var fuzzContexts = sync.OnceValue(func() []fuzzContext {
	rng := rand.New(rand.NewPCG(20, 20))
	var out []fuzzContext
	for _, tc := range []struct {
		width   int
		float   bool
		shift   uint
		n       int
		density float64
	}{
		{2, true, 6, 300, 0.05}, {2, true, 7, 1000, 0.6}, {1, false, 6, 200, 0.2},
		{4, true, 6, 150, 0.1}, {8, false, 6, 100, 0.3}, {2, true, defaultBlockShift, 500, 0.02},
	} {
		versions := driftChain(rng, tc.n, tc.width, tc.float, 2, tc.density)
		prev, err := encodeDeltaShift(nil, versions[0], versions[1], tc.width, tc.float, tc.shift)
		if err != nil {
			panic(err)
		}
		d, err := OpenDelta(prev)
		if err != nil {
			panic(err)
		}
		ctx := d.AsContext()
		enc := newDeltaEncoderShift(tc.width, tc.float, int64(tc.n), tc.shift)
		enc.SetContext(ctx)
		if _, err := enc.AddDiff(0, versions[1], versions[2]); err != nil {
			panic(err)
		}
		body, err := enc.Finish()
		if err != nil {
			panic(err)
		}
		out = append(out, fuzzContext{ctx, body})
	}
	return out
})

// FuzzDecodeDelta2 decodes arbitrary bodies against one of a few contexts (its own or
// another's): ApplyDeltaContext and the block path must never panic or write outside dst,
// must agree, must fail only with the package's sentinel errors, and a body that applies
// forward must apply back to the original bytes.
func FuzzDecodeDelta2(f *testing.F) {
	contexts := fuzzContexts()
	for i, c := range contexts {
		f.Add(c.body, uint8(i), uint32(0), uint32(1<<20))
		f.Add(c.body, uint8(i+1), uint32(0), uint32(1<<20)) // another's context
		f.Add(c.body, uint8(i), uint32(17), uint32(40))
		f.Add(c.body[:len(c.body)/2], uint8(i), uint32(0), uint32(100))
	}
	f.Fuzz(func(t *testing.T, body []byte, which uint8, first, count uint32) {
		ctx := contexts[int(which)%len(contexts)].ctx
		info, perr := ParseDelta(body)
		if perr != nil || info.Elements > 1<<20 {
			return // FuzzDecodeDelta covers the framing
		}
		start := min(int64(first), info.Elements)
		n := min(int64(count), info.Elements-start)
		w := info.Width
		g := newGuarded(int(n), w)
		dst := g.dst
		d, err := OpenDelta(body)
		if err != nil {
			t.Fatalf("OpenDelta refused a body ParseDelta accepted: %v", err)
		}
		d.SetContext(ctx)
		viaBlocks := bytes.Clone(dst)
		berr := applyByBlocks(d, viaBlocks, start, Forward)
		err = ApplyDeltaContext(body, ctx, dst, start, Forward)
		if (err == nil) != (berr == nil) || (err == nil && !bytes.Equal(viaBlocks, dst)) {
			t.Fatalf("block path (%v) and ApplyDeltaContext (%v) disagree", berr, err)
		}
		if g.writtenOutside() {
			t.Fatal("ApplyDeltaContext wrote outside dst")
		}
		if err != nil {
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("ApplyDeltaContext: unexpected error kind: %v", err)
			}
			return
		}
		if err := ApplyDeltaContext(body, ctx, dst, start, Backward); err != nil {
			t.Fatalf("backward after a successful forward: %v", err)
		}
		if !g.restored() {
			t.Fatal("forward then backward did not restore the bytes")
		}
	})
}
