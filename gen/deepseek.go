package gen

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
)

// DeepSeek-V3 checkpoints (MoE.DeepSeek): the names, dtypes and fp8 block scales of
// deepseek-ai/DeepSeek-V3's safetensors. Every linear of the decoder layers is stored as
// float8_e4m3fn with a float32 weight_scale_inv per 128x128 block (amax/448 of the block of
// the fp32 master weights, as DeepSeek's weight quantization makes it, the fp8 value the
// master divided by it, rounded to nearest even); embeddings, norms, the routers and lm_head
// are bf16. Attention is multi-head latent attention (q_a_proj, q_a_layernorm, q_b_proj,
// kv_a_proj_with_mqa, kv_a_layernorm, kv_b_proj, o_proj), the first layers are dense
// (first_k_dense_replace, 3 as in DeepSeek-V3, fewer in shallow models), the others have the
// router (mlp.gate.weight, and its float32 e_score_correction_bias, which the load balancing
// moves and RL post-training leaves as it is), the routed experts and mlp.shared_experts.
// The multi-token-prediction layer is left out.

// fp8BlockSize is the side of DeepSeek-V3's quantization blocks (weight_block_size).
const fp8BlockSize = 128

// fp8Max is the largest float8_e4m3fn value.
const fp8Max = 448

// deepseekDenseLayers is first_k_dense_replace: DeepSeek-V3's 3, leaving one MoE layer at least.
func (c Config) deepseekDenseLayers() int { return max(0, min(3, c.Layers-1)) }

// mla returns the latent attention's widths, derived from the model's as DeepSeek-V3's are
// from its 7168 (q_lora_rank 1536, kv_lora_rank 512; head dims 128, 64 and 128).
func (c Config) mla() (qLora, kvLora, nope, rope, vHead int64) {
	d := int64(c.headDimSafe())
	h := int64(c.Hidden)
	return max(8, (h*3/14+7)/8*8), max(8, (h/14+7)/8*8), d, max(1, d/2), d
}

// deepseekCounts returns the tensors and parameters (scales not counted) of a DeepSeek model.
func (c Config) deepseekCounts() (tensors int, params int64) {
	h := int64(c.Hidden)
	heads := int64(c.Heads)
	qLora, kvLora, nope, rope, vHead := c.mla()
	attn := qLora*h + qLora + heads*(nope+rope)*qLora + (kvLora+rope)*h + kvLora + heads*(nope+vHead)*kvLora + h*heads*vHead
	e := c.MoE
	dense := int64(c.deepseekDenseLayers())
	moeLayers := int64(c.Layers) - dense
	params = dense*(attn+3*h*int64(c.Intermediate)+2*h) +
		moeLayers*(attn+int64(e.Experts)*(h+1)+int64(e.Experts)*3*h*int64(e.ExpertIntermediate)+3*h*int64(e.SharedIntermediate)+2*h)
	perMoE := 12 + 2 + 6*e.Experts + 2
	if e.SharedIntermediate > 0 {
		perMoE += 6
	}
	tensors = int(dense)*20 + int(moeLayers)*perMoE
	return tensors, params
}

// addDeepSeekLayer appends layer i's tensors in state_dict order.
func (c Config) addDeepSeekLayer(l *layout, i int, add func(name string, kind tensorKind, shape ...int64) int) {
	e := c.MoE
	h, heads := int64(c.Hidden), int64(c.Heads)
	qLora, kvLora, nope, rope, vHead := c.mla()
	p := fmt.Sprintf("model.layers.%d.", i)
	fp8 := func(name string, kind tensorKind, out, in int64) []int {
		w := add(name+".weight", kind, out, in)
		l.tensors[w].dtype = dtF8E4M3
		s := add(name+".weight_scale_inv", kindScale, (out+fp8BlockSize-1)/fp8BlockSize, (in+fp8BlockSize-1)/fp8BlockSize)
		l.tensors[s].dtype, l.tensors[s].of = dtF32, w
		return []int{w, s}
	}
	fp8(p+"self_attn.q_a_proj", kindAttention, qLora, h)
	add(p+"self_attn.q_a_layernorm.weight", kindNorm, qLora)
	fp8(p+"self_attn.q_b_proj", kindAttention, heads*(nope+rope), qLora)
	fp8(p+"self_attn.kv_a_proj_with_mqa", kindAttention, kvLora+rope, h)
	add(p+"self_attn.kv_a_layernorm.weight", kindNorm, kvLora)
	fp8(p+"self_attn.kv_b_proj", kindAttention, heads*(nope+vHead), kvLora)
	fp8(p+"self_attn.o_proj", kindAttention, h, heads*vHead)
	mlp := func(prefix string, kind tensorKind, width int64) []int {
		return append(append(fp8(prefix+"gate_proj", kind, width, h), fp8(prefix+"up_proj", kind, width, h)...), fp8(prefix+"down_proj", kind, h, width)...)
	}
	if i < c.deepseekDenseLayers() {
		mlp(p+"mlp.", kindMLP, int64(c.Intermediate))
	} else {
		for x := range e.Experts {
			for _, ti := range mlp(fmt.Sprintf("%smlp.experts.%d.", p, x), kindExpert, int64(e.ExpertIntermediate)) {
				l.tensors[ti].layer, l.tensors[ti].expert = i, x
			}
		}
		add(p+"mlp.gate.weight", kindRouter, int64(e.Experts), h)
		b := add(p+"mlp.gate.e_score_correction_bias", kindScoreBias, int64(e.Experts))
		l.tensors[b].dtype = dtF32
		if e.SharedIntermediate > 0 {
			mlp(p+"mlp.shared_experts.", kindMLP, int64(e.SharedIntermediate))
		}
	}
	add(p+"input_layernorm.weight", kindNorm, h)
	add(p+"post_attention_layernorm.weight", kindNorm, h)
}

// deepseekConfigJSON is the DeepseekV3Config of a DeepSeek model, with its fp8
// quantization_config.
func deepseekConfigJSON(c Config) map[string]any {
	e := c.MoE
	qLora, kvLora, nope, rope, vHead := c.mla()
	shared := 0
	if e.SharedIntermediate > 0 {
		shared = e.SharedIntermediate / e.ExpertIntermediate
	}
	return map[string]any{
		"architectures":           []string{"DeepseekV3ForCausalLM"},
		"attention_bias":          false,
		"attention_dropout":       json.Number("0.0"),
		"bos_token_id":            0,
		"eos_token_id":            1,
		"first_k_dense_replace":   c.deepseekDenseLayers(),
		"hidden_act":              "silu",
		"hidden_size":             c.Hidden,
		"initializer_range":       json.Number("0.02"),
		"intermediate_size":       c.Intermediate,
		"kv_lora_rank":            kvLora,
		"max_position_embeddings": 163840,
		"model_type":              "deepseek_v3",
		"moe_intermediate_size":   e.ExpertIntermediate,
		"n_group":                 1,
		"n_routed_experts":        e.Experts,
		"n_shared_experts":        shared,
		"norm_topk_prob":          true,
		"num_attention_heads":     c.Heads,
		"num_experts_per_tok":     e.TopK,
		"num_hidden_layers":       c.Layers,
		"num_key_value_heads":     c.Heads,
		"q_lora_rank":             qLora,
		"qk_nope_head_dim":        nope,
		"qk_rope_head_dim":        rope,
		"quantization_config": map[string]any{
			"activation_scheme": "dynamic",
			"fmt":               "e4m3",
			"quant_method":      "fp8",
			"weight_block_size": []int{fp8BlockSize, fp8BlockSize},
		},
		"rms_norm_eps":          json.Number("1e-06"),
		"rope_scaling":          nil,
		"rope_theta":            json.Number("10000.0"),
		"routed_scaling_factor": json.Number("2.5"),
		"scoring_func":          "sigmoid",
		"tie_word_embeddings":   false,
		"topk_group":            1,
		"topk_method":           "noaux_tc",
		"torch_dtype":           "bfloat16",
		"transformers_version":  transformersVersion,
		"use_cache":             true,
		"v_head_dim":            vHead,
		"vocab_size":            c.Vocab,
	}
}

// f32ToE4M3 rounds a float32 to float8_e4m3fn (bias 7, 3 mantissa bits, no infinities) with
// round-to-nearest-even, saturating at +-448 as DeepSeek's quantization (which divides by
// amax/448) never exceeds. Subnormals are multiples of 2^-9.
func f32ToE4M3(f float32) uint8 {
	b := math.Float32bits(f)
	sign := uint8(b>>24) & 0x80
	a := math.Float32frombits(b &^ 0x80000000)
	switch {
	case a != a: // NaN
		return sign | 0x7f
	case a >= fp8Max:
		return sign | 0x7e
	case a < 1.0/64: // below the smallest normal, 2^-6: a multiple of 2^-9, which may round up to it
		return sign | uint8(math.RoundToEven(float64(a)*512))
	}
	ab := math.Float32bits(a)
	ab += 0x7ffff + (ab>>20)&1 // round the 23-bit mantissa to 3 bits, carrying into the exponent
	exp := int(ab>>23) - 127 + 7
	code := uint8(exp)<<3 | uint8(ab>>20)&7
	if code > 0x7e {
		code = 0x7e
	}
	return sign | code
}

// e4m3ToF32 widens a float8_e4m3fn to float32 (exact).
func e4m3ToF32(q uint8) float32 {
	e, m := int(q>>3&0xf), float64(q&7)
	var v float64
	switch {
	case q&0x7f == 0x7f:
		v = math.NaN()
	case e == 0:
		v = m / 8 * math.Ldexp(1, -6)
	default:
		v = (1 + m/8) * math.Ldexp(1, e-7)
	}
	if q&0x80 != 0 {
		v = -v
	}
	return float32(v)
}

// quantizeBlocks returns the fp8 bytes and the float32 weight_scale_inv of the fp32 master
// weights w of an [out, in] tensor, block by block: scale = amax/448 (1 for an all-zero
// block), q = e4m3(w/scale).
func quantizeBlocks(w []float32, out, in int64) (q []byte, scales []float32) {
	rb, cb := (out+fp8BlockSize-1)/fp8BlockSize, (in+fp8BlockSize-1)/fp8BlockSize
	scales = make([]float32, rb*cb)
	for r := range out {
		row := w[r*in : (r+1)*in]
		for j, x := range row {
			k := r/fp8BlockSize*cb + int64(j)/fp8BlockSize
			scales[k] = max(scales[k], float32(math.Abs(float64(x))))
		}
	}
	for k, amax := range scales {
		if amax == 0 {
			scales[k] = 1
		} else {
			scales[k] = amax / fp8Max
		}
	}
	q = make([]byte, len(w))
	for r := range out {
		for j := range in {
			i := r*in + j
			q[i] = f32ToE4M3(w[i] / scales[r/fp8BlockSize*cb+j/fp8BlockSize])
		}
	}
	return q, scales
}

// quantCache hands out the quantized bytes of fp8 tensors: a block's scale needs the whole
// block, so the first range asked of a weight or its scale quantizes the whole tensor once,
// and the entry is dropped when all of both have been handed out.
type quantCache struct {
	lay     *layout
	master  func(s *scratch, ti int) []float32 // the fp32 master weights of tensor ti
	mu      sync.Mutex
	entries map[int]*quantEntry
}

type quantEntry struct {
	once   sync.Once
	q      []byte
	scales []byte // float32 little-endian
	left   atomic.Int64
}

func newQuantCache(lay *layout, master func(s *scratch, ti int) []float32) *quantCache {
	return &quantCache{lay: lay, master: master, entries: map[int]*quantEntry{}}
}

// put copies elements [lo, hi) of fp8 weight ti (scale false) or of its scale into dst.
func (qc *quantCache) put(s *scratch, ti int, scale bool, lo, hi int64, dst []byte) {
	qc.mu.Lock()
	e, ok := qc.entries[ti]
	if !ok {
		e = &quantEntry{}
		qc.entries[ti] = e
	}
	qc.mu.Unlock()
	e.once.Do(func() {
		t := &qc.lay.tensors[ti]
		q, scales := quantizeBlocks(qc.master(s, ti), t.shape[0], t.shape[1])
		e.q = q
		e.scales = make([]byte, 4*len(scales))
		for k, f := range scales {
			binary.LittleEndian.PutUint32(e.scales[4*k:], math.Float32bits(f))
		}
		e.left.Store(int64(len(e.q) + len(e.scales)))
	})
	var n int
	if scale {
		n = copy(dst, e.scales[4*lo:4*hi])
	} else {
		n = copy(dst, e.q[lo:hi])
	}
	// A scale element split by a write buffer's edge is asked for twice, so the count can
	// run out 4 bytes early; a later request then quantizes the tensor again (the same bytes).
	if e.left.Add(-int64(n)) <= 0 {
		qc.mu.Lock()
		if qc.entries[ti] == e {
			delete(qc.entries, ti)
		}
		qc.mu.Unlock()
	}
}

// storedSource turns a source of fp32 master weights by range (part) and of whole tensors
// (whole) into the bytes the checkpoint stores: bf16, fp8 and its scales, float32.
func storedSource(lay *layout, part func(s *scratch, ti int, lo, hi int64) []float32, whole func(s *scratch, ti int) []float32) tensorSource {
	qc := newQuantCache(lay, whole)
	return func(s *scratch, ti int, lo, hi int64, dst []byte) {
		t := &lay.tensors[ti]
		switch {
		case t.kind == kindScale:
			qc.put(s, t.of, true, lo, hi, dst)
		case t.dtype == dtF8E4M3:
			qc.put(s, ti, false, lo, hi, dst)
		case t.dtype == dtF32:
			for j, f := range part(s, ti, lo, hi) {
				binary.LittleEndian.PutUint32(dst[4*j:], math.Float32bits(f))
			}
		default:
			putBF16s(dst, part(s, ti, lo, hi))
		}
	}
}
