package gen

import (
	"encoding/json"
	"fmt"
)

// The JSON files save_pretrained writes beside the weights. transformers writes them with
// json.dumps(..., indent=2, sort_keys=True) + "\n"; json.MarshalIndent of a map sorts keys
// and indents the same way, and json.Number keeps Python's spelling of floats ("1e-06",
// "10000.0") that Go would otherwise print differently.

// transformersVersion is the version recorded in the JSON files, as a real save would.
const transformersVersion = "4.46.0"

// configJSON is an HF LlamaConfig as LlamaForCausalLM.save_pretrained writes it, or the
// Qwen MoE config of an MoE model.
func configJSON(c Config) ([]byte, error) {
	switch {
	case c.MoE.DeepSeek && c.MoE.enabled():
		return marshalPython(deepseekConfigJSON(c))
	case c.MoE.enabled():
		return marshalPython(moeConfigJSON(c))
	}
	return marshalPython(map[string]any{
		"architectures":           []string{"LlamaForCausalLM"},
		"attention_bias":          false,
		"attention_dropout":       json.Number("0.0"),
		"bos_token_id":            1,
		"eos_token_id":            2,
		"head_dim":                c.headDim(),
		"hidden_act":              "silu",
		"hidden_size":             c.Hidden,
		"initializer_range":       json.Number("0.02"),
		"intermediate_size":       c.Intermediate,
		"max_position_embeddings": 4096,
		"mlp_bias":                false,
		"model_type":              "llama",
		"num_attention_heads":     c.Heads,
		"num_hidden_layers":       c.Layers,
		"num_key_value_heads":     c.KVHeads,
		"pretraining_tp":          1,
		"rms_norm_eps":            json.Number("1e-05"),
		"rope_scaling":            nil,
		"rope_theta":              json.Number("10000.0"),
		"tie_word_embeddings":     false,
		"torch_dtype":             "bfloat16",
		"transformers_version":    transformersVersion,
		"use_cache":               true,
		"vocab_size":              c.Vocab,
	})
}

// generationConfigJSON is the GenerationConfig save_pretrained derives from the model config.
func generationConfigJSON() ([]byte, error) {
	return marshalPython(map[string]any{
		"_from_model_config":   true,
		"bos_token_id":         1,
		"eos_token_id":         2,
		"transformers_version": transformersVersion,
	})
}

// indexJSON is model.safetensors.index.json of a sharded checkpoint.
func indexJSON(lay *layout) ([]byte, error) {
	names := lay.fileNames()
	weightMap := make(map[string]string, len(lay.tensors))
	for k, group := range lay.files {
		for _, ti := range group {
			weightMap[lay.tensors[ti].name] = names[k]
		}
	}
	return marshalPython(map[string]any{
		"metadata":   map[string]any{"total_size": lay.totalBytes()},
		"weight_map": weightMap,
	})
}

// marshalPython encodes v as Python's json.dumps(v, indent=2, sort_keys=True) + "\n" would.
func marshalPython(v any) ([]byte, error) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("encode json: %w", err)
	}
	return append(b, '\n'), nil
}
