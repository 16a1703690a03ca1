package gen

import "testing"

// Short kernel benchmarks (one 32K-element chunk in cache); run with -bench . -benchtime 200x.

func BenchmarkStepRangeCached(b *testing.B) {
	c := ConfigForParams(1_000_000, 3e-6, 1)
	lay := newLayout(c)
	t := &lay.tensors[1]
	n := 1 << 15
	w, m, v := make([]float32, n), make([]float32, n), make([]float32, n)
	initRange(t, 0, w, m, v)
	sc := newStepConstants(3e-6, 1)
	b.SetBytes(int64(n))
	for b.Loop() {
		stepRange(t, &sc, true, 0, w, m, v)
	}
}

func BenchmarkInitRangeCached(b *testing.B) {
	c := ConfigForParams(1_000_000, 3e-6, 1)
	lay := newLayout(c)
	t := &lay.tensors[1]
	n := 1 << 15
	w, m, v := make([]float32, n), make([]float32, n), make([]float32, n)
	b.SetBytes(int64(n))
	for b.Loop() {
		initRange(t, 0, w, m, v)
	}
}
