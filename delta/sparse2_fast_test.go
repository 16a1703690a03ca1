package delta

import (
	"bytes"
	"encoding/hex"
	"math/rand/v2"
	"slices"
	"testing"
)

// decodeBothWays decodes block b of d against ctx with the reference decoder (decode, then
// compact) and with the fast one (decodeFast) and fails the test unless
// the fast one accepts exactly what the reference accepts and decodes it to the same block,
// and decodeInto returns the reference's error. It returns whether the block was good.
func decodeBothWays(t testing.TB, d *Delta, ctx ContextFunc, b int64) bool {
	t.Helper()
	count, _ := d.l.entry(b)
	if count == 0 {
		return true
	}
	cb, err := ctx(b)
	if err != nil || checkContext(cb, b, d.l.shift, d.l.Width, d.l.Float, d.l.blockLen(b)) != nil {
		return false // refused before either decoder runs
	}
	payload := d.l.body[d.offsets[b]:d.offsets[b+1]]
	return decodeBothWaysLen(t, payload, int(count), d.l.blockLen(b), cb, d.l.Width, d.l.Float, b)
}

// decodeBothWaysLen is decodeBothWays on one block's payload of count changes, decoded as a
// block of blockLen elements against cb (of the delta's width and float).
func decodeBothWaysLen(t testing.TB, payload []byte, count int, blockLen uint64, cb *DecodedBlock, width int, float bool, b int64) bool {
	t.Helper()
	values := newValueMap(width, float)
	// Pooled decoders, as the read path's: their lists hold earlier blocks' leftovers.
	newDecoder := func() *block2Decoder {
		dec := block2Decoders.Get().(*block2Decoder)
		dec.width, dec.values = width, values
		return dec
	}
	ref := newDecoder()
	defer block2Decoders.Put(ref)
	want := &DecodedBlock{width: width, values: values}
	refErr := ref.decode(payload, count, blockLen, cb)
	if refErr == nil {
		ref.compact(want)
	}
	fast := newDecoder()
	defer block2Decoders.Put(fast)
	got := &DecodedBlock{width: width, values: values}
	ok := fast.decodeFast(payload, count, blockLen, cb, got)
	if ok != (refErr == nil) {
		t.Fatalf("block %d: the fast decoder says ok=%t, the reference %v", b, ok, refErr)
	}
	if ok && !sameBlock(got, want) {
		t.Fatalf("block %d: the fast decoder's block differs from the reference's:\n got %v %v %v %v\nwant %v %v %v %v",
			b, got.pos, got.symbols, got.escAt, got.escCode, want.pos, want.symbols, want.escAt, want.escCode)
	}
	// decodeInto, on a decoder that decoded another block before (reused lists).
	into := &DecodedBlock{width: width, values: values, pos: []uint32{7}, symbols: []byte{9}}
	err := fast.decodeInto(payload, count, blockLen, cb, into)
	if (err == nil) != (refErr == nil) || err != nil && err.Error() != refErr.Error() {
		t.Fatalf("block %d: decodeInto's error %v, the reference's %v", b, err, refErr)
	}
	if err == nil && !sameBlock(into, want) {
		t.Fatalf("block %d: decodeInto's block differs from the reference's", b)
	}
	return ok
}

func sameBlock(a, b *DecodedBlock) bool {
	return slices.Equal(a.pos, b.pos) && bytes.Equal(a.symbols, b.symbols) &&
		slices.Equal(a.escAt, b.escAt) && slices.Equal(a.escCode, b.escCode)
}

// decodeAllBothWays is decodeBothWays on every block of body against ctx; it reports how many
// blocks were good.
func decodeAllBothWays(t testing.TB, body []byte, ctx ContextFunc) int {
	t.Helper()
	d, err := OpenDelta(body)
	if err != nil || !d.NeedsContext() {
		return 0
	}
	good := 0
	for b := range d.l.blocks {
		if decodeBothWays(t, d, ctx, b) {
			good++
		}
	}
	return good
}

// jumpChain is driftChain with some of the changes far larger (codes escaped as a symbol
// 255 and a uvarint, in both classes) and a hot set of elements that change more often.
func jumpChain(rng *rand.Rand, n, width int, float bool, versions int, density, jumps float64) [][]byte {
	values := newValueMap(width, float)
	hot := make([]bool, n)
	for i := range hot {
		hot[i] = rng.Float64() < 2*density
	}
	out := [][]byte{randomBytes(rng, n*width)}
	for range versions {
		cur := bytes.Clone(out[len(out)-1])
		for i := range n {
			p := density / 2
			if hot[i] {
				p = 0.5
			}
			if rng.Float64() >= p {
				continue
			}
			o := values.toOrd(loadElement(cur[i*width:], width))
			step := uint64(rng.IntN(3) + 1)
			if rng.Float64() < jumps {
				step = rng.Uint64() & values.mask
			}
			if rng.IntN(2) == 0 {
				step = -step
			}
			storeElement(cur[i*width:], values.fromOrd((o+step)&values.mask), width)
		}
		out = append(out, cur)
	}
	return out
}

// TestDecodeFastMatchesReference: on chains of steps at several densities, element types and
// block sizes (the first step the context of the second), on the format's worked example and
// on every byte of small bodies flipped, the fast decoder accepts what the reference accepts
// and decodes it to the same block.
func TestDecodeFastMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(30, 18))
	type chainCase struct {
		width          int
		float          bool
		shift          uint
		n              int
		density, jumps float64
	}
	var small [][2]any // small bodies and their contexts, for the byte flips
	for _, tc := range []chainCase{
		{2, true, defaultBlockShift, 1 << 16, 0.02, 0},
		{2, true, 12, 1 << 15, 0.01, 0.01},
		{2, true, 10, 1 << 14, 0.6, 0.05},
		{2, false, 9, 5000, 0.1, 0.3},
		{1, false, 8, 3000, 0.2, 0.5},
		{4, true, 10, 4000, 0.05, 0.2},
		{8, false, 8, 2000, 0.3, 0.5},
		{2, true, 6, 300, 0.3, 0.1},
		{4, false, 6, 200, 0.5, 0.5},
	} {
		var versions [][]byte
		if tc.jumps == 0 {
			versions = driftChain(rng, tc.n, tc.width, tc.float, 3, tc.density)
		} else {
			versions = jumpChain(rng, tc.n, tc.width, tc.float, 3, tc.density, tc.jumps)
		}
		bodies, deltas := openChain(t, versions, tc.width, tc.float, tc.shift)
		for i := 1; i < len(bodies); i++ {
			ctx := deltas[i-1].AsContext()
			if good := decodeAllBothWays(t, bodies[i], ctx); good != int(deltas[i].l.blocks) {
				t.Fatalf("%+v step %d: %d of %d blocks good", tc, i, good, deltas[i].l.blocks)
			}
			// Against the wrong context: both refuse.
			if i == 2 {
				decodeAllBothWays(t, bodies[i], deltas[0].AsContext())
			}
			if tc.n <= 300 {
				small = append(small, [2]any{bodies[i], ctx})
			}
		}
	}
	ctxBody, _ := hex.DecodeString(docExampleHex)
	ctxDelta, _ := OpenDelta(ctxBody)
	body, _ := hex.DecodeString(docExample2Hex)
	if decodeAllBothWays(t, body, ctxDelta.AsContext()) != 1 {
		t.Fatal("the format's version-2 example does not decode")
	}
	small = append(small, [2]any{body, ctxDelta.AsContext()})
	for _, c := range fuzzContexts() {
		decodeAllBothWays(t, c.body, c.ctx)
	}
	// Damage: every byte of the small bodies' blocks flipped in a few ways.
	for _, s := range small {
		body, ctx := s[0].([]byte), s[1].(ContextFunc)
		d, _ := OpenDelta(body)
		for at := int(d.offsets[0]); at < len(body); at++ {
			for _, x := range []byte{0x01, 0x80, 0xFF, 0x10} {
				bad := bytes.Clone(body)
				bad[at] ^= x
				decodeAllBothWays(t, bad, ctx)
			}
		}
	}
}

// TestDecodeFastRefusesPositionsPastTheBlock: blocks decoded as shorter blocks than they
// were coded for, so that changes of class B fall past the block's end (the last one, or
// half of them, in the stream's first groups or its last): the reference refuses them, and
// so does the fast decoder (whose runs test the positions once per group of codes).
func TestDecodeFastRefusesPositionsPastTheBlock(t *testing.T) {
	rng := rand.New(rand.NewPCG(30, 19))
	// The context changes only the first quarter of the elements, the block all of them:
	// the block decodes as a block cut anywhere past that quarter.
	const n = 1 << 16
	drift := driftChain(rng, n, 2, true, 3, 0.02)
	v1 := bytes.Clone(drift[0])
	copy(v1[:n/2], drift[1][:n/2])
	versions := [][]byte{drift[0], v1, drift[2], drift[3]}
	_, deltas := openChain(t, versions, 2, true, defaultBlockShift)
	d, ctx := deltas[1], deltas[0].AsContext()
	count, _ := d.l.entry(0)
	cb, err := ctx(0)
	if err != nil {
		t.Fatal(err)
	}
	payload := d.l.body[d.offsets[0]:d.offsets[1]]
	full, err := d.DecodeBlock(0)
	if err != nil {
		t.Fatal(err)
	}
	cut := 0
	for _, i := range []int{full.Changes() - 1, full.Changes() * 3 / 4, full.Changes() / 2, 200, 130, 1} {
		blockLen := uint64(full.pos[i]) // change i and those after it are outside
		if checkContext(cb, 0, d.l.shift, 2, true, blockLen) != nil {
			continue // the context has changes there: refused before decoding
		}
		cut++
		if decodeBothWaysLen(t, payload, int(count), blockLen, cb, 2, true, 0) {
			t.Fatalf("a block cut before its change %d of %d is accepted", i, full.Changes())
		}
	}
	if cut < 3 {
		t.Fatalf("only %d cuts past the context's changes", cut)
	}
}

// FuzzDecodeFast: on arbitrary bodies against a few contexts, the fast decoder accepts what
// the reference accepts and decodes it to the same blocks.
func FuzzDecodeFast(f *testing.F) {
	contexts := fuzzContexts()
	for i, c := range contexts {
		f.Add(c.body, uint8(i))
		f.Add(c.body, uint8(i+1))
	}
	f.Fuzz(func(t *testing.T, body []byte, which uint8) {
		info, err := ParseDelta(body)
		if err != nil || info.Elements > 1<<20 {
			return
		}
		decodeAllBothWays(t, body, contexts[int(which)%len(contexts)].ctx)
	})
}
