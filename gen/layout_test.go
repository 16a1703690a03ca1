package gen

import (
	"errors"
	"math"
	"slices"
	"testing"
)

func TestLayoutShapesAndOrder(t *testing.T) {
	c := Config{Layers: 2, Hidden: 64, Intermediate: 176, Heads: 8, KVHeads: 2, Vocab: 100, LR: 1e-6, Seed: 1}
	infos, err := c.Tensors()
	if err != nil {
		t.Fatal(err)
	}
	want := []struct {
		name  string
		shape []int64
	}{
		{"model.embed_tokens.weight", []int64{100, 64}},
		{"model.layers.0.self_attn.q_proj.weight", []int64{64, 64}},
		{"model.layers.0.self_attn.k_proj.weight", []int64{16, 64}}, // 2 kv heads of dim 8
		{"model.layers.0.self_attn.v_proj.weight", []int64{16, 64}},
		{"model.layers.0.self_attn.o_proj.weight", []int64{64, 64}},
		{"model.layers.0.mlp.gate_proj.weight", []int64{176, 64}},
		{"model.layers.0.mlp.up_proj.weight", []int64{176, 64}},
		{"model.layers.0.mlp.down_proj.weight", []int64{64, 176}},
		{"model.layers.0.input_layernorm.weight", []int64{64}},
		{"model.layers.0.post_attention_layernorm.weight", []int64{64}},
	}
	if len(infos) != 9*2+3 {
		t.Fatalf("%d tensors, want 21", len(infos))
	}
	for i, w := range want {
		if infos[i].Name != w.name || !slices.Equal(infos[i].Shape, w.shape) || infos[i].File != "model.safetensors" {
			t.Errorf("tensor %d = %+v, want %s %v", i, infos[i], w.name, w.shape)
		}
	}
	if infos[19].Name != "model.norm.weight" || infos[20].Name != "lm_head.weight" || !slices.Equal(infos[20].Shape, []int64{100, 64}) {
		t.Errorf("last tensors %+v %+v", infos[19], infos[20])
	}
	var total int64
	for _, in := range infos {
		n := int64(1)
		for _, d := range in.Shape {
			n *= d
		}
		total += n
	}
	if total != c.ParamCount() {
		t.Errorf("tensors hold %d parameters, ParamCount says %d", total, c.ParamCount())
	}
}

// TestSplitShards checks every shard count for a model: contiguous in state_dict order,
// non-empty, and roughly balanced when there are many tensors per shard.
func TestSplitShards(t *testing.T) {
	c := Config{Layers: 4, Hidden: 64, Intermediate: 176, Heads: 4, KVHeads: 2, Vocab: 512, LR: 1e-6}
	tensors := newLayout(c).tensors
	for n := 1; n <= len(tensors); n++ {
		groups := splitShards(tensors, n)
		if len(groups) != n {
			t.Fatalf("n=%d: %d groups", n, len(groups))
		}
		next := 0
		for k, g := range groups {
			if len(g) == 0 {
				t.Fatalf("n=%d: shard %d empty", n, k)
			}
			for _, ti := range g {
				if ti != next {
					t.Fatalf("n=%d: shard %d holds %d, want %d (not contiguous)", n, k, ti, next)
				}
				next++
			}
		}
		if next != len(tensors) {
			t.Fatalf("n=%d: %d of %d tensors assigned", n, next, len(tensors))
		}
	}
}

func TestShardedFileNames(t *testing.T) {
	c := mustPreset(t, "small", 1e-6, 1)
	c.Shards = 3
	got := newLayout(c).fileNames()
	want := []string{"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors"}
	if !slices.Equal(got, want) {
		t.Errorf("file names %v, want %v", got, want)
	}
}

func TestValidate(t *testing.T) {
	good := Config{Layers: 1, Hidden: 16, Intermediate: 48, Heads: 4, KVHeads: 2, Vocab: 128, LR: 1e-6}
	tests := []struct {
		name   string
		modify func(*Config)
	}{
		{"zero layers", func(c *Config) { c.Layers = 0 }},
		{"negative vocab", func(c *Config) { c.Vocab = -1 }},
		{"hidden not a multiple of heads", func(c *Config) { c.Heads = 3 }},
		{"heads not a multiple of kv heads", func(c *Config) { c.KVHeads = 3 }},
		{"zero lr", func(c *Config) { c.LR = 0 }},
		{"nan lr", func(c *Config) { c.LR = math.NaN() }},
		{"inf lr", func(c *Config) { c.LR = math.Inf(1) }},
		{"negative shards", func(c *Config) { c.Shards = -1 }},
		{"more shards than tensors", func(c *Config) { c.Shards = 13 }},
		{"negative workers", func(c *Config) { c.Workers = -2 }},
		{"too many parameters", func(c *Config) { c.Vocab, c.Hidden = 1<<30, 1<<12 }},
	}
	if err := good.validate(); err != nil {
		t.Fatalf("good config: %v", err)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := good
			tc.modify(&c)
			if err := c.validate(); !errors.Is(err, ErrBadConfig) {
				t.Errorf("validate = %v, want ErrBadConfig", err)
			}
			if _, err := New(c); !errors.Is(err, ErrBadConfig) {
				t.Errorf("New = %v, want ErrBadConfig", err)
			}
			if err := StreamCheckpoint(c, 1, t.TempDir()); !errors.Is(err, ErrBadConfig) {
				t.Errorf("StreamCheckpoint = %v, want ErrBadConfig", err)
			}
		})
	}
}

func TestTensorConstantsAreInRange(t *testing.T) {
	c := ConfigForParams(1_000_000, 3e-6, 9)
	for _, ts := range newLayout(c).tensors {
		base := snrByKind[ts.kind]
		if ts.snr < 0.6*base || ts.snr > 1.4*base || ts.gradScale < 1e-5 || ts.gradScale > 6.5e-4 {
			t.Errorf("%s: snr %v gradScale %v out of range", ts.name, ts.snr, ts.gradScale)
		}
	}
}
