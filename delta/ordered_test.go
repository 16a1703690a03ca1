package delta

import (
	"math"
	"math/rand/v2"
	"testing"
)

// bf16Float is the float32 value of the bf16 bits b.
func bf16Float(b uint64) float32 { return math.Float32frombits(uint32(b) << 16) }

func TestOrderedMappingIsBijectiveAndMonotone(t *testing.T) {
	// Every 16-bit pattern: the float mapping is a bijection, and for non-NaN values its
	// order is the float order (with -0 just below +0).
	seen := make([]bool, 1<<16)
	for x := uint64(0); x < 1<<16; x++ {
		o := toOrdered(x, 2, true)
		if o > 0xFFFF || seen[o] {
			t.Fatalf("toOrdered(%#04x) = %#x: out of range or not injective", x, o)
		}
		seen[o] = true
		if back := fromOrdered(o, 2, true); back != x {
			t.Fatalf("fromOrdered(toOrdered(%#04x)) = %#04x", x, back)
		}
		if toOrdered(x, 2, false) != x || fromOrdered(x, 2, false) != x {
			t.Fatalf("integer mapping of %#04x is not the identity", x)
		}
	}
	for o := uint64(0); o < 0xFFFF; o++ {
		a, b := bf16Float(fromOrdered(o, 2, true)), bf16Float(fromOrdered(o+1, 2, true))
		if a != a || b != b { // NaN: no order to keep
			continue
		}
		if a > b || (a == b && !(math.Signbit(float64(a)) && !math.Signbit(float64(b)))) {
			t.Fatalf("ordered %#04x -> %v, %#04x -> %v: not increasing", o, a, o+1, b)
		}
	}
}

func TestOrderedMappingWidths(t *testing.T) {
	tests := []struct {
		width   int
		x, want uint64
	}{
		{1, 0x00, 0x80},                             // +0 sits just above -0
		{1, 0x80, 0x7F},                             // -0
		{1, 0xFF, 0x00},                             // most negative pattern comes first
		{2, 0x3F80, 0xBF80},                         // bf16 1.0
		{2, 0xBF80, 0x407F},                         // bf16 -1.0
		{4, 0x3F800000, 0xBF800000},                 // f32 1.0
		{4, 0xBF800000, 0x407FFFFF},                 // f32 -1.0
		{8, 0x3FF0000000000000, 0xBFF0000000000000}, // f64 1.0
		{8, 0x8000000000000000, 0x7FFFFFFFFFFFFFFF}, // f64 -0
		{8, 0xFFFFFFFFFFFFFFFF, 0x0000000000000000}, // most negative NaN pattern
		{8, 0x7FFFFFFFFFFFFFFF, 0xFFFFFFFFFFFFFFFF}, // most positive NaN pattern
		{4, 0x00000001, 0x80000001},                 // smallest positive subnormal
		{2, 0x8001, 0x7FFE},                         // smallest negative subnormal
		{8, 0x0000000000000000, 0x8000000000000000}, // f64 +0
		{1, 0x7F, 0xFF},                             // largest positive pattern
		{4, 0xFFFFFFFF, 0x00000000},                 // f32 negative NaN
		{2, 0x7FFF, 0xFFFF},                         // bf16 positive NaN pattern
		{2, 0xFFFF, 0x0000},                         // bf16 negative NaN pattern
		{8, 0x0000000000000001, 0x8000000000000001}, // f64 smallest subnormal
		{4, 0x80000000, 0x7FFFFFFF},                 // f32 -0
	}
	for _, tc := range tests {
		if got := toOrdered(tc.x, tc.width, true); got != tc.want {
			t.Errorf("toOrdered(%#x, width %d) = %#x, want %#x", tc.x, tc.width, got, tc.want)
		}
		if got := fromOrdered(tc.want, tc.width, true); got != tc.x {
			t.Errorf("fromOrdered(%#x, width %d) = %#x, want %#x", tc.want, tc.width, got, tc.x)
		}
	}
}

func TestZigzag(t *testing.T) {
	tests := []struct {
		width   int
		d, want uint64
	}{
		{2, 0, 0},
		{2, 0xFFFF, 1}, // -1
		{2, 1, 2},
		{2, 0xFFFE, 3}, // -2
		{2, 2, 4},
		{2, 0x7FFF, 0xFFFE}, // largest positive
		{2, 0x8000, 0xFFFF}, // most negative
		{1, 0xFF, 1},
		{1, 0x80, 0xFF},
		{4, 0xFFFFFFFF, 1},
		{8, 0xFFFFFFFFFFFFFFFF, 1},
		{8, 0x8000000000000000, 0xFFFFFFFFFFFFFFFF},
		{8, 0x7FFFFFFFFFFFFFFF, 0xFFFFFFFFFFFFFFFE},
	}
	for _, tc := range tests {
		if got := zigzag(tc.d, tc.width); got != tc.want {
			t.Errorf("zigzag(%#x, width %d) = %#x, want %#x", tc.d, tc.width, got, tc.want)
		}
		if got := unzigzag(tc.want, tc.width); got != tc.d {
			t.Errorf("unzigzag(%#x, width %d) = %#x, want %#x", tc.want, tc.width, got, tc.d)
		}
	}
}

// TestValueCodeExhaustiveWidth1 checks every pair of bytes: the code is 0 iff equal, and
// applying it forward and backward walks exactly between the two values.
func TestValueCodeExhaustiveWidth1(t *testing.T) {
	for _, float := range []bool{false, true} {
		for a := uint64(0); a < 256; a++ {
			for b := uint64(0); b < 256; b++ {
				code := valueCode(a, b, 1, float)
				if (code == 0) != (a == b) || code > 255 {
					t.Fatalf("valueCode(%#x, %#x, float %v) = %d", a, b, float, code)
				}
				if got := applyValueCode(a, code, 1, float, Forward); got != b {
					t.Fatalf("forward %#x by code %d = %#x, want %#x", a, code, got, b)
				}
				if got := applyValueCode(b, code, 1, float, Backward); got != a {
					t.Fatalf("backward %#x by code %d = %#x, want %#x", b, code, got, a)
				}
			}
		}
	}
}

func TestValueCodeRandomWidths(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, width := range []int{2, 4, 8} {
		mask := widthMask(width)
		for range 100000 {
			a := rng.Uint64() & mask
			b := rng.Uint64() & mask
			if rng.IntN(2) == 0 { // near neighbours as well as far ones
				b = (a + uint64(rng.IntN(9)) - 4) & mask
			}
			for _, float := range []bool{false, true} {
				code := valueCode(a, b, width, float)
				if (code == 0) != (a == b) || code > mask {
					t.Fatalf("width %d valueCode(%#x, %#x) = %#x", width, a, b, code)
				}
				if got := applyValueCode(a, code, width, float, Forward); got != b {
					t.Fatalf("width %d forward %#x by %#x = %#x, want %#x", width, a, code, got, b)
				}
				if got := applyValueCode(b, code, width, float, Backward); got != a {
					t.Fatalf("width %d backward %#x by %#x = %#x, want %#x", width, b, code, got, a)
				}
			}
		}
	}
}

// TestValueCodeULP checks the property the codec relies on: one bf16 ULP away, in either
// direction and for either sign, is code 1 or 2.
func TestValueCodeULP(t *testing.T) {
	for _, x := range []uint64{0x3F80, 0xBF80, 0x0001, 0x8001, 0x3C23, 0xBC23} {
		up := toOrdered(x, 2, true) + 1
		next := fromOrdered(up, 2, true)
		if c := valueCode(x, next, 2, true); c != 2 {
			t.Errorf("bf16 %#04x -> %#04x: code %d, want 2 (+1)", x, next, c)
		}
		if c := valueCode(next, x, 2, true); c != 1 {
			t.Errorf("bf16 %#04x -> %#04x: code %d, want 1 (-1)", next, x, c)
		}
		// In float terms the neighbour is the next larger value.
		if !(bf16Float(next) > bf16Float(x)) && !(bf16Float(x) == 0 && bf16Float(next) == 0) {
			t.Errorf("bf16 %#04x (%v) -> %#04x (%v) is not the next larger value", x, bf16Float(x), next, bf16Float(next))
		}
	}
}

// TestValueMapMatchesDefinitions compares the inlined per-element arithmetic with its
// definition spelled out through toOrdered, zigzag and their inverses.
func TestValueMapMatchesDefinitions(t *testing.T) {
	rng := rand.New(rand.NewPCG(29, 30))
	for _, width := range []int{1, 2, 4, 8} {
		mask := widthMask(width)
		for _, float := range []bool{false, true} {
			m := newValueMap(width, float)
			for range 20000 {
				a, b := rng.Uint64()&mask, rng.Uint64()&mask
				want := zigzag((toOrdered(b, width, float)-toOrdered(a, width, float))&mask, width)
				if got := m.code(a, b); got != want {
					t.Fatalf("width %d float %v: code(%#x, %#x) = %#x, want %#x", width, float, a, b, got, want)
				}
				d := unzigzag(want, width)
				fwd := fromOrdered((toOrdered(a, width, float)+d)&mask, width, float)
				back := fromOrdered((toOrdered(b, width, float)-d)&mask, width, float)
				if got := m.apply(a, want, Forward); got != fwd || fwd != b {
					t.Fatalf("width %d float %v: forward %#x by %#x = %#x, definition %#x, want %#x", width, float, a, want, got, fwd, b)
				}
				if got := m.apply(b, want, Backward); got != back || back != a {
					t.Fatalf("width %d float %v: backward %#x by %#x = %#x, definition %#x, want %#x", width, float, b, want, got, back, a)
				}
			}
		}
	}
}
