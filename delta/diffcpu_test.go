package delta

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"slices"
	"testing"
)

// sparseChange returns a copy of base with about frac of its elements changed (each changed
// element differs from base in at least one byte).
func sparseChange(rng *rand.Rand, base []byte, width int, frac float64) []byte {
	cur := bytes.Clone(base)
	for i := 0; i < len(base)/width; i++ {
		if rng.Float64() < frac {
			b := rng.IntN(width)
			cur[i*width+b] ^= byte(1 + rng.IntN(255))
		}
	}
	return cur
}

func randomBytes(rng *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// diffBoth runs the CPU backend and the reference on the same input and fails on any
// difference in output or error.
func diffBoth(t testing.TB, base, cur []byte, width int) Changes {
	t.Helper()
	var fast, ref Changes
	errFast := NewCPUDiff().Diff(base, cur, width, &fast)
	errRef := ReferenceDiff(base, cur, width, &ref)
	if (errFast == nil) != (errRef == nil) {
		t.Fatalf("width %d, %d bytes: cpu error %v, reference error %v", width, len(base), errFast, errRef)
	}
	if !slices.Equal(fast.Index, ref.Index) {
		t.Fatalf("width %d, %d bytes: indices differ: cpu %v, reference %v", width, len(base), fast.Index, ref.Index)
	}
	if !bytes.Equal(fast.Values, ref.Values) {
		t.Fatalf("width %d, %d bytes: values differ: cpu %x, reference %x", width, len(base), fast.Values, ref.Values)
	}
	return ref
}

func TestDiffMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	tests := []struct {
		name     string
		elements int
		frac     float64
	}{
		{"empty", 0, 0},
		{"one element unchanged", 1, 0},
		{"one element changed", 1, 1},
		{"tail only", 3, 0.5},
		{"nothing changed", 1000, 0},
		{"all changed", 1000, 1},
		{"sparse 2%", 10007, 0.02},
		{"dense 50%", 4099, 0.5},
		{"word plus tail", 37, 0.3},
	}
	for _, width := range []int{1, 2, 4, 8} {
		for _, tc := range tests {
			base := randomBytes(rng, tc.elements*width)
			cur := sparseChange(rng, base, width, tc.frac)
			got := diffBoth(t, base, cur, width)
			// Independent check of the reference itself on the extreme cases.
			switch tc.frac {
			case 0:
				if len(got.Index) != 0 {
					t.Errorf("width %d %s: %d changes reported, want 0", width, tc.name, len(got.Index))
				}
			case 1:
				if len(got.Index) != tc.elements {
					t.Errorf("width %d %s: %d changes reported, want %d", width, tc.name, len(got.Index), tc.elements)
				}
			}
			if len(got.Values) != len(got.Index)*width {
				t.Errorf("width %d %s: %d value bytes for %d changes", width, tc.name, len(got.Values), len(got.Index))
			}
		}
	}
}

// TestDiffEveryByteOfAWord changes each single byte position of a few words in turn, so every
// element slot of every width is hit through the word path and the tail path.
func TestDiffEveryByteOfAWord(t *testing.T) {
	for _, width := range []int{1, 2, 4, 8} {
		for n := 0; n <= 72; n += width {
			base := make([]byte, n)
			for pos := 0; pos < n; pos++ {
				cur := bytes.Clone(base)
				cur[pos] = 0x80
				got := diffBoth(t, base, cur, width)
				if len(got.Index) != 1 || int(got.Index[0]) != pos/width {
					t.Fatalf("width %d, %d bytes, byte %d changed: got indices %v, want [%d]", width, n, pos, got.Index, pos/width)
				}
			}
		}
	}
}

func TestDiffAppendsToOutput(t *testing.T) {
	out := Changes{Index: []uint32{7}, Values: []byte{0xAA, 0xBB}}
	if err := NewCPUDiff().Diff([]byte{1, 2, 3, 4}, []byte{1, 2, 3, 5}, 2, &out); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(out.Index, []uint32{7, 1}) || !bytes.Equal(out.Values, []byte{0xAA, 0xBB, 3, 5}) {
		t.Fatalf("got %v %x, want appended change at index 1", out.Index, out.Values)
	}
	out.Reset()
	if len(out.Index) != 0 || len(out.Values) != 0 {
		t.Fatalf("Reset left %v %x", out.Index, out.Values)
	}
}

func TestDiffBadArguments(t *testing.T) {
	var out Changes
	tests := []struct {
		name      string
		base, cur []byte
		width     int
	}{
		{"width 3", make([]byte, 6), make([]byte, 6), 3},
		{"width 0", nil, nil, 0},
		{"width 16", make([]byte, 16), make([]byte, 16), 16},
		{"unequal lengths", make([]byte, 4), make([]byte, 6), 2},
		{"partial element", make([]byte, 5), make([]byte, 5), 2},
	}
	for _, tc := range tests {
		for _, diff := range []func([]byte, []byte, int, *Changes) error{NewCPUDiff().Diff, ReferenceDiff} {
			if err := diff(tc.base, tc.cur, tc.width, &out); !errors.Is(err, ErrInvalidArgument) {
				t.Errorf("%s: got %v, want ErrInvalidArgument", tc.name, err)
			}
		}
	}
	if err := NewCPUDiff().Diff(nil, nil, 2, nil); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("nil output: got %v, want ErrInvalidArgument", err)
	}
	if name := NewCPUDiff().Name(); name != "cpu" {
		t.Errorf("Name() = %q, want cpu", name)
	}
}

// FuzzDiff compares the CPU backend with the reference on arbitrary inputs: the fuzzer's bytes
// are split into base and cur, and mask (when non-empty) makes elements equal so that sparse
// changes are explored, not only dense ones.
func FuzzDiff(f *testing.F) {
	f.Add([]byte{}, []byte{}, uint8(2))
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 4, 5, 6, 7, 9}, []byte{}, uint8(1))
	f.Add(bytes.Repeat([]byte{0xAB}, 96), []byte{}, uint8(4))
	f.Add(append(bytes.Repeat([]byte{0}, 40), bytes.Repeat([]byte{1}, 40)...), []byte{0, 0, 0xFF}, uint8(8))
	f.Add([]byte("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ!@"), []byte{1, 0, 0, 0, 0, 0, 0, 1}, uint8(2))
	f.Fuzz(func(t *testing.T, data, mask []byte, widthSel uint8) {
		width := 1 << (widthSel % 4)
		n := len(data) / 2 / width * width
		base := data[:n]
		cur := bytes.Clone(data[n : 2*n])
		if len(mask) > 0 {
			for i := 0; i < n/width; i++ {
				if mask[i%len(mask)]&1 == 0 {
					copy(cur[i*width:(i+1)*width], base[i*width:(i+1)*width])
				}
			}
		}
		diffBoth(t, base, cur, width)
	})
}

// BenchmarkDiff measures the diff on 64 MiB of bf16 with ~2% of elements changed, beside
// copy() of the same bytes as the memory-speed yardstick (b.SetBytes gives MB/s per core).
func BenchmarkDiff(b *testing.B) {
	const size = 64 << 20
	rng := rand.New(rand.NewPCG(3, 4))
	base := randomBytes(rng, size)
	cur := sparseChange(rng, base, 2, 0.02)
	var out Changes
	out.Index = make([]uint32, 0, size/2/40)
	out.Values = make([]byte, 0, size/40)
	b.Run("cpu", func(b *testing.B) {
		backend := NewCPUDiff()
		b.SetBytes(size)
		for b.Loop() {
			out.Reset()
			if err := backend.Diff(base, cur, 2, &out); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("reference", func(b *testing.B) {
		b.SetBytes(size)
		for b.Loop() {
			out.Reset()
			if err := ReferenceDiff(base, cur, 2, &out); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("copy", func(b *testing.B) {
		dst := make([]byte, size)
		b.SetBytes(size)
		for b.Loop() {
			copy(dst, cur)
		}
	})
}
