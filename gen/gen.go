// Package gen generates realistic RL post-training checkpoints for tests, the demo and
// benchmarks: a GPT-style set of HF-named bf16 tensors (a dense Llama, or with Config.MoE a
// Qwen-style mixture of experts whose unrouted experts move only by Adam's moments, or a
// DeepSeek-V3-style one with fp8 block-scaled linears), initialised like a real model and
// evolved by the Adam rule on fp32 master weights from noisy gradients, then cast to bf16 with
// round-to-nearest-even. The changed fraction per step comes from that arithmetic.
//
// Everything is a pure function of (Config, step): every random number comes from a
// counter-based generator keyed by (seed, tensor name, purpose, step, element index), so the
// bytes are the same on every run and for any number of goroutines, and the history of any
// range of elements can be replayed on its own. Two ways to get checkpoints follow from that:
//
//   - Model holds the fp32 master weights and Adam moments in memory (12 bytes per
//     parameter; fine up to ~500M parameters) and steps them forward one step at a time.
//   - StreamCheckpoint writes the checkpoint after any number of steps holding only a few
//     MiB, replaying the steps of each range of elements from their seeds. It is meant for
//     the 2-4 GB checkpoints of benchmarks and is byte-identical to Model.
//
// The simulated run: linears and embeddings start as fp32 draws from N(0, 0.02^2), norms at
// 1.0. Version 1 is taken 1000 optimizer steps into the run, so Adam's moments are warm (set
// to what those steps leave behind) and every version is statistically like the next. Each
// element's gradient is scale*(a*s + n): a persistent direction s, fresh noise n every step,
// a per-tensor scale and a per-row signal strength a (RL gradients are noise-dominated,
// a ~0.05). Adam (beta1 0.9, beta2 0.999, eps 1e-8, bias correction, PyTorch's fp32
// arithmetic) updates the fp32 masters and the checkpoint is their round-to-nearest-even
// bf16 cast. Measured with the medium preset: ~2.5% of elements change per step at lr 3e-6
// and ~1% at 1e-6, ~88-90% of them by exactly one bf16 ULP; norms do not change.
//
// Version numbering: version 1 is the model before any step; version v is the model after
// v-1 steps.
package gen

import "fmt"

// Config describes the model and the training run.
type Config struct {
	Layers, Hidden, Intermediate, Heads, KVHeads, Vocab int
	LR                                                  float64 // Adam learning rate, e.g. 3e-6
	Seed                                                uint64
	Shards                                              int // 1: model.safetensors; >1: model-0000K-of-0000N.safetensors + index

	// MoE makes the model a mixture of experts (Qwen MoE naming, routed Adam steps: see
	// MoE); the zero value is the dense Llama-style model.
	MoE MoE

	// Workers is the number of goroutines to use (0: GOMAXPROCS). It never changes the output.
	Workers int
}

// Model is a model and its optimizer state. Not safe for concurrent use.
type Model struct {
	cfg     Config
	lay     *layout
	steps   int
	w, m, v [][]float32 // per tensor, state_dict order: fp32 master weights and Adam moments
}

// New initialises a model (version 1 is its state before any step).
func New(cfg Config) (*Model, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	lay := newLayout(cfg)
	md := &Model{cfg: cfg, lay: lay}
	for i := range lay.tensors {
		n := lay.tensors[i].numel
		md.w = append(md.w, make([]float32, n))
		md.m = append(md.m, make([]float32, n))
		md.v = append(md.v, make([]float32, n))
	}
	jobs := splitRanges(lay.tensors)
	parallelFor(cfg.workers(), len(jobs), func(_, j int) {
		r := jobs[j]
		initRange(&lay.tensors[r.tensor], r.lo, md.w[r.tensor][r.lo:r.hi], md.m[r.tensor][r.lo:r.hi], md.v[r.tensor][r.lo:r.hi])
	})
	return md, nil
}

// Step applies one Adam step to every parameter.
func (m *Model) Step() {
	m.steps++
	c := newStepConstants(m.cfg.LR, m.steps)
	route := routingAt(m.cfg, warmStartSteps+m.steps)
	jobs := splitRanges(m.lay.tensors)
	parallelFor(m.cfg.workers(), len(jobs), func(_, j int) {
		r := jobs[j]
		t := &m.lay.tensors[r.tensor]
		stepRange(t, &c, route.routes(t), r.lo, m.w[r.tensor][r.lo:r.hi], m.m[r.tensor][r.lo:r.hi], m.v[r.tensor][r.lo:r.hi])
	})
}

// Steps is the number of steps taken so far (the model is version Steps()+1).
func (m *Model) Steps() int { return m.steps }

// Config returns the model's config.
func (m *Model) Config() Config { return m.cfg }

// WriteCheckpoint writes the current bf16 checkpoint (safetensors file(s), config.json,
// generation_config.json and, when sharded, model.safetensors.index.json) into dir, as
// save_pretrained would. dir is created if it does not exist.
func (m *Model) WriteCheckpoint(dir string) error {
	_, err := writeCheckpoint(dir, m.cfg, m.lay, m.source())
	return err
}

// CheckpointFiles returns the files WriteCheckpoint would write, by name, in memory: a
// convenience for tests of other packages that need real checkpoints of small models.
func (m *Model) CheckpointFiles() (map[string][]byte, error) {
	return checkpointFiles(m.cfg, m.lay, m.source())
}

// source returns the stored bytes of the current master weights.
func (m *Model) source() tensorSource {
	return storedSource(m.lay,
		func(_ *scratch, ti int, lo, hi int64) []float32 { return m.w[ti][lo:hi] },
		func(_ *scratch, ti int) []float32 { return m.w[ti] })
}

// TensorInfo describes one tensor of the model.
type TensorInfo struct {
	Name  string
	Shape []int64 // as stored: [out, in] for linears
	File  string  // the safetensors file that holds it
	DType string  // as safetensors spells it: BF16, or F8_E4M3 and F32 in a DeepSeek model
}

// Tensors lists the model's tensors in state_dict order.
func (c Config) Tensors() ([]TensorInfo, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	lay := newLayout(c)
	names := lay.fileNames()
	file := make([]string, len(lay.tensors))
	for k, group := range lay.files {
		for _, ti := range group {
			file[ti] = names[k]
		}
	}
	out := make([]TensorInfo, len(lay.tensors))
	for i, t := range lay.tensors {
		out[i] = TensorInfo{Name: t.name, Shape: append([]int64(nil), t.shape...), File: file[i], DType: t.dtype.String()}
	}
	return out, nil
}

// StreamCheckpoint writes the checkpoint of cfg after steps Adam steps (version steps+1) into
// dir without holding the model in memory: each range of elements is initialised and stepped
// forward from its seeds just before it is written, so memory stays at a few MiB per worker
// whatever the model size (a DeepSeek model's fp8 tensors are replayed whole, for their
// block scales: 13 bytes per element of the largest), and the cost is steps times that of one in-memory step. The bytes
// are identical to New(cfg) followed by steps calls of Step and WriteCheckpoint.
func StreamCheckpoint(cfg Config, steps int, dir string) error {
	_, err := streamCheckpoint(cfg, steps, dir)
	return err
}

func streamCheckpoint(cfg Config, steps int, dir string) (int64, error) {
	if err := cfg.validate(); err != nil {
		return 0, err
	}
	if steps < 0 || steps >= MaxVersion {
		return 0, fmt.Errorf("%w: %d steps", ErrBadVersion, steps)
	}
	lay := newLayout(cfg)
	return writeCheckpoint(dir, cfg, lay, streamSource(cfg, lay, steps))
}

// StreamCheckpointFiles is StreamCheckpoint into memory (for tests of small models).
func StreamCheckpointFiles(cfg Config, steps int) (map[string][]byte, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if steps < 0 || steps >= MaxVersion {
		return nil, fmt.Errorf("%w: %d steps", ErrBadVersion, steps)
	}
	lay := newLayout(cfg)
	return checkpointFiles(cfg, lay, streamSource(cfg, lay, steps))
}

// streamSource replays steps Adam steps for each requested range, in the worker's scratch.
func streamSource(cfg Config, lay *layout, steps int) tensorSource {
	consts := make([]stepConstants, steps)
	routes := make([]routing, steps)
	for t := range consts {
		consts[t] = newStepConstants(cfg.LR, t+1)
		routes[t] = routingAt(cfg, warmStartSteps+t+1)
	}
	replay := func(s *scratch, ti int, lo, hi int64) []float32 {
		t := &lay.tensors[ti]
		w, m, v := s.state(int(hi - lo))
		initRange(t, lo, w, m, v)
		for k := range consts {
			stepRange(t, &consts[k], routes[k].routes(t), lo, w, m, v)
		}
		return w
	}
	return storedSource(lay, replay, func(s *scratch, ti int) []float32 { return replay(s, ti, 0, lay.tensors[ti].numel) })
}

// scratch is one worker's reusable state buffers for streaming, and its buffer for elements
// split by a write buffer's edge.
type scratch struct {
	w, m, v []float32
	split   []byte
}

func (s *scratch) bytes(n int) []byte {
	if cap(s.split) < n {
		s.split = make([]byte, n)
	}
	return s.split[:n]
}

func (s *scratch) state(n int) (w, m, v []float32) {
	if cap(s.w) < n {
		s.w, s.m, s.v = make([]float32, n), make([]float32, n), make([]float32, n)
	}
	return s.w[:n], s.m[:n], s.v[:n]
}
