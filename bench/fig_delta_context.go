package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"sort"
	"strings"

	"github.com/weightfs/weightfs/delta"
)

// Figure 1's statistics of consecutive steps: how much the previous step's changes say about
// the next one's, which is what a delta coded with the previous delta as context can win.
// Measured on checkpoints of a real RL run (GRPO, fp32 AdamW at lr 3e-6, bf16 export), an
// element that changed in the last step changes again with probability ~0.24 against ~0.017
// for one that did not (the positions' bound falls from ~6.98 to ~6.39 bits per changed
// element), and an element that changes twice in a row moves the same way ~87% of the time.
// The figure prints the generator's numbers beside these.

// The real run's statistics, as quoted above.
const (
	realPAfterChange = 0.24
	realPAfterNone   = 0.017
	realSameDir      = 0.87
	realBoundOrder0  = 6.98
	realBoundContext = 6.39
)

// stepPair counts, over two consecutive steps (the previous one and the current one), the
// elements that changed in each and in both, and of those changing in both how many moved in
// the same direction.
type stepPair struct {
	Total       int64 `json:"total_elements"`
	PrevChanged int64 `json:"prev_changed"`   // changed in the previous step
	Changed     int64 `json:"changed"`        // changed in the current step
	Both        int64 `json:"changed_both"`   // in both
	Same        int64 `json:"same_direction"` // in both, the same way both times
	Pairs       int   `json:"step_pairs"`     // pairs of consecutive steps summed
}

func (s *stepPair) add(o stepPair) {
	s.Total += o.Total
	s.PrevChanged += o.PrevChanged
	s.Changed += o.Changed
	s.Both += o.Both
	s.Same += o.Same
	s.Pairs += o.Pairs
}

func ratio(a, b int64) float64 {
	if b <= 0 {
		return math.NaN()
	}
	return float64(a) / float64(b)
}

// PAfterChange is P(an element changes | it changed in the previous step).
func (s stepPair) PAfterChange() float64 { return ratio(s.Both, s.PrevChanged) }

// PAfterNone is P(an element changes | it did not change in the previous step).
func (s stepPair) PAfterNone() float64 { return ratio(s.Changed-s.Both, s.Total-s.PrevChanged) }

// SameDirection is the fraction of the elements changing in both steps that moved the same way.
func (s stepPair) SameDirection() float64 { return ratio(s.Same, s.Both) }

// binaryEntropy is H(p) in bits.
func binaryEntropy(p float64) float64 {
	if p <= 0 || p >= 1 {
		return 0
	}
	return -p*math.Log2(p) - (1-p)*math.Log2(1-p)
}

// Order0Bits is the order-0 bound of the current step's positions, H(p)/p bits per changed
// element (positionBoundBits).
func (s stepPair) Order0Bits() float64 { return positionBoundBits(s.Changed, s.Total) }

// ContextBits is the bound of the current step's positions for a coder that knows which
// elements changed in the previous step and codes each element with the probability of its
// class: (q·H(a) + (1-q)·H(b)) / p bits per changed element, with q the previous step's
// density, a = PAfterChange, b = PAfterNone and p the current density.
func (s stepPair) ContextBits() float64 {
	if s.Total <= 0 || s.Changed <= 0 {
		return 0
	}
	q := ratio(s.PrevChanged, s.Total)
	p := ratio(s.Changed, s.Total)
	return (q*binaryEntropy(s.PAfterChange()) + (1-q)*binaryEntropy(s.PAfterNone())) / p
}

// stepChanges are one tensor's changes in one step: the changed elements in ascending order and
// whether each went up.
type stepChanges struct {
	idx []uint64
	up  []bool
}

// pairSteps counts, for one tensor of n elements, the pair of steps prev and cur.
func pairSteps(n int64, prev, cur stepChanges) stepPair {
	out := stepPair{Total: n, PrevChanged: int64(len(prev.idx)), Changed: int64(len(cur.idx)), Pairs: 1}
	i, j := 0, 0
	for i < len(prev.idx) && j < len(cur.idx) {
		switch {
		case prev.idx[i] < cur.idx[j]:
			i++
		case prev.idx[i] > cur.idx[j]:
			j++
		default:
			out.Both++
			if prev.up[i] == cur.up[j] {
				out.Same++
			}
			i++
			j++
		}
	}
	return out
}

// elementValue reads element i of a little-endian tensor of width 2 (bf16) or 4 (f32) as a
// float.
func elementValue(b []byte, width int, i uint64) float64 {
	if width == 2 {
		return float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[2*i:])) << 16))
	}
	return float64(math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])))
}

// tensorSteps diffs one tensor's bytes of two versions and records which elements changed and
// which way. Only floating-point widths 2 (bf16) and 4 (f32) have a direction; for others no
// element counts as going up.
func tensorSteps(backend delta.DiffBackend, base, now []byte, width int) (stepChanges, error) {
	var out stepChanges
	var ch delta.Changes
	elements := int64(len(now) / width)
	for first := int64(0); first < elements; first += diffChunkElements {
		end := min(first+diffChunkElements, elements)
		ch.Reset()
		lo, hi := first*int64(width), end*int64(width)
		if err := backend.Diff(base[lo:hi], now[lo:hi], width, &ch); err != nil {
			return out, err
		}
		for _, k := range ch.Index {
			i := uint64(first) + uint64(k)
			out.idx = append(out.idx, i)
			up := false
			if width == 2 || width == 4 {
				up = elementValue(now, width, i) > elementValue(base, width, i)
			}
			out.up = append(out.up, up)
		}
	}
	return out, nil
}

// stepTracker keeps each tensor's changes of the last step seen, and sums the pairs of
// consecutive steps.
type stepTracker struct {
	last   map[string]stepChanges // "file/tensor" -> its changes in the last step
	sizes  map[string]int64
	bodies map[string][]byte // "file/tensor" -> the version-1 delta body of its last step
	Sum    stepPair
	Codec  codecSums // both delta body versions on the same steps (fig_delta_codec.go)
}

// observe diffs the safetensors files of cur against prev (the version before it) and adds the
// pair this step makes with the previous one, if observe saw that one.
func (t *stepTracker) observe(prev, cur map[string][]byte) error {
	if t.last == nil {
		t.last, t.sizes, t.bodies = map[string]stepChanges{}, map[string]int64{}, map[string][]byte{}
	}
	var names []string
	for name := range cur {
		if strings.HasSuffix(name, ".safetensors") {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	backend := delta.NewCPUDiff()
	next := map[string]stepChanges{}
	nextBodies := map[string][]byte{}
	var sum stepPair
	withContext := false
	for _, name := range names {
		p, ok := prev[name]
		if !ok {
			return fmt.Errorf("%s: not in the previous version", name)
		}
		c := cur[name]
		hp, err := delta.ReadHeader(bytes.NewReader(p), int64(len(p)))
		if err != nil {
			return fmt.Errorf("%s, previous version: %w", name, err)
		}
		hc, err := delta.ReadHeader(bytes.NewReader(c), int64(len(c)))
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		for _, tn := range hc.Tensors {
			tp, ok := hp.Tensor(tn.Name)
			if !ok || tp.DType != tn.DType || tp.ByteLen() != tn.ByteLen() {
				return fmt.Errorf("%s: tensor %s: not the same dtype and size in both versions", name, tn.Name)
			}
			width := tn.DType.Size()
			pt, ct := p[hp.DataStart()+tp.Begin:hp.DataStart()+tp.End], c[hc.DataStart()+tn.Begin:hc.DataStart()+tn.End]
			steps, err := tensorSteps(backend, pt, ct, width)
			if err != nil {
				return fmt.Errorf("%s: tensor %s: %w", name, tn.Name, err)
			}
			key := name + "/" + tn.Name
			n := tn.ByteLen() / int64(width)
			var prevBody []byte
			if before, ok := t.last[key]; ok && t.sizes[key] == n {
				sum.add(pairSteps(n, before, steps))
				prevBody, withContext = t.bodies[key], true
			}
			if nextBodies[key], err = t.Codec.addTensor(pt, ct, width, tn.DType.IsFloat(), prevBody); err != nil {
				return fmt.Errorf("%s: tensor %s: delta body versions: %w", name, tn.Name, err)
			}
			next[key] = steps
			t.sizes[key] = n
		}
	}
	if sum.Pairs > 0 {
		sum.Pairs = 1 // one pair of steps, over every tensor
	}
	t.Sum.add(sum)
	if withContext {
		t.Codec.Pairs++
	}
	t.last, t.bodies = next, nextBodies
	return nil
}

// differs reports whether the generator's statistics are off the real run's: either
// probability by more than a quarter of the real value, or the same-direction share by more
// than 5 points.
func (s stepPair) differs() []string {
	var out []string
	off := func(got, want float64) bool { return math.IsNaN(got) || math.Abs(got-want) > want/4 }
	if off(s.PAfterChange(), realPAfterChange) {
		out = append(out, fmt.Sprintf("P(change | changed) %.3f, the real run %.2f", s.PAfterChange(), realPAfterChange))
	}
	if off(s.PAfterNone(), realPAfterNone) {
		out = append(out, fmt.Sprintf("P(change | not) %.4f, the real run %.3f", s.PAfterNone(), realPAfterNone))
	}
	if d := s.SameDirection(); math.IsNaN(d) || math.Abs(d-realSameDir) > 0.05 {
		out = append(out, fmt.Sprintf("same direction %.1f%%, the real run %.0f%%", 100*d, 100*realSameDir))
	}
	return out
}

// contextRows are figure 1's rows for the statistics of consecutive steps at lr (the real
// run's numbers are for lr 3e-6).
func contextRows(s stepPair, lr float64) []Row {
	if s.Pairs == 0 {
		return []Row{{Figure: "1", Name: "  consecutive steps", Status: StatusSkip, Note: "fewer than three versions: no pair of steps"}}
	}
	real := fmt.Sprintf("a real RL run (GRPO, lr 3e-6): %.2f vs %.3f", realPAfterChange, realPAfterNone)
	verdict := ""
	if lr == deltaHighLR {
		if d := s.differs(); len(d) > 0 {
			verdict = "the generator DIFFERS from the real run: " + strings.Join(d, "; ")
		} else {
			verdict = "the generator is close to the real run (each within a quarter, direction within 5 points)"
		}
	} else {
		verdict = "the real run's numbers are for lr 3e-6"
	}
	detail := map[string]any{"steps": s, "p_after_change": s.PAfterChange(), "p_after_none": s.PAfterNone(),
		"same_direction": s.SameDirection(), "order0_bits": s.Order0Bits(), "context_bits": s.ContextBits()}
	return []Row{
		{Figure: "1", Name: "  P(change | changed last step), vs P(change | not)", Measured: s.PAfterChange(), Unit: "",
			Baseline: s.PAfterNone(), BaselineName: "P(change | not)",
			Note:   joinNote(fmt.Sprintf("%d pair(s) of steps, %d elements; %s (%.0fx)", s.Pairs, s.Total, real, realPAfterChange/realPAfterNone), verdict),
			Detail: detail},
		{Figure: "1", Name: "  changing twice in a row: same direction", Measured: 100 * s.SameDirection(), Unit: "%",
			Note: fmt.Sprintf("of %d elements changing in both steps; the real run %.0f%%", s.Both, 100*realSameDir)},
		{Figure: "1", Name: "  positions' bound with the previous step as context", Measured: s.ContextBits(), Unit: "bits/elt",
			Baseline: s.Order0Bits(), BaselineName: "order-0 bound H(p)/p",
			Note: fmt.Sprintf("(q·H(a) + (1-q)·H(b))/p; the real run %.2f -> %.2f bits", realBoundOrder0, realBoundContext)},
	}
}
