package delta

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"testing"
)

// referenceApply is the obviously correct forward result: a copy of base with the new value
// copied in at every changed index.
func referenceApply(base []byte, c *Changes, width int) []byte {
	out := bytes.Clone(base)
	for i, idx := range c.Index {
		copy(out[int(idx)*width:], c.Values[i*width:(i+1)*width])
	}
	return out
}

// checkRoundTrip encodes base -> cur, checks the description, and applies the body over the
// whole tensor both ways and over random sub-ranges, comparing with the reference.
func checkRoundTrip(t *testing.T, rng *rand.Rand, base, cur []byte, width int, float bool, shift uint) []byte {
	t.Helper()
	body, err := encodeDeltaShift(nil, base, cur, width, float, shift)
	if err != nil {
		t.Fatalf("encode: %v", err)
	}
	var ref Changes
	if err := ReferenceDiff(base, cur, width, &ref); err != nil {
		t.Fatal(err)
	}
	info, err := ParseDelta(body)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	want := DeltaInfo{Version: 1, Width: width, Float: float, Elements: int64(len(base) / width), Changed: int64(len(ref.Index))}
	if info != want {
		t.Fatalf("ParseDelta = %+v, want %+v", info, want)
	}
	refNew := referenceApply(base, &ref, width)
	if !bytes.Equal(refNew, cur) {
		t.Fatal("reference apply does not give cur: the test itself is wrong")
	}
	fwd := bytes.Clone(base)
	if err := ApplyDelta(body, fwd, 0, Forward); err != nil {
		t.Fatalf("apply forward: %v", err)
	}
	if !bytes.Equal(fwd, refNew) {
		t.Fatalf("forward apply differs from copying the new values at the changed indices")
	}
	back := bytes.Clone(cur)
	if err := ApplyDelta(body, back, 0, Backward); err != nil {
		t.Fatalf("apply backward: %v", err)
	}
	if !bytes.Equal(back, base) {
		t.Fatalf("backward apply does not give base")
	}
	checkBlockPath(t, rng, body)
	n := len(base) / width
	for range 8 {
		if n == 0 {
			break
		}
		lo := rng.IntN(n + 1)
		hi := lo + rng.IntN(n-lo+1)
		part := bytes.Clone(base[lo*width : hi*width])
		if err := ApplyDelta(body, part, int64(lo), Forward); err != nil {
			t.Fatalf("apply forward [%d, %d): %v", lo, hi, err)
		}
		if !bytes.Equal(part, cur[lo*width:hi*width]) {
			t.Fatalf("forward apply of elements [%d, %d) differs", lo, hi)
		}
		part = bytes.Clone(cur[lo*width : hi*width])
		if err := ApplyDelta(body, part, int64(lo), Backward); err != nil {
			t.Fatalf("apply backward [%d, %d): %v", lo, hi, err)
		}
		if !bytes.Equal(part, base[lo*width:hi*width]) {
			t.Fatalf("backward apply of elements [%d, %d) differs", lo, hi)
		}
	}
	return body
}

// changeValues returns a copy of base where a frac of the elements get a new value: mostly a
// small step in ordered space (the RL case), sometimes an arbitrary bit pattern (escapes).
func changeValues(rng *rand.Rand, base []byte, width int, float bool, frac float64) []byte {
	cur := bytes.Clone(base)
	mask := widthMask(width)
	for i := 0; i < len(base)/width; i++ {
		if rng.Float64() >= frac {
			continue
		}
		x := loadElement(base[i*width:], width)
		var y uint64
		if rng.IntN(8) == 0 {
			y = rng.Uint64() & mask
		} else {
			step := uint64(1 + rng.IntN(4))
			o := toOrdered(x, width, float)
			if rng.IntN(2) == 0 {
				o -= step
			} else {
				o += step
			}
			y = fromOrdered(o&mask, width, float)
		}
		if y == x {
			y ^= 1
		}
		storeElement(cur[i*width:], y, width)
	}
	return cur
}

func TestDeltaRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	tests := []struct {
		name     string
		elements int
		frac     float64
		shift    uint
	}{
		{"empty tensor", 0, 0, defaultBlockShift},
		{"scalar unchanged", 1, 0, defaultBlockShift},
		{"scalar changed", 1, 1, defaultBlockShift},
		{"nothing changed", 5000, 0, defaultBlockShift},
		{"all changed", 3000, 1, defaultBlockShift},
		{"sparse", 20000, 0.02, defaultBlockShift},
		{"sparse, many small blocks", 20000, 0.02, minBlockShift},
		{"dense, small blocks, short last block", 1000, 0.5, 7},
		{"all changed, small blocks", 640, 1, minBlockShift},
		{"block boundary exactly", 512, 0.1, 8},
	}
	for _, width := range []int{1, 2, 4, 8} {
		for _, float := range []bool{false, true} {
			for _, tc := range tests {
				base := randomBytes(rng, tc.elements*width)
				cur := changeValues(rng, base, width, float, tc.frac)
				checkRoundTrip(t, rng, base, cur, width, float, tc.shift)
			}
		}
	}
}

// TestDeltaRoundTripMultiBlock uses the real block size over a tensor of three blocks and a
// short fourth, with changes at both ends of every block.
func TestDeltaRoundTripMultiBlock(t *testing.T) {
	rng := rand.New(rand.NewPCG(13, 14))
	const n = 3<<defaultBlockShift + 1000
	base := randomBytes(rng, 2*n)
	cur := changeValues(rng, base, 2, true, 0.01)
	for _, at := range []int{0, 1<<defaultBlockShift - 1, 1 << defaultBlockShift, 2 << defaultBlockShift, n - 1} {
		cur[2*at] ^= 0x01
	}
	checkRoundTrip(t, rng, base, cur, 2, true, defaultBlockShift)
}

// TestDeltaSpecialValues covers the patterns float comparison gets wrong and the largest
// differences of each width (escapes, wrap-around).
func TestDeltaSpecialValues(t *testing.T) {
	rng := rand.New(rand.NewPCG(15, 16))
	pairs := map[int][][2]uint64{
		1: {{0x00, 0x80}, {0x00, 0xFF}, {0x7F, 0x80}, {0xFF, 0x00}, {0x80, 0x7F}},
		2: {{0x0000, 0x8000}, {0x7FC0, 0x7FC1}, {0xFFFF, 0x0000}, {0x7FFF, 0x8000}, {0x0000, 0xFFFF}, {0x3F80, 0xBF80}},
		4: {{0x00000000, 0x80000000}, {0x7FC00000, 0x7FC00001}, {0xFFFFFFFF, 0}, {0x7F800000, 0xFF800000}},
		8: {{0, 1 << 63}, {^uint64(0), 0}, {0x7FF8000000000000, 0x7FF8000000000001}, {1<<63 - 1, 1 << 63}, {0, ^uint64(0)}},
	}
	for width, ps := range pairs {
		for _, float := range []bool{false, true} {
			base := make([]byte, 2*len(ps)*width)
			cur := make([]byte, len(base))
			for i, p := range ps {
				// Each pair both ways, so both signs of every difference appear.
				storeElement(base[2*i*width:], p[0], width)
				storeElement(cur[2*i*width:], p[1], width)
				storeElement(base[(2*i+1)*width:], p[1], width)
				storeElement(cur[(2*i+1)*width:], p[0], width)
			}
			checkRoundTrip(t, rng, base, cur, width, float, defaultBlockShift)
		}
	}
}

// TestDeltaChunkingDoesNotMatter feeds the same changes in chunks of different sizes (and
// directly through Add) and expects identical bodies: the encoding is a function of the
// changes alone.
func TestDeltaChunkingDoesNotMatter(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 18))
	const width, n = 2, 5000
	base := randomBytes(rng, n*width)
	cur := changeValues(rng, base, width, true, 0.05)
	want, err := encodeDeltaShift(nil, base, cur, width, true, 8)
	if err != nil {
		t.Fatal(err)
	}
	for _, chunk := range []int{1, 7, 64, 256, 1000, n} {
		enc := newDeltaEncoderShift(width, true, n, 8)
		var c Changes
		for first := 0; first < n; first += chunk {
			end := min(first+chunk, n)
			c.Reset()
			if err := ReferenceDiff(base[first*width:end*width], cur[first*width:end*width], width, &c); err != nil {
				t.Fatal(err)
			}
			if err := enc.AddChanges(int64(first), base[first*width:end*width], &c); err != nil {
				t.Fatalf("chunk %d: %v", chunk, err)
			}
		}
		got, err := enc.Finish()
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("chunks of %d elements give a different body", chunk)
		}
	}
}

func TestDeltaEncoderMisuse(t *testing.T) {
	one := func(v byte) []byte { return []byte{v, 0} }
	tests := []struct {
		name string
		run  func() error
	}{
		{"width 3", func() error {
			_, err := NewDeltaEncoder(3, false, 10).Finish()
			return err
		}},
		{"negative elements", func() error {
			return NewDeltaEncoder(2, false, -1).Add(0, nil, nil, nil)
		}},
		{"too many elements", func() error {
			return NewDeltaEncoder(2, false, maxDeltaElements+1).Add(0, nil, nil, nil)
		}},
		{"value lengths", func() error {
			return NewDeltaEncoder(2, false, 10).Add(0, []uint32{1}, []byte{1}, []byte{2})
		}},
		{"unchanged element", func() error {
			return NewDeltaEncoder(2, false, 10).Add(0, []uint32{1}, one(5), one(5))
		}},
		{"index beyond the tensor", func() error {
			return NewDeltaEncoder(2, false, 10).Add(5, []uint32{5}, one(1), one(2))
		}},
		{"negative chunk start", func() error {
			return NewDeltaEncoder(2, false, 10).Add(-1, []uint32{2}, one(1), one(2))
		}},
		{"not ascending within a call", func() error {
			return NewDeltaEncoder(2, false, 10).Add(0, []uint32{3, 3}, append(one(1), one(1)...), append(one(2), one(2)...))
		}},
		{"not ascending across calls", func() error {
			e := NewDeltaEncoder(2, false, 10)
			if err := e.Add(4, []uint32{0}, one(1), one(2)); err != nil {
				return err
			}
			return e.Add(0, []uint32{3}, one(1), one(2))
		}},
		{"Add after Finish", func() error {
			e := NewDeltaEncoder(2, false, 10)
			if _, err := e.Finish(); err != nil {
				return err
			}
			return e.Add(0, []uint32{3}, one(1), one(2))
		}},
		{"Finish twice", func() error {
			e := NewDeltaEncoder(2, false, 10)
			if _, err := e.Finish(); err != nil {
				return err
			}
			_, err := e.Finish()
			return err
		}},
		{"sticky error", func() error {
			e := NewDeltaEncoder(2, false, 10)
			_ = e.Add(0, []uint32{1}, one(5), one(5))
			_, err := e.Finish()
			return err
		}},
		{"change beyond the base chunk", func() error {
			return NewDeltaEncoder(2, false, 10).AddChanges(0, make([]byte, 4), &Changes{Index: []uint32{2}, Values: one(1)})
		}},
		{"encode unequal lengths", func() error {
			_, err := EncodeDelta(nil, make([]byte, 4), make([]byte, 6), 2, true)
			return err
		}},
	}
	for _, tc := range tests {
		if err := tc.run(); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: got %v, want ErrInvalidArgument", tc.name, err)
		}
	}
}

func TestApplyDeltaBadArguments(t *testing.T) {
	base := make([]byte, 20)
	cur := bytes.Clone(base)
	cur[4] = 1
	body, err := EncodeDelta(nil, base, cur, 2, true)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		dst   []byte
		first int64
		dir   Direction
	}{
		{"odd length", make([]byte, 3), 0, Forward},
		{"negative first", make([]byte, 2), -1, Forward},
		{"past the end", make([]byte, 4), 9, Forward},
		{"start past the end", nil, 11, Forward},
		{"unknown direction", make([]byte, 2), 0, Direction(7)},
	}
	for _, tc := range tests {
		if err := ApplyDelta(body, tc.dst, tc.first, tc.dir); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: got %v, want ErrInvalidArgument", tc.name, err)
		}
	}
	// An empty range at the very end is fine and touches nothing.
	if err := ApplyDelta(body, nil, 10, Forward); err != nil {
		t.Errorf("empty range at the end: %v", err)
	}
}

func TestParseDeltaRejects(t *testing.T) {
	rng := rand.New(rand.NewPCG(19, 20))
	base := randomBytes(rng, 2*3000)
	cur := changeValues(rng, base, 2, true, 0.05)
	body, err := encodeDeltaShift(nil, base, cur, 2, true, 8)
	if err != nil {
		t.Fatal(err)
	}
	edit := func(f func(b []byte)) []byte {
		b := bytes.Clone(body)
		f(b)
		return b
	}
	tests := []struct {
		name string
		body []byte
		want error
	}{
		{"empty", nil, ErrMalformed},
		{"wrong magic", edit(func(b []byte) { b[0] = 'X' }), ErrMalformed},
		{"version 0", edit(func(b []byte) { b[4] = 0 }), ErrUnsupportedVersion},
		{"version 3", edit(func(b []byte) { b[4] = 3 }), ErrUnsupportedVersion},
		{"magic only", []byte(deltaMagic), ErrMalformed},
		{"width 3", edit(func(b []byte) { b[5] = 3 }), ErrMalformed},
		{"unknown flag", edit(func(b []byte) { b[6] |= 2 }), ErrMalformed},
		{"block shift too small", edit(func(b []byte) { b[7] = minBlockShift - 1 }), ErrMalformed},
		{"block shift too large", edit(func(b []byte) { b[7] = maxBlockShift + 1 }), ErrMalformed},
		{"block shift changed", edit(func(b []byte) { b[7] = 9 }), ErrMalformed},
		{"huge element count", edit(func(b []byte) { binary.LittleEndian.PutUint64(b[8:], 1<<62) }), ErrMalformed},
		{"more changed than elements", edit(func(b []byte) { binary.LittleEndian.PutUint64(b[16:], 3001) }), ErrMalformed},
		{"changed count off by one", edit(func(b []byte) { b[16]++ }), ErrMalformed},
		{"block count off by one", edit(func(b []byte) { b[deltaHeaderSize]++ }), ErrMalformed},
		{"block size off by one", edit(func(b []byte) { b[deltaHeaderSize+4]++ }), ErrMalformed},
		{"trailing byte", append(bytes.Clone(body), 0), ErrMalformed},
	}
	for _, tc := range tests {
		if _, err := ParseDelta(tc.body); !errors.Is(err, tc.want) {
			t.Errorf("%s: ParseDelta: got %v, want %v", tc.name, err, tc.want)
		}
		if err := ApplyDelta(tc.body, bytes.Clone(base), 0, Forward); !errors.Is(err, tc.want) {
			t.Errorf("%s: ApplyDelta: got %v, want %v", tc.name, err, tc.want)
		}
	}
	// Every proper prefix is refused.
	for n := range len(body) {
		if _, err := ParseDelta(body[:n]); !errors.Is(err, ErrMalformed) {
			t.Fatalf("prefix of %d bytes: got %v, want ErrMalformed", n, err)
		}
	}
}

// TestApplyDeltaCorruptBlocks damages bytes inside the blocks (the framing stays valid) and
// checks that decoding fails cleanly or, where the damage is undetectable, still writes only
// inside dst; and that a block found corrupt leaves its elements untouched.
func TestApplyDeltaCorruptBlocks(t *testing.T) {
	rng := rand.New(rand.NewPCG(21, 22))
	base := randomBytes(rng, 2*600)
	cur := changeValues(rng, base, 2, true, 0.2)
	body, err := encodeDeltaShift(nil, base, cur, 2, true, 10) // one block
	if err != nil {
		t.Fatal(err)
	}
	l, err := parseLayout(body)
	if err != nil {
		t.Fatal(err)
	}
	detected := 0
	for at := int(l.payloadStart()); at < len(body); at++ {
		for _, flip := range []byte{0x01, 0x80, 0xFF} {
			bad := bytes.Clone(body)
			bad[at] ^= flip
			dst := bytes.Clone(base)
			err := ApplyDelta(bad, dst, 0, Forward)
			if err == nil {
				continue
			}
			detected++
			if !errors.Is(err, ErrMalformed) {
				t.Fatalf("byte %d ^ %#x: got %v, want ErrMalformed", at, flip, err)
			}
			if !bytes.Equal(dst, base) {
				t.Fatalf("byte %d ^ %#x: corrupt single block was partly applied", at, flip)
			}
		}
	}
	if detected == 0 {
		t.Fatal("no corruption detected at all")
	}
}
