// Package gen generates realistic RL post-training checkpoints for tests, the demo and
// benchmarks: a GPT-style set of HF-named bf16 tensors, initialised like a real model and
// evolved by the Adam rule on fp32 master weights from noisy gradients, then cast to bf16 with
// round-to-nearest-even. The changed fraction per step comes from that arithmetic.
package gen

// API CONTRACT (bodies to be replaced by the implementation).

import "errors"

var errNotYet = errors.New("not implemented yet")

// Config describes the model and the training run.
type Config struct {
	Layers, Hidden, Intermediate, Heads, KVHeads, Vocab int
	LR                                                  float64 // Adam learning rate, e.g. 3e-6
	Seed                                                uint64
	Shards                                              int // 1: model.safetensors; >1: model-0000K-of-0000N.safetensors + index
}

// ConfigForParams returns a plausible config with about params parameters.
func ConfigForParams(params int64, lr float64, seed uint64) Config { return Config{} }

// Model is a model and its optimizer state. Not safe for concurrent use.
type Model struct{}

// New initialises a model (version 1 is its state before any step).
func New(cfg Config) (*Model, error) { return nil, errNotYet }

// Step applies one Adam step to every parameter.
func (m *Model) Step() {}

// WriteCheckpoint writes the current bf16 checkpoint (safetensors file(s), config.json and,
// when sharded, model.safetensors.index.json) into dir, as save_pretrained would.
func (m *Model) WriteCheckpoint(dir string) error { return errNotYet }
