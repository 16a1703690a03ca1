package gen

import (
	"math"
	"testing"
)

// TestNormalMoments checks the approximate normal over a fixed sample: the sample is
// deterministic, so the bounds are about the approximation, not about luck.
func TestNormalMoments(t *testing.T) {
	s := newStream(42, purposeNoise, 7)
	const n = 1 << 20
	var sum, sumSq, sum4 float64
	var lo, hi float32
	for i := range uint64(n) {
		x := normal(s.at(i))
		sum += float64(x)
		sumSq += float64(x) * float64(x)
		sum4 += math.Pow(float64(x), 4)
		lo, hi = min(lo, x), max(hi, x)
	}
	mean := sum / n
	variance := sumSq/n - mean*mean
	kurtosis := sum4 / n / (variance * variance)
	if math.Abs(mean) > 0.005 || math.Abs(variance-1) > 0.01 {
		t.Errorf("mean %.4f variance %.4f, want ~0 and ~1", mean, variance)
	}
	// Irwin-Hall(4) has kurtosis 3 - 6/(5*4) = 2.7.
	if math.Abs(kurtosis-2.7) > 0.03 {
		t.Errorf("kurtosis %.3f, want ~2.7", kurtosis)
	}
	if lo < -3.47 || hi > 3.47 || lo > -3 || hi < 3 {
		t.Errorf("range [%.3f, %.3f], want within +-3.47 and beyond +-3", lo, hi)
	}
}

func TestUniformRange(t *testing.T) {
	for _, u := range []uint64{0, math.MaxUint64, 1 << 63, 12345} {
		if f := uniform(u); !(f >= 0 && f < 1) {
			t.Errorf("uniform(%#x) = %v, want [0,1)", u, f)
		}
	}
}

// TestStreamsAreDistinct guards against two purposes or steps sharing a sequence.
func TestStreamsAreDistinct(t *testing.T) {
	seen := map[uint64]string{}
	for _, p := range []uint64{purposeInit, purposeSignal, purposeNoise, purposeRow, purposeTensor, purposeMoments} {
		for step := range uint64(4) {
			s := newStream(nameKey(1, "model.norm.weight"), p, step)
			for i := range uint64(64) {
				v := s.at(i)
				if prev, ok := seen[v]; ok {
					t.Fatalf("purpose %d step %d element %d repeats %s", p, step, i, prev)
				}
				seen[v] = "seen"
			}
		}
	}
	if nameKey(1, "a") == nameKey(2, "a") || nameKey(1, "a") == nameKey(1, "b") {
		t.Error("name keys collide across seeds or names")
	}
}

// TestMix64KnownValues pins the splitmix64 output function (the first outputs of splitmix64
// seeded with 0, from its reference implementation).
func TestMix64KnownValues(t *testing.T) {
	want := []uint64{0xe220a8397b1dcdaf, 0x6e789e6aa1b965f4, 0x06c45d188009454f}
	s := stream(0)
	for i, w := range want {
		if got := s.at(uint64(i)); got != w {
			t.Errorf("splitmix64(0)[%d] = %#x, want %#x", i, got, w)
		}
	}
}
