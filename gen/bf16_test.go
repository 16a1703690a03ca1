package gen

import (
	"math"
	"testing"
)

func TestF32ToBF16(t *testing.T) {
	tests := []struct {
		name string
		in   uint32 // float32 bits
		want uint16
	}{
		{"one", 0x3f800000, 0x3f80},
		{"minus one", 0xbf800000, 0xbf80},
		{"zero", 0x00000000, 0x0000},
		{"minus zero", 0x80000000, 0x8000},
		{"below half rounds down", 0x3f807fff, 0x3f80},
		{"tie to even stays", 0x3f808000, 0x3f80},
		{"tie to even goes up", 0x3f818000, 0x3f82},
		{"above half rounds up", 0x3f808001, 0x3f81},
		{"carry into exponent", 0x3fffffff, 0x4000},
		{"largest float32 overflows to inf", 0x7f7fffff, 0x7f80},
		{"largest bf16 stays", 0x7f7f0000, 0x7f7f},
		{"just below overflow midpoint", 0x7f7f7fff, 0x7f7f},
		{"overflow midpoint rounds to inf", 0x7f7f8000, 0x7f80},
		{"inf", 0x7f800000, 0x7f80},
		{"minus inf", 0xff800000, 0xff80},
		{"quiet nan", 0x7fc00000, 0x7fc0},
		{"signalling nan with low payload only stays nan", 0x7f800001, 0x7fc0},
		{"negative nan", 0xff800001, 0xffc0},
		{"smallest subnormal rounds to zero", 0x00000001, 0x0000},
		{"subnormal tie to even", 0x00018000, 0x0002},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := math.Float32frombits(tc.in)
			if got := f32ToBF16(f); got != tc.want {
				t.Errorf("f32ToBF16(%#08x) = %#04x, want %#04x", tc.in, got, tc.want)
			}
			if got := referenceBF16(f); got != tc.want {
				t.Errorf("referenceBF16(%#08x) = %#04x, want %#04x", tc.in, got, tc.want)
			}
		})
	}
}

// TestBF16FastMatchesReference sweeps bit patterns: every upper half with several low halves
// (the ones that decide rounding), plus a pseudo-random sample.
func TestBF16FastMatchesReference(t *testing.T) {
	lows := []uint32{0x0000, 0x0001, 0x7fff, 0x8000, 0x8001, 0xffff, 0x1234, 0xc000}
	for hi := uint32(0); hi < 1<<16; hi++ {
		for _, lo := range lows {
			b := hi<<16 | lo
			f := math.Float32frombits(b)
			if got, want := f32ToBF16(f), referenceBF16(f); got != want {
				t.Fatalf("bits %#08x: fast %#04x, reference %#04x", b, got, want)
			}
		}
	}
	s := newStream(1, 2, 3)
	for i := range uint64(1 << 20) {
		b := uint32(s.at(i))
		f := math.Float32frombits(b)
		if got, want := f32ToBF16(f), referenceBF16(f); got != want {
			t.Fatalf("bits %#08x: fast %#04x, reference %#04x", b, got, want)
		}
	}
}

func TestBF16RoundTripIsExact(t *testing.T) {
	for h := range uint32(1 << 16) {
		f := bf16ToF32(uint16(h))
		got := f32ToBF16(f)
		if math.IsNaN(float64(f)) {
			if got&0x7fff <= 0x7f80 || got&0x8000 != uint16(h)&0x8000 {
				t.Fatalf("NaN %#04x became %#04x", h, got)
			}
			continue
		}
		if got != uint16(h) {
			t.Fatalf("bf16 %#04x -> f32 -> bf16 = %#04x", h, got)
		}
	}
}

func FuzzBF16(f *testing.F) {
	for _, b := range []uint32{0, 0x3f808000, 0x3f818000, 0x7f7f8000, 0x7f800001, 0xff800000, 0x00018000} {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b uint32) {
		x := math.Float32frombits(b)
		got, want := f32ToBF16(x), referenceBF16(x)
		if got != want {
			t.Fatalf("bits %#08x: fast %#04x, reference %#04x", b, got, want)
		}
		if math.IsNaN(float64(x)) != math.IsNaN(float64(bf16ToF32(got))) {
			t.Fatalf("bits %#08x: NaN-ness changed (%#04x)", b, got)
		}
		// The result is one of the two bf16 values that bracket x.
		if !math.IsNaN(float64(x)) && got != uint16(b>>16) && got != uint16(b>>16)+1 {
			t.Fatalf("bits %#08x: %#04x does not bracket", b, got)
		}
	})
}
