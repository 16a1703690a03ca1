package main

import (
	"encoding/binary"
	"math"
	"testing"

	"github.com/weightfs/weightfs/delta"
)

// bf16s encodes floats (exact in bf16) as little-endian bf16.
func bf16s(vals ...float32) []byte {
	b := make([]byte, 2*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint16(b[2*i:], uint16(math.Float32bits(v)>>16))
	}
	return b
}

// TestStepStatisticsHandMade runs three versions of a 10-element tensor whose answer is known:
// step 1 changes elements 0, 1, 2, 3 (0 and 1 up, 2 and 3 down); step 2 changes 0 (up again),
// 2 (up: reversed), 3 (down again) and 7 (not changed before).
func TestStepStatisticsHandMade(t *testing.T) {
	v1 := bf16s(1, 1, 1, 1, 1, 1, 1, 1, 1, 1)
	v2 := bf16s(2, 2, 0.5, 0.5, 1, 1, 1, 1, 1, 1)
	v3 := bf16s(4, 2, 1, 0.25, 1, 1, 1, -2, 1, 1)
	backend := delta.NewCPUDiff()
	s1, err := tensorSteps(backend, v1, v2, 2)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := tensorSteps(backend, v2, v3, 2)
	if err != nil {
		t.Fatal(err)
	}
	if want := []uint64{0, 1, 2, 3}; !equalU64(s1.idx, want) || !equalBools(s1.up, []bool{true, true, false, false}) {
		t.Fatalf("step 1: %v %v", s1.idx, s1.up)
	}
	got := pairSteps(10, s1, s2)
	want := stepPair{Total: 10, PrevChanged: 4, Changed: 4, Both: 3, Same: 2, Pairs: 1}
	if got != want {
		t.Fatalf("pair = %+v, want %+v", got, want)
	}
	// P(change | changed) = 3/4; P(change | not) = 1/6; same direction 2/3.
	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"PAfterChange", got.PAfterChange(), 0.75},
		{"PAfterNone", got.PAfterNone(), 1.0 / 6},
		{"SameDirection", got.SameDirection(), 2.0 / 3},
		{"Order0Bits", got.Order0Bits(), binaryEntropy(0.4) / 0.4},
		// q = 0.4, p = 0.4: (0.4·H(3/4) + 0.6·H(1/6)) / 0.4
		{"ContextBits", got.ContextBits(), (0.4*binaryEntropy(0.75) + 0.6*binaryEntropy(1.0/6)) / 0.4},
	} {
		if math.Abs(c.got-c.want) > 1e-12 {
			t.Errorf("%s = %v, want %v", c.name, c.got, c.want)
		}
	}
	if got.ContextBits() >= got.Order0Bits() {
		t.Errorf("context bound %.3f not below the order-0 bound %.3f", got.ContextBits(), got.Order0Bits())
	}
}

func equalU64(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func equalBools(a, b []bool) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestStepPairEdges: no previous change, no change at all, and the real run's numbers as the
// generator's (not differing).
func TestStepPairEdges(t *testing.T) {
	none := pairSteps(5, stepChanges{}, stepChanges{})
	if none.ContextBits() != 0 || none.Order0Bits() != 0 || !math.IsNaN(none.PAfterChange()) {
		t.Errorf("empty pair: %+v context %v order0 %v", none, none.ContextBits(), none.Order0Bits())
	}
	if d := none.differs(); len(d) != 3 {
		t.Errorf("an empty pair should differ on all three, got %v", d)
	}
	// 100000 elements, 2000 changed before; 0.24 of them again (480), 0.017 of the others
	// (1666), 87% of the 480 the same way (417.6 -> 418).
	real := stepPair{Total: 100000, PrevChanged: 2000, Changed: 480 + 1666, Both: 480, Same: 418, Pairs: 1}
	if d := real.differs(); len(d) != 0 {
		t.Errorf("the real run's numbers differ from themselves: %v", d)
	}
	off := real
	off.Same = 300
	if d := off.differs(); len(d) != 1 {
		t.Errorf("62%% same direction should differ once, got %v", d)
	}
}

// TestStepTrackerGenerator runs the tracker over three versions of the generator's tiny model
// and checks the counts against each other and the bytewise diff.
func TestStepTrackerGenerator(t *testing.T) {
	v := []map[string][]byte{genFiles(t, "tiny", 3e-6, 0), genFiles(t, "tiny", 3e-6, 1), genFiles(t, "tiny", 3e-6, 2)}
	var tr stepTracker
	if err := tr.observe(v[0], v[1]); err != nil {
		t.Fatal(err)
	}
	if tr.Sum.Pairs != 0 {
		t.Fatalf("one step is no pair: %+v", tr.Sum)
	}
	if err := tr.observe(v[1], v[2]); err != nil {
		t.Fatal(err)
	}
	s := tr.Sum
	enc, err := newSlimeEncoder()
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	c1, err := measureChanges(v[0], v[1], enc)
	if err != nil {
		t.Fatal(err)
	}
	c2, err := measureChanges(v[1], v[2], enc)
	if err != nil {
		t.Fatal(err)
	}
	if s.Pairs != 1 || s.Total != c2.Total || s.PrevChanged != c1.Changed || s.Changed != c2.Changed {
		t.Fatalf("tracker %+v, diffs %d then %d of %d", s, c1.Changed, c2.Changed, c2.Total)
	}
	if s.Both <= 0 || s.Both > min(s.PrevChanged, s.Changed) || s.Same > s.Both {
		t.Fatalf("inconsistent pair %+v", s)
	}
	rows := contextRows(s, 3e-6)
	if len(rows) != 3 {
		t.Fatalf("%d rows", len(rows))
	}
}
