package gen

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
)

// goldenMoE pins the bytes of the MoE presets (lr 3e-6, seed 1) at versions 1 and 4, as
// goldenTiny does for the dense model: only update it on purpose.
var goldenMoE = map[string]map[int]string{
	"tiny-moe":        {0: "1c8ceab666f06889a465f23f9bf45329ad568f92b94caa0baca96a79e32cb660", 3: "fcac6a13c2c6cf5e337e7776e4c43972263287d3b5b1ec26f3677eadec7a4c2c"},
	"tiny-moe-shared": {0: "ef2660c246c27cc7bd27f10d60f4a763c6cb2ef33ba946d41e6735500d454980", 3: "c65a42d87e6907b9549c34a0c8f6001614635e6c2dac3908d37f9768713eb4f3"},
}

// moeShape is a Qwen3-MoE-like shape with tiny widths, for tests of names and counts.
func moeShape(layers, experts, topK, shared int) Config {
	return Config{Layers: layers, Hidden: 16, Intermediate: 48, Heads: 4, KVHeads: 2, Vocab: 128, LR: 3e-6, Seed: 1,
		MoE: MoE{Experts: experts, TopK: topK, ExpertIntermediate: 8, SharedIntermediate: shared}}
}

func TestMoETensorNamesAndCounts(t *testing.T) {
	tests := []struct {
		name             string
		cfg              Config
		tensors          int
		layer0           []string // the first tensors of layer 0, in state_dict order
		layer0Last       []string // its last tensors
		missingSomewhere string   // a name this kind of model must not have
	}{
		{
			name: "qwen3-moe, Qwen3-30B-A3B's 48 layers x 128 experts", cfg: moeShape(48, 128, 8, 0),
			tensors: 48*(4+2+1+3*128+2) + 3, // 18,867
			layer0: []string{"q_proj.weight", "k_proj.weight", "v_proj.weight", "o_proj.weight", "q_norm.weight", "k_norm.weight",
				"mlp.gate.weight", "mlp.experts.0.gate_proj.weight", "mlp.experts.0.up_proj.weight", "mlp.experts.0.down_proj.weight",
				"mlp.experts.1.gate_proj.weight"},
			layer0Last:       []string{"mlp.experts.127.down_proj.weight", "input_layernorm.weight", "post_attention_layernorm.weight"},
			missingSomewhere: "shared_expert",
		},
		{
			name: "qwen2-moe, Qwen1.5-MoE-A2.7B's 24 layers x 60 experts + shared", cfg: moeShape(24, 60, 4, 32),
			tensors: 24*(4+3+1+3*60+3+1+2) + 3, // 4,659
			layer0: []string{"q_proj.weight", "q_proj.bias", "k_proj.weight", "k_proj.bias", "v_proj.weight", "v_proj.bias",
				"o_proj.weight", "mlp.gate.weight", "mlp.experts.0.gate_proj.weight"},
			layer0Last: []string{"mlp.experts.59.down_proj.weight", "mlp.shared_expert.gate_proj.weight", "mlp.shared_expert.up_proj.weight",
				"mlp.shared_expert.down_proj.weight", "mlp.shared_expert_gate.weight", "input_layernorm.weight", "post_attention_layernorm.weight"},
			missingSomewhere: "q_norm",
		},
		{
			name: "52 layers x 128 experts: over 20,000 tensors", cfg: moeShape(52, 128, 8, 0),
			tensors: 52*393 + 3, // 20,439
			layer0:  []string{"q_proj.weight"}, layer0Last: []string{"post_attention_layernorm.weight"}, missingSomewhere: "shared_expert",
		},
		{
			name: "65 layers x 512 experts: over 100,000 tensors", cfg: moeShape(65, 512, 8, 0),
			tensors: 65*(4+2+1+3*512+2) + 3, // 100,428
			layer0:  []string{"q_proj.weight"}, layer0Last: []string{"mlp.experts.511.down_proj.weight", "input_layernorm.weight", "post_attention_layernorm.weight"},
			missingSomewhere: "shared_expert",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			infos, err := tc.cfg.Tensors()
			if err != nil {
				t.Fatal(err)
			}
			if len(infos) != tc.tensors || tc.cfg.numTensors() != tc.tensors {
				t.Fatalf("%d tensors (numTensors %d), want %d", len(infos), tc.cfg.numTensors(), tc.tensors)
			}
			seen := map[string]bool{}
			var params int64
			for _, in := range infos {
				if seen[in.Name] {
					t.Fatalf("%s twice", in.Name)
				}
				seen[in.Name] = true
				if strings.Contains(in.Name, tc.missingSomewhere) {
					t.Fatalf("%s in this kind of model", in.Name)
				}
				n := int64(1)
				for _, d := range in.Shape {
					n *= d
				}
				params += n
			}
			if params != tc.cfg.ParamCount() {
				t.Errorf("tensors hold %d parameters, ParamCount says %d", params, tc.cfg.ParamCount())
			}
			if infos[0].Name != "model.embed_tokens.weight" || infos[len(infos)-1].Name != "lm_head.weight" || infos[len(infos)-2].Name != "model.norm.weight" {
				t.Errorf("model starts %s, ends %s %s", infos[0].Name, infos[len(infos)-2].Name, infos[len(infos)-1].Name)
			}
			perLayer := (tc.tensors - 3) / tc.cfg.Layers
			for i, suffix := range tc.layer0 {
				if want := "model.layers.0." + withAttn(suffix); infos[1+i].Name != want {
					t.Errorf("tensor %d is %s, want %s", 1+i, infos[1+i].Name, want)
				}
			}
			for i, suffix := range tc.layer0Last {
				k := 1 + perLayer - len(tc.layer0Last) + i
				if want := "model.layers.0." + withAttn(suffix); infos[k].Name != want {
					t.Errorf("tensor %d is %s, want %s", k, infos[k].Name, want)
				}
			}
			for L := range tc.cfg.Layers {
				for x := range tc.cfg.MoE.Experts {
					if name := fmt.Sprintf("model.layers.%d.mlp.experts.%d.down_proj.weight", L, x); !seen[name] {
						t.Fatalf("no %s", name)
					}
				}
			}
		})
	}
}

// withAttn prefixes self_attn. to the attention tensors' suffixes of the table above.
func withAttn(s string) string {
	if strings.HasPrefix(s, "q_") || strings.HasPrefix(s, "k_") || strings.HasPrefix(s, "v_") || strings.HasPrefix(s, "o_") {
		return "self_attn." + s
	}
	return s
}

func TestMoEShapes(t *testing.T) {
	c := moeShape(1, 6, 2, 24)
	c.MoE.ExpertIntermediate = 12
	infos, err := c.Tensors()
	if err != nil {
		t.Fatal(err)
	}
	shapes := map[string][]int64{}
	for _, in := range infos {
		shapes[in.Name] = in.Shape
	}
	want := map[string][]int64{
		"model.layers.0.mlp.gate.weight":                    {6, 16},
		"model.layers.0.mlp.experts.5.gate_proj.weight":     {12, 16},
		"model.layers.0.mlp.experts.5.up_proj.weight":       {12, 16},
		"model.layers.0.mlp.experts.5.down_proj.weight":     {16, 12},
		"model.layers.0.mlp.shared_expert.gate_proj.weight": {24, 16},
		"model.layers.0.mlp.shared_expert.down_proj.weight": {16, 24},
		"model.layers.0.mlp.shared_expert_gate.weight":      {1, 16},
		"model.layers.0.self_attn.k_proj.bias":              {8},
		"model.layers.0.self_attn.q_proj.bias":              {16},
		"model.layers.0.post_attention_layernorm.weight":    {16},
		"model.layers.0.self_attn.o_proj.weight":            {16, 16},
		"model.layers.0.self_attn.v_proj.weight":            {8, 16},
		"model.layers.0.mlp.shared_expert.up_proj.weight":   {24, 16},
		"model.layers.0.mlp.experts.0.gate_proj.weight":     {12, 16},
		"model.layers.0.input_layernorm.weight":             {16},
		"model.layers.0.self_attn.q_proj.weight":            {16, 16},
		"model.layers.0.self_attn.k_proj.weight":            {8, 16},
		"model.layers.0.self_attn.v_proj.bias":              {8},
		"model.layers.0.mlp.experts.0.down_proj.weight":     {16, 12},
		"model.layers.0.mlp.experts.0.up_proj.weight":       {12, 16},
	}
	for name, shape := range want {
		if !slices.Equal(shapes[name], shape) {
			t.Errorf("%s: shape %v, want %v", name, shapes[name], shape)
		}
	}
	q3 := moeShape(1, 6, 2, 0)
	infos, _ = q3.Tensors()
	for _, in := range infos {
		if strings.HasSuffix(in.Name, "_norm.weight") && strings.Contains(in.Name, "self_attn") && !slices.Equal(in.Shape, []int64{4}) {
			t.Errorf("%s: shape %v, want [head_dim 4]", in.Name, in.Shape)
		}
	}
}

func TestMoEValidate(t *testing.T) {
	good := moeShape(2, 8, 2, 0)
	if err := good.validate(); err != nil {
		t.Fatalf("good config: %v", err)
	}
	tests := []struct {
		name   string
		modify func(*Config)
		want   string
	}{
		{"top-k 0", func(c *Config) { c.MoE.TopK = 0 }, "top-k 0"},
		{"top-k above experts", func(c *Config) { c.MoE.TopK = 9 }, "top-k 9"},
		{"no expert width", func(c *Config) { c.MoE.ExpertIntermediate = 0 }, "expert intermediate"},
		{"negative shared width", func(c *Config) { c.MoE.SharedIntermediate = -1 }, "shared expert"},
		{"top-k without experts", func(c *Config) { c.MoE.Experts = 0 }, "need experts"},
		{"too many experts", func(c *Config) { c.MoE.Experts = maxExperts + 1 }, "experts per layer"},
		{"more shards than tensors", func(c *Config) { c.Shards = 2*(7+24+2) + 4 }, "shards"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := good
			tc.modify(&c)
			err := c.validate()
			if !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("validate = %v, want ErrBadConfig saying %q", err, tc.want)
			}
		})
	}
}

// TestRouting: every layer routes exactly TopK experts a step, the choice differs between
// steps and layers, and the warm idle counts agree with the routing they come from.
func TestRouting(t *testing.T) {
	c := moeShape(3, 16, 4, 0)
	seen := map[string]bool{}
	for run := warmStartSteps - 20; run <= warmStartSteps+20; run++ {
		r := routingAt(c, run)
		for layer, routed := range r {
			n := 0
			key := fmt.Sprint(routed)
			for _, ok := range routed {
				if ok {
					n++
				}
			}
			if n != c.MoE.TopK {
				t.Fatalf("step %d layer %d routes %d experts, want %d", run, layer, n, c.MoE.TopK)
			}
			seen[key] = true
		}
	}
	if len(seen) < 100 { // 123 (layer, step) pairs of C(16,4) = 1820 choices each
		t.Errorf("only %d distinct routings in 123 (layer, step) pairs", len(seen))
	}
	idle := warmIdleSteps(c)
	for layer := range c.Layers {
		for x := range c.MoE.Experts {
			n := idle[layer][x]
			if n >= warmStartSteps {
				t.Fatalf("layer %d expert %d never routed", layer, x)
			}
			if !routingAt(c, warmStartSteps-n)[layer][x] {
				t.Errorf("layer %d expert %d: idle %d, but not routed at step %d", layer, x, n, warmStartSteps-n)
			}
			for k := range n {
				if routingAt(c, warmStartSteps-k)[layer][x] {
					t.Errorf("layer %d expert %d: idle %d, but routed at step %d", layer, x, n, warmStartSteps-k)
				}
			}
		}
	}
	// The one-pass selection agrees with the reference's count of higher scores.
	for _, rc := range []Config{moeShape(2, 128, 8, 0), moeShape(2, 60, 4, 0), moeShape(1, 5, 5, 0), moeShape(1, 7, 1, 0)} {
		for run := 1; run <= 40; run++ {
			r := routingAt(rc, run)
			for layer := range rc.Layers {
				for x := range rc.MoE.Experts {
					ts := &tensorSpec{layer: layer, expert: x}
					if r[layer][x] != referenceRouted(rc, ts, run) {
						t.Fatalf("%d experts top-%d, step %d layer %d expert %d: routed %v, reference %v",
							rc.MoE.Experts, rc.MoE.TopK, run, layer, x, r[layer][x], !r[layer][x])
					}
				}
			}
		}
	}
	if routingAt(Config{Layers: 2}, 5) != nil {
		t.Error("a dense model has a routing")
	}
}

// TestMoEMatchesReference compares the MoE kernels (routing tables, warm idle decay,
// zero-gradient steps) with the element-by-element reference, which counts the routing on its
// own, for every element of the tiny MoE presets after several steps.
func TestMoEMatchesReference(t *testing.T) {
	for _, preset := range []string{"tiny-moe", "tiny-moe-shared", "tiny-deepseek"} {
		c := mustPreset(t, preset, 3e-6, 11)
		c.Workers = 3
		const steps = 4
		m := steppedModel(t, c, steps)
		idled := false
		for ti := range m.lay.tensors {
			ts := &m.lay.tensors[ti]
			idled = idled || ts.warmIdle > 0
			for i := range ts.numel {
				want := referenceTrajectory(c, ts, i, steps)
				if got := m.w[ti][i]; math.Float32bits(got) != math.Float32bits(want) {
					t.Fatalf("%s %s[%d]: fast %v, reference %v", preset, ts.name, i, got, want)
				}
			}
		}
		if !idled {
			t.Errorf("%s: no expert idle at version 1: the warm decay is not tested", preset)
		}
	}
}

// TestMoEDeterministic: the same seed and flags give the same bytes for any number of
// workers, in memory and streamed, and the pinned digests.
func TestMoEDeterministic(t *testing.T) {
	for preset, golden := range goldenMoE {
		c := mustPreset(t, preset, 3e-6, 1)
		c.Shards = 3
		var digests [][]string
		for _, workers := range []int{1, 4} {
			c.Workers = workers
			m, err := New(c)
			if err != nil {
				t.Fatal(err)
			}
			var ds []string
			for step := 0; step <= 3; step++ {
				if step > 0 {
					m.Step()
				}
				files, err := m.CheckpointFiles()
				if err != nil {
					t.Fatal(err)
				}
				streamed, err := StreamCheckpointFiles(c, step)
				if err != nil {
					t.Fatal(err)
				}
				if filesDigest(files) != filesDigest(streamed) {
					t.Errorf("%s step %d: streamed checkpoint differs", preset, step)
				}
				ds = append(ds, filesDigest(files))
			}
			digests = append(digests, ds)
		}
		if !slices.Equal(digests[0], digests[1]) {
			t.Errorf("%s: digests differ with the number of workers", preset)
		}
		for step, want := range golden {
			c1 := mustPreset(t, preset, 3e-6, 1)
			files, err := StreamCheckpointFiles(c1, step)
			if err != nil {
				t.Fatal(err)
			}
			if got := filesDigest(files); got != want {
				t.Errorf("%s step %d: digest %s, want %s", preset, step, got, want)
			}
		}
	}
}

// TestMoEConfigJSON: config.json is a Qwen3-MoE or Qwen2-MoE config with the MoE fields.
func TestMoEConfigJSON(t *testing.T) {
	for _, tc := range []struct {
		preset, arch, modelType string
		shared                  float64
	}{
		{"tiny-moe", "Qwen3MoeForCausalLM", "qwen3_moe", 0},
		{"tiny-moe-shared", "Qwen2MoeForCausalLM", "qwen2_moe", 32},
	} {
		files, err := StreamCheckpointFiles(mustPreset(t, tc.preset, 3e-6, 1), 0)
		if err != nil {
			t.Fatal(err)
		}
		var cfg map[string]any
		if err := json.Unmarshal(files["config.json"], &cfg); err != nil {
			t.Fatal(err)
		}
		archs, _ := cfg["architectures"].([]any)
		if len(archs) != 1 || archs[0] != tc.arch || cfg["model_type"] != tc.modelType ||
			cfg["num_experts"] != 4.0 || cfg["num_experts_per_tok"] != 2.0 || cfg["moe_intermediate_size"] != 8.0 {
			t.Errorf("%s: config %v", tc.preset, cfg)
		}
		if got, _ := cfg["shared_expert_intermediate_size"].(float64); got != tc.shared {
			t.Errorf("%s: shared_expert_intermediate_size %v, want %v", tc.preset, cfg["shared_expert_intermediate_size"], tc.shared)
		}
	}
}

func TestMoEConfigForParams(t *testing.T) {
	tests := []struct {
		params                int64
		layers, experts, topK int
		shared                int
		deepseek              bool
	}{
		{1_000_000, 0, 8, 2, 0, false},
		{50_000_000, 0, 64, 8, 0, false},
		{500_000_000, 40, 128, 8, 0, false},
		{300_000_000, 0, 60, 4, 1024, false},
		{200_000_000, 0, 64, 8, 0, true},
		{600_000_000, 20, 256, 8, 1, true}, // shared: one expert's width
	}
	for _, tc := range tests {
		c := MoEConfigForParams(tc.params, tc.layers, MoE{Experts: tc.experts, TopK: tc.topK, SharedIntermediate: tc.shared, DeepSeek: tc.deepseek}, 3e-6, 5)
		if err := c.validate(); err != nil {
			t.Errorf("%+v: %+v: %v", tc, c, err)
			continue
		}
		if ratio := float64(c.ParamCount()) / float64(tc.params); ratio < 0.8 || ratio > 1.25 {
			t.Errorf("%+v: %d parameters (%.2fx): %+v", tc, c.ParamCount(), ratio, c)
		}
		wantShared := tc.shared
		if tc.deepseek && tc.shared > 0 {
			wantShared = c.MoE.ExpertIntermediate
		}
		if (tc.layers > 0 && c.Layers != tc.layers) || c.MoE.Experts != tc.experts || c.MoE.TopK != tc.topK || c.MoE.SharedIntermediate != wantShared || c.MoE.DeepSeek != tc.deepseek || c.Seed != 5 {
			t.Errorf("%+v: flags not carried: %+v", tc, c)
		}
	}
}
