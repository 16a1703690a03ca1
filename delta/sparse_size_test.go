package delta

import (
	"encoding/binary"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// rlBF16Step builds synthetic RL-like data: n bf16 weights drawn from N(0, 0.02), and the next
// step where each element changes independently with probability p, by +-1 ULP in 88% of the
// changes and +-2..4 ULP otherwise (in ordered space, so "ULP" means the neighbouring
// representable value whatever the sign).
func rlBF16Step(rng *rand.Rand, n int, p float64) (base, cur []byte) {
	base = make([]byte, 2*n)
	for i := range n {
		f := math.Float32bits(float32(rng.NormFloat64() * 0.02))
		f += 0x7FFF + (f>>16)&1 // round to nearest even
		binary.LittleEndian.PutUint16(base[2*i:], uint16(f>>16))
	}
	cur = make([]byte, len(base))
	copy(cur, base)
	// Bernoulli(p) positions by geometric gaps.
	logq := math.Log1p(-p)
	for i := int(math.Log(1-rng.Float64()) / logq); i < n; i += 1 + int(math.Log(1-rng.Float64())/logq) {
		step := uint64(1)
		if rng.Float64() >= 0.88 {
			step = uint64(2 + rng.IntN(3))
		}
		o := toOrdered(uint64(binary.LittleEndian.Uint16(base[2*i:])), 2, true)
		if rng.IntN(2) == 0 {
			o -= step
		} else {
			o += step
		}
		binary.LittleEndian.PutUint16(cur[2*i:], uint16(fromOrdered(o&0xFFFF, 2, true)))
	}
	return base, cur
}

// binaryEntropy is H(p) in bits.
func binaryEntropy(p float64) float64 {
	return -p*math.Log2(p) - (1-p)*math.Log2(1-p)
}

// slimeLikeBytes is the size of the changes as u16 gap + new value per change, zstd level 1
// (klauspost's SpeedFastest): the in-memory sparse encoding slime compresses.
func slimeLikeBytes(t *testing.T, c *Changes) int {
	buf := make([]byte, 0, 4*len(c.Index))
	prev := uint32(0)
	for i, idx := range c.Index {
		buf = binary.LittleEndian.AppendUint16(buf, uint16(min(idx-prev, math.MaxUint16)))
		buf = append(buf, c.Values[2*i:2*i+2]...)
		prev = idx
	}
	return zstdLen(t, buf)
}

// slimeDiskBytes is the size of slime's disk delta of one tensor (docs/format.md Part III §4): u32 count,
// u32 byte positions of the changed bytes, the new bytes, one zstd frame.
func slimeDiskBytes(t *testing.T, base, cur []byte) int {
	var pos, vals []byte
	for i := range base {
		if base[i] != cur[i] {
			pos = binary.LittleEndian.AppendUint32(pos, uint32(i))
			vals = append(vals, cur[i])
		}
	}
	buf := binary.LittleEndian.AppendUint32(nil, uint32(len(vals)))
	buf = append(append(buf, pos...), vals...)
	return zstdLen(t, buf)
}

func zstdLen(t *testing.T, b []byte) int {
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	return len(enc.EncodeAll(b, nil))
}

// sectionBytes splits a body into its position streams and its value symbols plus escapes,
// summed over the blocks; framing is the rest.
func sectionBytes(t *testing.T, body []byte) (positions, values int) {
	l, err := parseLayout(body)
	if err != nil {
		t.Fatal(err)
	}
	off := l.payloadStart()
	for b := range l.blocks {
		_, size := l.entry(b)
		block := body[off : off+int64(size)]
		off += int64(size)
		if size == 0 {
			continue
		}
		p, n1 := binary.Uvarint(block[1:])
		_, n2 := binary.Uvarint(block[1+n1:])
		positions += int(p)
		values += len(block) - 1 - n1 - n2 - int(p)
	}
	return positions, values
}

// valueEntropy is the empirical entropy, in bits, of the value codes of the changes.
func valueEntropy(base, cur []byte, c *Changes) float64 {
	counts := map[uint64]float64{}
	for i, idx := range c.Index {
		b := uint64(binary.LittleEndian.Uint16(base[2*idx:]))
		counts[valueCode(b, uint64(binary.LittleEndian.Uint16(c.Values[2*i:])), 2, true)]++
	}
	h := 0.0
	for _, k := range counts {
		q := k / float64(len(c.Index))
		h -= q * math.Log2(q)
	}
	return h
}

// TestCodecSize measures bytes per changed element on synthetic RL-like bf16 data and checks
// them loosely against the targets (1.15 B at 2.5%, 1.5 B at 1%), beside the entropy bound of
// the positions, TRL's 6 B and slime's encodings. Run with -v to see the numbers.
func TestCodecSize(t *testing.T) {
	const n = 1 << 22 // 4 blocks of 2^20 bf16 elements, 8 MiB
	tests := []struct {
		p, limit float64
	}{
		{0.01, 1.6},
		{0.025, 1.25},
	}
	rng := rand.New(rand.NewPCG(25, 26))
	for _, tc := range tests {
		base, cur := rlBF16Step(rng, n, tc.p)
		body, err := EncodeDelta(nil, base, cur, 2, true)
		if err != nil {
			t.Fatal(err)
		}
		var c Changes
		if err := ReferenceDiff(base, cur, 2, &c); err != nil {
			t.Fatal(err)
		}
		changed := float64(len(c.Index))
		ours := float64(len(body)) / changed
		posBound := binaryEntropy(tc.p) / tc.p / 8
		posBytes, valBytes := sectionBytes(t, body)
		t.Logf("p=%.3f: %d changed of %d; ours %.3f B/change (%d B: positions %.3f B, values %.3f B); "+
			"bounds: positions H(p)/p %.3f B, values %.3f B; TRL 6 B; slime u16 gap+value zstd-1 %.3f B; "+
			"slime disk format zstd-1 %.3f B",
			tc.p, len(c.Index), n, ours, len(body), float64(posBytes)/changed, float64(valBytes)/changed,
			posBound, valueEntropy(base, cur, &c)/8,
			float64(slimeLikeBytes(t, &c))/changed, float64(slimeDiskBytes(t, base, cur))/changed)
		if ours >= tc.limit {
			t.Errorf("p=%.3f: %.3f bytes per changed element, limit %.2f", tc.p, ours, tc.limit)
		}
		dst := append([]byte(nil), base...)
		if err := ApplyDelta(body, dst, 0, Forward); err != nil || string(dst) != string(cur) {
			t.Fatalf("p=%.3f: round trip failed: %v", tc.p, err)
		}
	}
}

// BenchmarkDelta measures encoding (diff included) and applying on 8 MiB of bf16 with 2.5%
// of the elements changed; b.SetBytes counts tensor bytes.
func BenchmarkDelta(b *testing.B) {
	rng := rand.New(rand.NewPCG(27, 28))
	base, cur := rlBF16Step(rng, 1<<22, 0.025)
	body, err := EncodeDelta(nil, base, cur, 2, true)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("encode", func(b *testing.B) {
		b.SetBytes(int64(len(base)))
		for b.Loop() {
			if _, err := EncodeDelta(nil, base, cur, 2, true); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("apply", func(b *testing.B) {
		dst := append([]byte(nil), base...)
		b.SetBytes(int64(len(base)))
		dir := Forward
		for b.Loop() {
			if err := ApplyDelta(body, dst, 0, dir); err != nil {
				b.Fatal(err)
			}
			dir = Forward + Backward - dir // alternate, so dst is always the base or the new tensor
		}
	})
}
