package main

import (
	"fmt"
	"math"

	"github.com/weightfs/weightfs/delta"
)

// Figure 1's side-by-side of the two delta body versions (docs/format.md Part II): every
// tensor's step is encoded in memory by the codec as version 1 (no context) and as version 2
// (against the step before of the same tensor), on the same changes, and summed with the
// bounds: order-0 (the positions' H(p)/p plus the values' entropy, what a coder without
// context can reach) and the bound of version 2's model (its three classes of elements, each
// with its own density and its own value statistics).

// deltaGoalV2 is the goal of the delta size at lr 3e-6, in stored bytes per changed element.
const deltaGoalV2 = 1.00

// The classes of version 2 (delta/sparse2_block.go): elements the context changed by one
// step, by more, and not at all.
const (
	codecA1 = iota
	codecA2
	codecB
	codecClasses
)

// codecSums sums, over the tensors of the step pairs seen, the bytes of both versions and the
// statistics of the bounds.
type codecSums struct {
	Pairs    int   `json:"step_pairs"`
	Elements int64 `json:"elements"`
	Changed  int64 `json:"changed"`
	V1Bytes  int64 `json:"v1_bytes"`
	V2Bytes  int64 `json:"v2_bytes"`
	// Per class: candidates (context changes of the class; for B, the other elements) and
	// the changes among them.
	Cand    [codecClasses]int64 `json:"class_candidates"`
	Members [codecClasses]int64 `json:"class_changes"`
	// The class's stored values (version 2's mapping) and all value codes, counted.
	vals  [codecClasses]map[uint64]int64
	codes map[uint64]int64
}

// blockChanges are a decoded body's changes: absolute positions and value codes.
type blockChanges struct {
	pos   []int64
	codes []uint64
}

func decodedChanges(body []byte, ctx delta.ContextFunc) (blockChanges, error) {
	var out blockChanges
	d, err := delta.OpenDelta(body)
	if err != nil {
		return out, err
	}
	d.SetContext(ctx)
	lo, hi := d.BlockRange(0, d.Info().Elements)
	for b := lo; b <= hi; b++ {
		db, err := d.DecodeBlock(b)
		if err != nil {
			return out, err
		}
		for i := range db.Changes() {
			out.pos = append(out.pos, db.Start()+int64(db.Position(i)))
			out.codes = append(out.codes, db.Code(i))
		}
	}
	return out, nil
}

// contextValue is the number version 2 stores for a change with value code code of an element
// the context changed with value code c (docs/format.md Part II, "Version 2"): zigzag(s*d -
// |dc|) at the element's width.
func contextValue(code, c uint64, width int) uint64 {
	mask := uint64(math.MaxUint64)
	if width < 8 {
		mask = 1<<(8*uint(width)) - 1
	}
	sign := (mask >> 1) + 1
	unzig := func(z uint64) uint64 {
		d := z >> 1
		if z&1 != 0 {
			d ^= mask
		}
		return d
	}
	d := unzig(code)
	if c&1 != 0 {
		d = -d & mask
	}
	e := (d - (c>>1 + c&1)) & mask
	z := (e << 1) & mask
	if e&sign != 0 {
		z ^= mask
	}
	return z
}

// addTensor encodes one tensor's step (base -> cur, width bytes per element) as version 1 and,
// when prev (the version-1 body of the step before) is given, as version 2 against it; only a
// step with a context is summed. It returns the version-1 body, the next step's context.
func (s *codecSums) addTensor(base, cur []byte, width int, float bool, prev []byte) ([]byte, error) {
	v1, err := delta.EncodeDelta(nil, base, cur, width, float)
	if err != nil {
		return nil, err
	}
	if prev == nil {
		return v1, nil
	}
	pd, err := delta.OpenDelta(prev)
	if err != nil {
		return nil, err
	}
	elements := int64(len(base) / width)
	enc := delta.NewDeltaEncoder(width, float, elements)
	enc.SetContext(pd.AsContext())
	for off := 0; off < len(base); off += delta.DiffChunkBytes {
		end := min(off+delta.DiffChunkBytes, len(base))
		if _, err := enc.AddDiff(int64(off/width), base[off:end], cur[off:end]); err != nil {
			return nil, err
		}
	}
	v2, err := enc.Finish()
	if err != nil {
		return nil, err
	}
	// The version-2 body must decode to the version-1 body's changes.
	now, err := decodedChanges(v2, pd.AsContext())
	if err != nil {
		return nil, fmt.Errorf("decode version 2: %w", err)
	}
	check, err := decodedChanges(v1, nil)
	if err != nil {
		return nil, err
	}
	if len(now.pos) != len(check.pos) {
		return nil, fmt.Errorf("version 2 decodes to %d changes, version 1 to %d", len(now.pos), len(check.pos))
	}
	for i := range now.pos {
		if now.pos[i] != check.pos[i] || now.codes[i] != check.codes[i] {
			return nil, fmt.Errorf("version 2 and version 1 differ at change %d", i)
		}
	}
	before, err := decodedChanges(prev, nil)
	if err != nil {
		return nil, err
	}
	if s.codes == nil {
		s.codes = map[uint64]int64{}
		for c := range s.vals {
			s.vals[c] = map[uint64]int64{}
		}
	}
	ctx := make(map[int64]uint64, len(before.pos))
	for i, p := range before.pos {
		ctx[p] = before.codes[i]
		s.Cand[codecClass(before.codes[i])]++
	}
	s.Cand[codecB] += elements - int64(len(before.pos))
	for i, p := range now.pos {
		code := now.codes[i]
		s.codes[code]++
		if c, ok := ctx[p]; ok {
			cl := codecClass(c)
			s.Members[cl]++
			s.vals[cl][contextValue(code, c, width)]++
		} else {
			s.Members[codecB]++
			s.vals[codecB][code]++
		}
	}
	s.Elements += elements
	s.Changed += int64(len(now.pos))
	s.V1Bytes += int64(len(v1))
	s.V2Bytes += int64(len(v2))
	return v1, nil
}

func codecClass(c uint64) int {
	if c <= 2 {
		return codecA1
	}
	return codecA2
}

// histBits is the total information of the counted symbols at their empirical entropy, in
// bits.
func histBits(h map[uint64]int64) float64 {
	var n int64
	for _, c := range h {
		n += c
	}
	bits := 0.0
	for _, c := range h {
		bits -= float64(c) * math.Log2(float64(c)/float64(n))
	}
	return bits
}

// Order0Bytes is the order-0 bound per changed element: H(p)/p for the positions plus the
// entropy of the value codes.
func (s codecSums) Order0Bytes() float64 {
	if s.Changed == 0 {
		return math.NaN()
	}
	return (positionBoundBits(s.Changed, s.Elements) + histBits(s.codes)/float64(s.Changed)) / 8
}

// ContextBytes is the bound of version 2's model per changed element: each class's positions
// at the class's density over its candidates, each class's stored values at their entropy.
func (s codecSums) ContextBytes() float64 {
	if s.Changed == 0 {
		return math.NaN()
	}
	bits := 0.0
	for c := range codecClasses {
		bits += float64(s.Members[c])*positionBoundBits(s.Members[c], s.Cand[c]) + histBits(s.vals[c])
	}
	return bits / float64(s.Changed) / 8
}

// codecRows are figure 1's rows for the two versions at lr, side by side.
func codecRows(s codecSums, lr float64) []Row {
	if s.Pairs == 0 || s.Changed == 0 {
		return []Row{{Figure: "1", Name: "  delta body versions 1 and 2", Status: StatusSkip, Note: "fewer than three versions: no step with a context"}}
	}
	per := func(n int64) float64 { return float64(n) / float64(s.Changed) }
	var goal *Goal
	goalNote := fmt.Sprintf("the goal of %.2f B/elt is set at lr 3e-6", deltaGoalV2)
	if lr == deltaHighLR {
		goal, goalNote = atMost(deltaGoalV2, "B/elt"), ""
	}
	how := fmt.Sprintf("codec in memory, the same %d changes of %d step pair(s): version 1 alone, version 2 against the step before", s.Changed, s.Pairs)
	detail := map[string]any{"sums": s, "order0_bytes": s.Order0Bytes(), "context_bytes": s.ContextBytes()}
	return []Row{
		{Figure: "1", Name: fmt.Sprintf("  delta body version 2 (context: the step before), lr %g", lr), Measured: per(s.V2Bytes), Unit: "B/elt",
			Baseline: per(s.V1Bytes), BaselineName: "version 1", Goal: goal, Note: joinNote(how, goalNote), Detail: detail},
		{Figure: "1", Name: "  delta body version 1 (no context), the same changes", Measured: per(s.V1Bytes), Unit: "B/elt", Goal: goal,
			Note: joinNote(fmt.Sprintf("order-0 bound %.3f B/elt: version 1 is %.1f%% above it", s.Order0Bytes(), 100*(per(s.V1Bytes)/s.Order0Bytes()-1)), goalNote)},
		{Figure: "1", Name: "  order-0 bound (H(p)/p + value entropy)", Measured: s.Order0Bytes(), Unit: "B/elt", Goal: goal,
			Note: "what a coder without context can reach at best"},
		{Figure: "1", Name: "  bound of version 2's classes", Measured: s.ContextBytes(), Unit: "B/elt", Goal: goal,
			Note: fmt.Sprintf("each class at its own density and value entropy; version 2 is %.1f%% above it", 100*(per(s.V2Bytes)/s.ContextBytes()-1))},
	}
}
