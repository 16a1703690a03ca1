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
streaming.

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
	fmt.Fprintf(stderr, "model: %d parameters (%d layers, hidden %d, intermediate %d, heads %d/%d kv, vocab %d), lr %g, seed %d\n",
		cfg.ParamCount(), cfg.Layers, cfg.Hidden, cfg.Intermediate, cfg.Heads, cfg.KVHeads, cfg.Vocab, cfg.LR, cfg.Seed)
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

// resolveConfig turns --params (a count like 250M or a preset name) and the run flags into a
// config.
func resolveConfig(o options) (gen.Config, error) {
	var cfg gen.Config
	if isPreset(o.params) {
		var err error
		if cfg, err = gen.Preset(o.params, o.lr, o.seed); err != nil {
			return cfg, err
		}
	} else {
		n, err := gen.ParseParamCount(o.params)
		if err != nil {
			return cfg, fmt.Errorf("--params: %w", err)
		}
		cfg = gen.ConfigForParams(n, o.lr, o.seed)
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
	}
	return o, nil
}
