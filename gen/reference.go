package gen

import (
	"encoding/binary"
	"encoding/json"
	"math"
	"slices"
	"strings"
)

// Reference implementations: the plainest possible statement of what the fast paths compute.
// Tests compare the fast paths with these bit for bit; nothing else should call them.

// referenceTrajectory returns the fp32 master weight of element i of t after steps Adam steps,
// computed for that one element alone with no hoisting, chunking or parallelism.
func referenceTrajectory(cfg Config, t *tensorSpec, i int64, steps int) float32 {
	lr := cfg.LR
	w := initialWeight(t, newStream(t.key, purposeInit, 0), i)
	signal := rowSignal(t, newStream(t.key, purposeRow, 0), i/t.rowLen)
	s := normal(newStream(t.key, purposeSignal, 0).at(uint64(i)))
	cold := *t
	cold.warmIdle = 0
	m, v := warmMoments(&cold, signal, s, newStream(t.key, purposeMoments, 0), i)
	if t.expert >= 0 { // zero gradients since the expert was last routed before version 1
		idle := 0
		for idle < warmStartSteps && !referenceRouted(cfg, t, warmStartSteps-idle) {
			idle++
		}
		if idle > 0 {
			m = float32(m * float32(powInt(adamBeta1, idle)))
			v = float32(v * float32(powInt(adamBeta2, idle)))
		}
	}
	for step := 1; step <= steps && !t.frozen(); step++ {
		c := newStepConstants(lr, step)
		n := normal(newStream(t.key, purposeNoise, uint64(step)).at(uint64(i)))
		g := gradient(t.gradScale, signal, s, n)
		if t.expert >= 0 && !referenceRouted(cfg, t, warmStartSteps+step) {
			g = 0
		}
		w, m, v = adamUpdate(&c, w, m, v, g)
	}
	return w
}

// referenceRouted reports whether expert tensor t gets a gradient in step run of the
// simulated run: its score is among the TopK highest of its layer's router, counted the plain
// way (the scores above it, and the equal ones at a lower index).
func referenceRouted(cfg Config, t *tensorSpec, run int) bool {
	s := newStream(routerKey(cfg.Seed, t.layer), purposeRoute, uint64(run))
	mine := s.at(uint64(t.expert))
	above := 0
	for x := range cfg.MoE.Experts {
		if sc := s.at(uint64(x)); sc > mine || (sc == mine && x < t.expert) {
			above++
		}
	}
	return above < cfg.MoE.TopK
}

// referenceBF16 rounds f to the nearest bfloat16 by comparing distances in float64 rather than
// by the bit trick of f32ToBF16: of the two bf16 values that bracket f (its bits truncated,
// and the next bf16 away from zero), take the nearer; on a tie take the one whose last kept
// bit is 0. NaNs keep their sign and become quiet.
func referenceBF16(f float32) uint16 {
	b := math.Float32bits(f)
	if math.IsNaN(float64(f)) {
		return uint16(b>>16) | 0x0040
	}
	down := uint16(b >> 16) // toward zero
	up := down + 1          // away from zero (0x7f7f+1 is infinity, as overflow must be)
	if b&0xffff == 0 {
		return down
	}
	x := math.Abs(float64(f))
	dDown := x - math.Abs(float64(bf16ToF32(down)))
	var dUp float64
	if up&0x7fff == 0x7f80 {
		// The next value up is infinity: round up exactly when f is at or past the midpoint
		// between the largest finite bf16 and 2^128, where IEEE rounding overflows.
		dUp = math.Ldexp(1, 128) - x
	} else {
		dUp = math.Abs(float64(bf16ToF32(up))) - x
	}
	switch {
	case dDown < dUp:
		return down
	case dUp < dDown:
		return up
	case down&1 == 0:
		return down
	default:
		return up
	}
}

// referenceSafetensors builds a whole safetensors file of the tensors of group the slow way:
// the header through encoding/json (a map marshals with sorted keys, and "__metadata__"
// sorts before every tensor name, as the safetensors serializer puts it first) and every
// element through elem. It is the reference for safetensorsHeader and writeSafetensors.
func referenceSafetensors(lay *layout, group []int, elem func(ti int, i int64) uint16) ([]byte, error) {
	type entry struct {
		DType       string   `json:"dtype"`
		Shape       []int64  `json:"shape"`
		DataOffsets [2]int64 `json:"data_offsets"`
	}
	order := append([]int(nil), group...)
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(lay.tensors[a].name, lay.tensors[b].name) })
	header := map[string]any{"__metadata__": map[string]string{"format": "pt"}}
	var data []byte
	for _, ti := range order {
		t := &lay.tensors[ti]
		start := int64(len(data))
		for i := range t.numel {
			data = binary.LittleEndian.AppendUint16(data, elem(ti, i))
		}
		header[t.name] = entry{t.dtype.String(), t.shape, [2]int64{start, int64(len(data))}}
	}
	js, err := json.Marshal(header)
	if err != nil {
		return nil, err
	}
	for len(js)%8 != 0 {
		js = append(js, ' ')
	}
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(js)))
	out = append(out, js...)
	return append(out, data...), nil
}
