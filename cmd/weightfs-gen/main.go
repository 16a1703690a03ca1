// Command weightfs-gen writes realistic RL post-training checkpoints: a Llama-style bf16 model
// evolved by Adam at RL learning rates, one version directory per step (weight_v000001, ...),
// as a trainer saves them to a weightfs mount. It parses flags and prints; package gen does
// the work.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/weightfs/weightfs/gen"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

const usageText = `usage: weightfs-gen [flags] [--out] DIR

Writes DIR/weight_v000001, DIR/weight_v000002, ... one after another, each the model after one
more Adam step (version v is the model after v-1 steps), and prints one line per version:
name, bytes, seconds. With --done each version is sealed by an empty DONE file created after
its files are closed. With --version-only K only version K is written, into DIR itself,
streaming. With --experts E every layer's MLP is E routed experts (Qwen MoE names:
mlp.gate, mlp.experts.N.{gate,up,down}_proj; mlp.shared_expert with
--shared-expert-intermediate); each step routes --top-k of them per layer, and the others
move only by Adam's moments.

flags:
`

// options are the parsed command line.
type options struct {
	params      string
	lr          float64
	seed        uint64
	versions    int
	start       int
	out         string
	done        bool
	shards      int
	stream      bool
	versionOnly int
	workers     int

	// The mixture-of-experts flags (experts 0: a dense model) and the depth.
	experts, topK, expertInter, sharedInter, layers int
	deepseek                                        bool
}

// moe is the MoE the flags ask for (expert width 0: chosen by gen).
func (o options) moe() gen.MoE {
	return gen.MoE{Experts: o.experts, TopK: o.topK, ExpertIntermediate: o.expertInter, SharedIntermediate: o.sharedInter, DeepSeek: o.deepseek}
}

// run executes one command line and returns the exit code: 0 success, 1 failure, 2 usage.
func run(args []string, stdout, stderr io.Writer) int {
	o, err := parseOptions(args, stdout)
	if errors.Is(err, errHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "weightfs-gen: %v\n(see weightfs-gen --help)\n", err)
		return 2
	}
	if err := generate(o, stdout, stderr); err != nil {
		fmt.Fprintf(stderr, "weightfs-gen: %v\n", err)
		return 1
	}
	return 0
}

// generate resolves the config and writes the versions.
func generate(o options, stdout, stderr io.Writer) error {
	cfg, err := resolveConfig(o)
	if err != nil {
		return err
	}
	moe := ""
	if e := cfg.MoE; e.Experts > 0 {
		moe = fmt.Sprintf(", %d experts of %d, top-%d", e.Experts, e.ExpertIntermediate, e.TopK)
		if e.DeepSeek {
			moe += ", DeepSeek-V3 fp8"
		}
		if e.SharedIntermediate > 0 {
			moe += fmt.Sprintf(", shared expert of %d", e.SharedIntermediate)
		}
	}
	tensors, err := cfg.Tensors()
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "model: %d parameters in %d tensors (%d layers, hidden %d, intermediate %d, heads %d/%d kv, vocab %d%s), lr %g, seed %d\n",
		cfg.ParamCount(), len(tensors), cfg.Layers, cfg.Hidden, cfg.Intermediate, cfg.Heads, cfg.KVHeads, cfg.Vocab, moe, cfg.LR, cfg.Seed)
	report := func(r gen.VersionReport) error {
		_, err := fmt.Fprintf(stdout, "%s %d bytes %.3f s\n", gen.VersionDirName(r.Version), r.Bytes, r.Duration.Seconds())
		return err
	}
	if o.versionOnly > 0 {
		r, err := gen.WriteVersion(cfg, o.versionOnly, o.out, o.done)
		if err != nil {
			return err
		}
		return report(r)
	}
	return gen.WriteSeries(gen.SeriesOptions{
		Config: cfg, Out: o.out, Start: o.start, Versions: o.versions, Done: o.done, Stream: o.stream,
	}, report)
}

// resolveConfig turns --params (a count like 250M or a preset name), the MoE flags and the
// run flags into a config. A preset takes --layers and --experts as they are; a count is
// reached with the experts asked for (and the depth, if --layers is given).
func resolveConfig(o options) (gen.Config, error) {
	var cfg gen.Config
	if isPreset(o.params) {
		var err error
		if cfg, err = gen.Preset(o.params, o.lr, o.seed); err != nil {
			return cfg, err
		}
		if o.layers > 0 {
			cfg.Layers = o.layers
		}
		if o.experts > 0 {
			cfg = gen.WithMoE(cfg, o.moe())
		}
	} else {
		n, err := gen.ParseParamCount(o.params)
		if err != nil {
			return cfg, fmt.Errorf("--params: %w", err)
		}
		switch {
		case o.experts > 0:
			cfg = gen.MoEConfigForParams(n, o.layers, o.moe(), o.lr, o.seed)
		case o.layers > 0:
			return cfg, errors.New("--layers with a parameter count needs --experts (or a preset)")
		default:
			cfg = gen.ConfigForParams(n, o.lr, o.seed)
		}
	}
	cfg.Shards = o.shards
	cfg.Workers = o.workers
	return cfg, nil
}

func isPreset(s string) bool {
	for _, p := range gen.PresetNames() {
		if s == p {
			return true
		}
	}
	return false
}

// parseOptions parses the command line; flags may come before or after the directory.
func parseOptions(args []string, stdout io.Writer) (options, error) {
	var o options
	fs := flag.NewFlagSet("weightfs-gen", flag.ContinueOnError)
	fs.StringVar(&o.params, "params", "250M", "model size: a parameter count (10K, 250M, 1.5B) or a preset ("+strings.Join(gen.PresetNames(), ", ")+")")
	fs.Float64Var(&o.lr, "lr", 3e-6, "Adam learning rate (RL: 1e-6 to 3e-6)")
	fs.Uint64Var(&o.seed, "seed", 1, "random seed: the same flags give the same bytes")
	fs.IntVar(&o.versions, "versions", 10, "how many versions to write")
	fs.IntVar(&o.start, "start", 1, "number of the first version (the model after start-1 steps)")
	fs.StringVar(&o.out, "out", "", "directory to write the version directories into (or, with --version-only, the version itself)")
	fs.BoolVar(&o.done, "done", false, "seal each version with an empty DONE file after its files are closed")
	fs.IntVar(&o.shards, "shards", 1, "safetensors files per version (>1: model-0000K-of-0000N.safetensors and an index)")
	fs.BoolVar(&o.stream, "stream", false, "stream each version from its seeds (a few MiB of memory; version v costs v-1 steps)")
	fs.IntVar(&o.versionOnly, "version-only", 0, "write only version K, streaming, into --out itself")
	fs.IntVar(&o.workers, "workers", 0, "goroutines to use (0: all cores); never changes the bytes")
	fs.IntVar(&o.experts, "experts", 0, "routed experts per layer: a mixture of experts named as Qwen3-MoE (Qwen2-MoE with a shared expert) writes it (0: dense Llama)")
	fs.IntVar(&o.topK, "top-k", 8, "experts per token, and experts each step routes to per layer (the others move only by Adam's moments); at most --experts")
	fs.IntVar(&o.expertInter, "expert-intermediate", 0, "width of each routed expert, moe_intermediate_size (0: chosen from the model's width)")
	fs.IntVar(&o.sharedInter, "shared-expert-intermediate", 0, "width of a shared expert in every layer (Qwen2-MoE naming); 0: none")
	fs.BoolVar(&o.deepseek, "deepseek", false, "with --experts: DeepSeek-V3 names and dtypes (latent attention, dense first layers, fp8 e4m3 linears with float32 weight_scale_inv per 128x128 block; a shared expert is whole experts)")
	fs.IntVar(&o.layers, "layers", 0, "number of layers (0: chosen from --params); with a parameter count it needs --experts")

	positional, err := parseArgs(fs, args)
	if errors.Is(err, errHelp) {
		fmt.Fprint(stdout, usageText)
		fs.SetOutput(stdout)
		fs.PrintDefaults()
		return o, errHelp
	}
	if err != nil {
		return o, err
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	switch {
	case len(positional) > 1:
		return o, fmt.Errorf("one output directory expected, got %q", positional)
	case len(positional) == 1 && o.out != "":
		return o, fmt.Errorf("output directory given twice (--out %s and %s)", o.out, positional[0])
	case len(positional) == 1:
		o.out = positional[0]
	}
	switch {
	case o.out == "":
		return o, errors.New("no output directory (--out DIR)")
	case o.versionOnly < 0:
		return o, fmt.Errorf("--version-only %d: versions start at 1", o.versionOnly)
	case o.versionOnly > 0 && (set["versions"] || set["start"] || set["stream"]):
		return o, errors.New("--version-only writes one version, streaming: drop --versions, --start and --stream")
	case o.shards < 1:
		return o, fmt.Errorf("--shards %d: at least 1", o.shards)
	case o.workers < 0:
		return o, fmt.Errorf("--workers %d: at least 0", o.workers)
	case o.experts < 0 || o.expertInter < 0 || o.sharedInter < 0 || o.layers < 0:
		return o, errors.New("--experts, --expert-intermediate, --shared-expert-intermediate and --layers are at least 0")
	case o.experts == 0 && (set["top-k"] || set["expert-intermediate"] || set["shared-expert-intermediate"] || set["deepseek"]):
		return o, errors.New("--top-k, --expert-intermediate, --shared-expert-intermediate and --deepseek need --experts")
	case o.experts > 0 && !set["top-k"]:
		o.topK = min(o.topK, o.experts)
	}
	return o, nil
}
