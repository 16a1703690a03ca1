package gen

import (
	"encoding/json"
	"fmt"
)

// MoE makes every layer's MLP a mixture of experts, named as Hugging Face's Qwen MoE models
// write them:
//
//	model.layers.L.mlp.gate.weight                          router, [Experts, Hidden]
//	model.layers.L.mlp.experts.E.{gate,up,down}_proj.weight  routed experts
//	model.layers.L.mlp.shared_expert.{gate,up,down}_proj.weight, model.layers.L.mlp.shared_expert_gate.weight
//	                                                         (Qwen2-MoE, with a shared expert)
//
// Attention and norms are the dense model's; Qwen3-MoE adds self_attn.q_norm/k_norm, Qwen2-MoE
// adds q/k/v biases, as those models have them.
//
// Routing: at every optimizer step the router of each layer picks TopK of its Experts (a
// top-k of seeded scores per layer and step). Routed experts get the dense model's simulated
// gradient; the others get a zero gradient, as the flat gradient buffers of RL trainers
// (FSDP, DeepSpeed) hold zeros for experts no token reached, so they still move: Adam's first
// moment decays by beta1 and the step divides it by the slowly decaying second moment, a
// smaller update that shrinks the longer an expert goes unrouted. Routers, shared experts,
// attention, embeddings and norms get a gradient every step. Version 1's warm moments follow
// the same routing over the steps before it: an expert last routed n steps before version 1
// starts with its moments decayed by beta1^n and beta2^n.
type MoE struct {
	// Experts is the number of routed experts per layer (num_experts); 0 is a dense model.
	Experts int
	// TopK is num_experts_per_tok, and the number of experts of each layer a step routes to.
	TopK int
	// ExpertIntermediate is the width of each routed expert (moe_intermediate_size).
	ExpertIntermediate int
	// SharedIntermediate is the width of the shared expert (shared_expert_intermediate_size);
	// 0: none. A shared expert makes the model a Qwen2-MoE, without one a Qwen3-MoE.
	// With DeepSeek it is n_shared_experts times ExpertIntermediate.
	SharedIntermediate int
	// DeepSeek names and stores the model as DeepSeek-V3 does: multi-head latent attention,
	// dense first layers, fp8 e4m3 linears with float32 weight_scale_inv per 128x128 block
	// (see deepseek.go).
	DeepSeek bool
}

// enabled reports whether the model is a mixture of experts.
func (e MoE) enabled() bool { return e.Experts > 0 }

// qwen2 reports whether the model is named and configured as a Qwen2-MoE (it has a shared
// expert) rather than a Qwen3-MoE.
func (e MoE) qwen2() bool { return e.SharedIntermediate > 0 && !e.DeepSeek }

// validateMoE checks the MoE fields of c (all zero for a dense model).
func (c Config) validateMoE() error {
	e := c.MoE
	if !e.enabled() {
		if e != (MoE{}) {
			return fmt.Errorf("%w: top-k %d, expert and shared intermediate sizes %d and %d need experts", ErrBadConfig, e.TopK, e.ExpertIntermediate, e.SharedIntermediate)
		}
		return nil
	}
	switch {
	case e.Experts > maxExperts:
		return fmt.Errorf("%w: %d experts per layer (at most %d)", ErrBadConfig, e.Experts, maxExperts)
	case e.TopK < 1 || e.TopK > e.Experts:
		return fmt.Errorf("%w: top-k %d must be between 1 and the %d experts", ErrBadConfig, e.TopK, e.Experts)
	case e.ExpertIntermediate < 1:
		return fmt.Errorf("%w: expert intermediate size %d must be positive", ErrBadConfig, e.ExpertIntermediate)
	case e.SharedIntermediate < 0:
		return fmt.Errorf("%w: shared expert intermediate size %d is negative", ErrBadConfig, e.SharedIntermediate)
	case e.DeepSeek && e.SharedIntermediate%e.ExpertIntermediate != 0:
		return fmt.Errorf("%w: DeepSeek's shared experts are whole experts: %d is not a multiple of the expert width %d", ErrBadConfig, e.SharedIntermediate, e.ExpertIntermediate)
	}
	return nil
}

// maxExperts bounds the experts of one layer (DeepSeek-V3 has 256, the largest models 384).
const maxExperts = 4096

// moeTensorsPerLayer is the number of tensors of one MoE layer.
func (c Config) moeTensorsPerLayer() int {
	e := c.MoE
	n := 4 + 2 + 1 + 3*e.Experts // attention, the two layer norms, router, experts
	if e.qwen2() {
		n += 3 + 3 + 1 // q/k/v biases, shared expert, shared expert gate
	} else {
		n += 2 // q_norm, k_norm
	}
	return n
}

// moeLayerParams is the number of parameters of one MoE layer.
func (c Config) moeLayerParams() int64 {
	e := c.MoE
	h, hd := int64(c.Hidden), int64(c.headDimSafe())
	q, kv := int64(c.Heads)*hd, int64(c.KVHeads)*hd
	n := 2*h*q + 2*h*kv + 2*h // attention, layer norms
	n += int64(e.Experts) * h // router
	n += int64(e.Experts) * 3 * h * int64(e.ExpertIntermediate)
	if e.qwen2() {
		n += q + 2*kv                            // biases
		n += 3*h*int64(e.SharedIntermediate) + h // shared expert and its gate
	} else {
		n += 2 * hd // q_norm, k_norm
	}
	return n
}

// addMoELayer appends layer i's tensors in state_dict order (the order of the HF modules'
// __init__): attention, router, experts, shared expert, norms.
func (c Config) addMoELayer(l *layout, i int, add func(name string, kind tensorKind, shape ...int64) int) {
	e := c.MoE
	h, hd := int64(c.Hidden), int64(c.headDim())
	q, kv := int64(c.Heads)*hd, int64(c.KVHeads)*hd
	p := fmt.Sprintf("model.layers.%d.", i)
	proj := func(name string, out, bias int64) {
		add(p+"self_attn."+name+".weight", kindAttention, out, h)
		if e.qwen2() && bias > 0 {
			add(p+"self_attn."+name+".bias", kindAttention, bias)
		}
	}
	proj("q_proj", q, q)
	proj("k_proj", kv, kv)
	proj("v_proj", kv, kv)
	add(p+"self_attn.o_proj.weight", kindAttention, h, q)
	if !e.qwen2() {
		add(p+"self_attn.q_norm.weight", kindNorm, hd)
		add(p+"self_attn.k_norm.weight", kindNorm, hd)
	}
	add(p+"mlp.gate.weight", kindRouter, int64(e.Experts), h)
	in := int64(e.ExpertIntermediate)
	for x := range e.Experts {
		ep := fmt.Sprintf("%smlp.experts.%d.", p, x)
		for _, ti := range []int{
			add(ep+"gate_proj.weight", kindExpert, in, h),
			add(ep+"up_proj.weight", kindExpert, in, h),
			add(ep+"down_proj.weight", kindExpert, h, in),
		} {
			l.tensors[ti].layer, l.tensors[ti].expert = i, x
		}
	}
	if e.qwen2() {
		sh := int64(e.SharedIntermediate)
		add(p+"mlp.shared_expert.gate_proj.weight", kindMLP, sh, h)
		add(p+"mlp.shared_expert.up_proj.weight", kindMLP, sh, h)
		add(p+"mlp.shared_expert.down_proj.weight", kindMLP, h, sh)
		add(p+"mlp.shared_expert_gate.weight", kindRouter, 1, h)
	}
	add(p+"input_layernorm.weight", kindNorm, h)
	add(p+"post_attention_layernorm.weight", kindNorm, h)
}

// routerKey is the key of layer i's router: its routing decisions are drawn from it.
func routerKey(seed uint64, layer int) uint64 {
	return nameKey(seed, fmt.Sprintf("model.layers.%d.mlp.gate.weight", layer))
}

// routing is the experts one step routes to: routed[layer][expert]. nil for a dense model.
type routing [][]bool

// routes reports whether t gets a gradient in the step r describes.
func (r routing) routes(t *tensorSpec) bool {
	return t.expert < 0 || r[t.layer][t.expert]
}

// routingAt returns the routing of absolute step run (1-based: step run of the simulated
// run, version 1 being taken after warmStartSteps of them), nil for a dense model.
func routingAt(c Config, run int) routing {
	if !c.MoE.enabled() {
		return nil
	}
	r := make(routing, c.Layers)
	best := make([]int, 0, c.MoE.TopK)
	for layer := range r {
		r[layer] = routedExperts(c, layer, run, best)
	}
	return r
}

// routedExperts draws layer's router scores for step run and marks the TopK highest (ties,
// which 64-bit scores practically never have, go to the lower index). best is scratch of
// capacity TopK. The selection keeps the TopK best so far in order, in one pass over the
// scores: the version-1 routing history draws hundreds of steps for every layer.
func routedExperts(c Config, layer, run int, best []int) []bool {
	s := newStream(routerKey(c.Seed, layer), purposeRoute, uint64(run))
	scores := make([]uint64, c.MoE.Experts)
	best = best[:0]
	for x := range scores {
		sc := s.at(uint64(x))
		scores[x] = sc
		if len(best) == c.MoE.TopK && sc <= scores[best[len(best)-1]] {
			continue // not above the K-th best (a tie keeps the lower index, already there)
		}
		i := len(best)
		for i > 0 && scores[best[i-1]] < sc {
			i--
		}
		if len(best) < c.MoE.TopK {
			best = append(best, 0)
		}
		copy(best[i+1:], best[i:len(best)-1])
		best[i] = x
	}
	routed := make([]bool, len(scores))
	for _, x := range best {
		routed[x] = true
	}
	return routed
}

// warmIdleSteps returns, per layer and expert, how many steps before version 1 the expert was
// last routed (0: routed by the step that made version 1; warmStartSteps: never in the run).
func warmIdleSteps(c Config) [][]int {
	idle := make([][]int, c.Layers)
	best := make([]int, 0, c.MoE.TopK)
	for layer := range idle {
		idle[layer] = make([]int, c.MoE.Experts)
		found := 0
		for x := range idle[layer] {
			idle[layer][x] = -1
		}
		for run := warmStartSteps; run >= 1 && found < c.MoE.Experts; run-- {
			for x, ok := range routedExperts(c, layer, run, best) {
				if ok && idle[layer][x] < 0 {
					idle[layer][x] = warmStartSteps - run
					found++
				}
			}
		}
		for x := range idle[layer] {
			if idle[layer][x] < 0 {
				idle[layer][x] = warmStartSteps
			}
		}
	}
	return idle
}

// moeConfigJSON is the Qwen3MoeConfig (or, with a shared expert, Qwen2MoeConfig) that
// save_pretrained writes for an MoE model: every layer sparse, as in the released models.
func moeConfigJSON(c Config) map[string]any {
	e := c.MoE
	m := map[string]any{
		"architectures":           []string{"Qwen3MoeForCausalLM"},
		"attention_bias":          false,
		"attention_dropout":       json.Number("0.0"),
		"bos_token_id":            151643,
		"decoder_sparse_step":     1,
		"eos_token_id":            151645,
		"head_dim":                c.headDim(),
		"hidden_act":              "silu",
		"hidden_size":             c.Hidden,
		"initializer_range":       json.Number("0.02"),
		"intermediate_size":       c.Intermediate,
		"max_position_embeddings": 40960,
		"max_window_layers":       c.Layers,
		"mlp_only_layers":         []int{},
		"model_type":              "qwen3_moe",
		"moe_intermediate_size":   e.ExpertIntermediate,
		"norm_topk_prob":          true,
		"num_attention_heads":     c.Heads,
		"num_experts":             e.Experts,
		"num_experts_per_tok":     e.TopK,
		"num_hidden_layers":       c.Layers,
		"num_key_value_heads":     c.KVHeads,
		"output_router_logits":    false,
		"rms_norm_eps":            json.Number("1e-06"),
		"rope_scaling":            nil,
		"rope_theta":              json.Number("1000000.0"),
		"router_aux_loss_coef":    json.Number("0.001"),
		"sliding_window":          nil,
		"tie_word_embeddings":     false,
		"torch_dtype":             "bfloat16",
		"transformers_version":    transformersVersion,
		"use_cache":               true,
		"use_sliding_window":      false,
		"vocab_size":              c.Vocab,
	}
	if e.qwen2() {
		m["architectures"] = []string{"Qwen2MoeForCausalLM"}
		m["model_type"] = "qwen2_moe"
		m["norm_topk_prob"] = false
		m["shared_expert_intermediate_size"] = e.SharedIntermediate
		delete(m, "attention_bias")
		delete(m, "head_dim")
	}
	return m
}
