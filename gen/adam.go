package gen

import "math"

// The Adam hyper-parameters of the simulated run (PyTorch's defaults, as RL trainers use).
const (
	adamBeta1 = 0.9
	adamBeta2 = 0.999
	adamEps   = 1e-8
	initStd   = 0.02 // HF initializer_range: std of linear and embedding weights
)

// stepConstants are the per-step scalars of the Adam update, computed once per step in
// float64 and rounded to float32 as PyTorch passes Python floats to its fp32 kernels.
type stepConstants struct {
	step       int     // steps since version 1: selects the step's noise stream
	stepSize   float32 // lr / (1 - beta1^t)
	bc2Sqrt    float32 // sqrt(1 - beta2^t)
	oneMinusB1 float32
	beta2      float32
	oneMinusB2 float32
	eps        float32
}

// newStepConstants returns the scalars of the k-th step after version 1 (k >= 1), which is
// step warmStartSteps+k of the simulated run.
func newStepConstants(lr float64, k int) stepConstants {
	t := warmStartSteps + k
	return stepConstants{
		step:       k,
		stepSize:   float32(lr / (1 - powInt(adamBeta1, t))),
		bc2Sqrt:    float32(math.Sqrt(1 - powInt(adamBeta2, t))),
		oneMinusB1: float32(1 - adamBeta1),
		beta2:      float32(adamBeta2),
		oneMinusB2: float32(1 - adamBeta2),
		eps:        float32(adamEps),
	}
}

// powInt is b^n by repeated multiplication: the same bits on every platform, which math.Pow
// (assembly on some) does not promise.
func powInt(b float64, n int) float64 {
	p := 1.0
	for range n {
		p *= b
	}
	return p
}

// sqrt32 is the correctly rounded float32 square root (the float64 root of a float32,
// rounded once more to float32, is exact: 53 >= 2*24+2).
func sqrt32(x float32) float32 { return float32(math.Sqrt(float64(x))) }

// Every float32 expression below is written one operation at a time with explicit float32
// conversions, and every function returns an explicitly converted value: Go may fuse a*b+c
// into one FMA on some platforms (arm64, ppc64, s390x), also across inlined calls, which would
// change the rounding and so the bytes; an explicit conversion forbids the fusion.

// initialWeight is element i of tensor t at version 1. Linears and embeddings are fp32 draws
// from N(0, 0.02^2) as HF's _init_weights makes them; norms are 1.0.
func initialWeight(t *tensorSpec, init stream, i int64) float32 {
	if t.kind == kindNorm {
		return 1
	}
	return float32(float32(initStd) * normal(init.at(uint64(i))))
}

// warmMoments returns the Adam moments of an element at version 1. The simulated run is
// already warmStartSteps steps in when version 1 is taken, so the optimizer is warm: m holds
// the signal plus the noise its exponential average keeps (variance (1-b1)/(1+b1) of the
// per-step noise), v holds the expected squared gradient, both scaled by the (1-beta^t) their
// bias corrections divide out. Without this the first steps after a fresh start move every
// element by the full learning rate (Adam's |m/sqrt(v)| is 1 at step 1) and change several
// times more elements than the steps after them; a warm optimizer makes every version
// statistically alike, which is what tests and benchmarks need.
func warmMoments(t *tensorSpec, signal, s float32, moments stream, i int64) (m, v float32) {
	mean := float32(signal * s)
	noise := float32(warmNoiseStd * normal(moments.at(uint64(i))))
	m = float32(t.gradScale*float32(mean+noise)) * warmBias1
	g2 := float32(float32(mean*mean) + 1) // E[(signal*s + n)^2] with E[n^2] = 1
	v = float32(float32(t.gradScale*t.gradScale)*g2) * warmBias2
	if t.warmIdle > 0 { // an expert not routed in the last warmIdle steps: zero gradients since
		m = float32(m * t.warmDecay1)
		v = float32(v * t.warmDecay2)
	}
	return m, v
}

// warmStartSteps is how many optimizer steps the simulated run has taken before version 1.
const warmStartSteps = 1000

var (
	warmNoiseStd = float32(math.Sqrt((1 - adamBeta1) / (1 + adamBeta1)))
	warmBias1    = float32(1 - powInt(adamBeta1, warmStartSteps))
	warmBias2    = float32(1 - powInt(adamBeta2, warmStartSteps))
)

// rowSignal is the signal amplitude of one row of t: the tensor's signal-to-noise ratio times a
// per-row factor in [0.5, 2), so that some rows change more than others as in real training.
func rowSignal(t *tensorSpec, rows stream, row int64) float32 {
	return float32(t.snr * (0.5 + float32(1.5*uniform(rows.at(uint64(row))))))
}

// gradient is the simulated gradient of an element: scale * (signal*s + n), where s is the
// element's persistent direction and n is this step's noise.
func gradient(scale, signal, s, n float32) float32 {
	return float32(scale * float32(float32(signal*s)+n))
}

// adamUpdate applies one Adam step (PyTorch's single-tensor algorithm, in fp32) to one element
// and returns its new weight, first moment and second moment.
func adamUpdate(c *stepConstants, w, m, v, g float32) (float32, float32, float32) {
	m = m + float32(c.oneMinusB1*float32(g-m)) // exp_avg.lerp_(grad, 1-beta1)
	v = float32(v*c.beta2) + float32(c.oneMinusB2*float32(g*g))
	denom := float32(sqrt32(v)/c.bc2Sqrt) + c.eps
	w = w - float32(c.stepSize*float32(m/denom)) // param.addcdiv_(m, denom, -step_size)
	return w, m, v
}

// initRange sets w, m, v to their state at version 1 for elements [lo, lo+len(w)) of t.
func initRange(t *tensorSpec, lo int64, w, m, v []float32) {
	init := newStream(t.key, purposeInit, 0)
	signalStream := newStream(t.key, purposeSignal, 0)
	moments := newStream(t.key, purposeMoments, 0)
	rows := newStream(t.key, purposeRow, 0)
	n := int64(len(w))
	for start := int64(0); start < n; {
		gi := lo + start
		row := gi / t.rowLen
		end := min(n, (row+1)*t.rowLen-lo)
		signal := rowSignal(t, rows, row)
		for j := start; j < end; j++ {
			e := lo + j
			w[j] = initialWeight(t, init, e)
			m[j], v[j] = warmMoments(t, signal, normal(signalStream.at(uint64(e))), moments, e)
		}
		start = end
	}
}

// stepRange applies step c to elements [lo, lo+len(w)) of t. This is the fast path: stream
// and row constants are hoisted out of the element loop, which walks one row segment at a
// time. referenceTrajectory in reference.go computes the same numbers element by element.
// An expert the step does not route to (routed false) gets a zero gradient: Adam still
// decays its moments and moves it by what is left of them.
func stepRange(t *tensorSpec, c *stepConstants, routed bool, lo int64, w, m, v []float32) {
	if t.frozen() {
		return
	}
	if !routed {
		for j := range w {
			w[j], m[j], v[j] = adamUpdate(c, w[j], m[j], v[j], 0)
		}
		return
	}
	signalStream := newStream(t.key, purposeSignal, 0)
	noiseStream := newStream(t.key, purposeNoise, uint64(c.step))
	rows := newStream(t.key, purposeRow, 0)
	scale := t.gradScale
	n := int64(len(w))
	for start := int64(0); start < n; {
		gi := lo + start
		row := gi / t.rowLen
		end := min(n, (row+1)*t.rowLen-lo)
		signal := rowSignal(t, rows, row)
		ws, ms, vs := w[start:end], m[start:end], v[start:end]
		ms, vs = ms[:len(ws)], vs[:len(ws)]
		for j := range ws {
			e := uint64(gi + int64(j))
			g := gradient(scale, signal, normal(signalStream.at(e)), normal(noiseStream.at(e)))
			ws[j], ms[j], vs[j] = adamUpdate(c, ws[j], ms[j], vs[j], g)
		}
		start = end
	}
}
