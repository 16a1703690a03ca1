package gen

import (
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// Presets are small fixed configs for unit tests (and the CLI's --params NAME), so that tests
// do not depend on ConfigForParams's heuristics.
var presets = map[string]Config{
	// ~9K parameters: the smallest model with every kind of tensor and GQA.
	"tiny": {Layers: 1, Hidden: 16, Intermediate: 48, Heads: 4, KVHeads: 2, Vocab: 128},
	// ~150K parameters: several layers, rows of a few hundred elements.
	"small": {Layers: 2, Hidden: 64, Intermediate: 176, Heads: 4, KVHeads: 2, Vocab: 512},
	// ~1.3M parameters: big enough for stable changed-fraction statistics.
	"medium": {Layers: 4, Hidden: 128, Intermediate: 352, Heads: 4, KVHeads: 2, Vocab: 2048},
}

// PresetNames lists the preset names, sorted.
func PresetNames() []string {
	names := make([]string, 0, len(presets))
	for n := range presets {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Preset returns the named small config ("tiny", "small", "medium") with lr and seed.
func Preset(name string, lr float64, seed uint64) (Config, error) {
	c, ok := presets[name]
	if !ok {
		return Config{}, fmt.Errorf("%w: no preset %q (have %s)", ErrBadConfig, name, strings.Join(PresetNames(), ", "))
	}
	c.LR, c.Seed, c.Shards = lr, seed, 1
	return c, nil
}

// hiddenSizes are the widths ConfigForParams chooses from, as real model families use them.
var hiddenSizes = []int{16, 32, 64, 96, 128, 192, 256, 384, 512, 576, 768, 896, 1024, 1280,
	1536, 2048, 2560, 3072, 3584, 4096, 5120}

// ConfigForParams returns a plausible config with about params parameters (from ~10K to a
// few billion): a Llama-like shape (head dim 64 from width 256 on, 4x grouped-query
// attention where the heads allow it, intermediate ~8/3 of the width) with the depth closest
// to a typical depth for its width. Small targets get small vocabularies so that embeddings
// do not take every parameter. Shards is 1; the result is valid if params >= ~5K.
func ConfigForParams(params int64, lr float64, seed uint64) Config {
	vocab := 32000
	switch {
	case params < 50_000:
		vocab = 128
	case params < 500_000:
		vocab = 512
	case params < 5_000_000:
		vocab = 2048
	case params < 50_000_000:
		vocab = 8192
	}
	best, bestScore := Config{}, math.Inf(1)
	for _, h := range hiddenSizes {
		c := shapeForWidth(h, vocab)
		c.Layers = 1
		embeddings := int64(2*vocab*h + h)
		perLayer := c.ParamCount() - embeddings
		layers := int64(math.Round(float64(params-embeddings) / float64(perLayer)))
		if layers < 1 || layers > 100_000 {
			continue
		}
		c.Layers = int(layers)
		// Prefer the total closest to the target, then the depth closest to typical.
		miss := math.Abs(math.Log(float64(c.ParamCount()) / float64(params)))
		depth := math.Abs(math.Log(float64(layers) / typicalDepth(h)))
		if score := float64(4*miss) + depth; score < bestScore { // conversion: no FMA, same choice everywhere
			best, bestScore = c, score
		}
	}
	if bestScore == math.Inf(1) { // smaller than any shape: the smallest model there is
		best = shapeForWidth(hiddenSizes[0], vocab)
		best.Layers = 1
	}
	best.LR, best.Seed, best.Shards = lr, seed, 1
	return best
}

// shapeForWidth fills in heads, kv heads and intermediate size for hidden size h.
func shapeForWidth(h, vocab int) Config {
	headDim := 64
	if h < 256 {
		headDim = h / 4
	}
	heads := h / headDim
	kv := heads
	switch {
	case heads%4 == 0 && heads >= 8:
		kv = heads / 4
	case heads%3 == 0 && heads >= 6:
		kv = heads / 3
	case heads%2 == 0:
		kv = heads / 2
	}
	round := 256
	if h < 512 {
		round = 16
	}
	inter := (h*8/3 + round - 1) / round * round
	return Config{Hidden: h, Intermediate: inter, Heads: heads, KVHeads: kv, Vocab: vocab}
}

// typicalDepth is a usual layer count for width h: deep and thin when small (SmolLM: 576
// wide, 30 layers), ~h/128 when large (Llama: 4096 wide, 32 layers).
func typicalDepth(h int) float64 {
	return math.Max(2, math.Min(32, float64(h)/48))
}

// ParseParamCount parses a parameter count: an integer with an optional K, M, B or G suffix
// (powers of 1000, any case), possibly with a fraction ("1.5B"), e.g. "250M", "10K", "2e9".
func ParseParamCount(s string) (int64, error) {
	t := strings.TrimSpace(s)
	mult := 1.0
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'k', 'K':
			mult = 1e3
		case 'm', 'M':
			mult = 1e6
		case 'b', 'B', 'g', 'G':
			mult = 1e9
		}
		if mult != 1 {
			t = t[:n-1]
		}
	}
	f, err := strconv.ParseFloat(t, 64)
	if err != nil {
		return 0, fmt.Errorf("%w: %q is not a number with an optional K, M or B suffix", ErrBadParamCount, s)
	}
	f *= mult
	if !(f >= 1) || f > maxParams {
		return 0, fmt.Errorf("%w: %q is out of range (1 to %d)", ErrBadParamCount, s, int64(maxParams))
	}
	return int64(math.Round(f)), nil
}

// Mixture-of-experts presets: the dense presets' shapes with Qwen MoE layers.
func init() {
	presets["tiny-moe"] = Config{Layers: 1, Hidden: 16, Intermediate: 48, Heads: 4, KVHeads: 2, Vocab: 128,
		MoE: MoE{Experts: 4, TopK: 2, ExpertIntermediate: 8}}
	presets["tiny-moe-shared"] = Config{Layers: 1, Hidden: 16, Intermediate: 48, Heads: 4, KVHeads: 2, Vocab: 128,
		MoE: MoE{Experts: 4, TopK: 2, ExpertIntermediate: 8, SharedIntermediate: 32}}
	// ~1.6M parameters, three quarters in 32 experts of 24.6K: stable changed-fraction
	// statistics for routed and unrouted experts alike.
	presets["tiny-deepseek"] = Config{Layers: 2, Hidden: 16, Intermediate: 48, Heads: 4, KVHeads: 4, Vocab: 128,
		MoE: MoE{Experts: 4, TopK: 2, ExpertIntermediate: 8, SharedIntermediate: 8, DeepSeek: true}}
	presets["medium-moe"] = Config{Layers: 2, Hidden: 128, Intermediate: 352, Heads: 4, KVHeads: 2, Vocab: 512,
		MoE: MoE{Experts: 16, TopK: 4, ExpertIntermediate: 64}}
}

// WithMoE returns c with every layer's MLP a mixture of experts as moe describes it.
// moe.ExpertIntermediate 0 takes c.Intermediate/TopK (rounded up to a multiple of 8: a
// token's active expert width about the dense MLP's, as in Qwen's models). For DeepSeek a
// shared width is rounded to whole experts (n_shared_experts, at least one).
func WithMoE(c Config, moe MoE) Config {
	if moe.ExpertIntermediate == 0 && moe.TopK > 0 {
		moe.ExpertIntermediate = max(8, (c.Intermediate/moe.TopK+7)/8*8)
	}
	c.MoE = moe
	c.MoE.SharedIntermediate = moe.sharedFor(moe.ExpertIntermediate)
	return c
}

// sharedFor is the shared expert width with experts of width ei: DeepSeek's in whole experts.
func (e MoE) sharedFor(ei int) int {
	if !e.DeepSeek || e.SharedIntermediate <= 0 || ei <= 0 {
		return e.SharedIntermediate
	}
	return max(1, (e.SharedIntermediate+ei/2)/ei) * ei
}

// MoEConfigForParams is ConfigForParams for a mixture of experts: the width (from the same
// Llama-like shapes) whose model with moe (as WithMoE takes it) comes closest to params
// parameters, with layers layers, or (layers 0) the depth ConfigForParams would prefer. With
// the depth fixed and moe.ExpertIntermediate 0 the experts' width is fitted to the target
// too. Shards is 1; the result may be invalid for a target too small for its experts
// (validate says so).
func MoEConfigForParams(params int64, layers int, moe MoE, lr float64, seed uint64) Config {
	vocab := ConfigForParams(params, lr, seed).Vocab
	best, bestScore := Config{}, math.Inf(1)
	for _, h := range hiddenSizes {
		c := WithMoE(shapeForWidth(h, vocab), moe)
		auto := c.MoE.ExpertIntermediate
		if layers > 0 && moe.ExpertIntermediate == 0 && moe.Experts > 0 {
			// The depth is fixed: fit the experts' width (linear in the count) to the target.
			c.Layers = layers
			at := func(ei int) float64 {
				c.MoE.ExpertIntermediate, c.MoE.SharedIntermediate = ei, moe.sharedFor(ei)
				return float64(c.ParamCount())
			}
			p8, p16 := at(8), at(16)
			at(max(8, int(math.Round((float64(params)-p8)/(p16-p8)))*8+8))
		}
		n := int64(layers)
		if layers <= 0 {
			c.Layers = 1
			embeddings := int64(2*vocab*h + h)
			n = int64(math.Round(float64(params-embeddings) / float64(c.ParamCount()-embeddings)))
			if n < 1 || n > 100_000 {
				continue
			}
			// One Newton step: DeepSeek's first layers are dense, so the count is not
			// linear in the depth from the first layer on.
			c.Layers = int(n)
			p := c.ParamCount()
			c.Layers++
			n = max(1, n+int64(math.Round(float64(params-p)/float64(c.ParamCount()-p))))
		}
		c.Layers = int(n)
		miss := math.Abs(math.Log(float64(c.ParamCount()) / float64(params)))
		score := float64(4 * miss) // conversion: no FMA, same choice everywhere
		if layers <= 0 {
			score += math.Abs(math.Log(float64(n) / typicalDepth(h)))
		} else {
			score += math.Abs(math.Log(float64(c.MoE.ExpertIntermediate) / float64(auto)))
		}
		if score < bestScore {
			best, bestScore = c, score
		}
	}
	if bestScore == math.Inf(1) {
		best = WithMoE(shapeForWidth(hiddenSizes[0], vocab), moe)
		best.Layers = max(layers, 1)
	}
	best.LR, best.Seed, best.Shards = lr, seed, 1
	return best
}
