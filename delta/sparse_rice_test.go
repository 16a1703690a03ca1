package delta

import (
	"bytes"
	"math/rand/v2"
	"slices"
	"testing"
)

// positionsFromGaps is the plain definition the Rice decoder must match.
func positionsFromGaps(gaps []uint32) []uint32 {
	pos := make([]uint32, 0, len(gaps))
	next := uint32(0)
	for _, g := range gaps {
		pos = append(pos, next+g)
		next += g + 1
	}
	return pos
}

func TestRiceRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	tests := []struct {
		name string
		gaps []uint32
	}{
		{"one zero gap", []uint32{0}},
		{"all zero", make([]uint32, 300)},
		{"one huge gap", []uint32{1<<20 - 1}},
		{"mixed", []uint32{0, 5, 1000, 3, 0, 0, 77, 1 << 19}},
		// A small parameter and one gap far above it: q+1+k exceeds 32 bits, the writer's
		// long path (writeUnary, then the low bits).
		{"zeros then a huge gap", append(make([]uint32, riceGroup-1), 1<<20-1)},
	}
	geometric := make([]uint32, 5000)
	for i := range geometric {
		geometric[i] = uint32(rng.ExpFloat64() * 40)
	}
	tests = append(tests, struct {
		name string
		gaps []uint32
	}{"geometric", geometric})
	// A dense group followed by a sparse one: each group picks its own parameter.
	mixedRows := append(make([]uint32, riceGroup), slices.Repeat([]uint32{900}, riceGroup)...)
	tests = append(tests, struct {
		name string
		gaps []uint32
	}{"dense then sparse rows", mixedRows})

	for _, tc := range tests {
		var w bitWriter
		appendRice(&w, tc.gaps)
		want := positionsFromGaps(tc.gaps)
		blockLen := uint64(want[len(want)-1]) + 1
		got, ok := decodeRice(w.out, len(tc.gaps), blockLen, nil)
		if !ok || !slices.Equal(got, want) {
			t.Errorf("%s: decode ok=%v, positions differ", tc.name, ok)
			continue
		}
		// The stream must be exactly the size its parameters cost, padded to a byte.
		var bits uint64
		for s := 0; s < len(tc.gaps); s += riceGroup {
			g := tc.gaps[s:min(s+riceGroup, len(tc.gaps))]
			bits += riceParamBits + riceCost(g, bestRiceParam(g))
		}
		if uint64(len(w.out)) != (bits+7)/8 {
			t.Errorf("%s: %d bytes, want %d", tc.name, len(w.out), (bits+7)/8)
		}
		// One element short of the last position, the stream is out of range.
		if _, ok := decodeRice(w.out, len(tc.gaps), blockLen-1, nil); ok {
			t.Errorf("%s: accepted with the last position outside the block", tc.name)
		}
		// Asking for more changes than coded, or a truncated stream, fails.
		if _, ok := decodeRice(w.out, len(tc.gaps)+1, blockLen+1000, nil); ok {
			t.Errorf("%s: decoded one change more than coded", tc.name)
		}
		if _, ok := decodeRice(w.out[:len(w.out)-1], len(tc.gaps), blockLen, nil); ok && len(w.out) > 0 {
			// Dropping the last byte may only succeed if it held nothing but padding, which
			// a minimal stream never has.
			t.Errorf("%s: decoded from a truncated stream", tc.name)
		}
		// Trailing garbage is refused.
		if _, ok := decodeRice(append(bytes.Clone(w.out), 0), len(tc.gaps), blockLen, nil); ok {
			t.Errorf("%s: accepted a trailing byte", tc.name)
		}
	}
}

// TestBestRiceParamIsExact compares the search with trying every parameter.
func TestBestRiceParamIsExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 10))
	for range 2000 {
		gaps := make([]uint32, 1+rng.IntN(riceGroup))
		scale := float64(int(1) << rng.IntN(16))
		for i := range gaps {
			gaps[i] = uint32(rng.ExpFloat64() * scale)
		}
		k := bestRiceParam(gaps)
		best := riceCost(gaps, k)
		for j := uint(0); j <= maxRiceParam; j++ {
			if c := riceCost(gaps, j); c < best || c == best && j < k {
				t.Fatalf("k=%d costs %d bits but k=%d costs %d", k, best, j, c)
			}
		}
		if ref := bestRiceParamLinear(gaps); k != ref {
			t.Fatalf("bestRiceParam %d, the linear walk %d", k, ref)
		}
	}
}

// bestRiceParamLinear is the reference search: up from 0, stopping at the first k that
// costs more than the best so far.
func bestRiceParamLinear(gaps []uint32) uint {
	best, bestCost := uint(0), riceCost(gaps, 0)
	for k := uint(1); k <= maxRiceParam; k++ {
		c := riceCost(gaps, k)
		if c > bestCost {
			break
		}
		if c < bestCost {
			best, bestCost = k, c
		}
	}
	return best
}

func TestRicePaddingMustBeZero(t *testing.T) {
	var w bitWriter
	appendRice(&w, []uint32{0}) // 5-bit parameter + 1 bit: two bits of padding
	bad := bytes.Clone(w.out)
	bad[len(bad)-1] |= 0x80
	if _, ok := decodeRice(w.out, 1, 100, nil); !ok {
		t.Fatal("valid stream refused")
	}
	if _, ok := decodeRice(bad, 1, 100, nil); ok {
		t.Fatal("stream with a set padding bit accepted")
	}
}

func TestBitReaderLongUnary(t *testing.T) {
	// Runs of zeros longer than the reader's 64-bit window, and refills in every position.
	for _, q := range []uint64{0, 1, 31, 32, 63, 64, 65, 200, 1000} {
		for lead := uint(0); lead < 9; lead++ {
			var w bitWriter
			w.writeBits(0x1FF, lead)
			w.writeUnary(q)
			w.writeBits(0x5, 3)
			w.flush()
			r := bitReader{buf: w.out}
			if _, ok := r.readBits(lead); !ok {
				t.Fatalf("q=%d lead=%d: lead bits", q, lead)
			}
			got, ok := r.readUnary(q)
			if !ok || got != q {
				t.Fatalf("q=%d lead=%d: readUnary = %d, %v", q, lead, got, ok)
			}
			if v, ok := r.readBits(3); !ok || v != 5 || !r.atCleanEnd() {
				t.Fatalf("q=%d lead=%d: trailing bits %d %v, clean end %v", q, lead, v, ok, r.atCleanEnd())
			}
			if q > 0 {
				r = bitReader{buf: w.out}
				r.readBits(lead)
				if _, ok := r.readUnary(q - 1); ok {
					t.Fatalf("q=%d lead=%d: limit %d not enforced", q, lead, q-1)
				}
			}
		}
	}
}

// decodeRiceReference is the plain bit-at-a-time reading of the format, the specification
// decodeRice's word-at-a-time fast path is checked against.
func decodeRiceReference(stream []byte, count int, blockLen uint64) ([]uint32, bool) {
	bit := 0
	read := func() (uint64, bool) {
		if bit >= 8*len(stream) {
			return 0, false
		}
		b := uint64(stream[bit/8]>>(bit%8)) & 1
		bit++
		return b, true
	}
	readN := func(k uint) (uint64, bool) {
		var v uint64
		for i := uint(0); i < k; i++ {
			b, ok := read()
			if !ok {
				return 0, false
			}
			v |= b << i
		}
		return v, true
	}
	var pos []uint32
	next := uint64(0)
	for done := 0; done < count; {
		k, ok := readN(riceParamBits)
		if !ok {
			return pos, false
		}
		for end := min(done+riceGroup, count); done < end; done++ {
			q := uint64(0)
			for {
				b, ok := read()
				if !ok {
					return pos, false
				}
				if b == 1 {
					break
				}
				q++
				if q > blockLen { // no valid gap is this long
					return pos, false
				}
			}
			low, ok := readN(uint(k))
			if !ok {
				return pos, false
			}
			gap := q<<k | low
			if next+gap >= blockLen {
				return pos, false
			}
			pos = append(pos, uint32(next+gap))
			next += gap + 1
		}
	}
	// Only zero padding may follow, and less than a byte of it.
	if 8*len(stream)-bit >= 8 {
		return pos, false
	}
	for bit < 8*len(stream) {
		if b, _ := read(); b != 0 {
			return pos, false
		}
	}
	return pos, true
}

// FuzzDecodeRice runs the fast and the reference decoder on arbitrary streams: they must
// agree on acceptance and, when accepting, on every position.
func FuzzDecodeRice(f *testing.F) {
	var w bitWriter
	appendRice(&w, []uint32{2, 0, 7})
	f.Add(w.out, uint16(3), uint32(16))
	w = bitWriter{}
	rng := rand.New(rand.NewPCG(31, 32))
	gaps := make([]uint32, 300)
	for i := range gaps {
		gaps[i] = uint32(rng.ExpFloat64() * 30)
	}
	appendRice(&w, gaps)
	f.Add(w.out, uint16(300), uint32(1<<20))
	f.Add([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0x80}, uint16(1), uint32(1<<16))
	f.Add([]byte{0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF}, uint16(40), uint32(100))
	f.Fuzz(func(t *testing.T, stream []byte, count uint16, blockLen uint32) {
		bl := uint64(blockLen%(1<<24)) + 1
		got, okGot := decodeRice(stream, int(count), bl, nil)
		want, okWant := decodeRiceReference(stream, int(count), bl)
		if okGot != okWant {
			t.Fatalf("fast decoder ok=%v, reference ok=%v", okGot, okWant)
		}
		if okGot && !slices.Equal(got, want) {
			t.Fatalf("positions differ:\n fast %v\n  ref %v", got, want)
		}
	})
}

// BenchmarkDecodeRice decodes the positions of one 2^20-element block at 1% density (RL steps
// at lr 1e-6), the reads' largest decoding cost.
func BenchmarkDecodeRice(b *testing.B) {
	rng := rand.New(rand.NewPCG(41, 42))
	const blockLen = 1 << 20
	var gaps []uint32
	for total := uint64(0); ; {
		g := uint32(rng.ExpFloat64() * 99)
		if total+uint64(g) >= blockLen {
			break
		}
		gaps = append(gaps, g)
		total += uint64(g) + 1
	}
	var w bitWriter
	appendRice(&w, gaps)
	pos := make([]uint32, 0, len(gaps))
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		var ok bool
		if pos, ok = decodeRice(w.out, len(gaps), blockLen, pos[:0]); !ok {
			b.Fatal("rejected")
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*len(gaps)), "ns/gap")
}

// TestBitWriterMatchesBitByBit: the bits written (four bytes at a time) are the bytes a
// writer of one bit at a time produces, least-significant first, with the last byte padded
// with zeros, for runs of fields of every width 0..32 and unary codes long and short.
func TestBitWriterMatchesBitByBit(t *testing.T) {
	rng := rand.New(rand.NewPCG(81, 82))
	for trial := 0; trial < 500; trial++ {
		var w bitWriter
		var ref []byte
		nbits := 0
		put := func(bit uint64) {
			if nbits%8 == 0 {
				ref = append(ref, 0)
			}
			ref[nbits/8] |= byte(bit&1) << (nbits % 8)
			nbits++
		}
		for f := rng.IntN(60); f > 0; f-- {
			if rng.IntN(3) == 0 {
				q := uint64(rng.IntN(100))
				w.writeUnary(q)
				for i := uint64(0); i < q; i++ {
					put(0)
				}
				put(1)
				continue
			}
			k := uint(rng.IntN(33))
			v := rng.Uint64()
			w.writeBits(v, k)
			for i := uint(0); i < k; i++ {
				put(v >> i)
			}
		}
		w.flush()
		if !bytes.Equal(w.out, ref) {
			t.Fatalf("trial %d: %d bits written as %x, want %x", trial, nbits, w.out, ref)
		}
	}
}
