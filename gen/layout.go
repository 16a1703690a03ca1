package gen

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

// tensorKind selects how a tensor is initialised and how strong its gradient signal is.
type tensorKind int

const (
	kindEmbedding tensorKind = iota // model.embed_tokens.weight
	kindAttention                   // q, k, v, o projections
	kindMLP                         // gate, up, down projections
	kindNorm                        // RMSNorm weights (initialised to 1.0)
	kindHead                        // lm_head.weight
	kindExpert                      // a routed expert's gate, up, down projections (MoE)
	kindRouter                      // an MoE router (mlp.gate) or shared expert gate
	kindScale                       // an fp8 weight's weight_scale_inv (DeepSeek)
	kindScoreBias                   // DeepSeek's router e_score_correction_bias
)

// tensorSpec is one tensor of the model and the constants of its simulated gradients.
type tensorSpec struct {
	name   string
	shape  []int64 // as HF stores it: [out, in] for linears, [n] for norms
	numel  int64
	rowLen int64 // elements per row (the last dimension); rows get their own signal strength
	kind   tensorKind
	key    uint64 // nameKey(seed, name): root of all of this tensor's random streams

	// gradScale is the tensor's gradient magnitude. Adam divides it out except against eps,
	// so it matters only where it is small; it is here so gradients have realistic sizes.
	gradScale float32
	// snr is the ratio of the persistent per-element signal to the per-step noise. It sets
	// how consistently an element moves and so, with the learning rate, how many bf16
	// values change per step.
	snr float32

	// layer and expert place a routed expert's tensor (expert is -1 for every other tensor):
	// it gets a gradient only in the steps whose routing names it.
	layer, expert int
	// warmIdle is how many steps before version 1 a routed expert was last routed; its warm
	// Adam moments are decayed by that many zero-gradient steps.
	warmIdle int
	// warmDecay1 and warmDecay2 are beta1^warmIdle and beta2^warmIdle in float32.
	warmDecay1, warmDecay2 float32

	// dtype is how the checkpoint stores the tensor: bf16 unless the model is fp8 (DeepSeek).
	dtype dtype
	// of is, for a weight_scale_inv tensor, the index of the fp8 weight it scales.
	of int
}

// dtype is a safetensors element type the generator writes.
type dtype uint8

const (
	dtBF16 dtype = iota
	dtF8E4M3
	dtF32
)

// String is the safetensors spelling of d.
func (d dtype) String() string {
	switch d {
	case dtF8E4M3:
		return "F8_E4M3"
	case dtF32:
		return "F32"
	}
	return "BF16"
}

// size is the width of one element in bytes.
func (d dtype) size() int64 {
	switch d {
	case dtF8E4M3:
		return 1
	case dtF32:
		return 4
	}
	return 2
}

// bytes is the size of the tensor as stored.
func (t *tensorSpec) bytes() int64 { return t.dtype.size() * t.numel }

// frozen reports whether t has no optimizer state of its own: a scale derived from its
// weight, or DeepSeek's router bias, which the load balancing (not the gradient) moves and
// which RL post-training leaves as it is.
func (t *tensorSpec) frozen() bool { return t.kind == kindScale || t.kind == kindScoreBias }

// Per-kind signal-to-noise ratios, tuned so that a step at lr 3e-6 changes ~2-3% of the bf16
// elements and a step at lr 1e-6 ~0.5-1% (see gen_test.go for the measured figures).
var snrByKind = [...]float32{
	kindEmbedding: 0.04,
	kindAttention: 0.05,
	kindMLP:       0.05,
	kindNorm:      0.08,
	kindHead:      0.05,
	kindExpert:    0.05,
	kindRouter:    0.05,
	kindScale:     0.05, // unused: scales have no state of their own
	kindScoreBias: 0.05, // unused: frozen
}

// layout is the model's tensors in state_dict order and their assignment to files.
type layout struct {
	tensors []tensorSpec // state_dict (module) order, as save_pretrained walks it
	// files[k] lists the tensors of the k-th safetensors file in the order their bytes are
	// stored (sorted by name, as the safetensors serializer does).
	files [][]int
}

// validate checks that the shapes fit together and the run parameters are usable.
func (c Config) validate() error {
	switch {
	case c.Layers < 1 || c.Hidden < 1 || c.Intermediate < 1 || c.Heads < 1 || c.KVHeads < 1 || c.Vocab < 1:
		return fmt.Errorf("%w: layers, hidden, intermediate, heads, kv heads and vocab must all be positive (got %d, %d, %d, %d, %d, %d)",
			ErrBadConfig, c.Layers, c.Hidden, c.Intermediate, c.Heads, c.KVHeads, c.Vocab)
	case c.Hidden%c.Heads != 0:
		return fmt.Errorf("%w: hidden size %d is not a multiple of %d heads", ErrBadConfig, c.Hidden, c.Heads)
	case c.Heads%c.KVHeads != 0:
		return fmt.Errorf("%w: %d heads are not a multiple of %d kv heads", ErrBadConfig, c.Heads, c.KVHeads)
	case !(c.LR > 0) || math.IsInf(c.LR, 0):
		return fmt.Errorf("%w: learning rate %v must be a finite positive number", ErrBadConfig, c.LR)
	case c.Shards < 0:
		return fmt.Errorf("%w: shards %d is negative", ErrBadConfig, c.Shards)
	case c.Workers < 0:
		return fmt.Errorf("%w: workers %d is negative", ErrBadConfig, c.Workers)
	}
	if err := c.validateMoE(); err != nil {
		return err
	}
	if p := c.ParamCount(); p <= 0 || p > maxParams {
		return fmt.Errorf("%w: %d parameters is out of range (at most %d)", ErrBadConfig, p, int64(maxParams))
	}
	if n := c.numTensors(); c.shards() > n {
		return fmt.Errorf("%w: %d shards for only %d tensors", ErrBadConfig, c.Shards, n)
	}
	return nil
}

// maxParams bounds configs so that element counts and byte offsets never overflow and a
// typo does not ask for a petabyte.
const maxParams = 1 << 40

func (c Config) shards() int { return max(c.Shards, 1) }

func (c Config) numTensors() int {
	switch {
	case c.MoE.DeepSeek && c.MoE.enabled():
		n, _ := c.deepseekCounts()
		return n + 3
	case c.MoE.enabled():
		return c.moeTensorsPerLayer()*c.Layers + 3
	}
	return 9*c.Layers + 3
}

// headDim is the width of one attention head.
func (c Config) headDim() int { return c.Hidden / c.Heads }

// ParamCount is the number of parameters of the model c describes (guarding against
// overflow is left to validate's bounds on the result; the inputs are ints).
func (c Config) ParamCount() int64 {
	h, in, v := int64(c.Hidden), int64(c.Intermediate), int64(c.Vocab)
	kv := int64(c.KVHeads) * int64(c.headDimSafe())
	perLayer := 2*h*h + 2*h*kv + 3*h*in + 2*h
	switch {
	case c.MoE.DeepSeek && c.MoE.enabled():
		_, n := c.deepseekCounts()
		return 2*v*h + n + h
	case c.MoE.enabled():
		perLayer = c.moeLayerParams()
	}
	return 2*v*h + int64(c.Layers)*perLayer + h
}

// headDimSafe is headDim that tolerates a zero head count (ParamCount runs before validation).
func (c Config) headDimSafe() int {
	if c.Heads <= 0 {
		return 0
	}
	return c.Hidden / c.Heads
}

// newLayout lists the tensors of a validated config and assigns them to files.
func newLayout(c Config) *layout {
	h, in, v := int64(c.Hidden), int64(c.Intermediate), int64(c.Vocab)
	q := int64(c.Heads) * int64(c.headDim())
	kv := int64(c.KVHeads) * int64(c.headDim())
	l := &layout{}
	add := func(name string, kind tensorKind, shape ...int64) int {
		t := tensorSpec{name: name, shape: shape, kind: kind, key: nameKey(c.Seed, name), expert: -1}
		t.numel = 1
		for _, d := range shape {
			t.numel *= d
		}
		t.rowLen = shape[len(shape)-1]
		tensorRandom := newStream(t.key, purposeTensor, 0)
		u := uniform(tensorRandom.at(0))
		t.gradScale = float32(1e-5) * (1 + float32(float32(63*u)*u)) // 1e-5 .. 6.4e-4; conversions: no FMA
		t.snr = snrByKind[kind] * (0.6 + float32(0.8*uniform(tensorRandom.at(1))))
		l.tensors = append(l.tensors, t)
		return len(l.tensors) - 1
	}
	add("model.embed_tokens.weight", kindEmbedding, v, h)
	for i := range c.Layers {
		switch {
		case c.MoE.DeepSeek && c.MoE.enabled():
			c.addDeepSeekLayer(l, i, add)
			continue
		case c.MoE.enabled():
			c.addMoELayer(l, i, add)
			continue
		}
		p := fmt.Sprintf("model.layers.%d.", i)
		add(p+"self_attn.q_proj.weight", kindAttention, q, h)
		add(p+"self_attn.k_proj.weight", kindAttention, kv, h)
		add(p+"self_attn.v_proj.weight", kindAttention, kv, h)
		add(p+"self_attn.o_proj.weight", kindAttention, h, q)
		add(p+"mlp.gate_proj.weight", kindMLP, in, h)
		add(p+"mlp.up_proj.weight", kindMLP, in, h)
		add(p+"mlp.down_proj.weight", kindMLP, h, in)
		add(p+"input_layernorm.weight", kindNorm, h)
		add(p+"post_attention_layernorm.weight", kindNorm, h)
	}
	add("model.norm.weight", kindNorm, h)
	add("lm_head.weight", kindHead, v, h)
	if c.MoE.enabled() {
		idle := warmIdleSteps(c)
		for i := range l.tensors {
			if t := &l.tensors[i]; t.expert >= 0 {
				t.warmIdle = idle[t.layer][t.expert]
				t.warmDecay1 = float32(powInt(adamBeta1, t.warmIdle))
				t.warmDecay2 = float32(powInt(adamBeta2, t.warmIdle))
			}
		}
	}

	for _, group := range splitShards(l.tensors, c.shards()) {
		slices.SortFunc(group, func(a, b int) int { return strings.Compare(l.tensors[a].name, l.tensors[b].name) })
		l.files = append(l.files, group)
	}
	return l
}

// splitShards cuts the tensors, in state_dict order, into n contiguous non-empty groups of
// about equal bytes, as save_pretrained's max_shard_size splitting does (it fills a shard in
// module order until the next tensor would not fit). Requires 1 <= n <= len(tensors).
func splitShards(tensors []tensorSpec, n int) [][]int {
	var total int64
	for i := range tensors {
		total += tensors[i].bytes()
	}
	groups := make([][]int, n)
	shard := 0
	var before int64 // bytes of all tensors before the current one
	for i := range tensors {
		size := tensors[i].bytes()
		remainingTensors := len(tensors) - i
		shardsAfter := n - 1 - shard
		if len(groups[shard]) > 0 && shardsAfter > 0 {
			// Move on when the tensor's midpoint lies past this shard's share of the bytes,
			// or when every remaining tensor is needed to fill the remaining shards.
			pastShare := (before+size/2)*int64(n) >= total*int64(shard+1)
			if pastShare || remainingTensors <= shardsAfter {
				shard++
			}
		}
		groups[shard] = append(groups[shard], i)
		before += size
	}
	return groups
}

// fileNames are the safetensors files of the layout, in order.
func (l *layout) fileNames() []string {
	if len(l.files) == 1 {
		return []string{"model.safetensors"}
	}
	names := make([]string, len(l.files))
	for k := range names {
		names[k] = fmt.Sprintf("model-%05d-of-%05d.safetensors", k+1, len(l.files))
	}
	return names
}

// totalBytes is the size of all tensor data (the index's total_size).
func (l *layout) totalBytes() int64 {
	var n int64
	for i := range l.tensors {
		n += l.tensors[i].bytes()
	}
	return n
}
