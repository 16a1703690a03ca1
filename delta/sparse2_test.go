package delta

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// driftChain builds versions+1 tensors of n elements of width bytes, each the step after the
// one before, with the structure that makes a previous step a useful context: every element
// drifts at its own persistent rate (most slowly, a few fast, as Adam's updates do relative to
// a bf16 ULP) in a direction that mostly persists, and changes when its drift crosses a whole
// step in ordered space. density scales the rates: about that fraction changes per step.
func driftChain(rng *rand.Rand, n, width int, float bool, versions int, density float64) [][]byte {
	values := newValueMap(width, float)
	rate := make([]float64, n)
	dir := make([]float64, n)
	acc := make([]float64, n)
	for i := range n {
		// Heavy-tailed rates: exponential in log, mean about density steps per step.
		rate[i] = density * math.Exp(1.6*rng.NormFloat64()-1.3)
		dir[i] = 1
		if rng.IntN(2) == 0 {
			dir[i] = -1
		}
		acc[i] = rng.Float64() - 0.5
	}
	base := randomBytes(rng, n*width)
	out := [][]byte{base}
	for range versions {
		prev := out[len(out)-1]
		cur := bytes.Clone(prev)
		for i := range n {
			if rng.Float64() < 0.06 {
				dir[i] = -dir[i]
			}
			before := math.Round(acc[i])
			acc[i] += dir[i]*rate[i] + 0.3*rate[i]*rng.NormFloat64()
			step := int64(math.Round(acc[i]) - before)
			if step == 0 {
				continue
			}
			o := values.toOrd(loadElement(prev[i*width:], width))
			storeElement(cur[i*width:], values.fromOrd((o+uint64(step))&values.mask), width)
		}
		out = append(out, cur)
	}
	return out
}

// encodeAgainst encodes base -> cur with blocks of 2^shift elements, as version 2 against ctx
// (version 1 when ctx is nil), in chunks of 3000 elements.
func encodeAgainst(t testing.TB, base, cur []byte, width int, float bool, shift uint, ctx ContextFunc) []byte {
	t.Helper()
	enc := newDeltaEncoderShift(width, float, int64(len(base)/width), shift)
	enc.SetContext(ctx)
	for off := 0; off < len(base); off += 3000 * width {
		end := min(off+3000*width, len(base))
		if _, err := enc.AddDiff(int64(off/width), base[off:end], cur[off:end]); err != nil {
			t.Fatalf("encode: %v", err)
		}
	}
	body, err := enc.Finish()
	if err != nil {
		t.Fatalf("encode: %v", err)
	}
	return body
}

// openChain encodes the steps of versions: the first as version 1, each later one as version
// 2 against the one before, and returns the bodies and their opened deltas, each with its
// context set.
func openChain(t testing.TB, versions [][]byte, width int, float bool, shift uint) ([][]byte, []*Delta) {
	t.Helper()
	var bodies [][]byte
	var deltas []*Delta
	for v := 1; v < len(versions); v++ {
		var ctx ContextFunc
		if v > 1 {
			ctx = deltas[v-2].AsContext()
		}
		body := encodeAgainst(t, versions[v-1], versions[v], width, float, shift, ctx)
		d, err := OpenDelta(body)
		if err != nil {
			t.Fatalf("step %d: OpenDelta: %v", v, err)
		}
		d.SetContext(ctx)
		bodies, deltas = append(bodies, body), append(deltas, d)
	}
	return bodies, deltas
}

func TestDelta2RoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(20, 1))
	tests := []struct {
		width   int
		float   bool
		shift   uint
		n       int
		density float64
	}{
		{2, true, 6, 3000, 0.03},
		{2, true, 10, 20000, 0.025},
		{2, true, 8, 5000, 0.6}, // dense: classes code their complements
		{1, false, 6, 2000, 0.05},
		{1, true, 6, 2000, 0.3},
		{4, true, 7, 4000, 0.02},
		{4, false, 9, 4000, 0.1},
		{8, true, 6, 1000, 0.05},
		{8, false, 6, 1000, 0.5},
		{2, true, 6, 100, 0.01}, // blocks without changes in one step or the other
	}
	for _, tc := range tests {
		t.Run(fmt.Sprintf("w%d-float%t-shift%d-n%d-p%g", tc.width, tc.float, tc.shift, tc.n, tc.density), func(t *testing.T) {
			versions := driftChain(rng, tc.n, tc.width, tc.float, 4, tc.density)
			bodies, deltas := openChain(t, versions, tc.width, tc.float, tc.shift)
			for v, body := range bodies {
				info, err := ParseDelta(body)
				if err != nil {
					t.Fatal(err)
				}
				if want := 1 + min(v, 1); info.Version != want || deltas[v].NeedsContext() != (want == 2) {
					t.Fatalf("step %d: version %d (needs context %t), want %d", v+1, info.Version, deltas[v].NeedsContext(), want)
				}
				var ctx ContextFunc
				if v > 0 {
					ctx = deltas[v-1].AsContext()
				}
				checkRoundTrip2(t, rng, body, ctx, deltas[v], versions[v], versions[v+1])
			}
		})
	}
}

// checkRoundTrip2 checks a body of either version against its context: whole applies both
// ways give the next and the previous version, and random ranges through ApplyDeltaContext
// and through the block path (d, with its context set) agree with the whole apply.
func checkRoundTrip2(t *testing.T, rng *rand.Rand, body []byte, ctx ContextFunc, d *Delta, base, cur []byte) {
	t.Helper()
	fwd := bytes.Clone(base)
	if err := ApplyDeltaContext(body, ctx, fwd, 0, Forward); err != nil || !bytes.Equal(fwd, cur) {
		t.Fatalf("forward apply: %v (equal %t)", err, bytes.Equal(fwd, cur))
	}
	back := bytes.Clone(cur)
	if err := ApplyDeltaContext(body, ctx, back, 0, Backward); err != nil || !bytes.Equal(back, base) {
		t.Fatalf("backward apply: %v (equal %t)", err, bytes.Equal(back, base))
	}
	w := d.Info().Width
	n := d.Info().Elements
	for i := range 10 {
		lo := rng.Int64N(n + 1)
		hi := lo + rng.Int64N(n-lo+1)
		dir, src, want := Forward, base, cur
		if i%2 == 1 {
			dir, src, want = Backward, cur, base
		}
		got := bytes.Clone(src[lo*int64(w) : hi*int64(w)])
		if err := ApplyDeltaContext(body, ctx, got, lo, dir); err != nil || !bytes.Equal(got, want[lo*int64(w):hi*int64(w)]) {
			t.Fatalf("apply [%d, %d) dir %d: %v", lo, hi, dir, err)
		}
		got = bytes.Clone(src[lo*int64(w) : hi*int64(w)])
		if err := applyByBlocks(d, got, lo, dir); err != nil || !bytes.Equal(got, want[lo*int64(w):hi*int64(w)]) {
			t.Fatalf("block path [%d, %d) dir %d: %v", lo, hi, dir, err)
		}
	}
}

func TestDelta2WithoutContextIsVersion1(t *testing.T) {
	rng := rand.New(rand.NewPCG(20, 2))
	versions := driftChain(rng, 5000, 2, true, 1, 0.03)
	want, err := encodeDeltaShift(nil, versions[0], versions[1], 2, true, 7)
	if err != nil {
		t.Fatal(err)
	}
	if got := encodeAgainst(t, versions[0], versions[1], 2, true, 7, nil); !bytes.Equal(got, want) {
		t.Fatal("an encoder with a nil context does not write the version-1 body")
	}
}

func TestDelta2ContextErrors(t *testing.T) {
	rng := rand.New(rand.NewPCG(20, 3))
	versions := driftChain(rng, 3000, 2, true, 3, 0.05)
	bodies, deltas := openChain(t, versions, 2, true, 7)
	other := driftChain(rng, 3000, 2, true, 1, 0.05)
	otherDelta, err := OpenDelta(encodeAgainst(t, other[0], other[1], 2, true, 7, nil))
	if err != nil {
		t.Fatal(err)
	}
	wide := driftChain(rng, 1500, 4, true, 1, 0.05)
	wideDelta, err := OpenDelta(encodeAgainst(t, wide[0], wide[1], 4, true, 6, nil))
	if err != nil {
		t.Fatal(err)
	}
	shifted, err := OpenDelta(encodeAgainst(t, versions[0], versions[1], 2, true, 8, nil))
	if err != nil {
		t.Fatal(err)
	}
	// The right context but one change's value code altered: same count, another checksum.
	altered := func(b int64) (*DecodedBlock, error) {
		db, err := deltas[0].DecodeBlock(b)
		if err != nil || db.Changes() == 0 {
			return db, err
		}
		db.symbols[0] ^= 3
		return db, nil
	}
	failing := errors.New("no such block")
	tests := []struct {
		name string
		ctx  ContextFunc
		want []error
	}{
		{"none", nil, []error{ErrNoContext}},
		{"the step before the context", deltas[0].AsContext(), []error{ErrContextMismatch, ErrMalformed}},
		{"another tensor's step", otherDelta.AsContext(), []error{ErrContextMismatch, ErrMalformed}},
		{"other element width", wideDelta.AsContext(), []error{ErrContextMismatch, ErrMalformed}},
		{"other block shift", shifted.AsContext(), []error{ErrContextMismatch, ErrMalformed}},
		{"one value code altered", altered, []error{ErrContextMismatch, ErrMalformed}},
		{"nil block", func(int64) (*DecodedBlock, error) { return nil, nil }, []error{ErrContextMismatch, ErrMalformed}},
		{"the context fails", func(int64) (*DecodedBlock, error) { return nil, failing }, []error{failing}},
	}
	body := bodies[2] // coded against bodies[1]
	d, err := OpenDelta(body)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range tests {
		dst := bytes.Clone(versions[2])
		err := ApplyDeltaContext(body, tc.ctx, dst, 0, Forward)
		for _, want := range tc.want {
			if !errors.Is(err, want) {
				t.Errorf("%s: ApplyDeltaContext: got %v, want %v", tc.name, err, want)
			}
		}
		_, err = d.DecodeBlockContext(0, tc.ctx, nil)
		if tc.ctx == nil {
			_, err = d.DecodeBlock(0) // d has no context set
		}
		for _, want := range tc.want {
			if !errors.Is(err, want) {
				t.Errorf("%s: DecodeBlock: got %v, want %v", tc.name, err, want)
			}
		}
	}
	if err := ApplyDelta(body, bytes.Clone(versions[2]), 0, Forward); !errors.Is(err, ErrNoContext) {
		t.Errorf("ApplyDelta of a version-2 body: got %v, want ErrNoContext", err)
	}
	// The encoder refuses a context that cannot be this tensor's.
	enc := newDeltaEncoderShift(2, true, 3000, 7)
	enc.SetContext(wideDelta.AsContext())
	if _, err := enc.AddDiff(0, versions[1], versions[2]); !errors.Is(err, ErrContextMismatch) {
		if _, err = enc.Finish(); !errors.Is(err, ErrContextMismatch) {
			t.Errorf("encoder against a context of another width: got %v, want ErrContextMismatch", err)
		}
	}
	// SetContext after the first change is a misuse.
	enc = newDeltaEncoderShift(2, true, 3000, 7)
	if _, err := enc.AddDiff(0, versions[1][:200], versions[2][:200]); err != nil {
		t.Fatal(err)
	}
	enc.SetContext(deltas[0].AsContext())
	if _, err := enc.Finish(); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("SetContext after a change: got %v, want ErrInvalidArgument", err)
	}
}

// TestContextValueMap checks that toContext and fromContext are inverse bijections on every
// code of 1-byte elements, for every context code.
func TestContextValueMap(t *testing.T) {
	m := newValueMap(1, false)
	for c := uint64(1); c <= 255; c++ {
		seen := map[uint64]bool{}
		for code := uint64(0); code <= 255; code++ {
			v := m.toContext(code, c)
			if v > 255 || seen[v] {
				t.Fatalf("context %d: code %d maps to %d, out of range or taken", c, code, v)
			}
			seen[v] = true
			if back := m.fromContext(v, c); back != code {
				t.Fatalf("context %d: code %d -> %d -> %d", c, code, v, back)
			}
		}
	}
	// The usual case: the same step as the context's, whichever way, stores 0.
	m2 := newValueMap(2, true)
	for _, c := range []uint64{1, 2, 7, 8, 0xFFFF} {
		if v := m2.toContext(c, c); v != 0 {
			t.Errorf("context code %d, the same code: stored %d, want 0", c, v)
		}
	}
}

// TestDelta2ConcurrentDecode decodes the blocks of a version-2 delta from several goroutines
// against shared context blocks, decoded once (as a reader's cache holds them, their checksums
// not yet computed): every goroutine gets the same blocks (go test -race checks the checksum's
// lazy computation).
func TestDelta2ConcurrentDecode(t *testing.T) {
	rng := rand.New(rand.NewPCG(20, 4))
	versions := driftChain(rng, 4000, 2, true, 2, 0.05)
	_, deltas := openChain(t, versions, 2, true, 6)
	lo, hi := deltas[0].BlockRange(0, deltas[0].Info().Elements)
	var shared []*DecodedBlock
	for b := lo; b <= hi; b++ {
		db, err := deltas[0].DecodeBlock(b)
		if err != nil {
			t.Fatal(err)
		}
		shared = append(shared, db)
	}
	ctx := func(b int64) (*DecodedBlock, error) { return shared[b], nil }
	want := bytes.Clone(versions[1])
	if err := ApplyDeltaContext(encodeAgainst(t, versions[1], versions[2], 2, true, 6, deltas[0].AsContext()), ctx, want, 0, Forward); err != nil {
		t.Fatal(err)
	}
	errs := make(chan error, 4)
	for range 4 {
		go func() {
			got := bytes.Clone(versions[1])
			for b := lo; b <= hi; b++ {
				db, err := deltas[1].DecodeBlockContext(b, ctx, nil)
				if err != nil {
					errs <- err
					return
				}
				if err := db.Apply(got, 0, Forward); err != nil {
					errs <- err
					return
				}
			}
			if !bytes.Equal(got, want) {
				errs <- errors.New("concurrent decoding gave other bytes")
				return
			}
			errs <- nil
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}
