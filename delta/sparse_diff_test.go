package delta

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
)

// encodeByReference encodes cur against base in chunks of chunk elements with the reference
// path: ReferenceDiff, then AddChanges.
func encodeByReference(t testing.TB, base, cur []byte, width int, float bool, shift uint, chunk int) []byte {
	t.Helper()
	n := len(base) / width
	enc := newDeltaEncoderShift(width, float, int64(n), shift)
	var c Changes
	for first := 0; first < n; first += chunk {
		b, cu := base[first*width:min(first+chunk, n)*width], cur[first*width:min(first+chunk, n)*width]
		c.Reset()
		if err := ReferenceDiff(b, cu, width, &c); err != nil {
			t.Fatal(err)
		}
		if err := enc.AddChanges(int64(first), b, &c); err != nil {
			t.Fatal(err)
		}
	}
	body, err := enc.Finish()
	if err != nil {
		t.Fatal(err)
	}
	return body
}

// encodeByAddDiff is encodeByReference with AddDiff; it also checks the counts AddDiff returns.
func encodeByAddDiff(t testing.TB, base, cur []byte, width int, float bool, shift uint, chunk int) []byte {
	t.Helper()
	n := len(base) / width
	enc := newDeltaEncoderShift(width, float, int64(n), shift)
	var c Changes
	total := 0
	for first := 0; first < n; first += chunk {
		b, cu := base[first*width:min(first+chunk, n)*width], cur[first*width:min(first+chunk, n)*width]
		found, err := enc.AddDiff(int64(first), b, cu)
		if err != nil {
			t.Fatal(err)
		}
		c.Reset()
		if err := ReferenceDiff(b, cu, width, &c); err != nil {
			t.Fatal(err)
		}
		if found != len(c.Index) {
			t.Fatalf("AddDiff of elements [%d, %d) found %d changes, the reference %d", first, first+chunk, found, len(c.Index))
		}
		total += found
	}
	if enc.Changed() != int64(total) {
		t.Fatalf("Changed() = %d, want %d", enc.Changed(), total)
	}
	body, err := enc.Finish()
	if err != nil {
		t.Fatal(err)
	}
	return body
}

func TestAddDiffMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(41, 42))
	for _, tc := range []struct {
		width   int
		float   bool
		density float64
	}{
		{1, false, 0.03}, {2, true, 0.027}, {2, true, 0.3}, {2, false, 0.01}, {2, true, 1},
		{4, true, 0.05}, {4, false, 0.5}, {8, true, 0.02}, {8, false, 1}, {2, true, 0},
	} {
		// An odd element count leaves a tail shorter than a word; shift 8 gives many blocks.
		n := 5003 * 8 / tc.width
		base := randomBytes(rng, n*tc.width)
		cur := changeValues(rng, base, tc.width, tc.float, tc.density)
		for _, shift := range []uint{minBlockShift, 8, defaultBlockShift} {
			for _, chunk := range []int{1, 3, 17, 256, 1000, n} {
				want := encodeByReference(t, base, cur, tc.width, tc.float, shift, chunk)
				got := encodeByAddDiff(t, base, cur, tc.width, tc.float, shift, chunk)
				if !bytes.Equal(got, want) {
					t.Errorf("width %d float %v density %v shift %d chunk %d: AddDiff's body differs from the reference's",
						tc.width, tc.float, tc.density, shift, chunk)
				}
			}
		}
	}
}

// TestAddDiffEveryLane changes one element at each position of a 32-byte group, for every
// width, so each lane of the mask is seen alone.
func TestAddDiffEveryLane(t *testing.T) {
	for _, width := range []int{1, 2, 4, 8} {
		for at := 0; at < 64/width; at++ {
			base := make([]byte, 64)
			cur := bytes.Clone(base)
			cur[at*width+width-1] = 0x80 // the element's top byte: its sign for a float
			want := encodeByReference(t, base, cur, width, true, defaultBlockShift, 64/width)
			got := encodeByAddDiff(t, base, cur, width, true, defaultBlockShift, 64/width)
			if !bytes.Equal(got, want) {
				t.Errorf("width %d element %d: AddDiff's body differs from the reference's", width, at)
			}
		}
	}
}

func TestAddDiffMisuse(t *testing.T) {
	two := []byte{1, 2, 3, 4}
	for _, tc := range []struct {
		name string
		run  func(e *DeltaEncoder) error
	}{
		{"lengths differ", func(e *DeltaEncoder) error { _, err := e.AddDiff(0, two, two[:2]); return err }},
		{"not whole elements", func(e *DeltaEncoder) error { _, err := e.AddDiff(0, two[:3], two[:3]); return err }},
		{"past the end", func(e *DeltaEncoder) error { _, err := e.AddDiff(9, two, two); return err }},
		{"negative start", func(e *DeltaEncoder) error { _, err := e.AddDiff(-1, two, two); return err }},
		{"overlaps what was added", func(e *DeltaEncoder) error {
			if _, err := e.AddDiff(0, two, two); err != nil {
				return nil // the first call must succeed: not the misuse under test
			}
			_, err := e.AddDiff(1, two, two)
			return err
		}},
		{"after Finish", func(e *DeltaEncoder) error {
			if _, err := e.Finish(); err != nil {
				return nil
			}
			_, err := e.AddDiff(0, two, two)
			return err
		}},
	} {
		e := NewDeltaEncoder(2, true, 10)
		if err := tc.run(e); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("%s: got %v, want ErrInvalidArgument", tc.name, err)
		}
	}
}

// FuzzAddDiff compares AddDiff with the reference path on arbitrary pairs, widths, block
// sizes and chunkings.
func FuzzAddDiff(f *testing.F) {
	f.Add([]byte{}, uint8(1), uint8(0), uint16(1), uint8(128))
	f.Add(randomBytes(rand.New(rand.NewPCG(1, 1)), 1024), uint8(5), uint8(1), uint16(33), uint8(20))
	f.Add(randomBytes(rand.New(rand.NewPCG(2, 2)), 4096), uint8(2), uint8(2), uint16(700), uint8(255))
	f.Add(randomBytes(rand.New(rand.NewPCG(3, 3)), 4096), uint8(7), uint8(5), uint16(5), uint8(3))
	f.Fuzz(func(t *testing.T, data []byte, widthSel, shiftSel uint8, chunk uint16, density uint8) {
		width := 1 << (widthSel % 4)
		float := widthSel&4 != 0
		shift := uint(minBlockShift) + uint(shiftSel%6)
		base, cur := fuzzPair(data, width, rand.New(rand.NewPCG(uint64(chunk), uint64(density))), density)
		c := max(1, int(chunk))
		want := encodeByReference(t, base, cur, width, float, shift, c)
		got := encodeByAddDiff(t, base, cur, width, float, shift, c)
		if !bytes.Equal(got, want) {
			t.Fatalf("width %d float %v shift %d chunk %d: AddDiff's body differs from the reference's", width, float, shift, c)
		}
	})
}

// TestChangedMaskKernelMatchesGo flips every bit of two groups in turn, and then random
// bytes, and requires the kernel's bitmap (where this machine has it) to be changedMaskGo's
// and to have exactly the changed elements set.
func TestChangedMaskKernelMatchesGo(t *testing.T) {
	if !haveMaskKernel16 {
		t.Skip("no mask kernel for 2-byte elements on this machine")
	}
	const groups = 2
	base := randomBytes(rand.New(rand.NewPCG(5, 6)), groups*maskGroupElems*2)
	check := func(what string, cur []byte) {
		t.Helper()
		var got, want [groups]uint64
		changedMask16(&base[0], &cur[0], groups, &got[0])
		changedMaskGo(base, cur, 2, want[:])
		if got != want {
			t.Fatalf("%s: kernel %x, Go %x", what, got, want)
		}
		for e := range groups * maskGroupElems {
			differs := !bytes.Equal(base[2*e:2*e+2], cur[2*e:2*e+2])
			if set := got[e/64]>>(e%64)&1 == 1; set != differs {
				t.Fatalf("%s: element %d differs %v, bit set %v", what, e, differs, set)
			}
		}
	}
	for bit := range len(base) * 8 {
		cur := bytes.Clone(base)
		cur[bit/8] ^= 1 << (bit % 8)
		check(fmt.Sprintf("bit %d flipped", bit), cur)
	}
	rng := rand.New(rand.NewPCG(7, 8))
	for i := range 200 {
		cur := bytes.Clone(base)
		for range rng.IntN(40) {
			cur[rng.IntN(len(cur))] = byte(rng.Uint32())
		}
		check(fmt.Sprintf("random case %d", i), cur)
	}
}
