package gen

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestConfigJSON(t *testing.T) {
	c := Config{Layers: 3, Hidden: 256, Intermediate: 688, Heads: 4, KVHeads: 2, Vocab: 1000, LR: 1e-6}
	b, err := configJSON(c)
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, want := range []string{
		"{\n  \"architectures\": [\n    \"LlamaForCausalLM\"\n  ],\n",
		`  "head_dim": 64,`,
		`  "hidden_size": 256,`,
		`  "intermediate_size": 688,`,
		`  "num_attention_heads": 4,`,
		`  "num_hidden_layers": 3,`,
		`  "num_key_value_heads": 2,`,
		`  "rms_norm_eps": 1e-05,`,
		`  "rope_scaling": null,`,
		`  "rope_theta": 10000.0,`,
		`  "torch_dtype": "bfloat16",`,
		"  \"vocab_size\": 1000\n}\n",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("config.json lacks %q:\n%s", want, s)
		}
	}
	var back map[string]any
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back["model_type"] != "llama" || back["tie_word_embeddings"] != false {
		t.Errorf("config.json: %v", back)
	}
}

func TestIndexJSON(t *testing.T) {
	c := mustPreset(t, "small", 1e-6, 1)
	c.Shards = 2
	m, err := New(c)
	if err != nil {
		t.Fatal(err)
	}
	files, err := m.CheckpointFiles()
	if err != nil {
		t.Fatal(err)
	}
	var index struct {
		Metadata  map[string]int64  `json:"metadata"`
		WeightMap map[string]string `json:"weight_map"`
	}
	raw := files["model.safetensors.index.json"]
	if err := json.Unmarshal(raw, &index); err != nil {
		t.Fatal(err)
	}
	if len(index.Metadata) != 1 || index.Metadata["total_size"] != 2*c.ParamCount() {
		t.Errorf("metadata %v, want total_size %d", index.Metadata, 2*c.ParamCount())
	}
	if !strings.HasPrefix(string(raw), "{\n  \"metadata\": {\n    \"total_size\": ") {
		t.Errorf("index starts %.60q", raw)
	}
	// Every tensor is in the file the weight map names, and nowhere else.
	for file, b := range files {
		if !strings.HasSuffix(file, ".safetensors") {
			continue
		}
		tensors, _, err := parseSafetensors(b)
		if err != nil {
			t.Fatal(err)
		}
		for name := range tensors {
			if index.WeightMap[name] != file {
				t.Errorf("%s is in %s, index says %s", name, file, index.WeightMap[name])
			}
		}
	}
	if len(index.WeightMap) != 9*c.Layers+3 {
		t.Errorf("weight map has %d entries", len(index.WeightMap))
	}
}

func TestGenerationConfigJSON(t *testing.T) {
	b, err := generationConfigJSON()
	if err != nil {
		t.Fatal(err)
	}
	want := "{\n  \"_from_model_config\": true,\n  \"bos_token_id\": 1,\n  \"eos_token_id\": 2,\n  \"transformers_version\": \"4.46.0\"\n}\n"
	if string(b) != want {
		t.Errorf("generation_config.json = %q, want %q", b, want)
	}
}

// FuzzCheckpointHeader builds headers for arbitrary small shapes and shard counts and reads
// them back with the strict test parser.
func FuzzCheckpointHeader(f *testing.F) {
	f.Add(1, 16, 48, 4, 2, 128, 1)
	f.Add(3, 64, 176, 8, 2, 1000, 5)
	f.Add(2, 24, 7, 6, 3, 3, 18)
	f.Fuzz(func(t *testing.T, layers, hidden, inter, heads, kv, vocab, shards int) {
		c := Config{Layers: layers, Hidden: hidden, Intermediate: inter, Heads: heads, KVHeads: kv, Vocab: vocab, LR: 1e-6, Shards: shards}
		if c.validate() != nil || c.ParamCount() > 1<<20 {
			return
		}
		lay := newLayout(c)
		seen := 0
		for _, group := range lay.files {
			header := safetensorsHeader(lay, group)
			var dataSize int64
			for _, ti := range group {
				dataSize += lay.tensors[ti].bytes()
			}
			// A file of the right size with zero data is enough for the header checks.
			file := append(header, make([]byte, dataSize)...)
			tensors, _, err := parseSafetensors(file)
			if err != nil {
				t.Fatalf("%+v: %v", c, err)
			}
			seen += len(tensors)
		}
		if seen != len(lay.tensors) {
			t.Fatalf("%+v: %d tensors in files, %d in the model", c, seen, len(lay.tensors))
		}
	})
}
