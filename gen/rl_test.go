package gen

import (
	"encoding/binary"
	"strings"
	"testing"
)

// orderedBF16 maps bf16 bits to an integer that is monotone in the value, so that the
// distance between two values in bf16 ULPs is a subtraction (-0 and +0 are one apart).
func orderedBF16(h uint16) int32 {
	if h&0x8000 != 0 {
		return -int32(h&0x7fff) - 1
	}
	return int32(h)
}

// changeStats compares two checkpoints' tensors bytewise, element by element.
func changeStats(t *testing.T, prev, cur map[string][]byte) (changed, oneULP, total int64) {
	t.Helper()
	for name, a := range prev {
		b, ok := cur[name]
		if !ok || len(a) != len(b) {
			t.Fatalf("%s: missing or resized", name)
		}
		for i := 0; i < len(a); i += 2 {
			total++
			x, y := binary.LittleEndian.Uint16(a[i:]), binary.LittleEndian.Uint16(b[i:])
			if x == y {
				continue
			}
			changed++
			if d := orderedBF16(x) - orderedBF16(y); d == 1 || d == -1 {
				oneULP++
			}
		}
	}
	return changed, oneULP, total
}

// TestChangedFractionPerStep is the generator's realism check (docs/design.md, The generator): consecutive bf16 checkpoints,
// compared bytewise, differ in 0.3%-5% of elements per step at RL learning rates, and most
// changed elements move by exactly one bf16 ULP. Measured on the medium preset (seed 1):
//
//	lr 1e-6: ~0.97% changed per step, ~90% of changes are +-1 ULP
//	lr 3e-6: ~2.5% changed per step, ~89% of changes are +-1 ULP
func TestChangedFractionPerStep(t *testing.T) {
	tests := []struct {
		lr              float64
		lowest, highest float64 // the band this lr is tuned for
	}{
		{1e-6, 0.005, 0.011},
		{3e-6, 0.02, 0.03},
	}
	for _, tc := range tests {
		c := mustPreset(t, "medium", tc.lr, 1)
		m, err := New(c)
		if err != nil {
			t.Fatal(err)
		}
		files, err := m.CheckpointFiles()
		if err != nil {
			t.Fatal(err)
		}
		prev := checkpointTensors(t, files)
		for step := 1; step <= 4; step++ {
			m.Step()
			files, err := m.CheckpointFiles()
			if err != nil {
				t.Fatal(err)
			}
			cur := checkpointTensors(t, files)
			changed, one, total := changeStats(t, prev, cur)
			frac := float64(changed) / float64(total)
			oneFrac := float64(one) / float64(changed)
			t.Logf("lr %g step %d: %.3f%% changed, %.1f%% of them by one ULP", tc.lr, step, 100*frac, 100*oneFrac)
			if frac < 0.003 || frac > 0.05 {
				t.Errorf("lr %g step %d: %.3f%% changed, want 0.3%%-5%%", tc.lr, step, 100*frac)
			}
			if frac < tc.lowest || frac > tc.highest {
				t.Errorf("lr %g step %d: %.3f%% changed, tuned for %.1f%%-%.1f%%", tc.lr, step, 100*frac, 100*tc.lowest, 100*tc.highest)
			}
			if oneFrac < 0.8 {
				t.Errorf("lr %g step %d: only %.1f%% of changes are one ULP, want >= 80%%", tc.lr, step, 100*oneFrac)
			}
			prev = cur
		}
	}
}

// TestNormsBarelyMove: RMSNorm weights sit at 1.0 where a bf16 ULP is ~1000 times an RL step,
// so they do not change in a few steps (as in real runs), while linears do.
func TestNormsBarelyMove(t *testing.T) {
	m, err := New(mustPreset(t, "small", 3e-6, 1))
	if err != nil {
		t.Fatal(err)
	}
	before, _ := m.CheckpointFiles()
	m.Step()
	m.Step()
	after, _ := m.CheckpointFiles()
	a, b := checkpointTensors(t, before), checkpointTensors(t, after)
	for name := range a {
		changed, _, _ := changeStats(t, map[string][]byte{name: a[name]}, map[string][]byte{name: b[name]})
		isNorm := name == "model.norm.weight" || strings.Contains(name, "layernorm")
		if isNorm && changed != 0 {
			t.Errorf("%s: %d elements changed", name, changed)
		}
		if !isNorm && changed == 0 {
			t.Errorf("%s: nothing changed", name)
		}
	}
}
