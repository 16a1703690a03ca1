package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
)

// figureNames are the figures of docs/benchmarks.md a run can select, in the order they run. "ingest" covers
// figures 2 (throughput) and 3 (seal latency); "sync" is figure 9 (end-to-end sync time);
// "tensors" is figure 11 (100,000 tensors against 10,000: issue 29 item 5); "hash" is figure
// 12 (BLAKE3 against today's two SHA-256 streams: issue 30); "moe" is figure 13 (a
// mixture-of-experts checkpoint against a dense one of the same bytes: issue 29's costs per
// version); "patchin" is figure 14 (a version saved by the Python writer through patches/
// against a full save: issue 31).
var figureNames = []string{"kernel", "delta", "reads", "ingest", "memory", "apply", "history", "sync", "group", "tensors", "hash", "moe", "patchin"}

// figureAliases maps the figure numbers and other spellings to names.
var figureAliases = map[string]string{
	"1": "delta", "2": "ingest", "3": "ingest", "4": "reads", "5": "memory", "6": "apply",
	"7": "history", "8": "kernel", "seal": "ingest", "read": "reads", "diff": "kernel",
	"size": "delta", "mem": "memory", "9": "sync", "e2e": "sync", "10": "group", "ranks": "group",
	"11": "tensors", "tensor": "tensors", "count": "tensors",
	"12": "hash", "blake3": "hash",
	"13": "moe", "experts": "moe", "mixture": "moe",
	"14": "patchin", "patch-in": "patchin", "writer": "patchin",
}

// parseOnly parses -only: a comma-separated list of figure names or numbers ("" or "all":
// every figure). The result is in run order, without repeats.
func parseOnly(s string) ([]string, error) {
	s = strings.TrimSpace(s)
	if s == "" || s == "all" {
		return slices.Clone(figureNames), nil
	}
	want := map[string]bool{}
	for _, part := range strings.Split(s, ",") {
		name := strings.ToLower(strings.TrimSpace(part))
		if alias, ok := figureAliases[name]; ok {
			name = alias
		}
		if !slices.Contains(figureNames, name) {
			return nil, fmt.Errorf("-only: unknown figure %q (have %s, or the numbers 1-14)", strings.TrimSpace(part), strings.Join(figureNames, ", "))
		}
		want[name] = true
	}
	var out []string
	for _, name := range figureNames {
		if want[name] {
			out = append(out, name)
		}
	}
	return out, nil
}

// options are the parsed command line.
type options struct {
	Out       string
	Markdown  string
	Figures   []string
	Quick     bool
	WorkRoot  string
	Weightfs  string
	Keep      bool
	ReadReps  int
	WriteSize int
	Force     bool
	// ProfileDir receives a CPU profile of every weightfs daemon the run starts.
	ProfileDir string
	// MoETensors (0: the 20,000, or -quick's) sets figure moe's tensor count; its
	// bytes follow at the ratio (1 GB for 20,000 tensors).
	MoETensors int
}

var errHelp = errors.New("help requested")

const usageText = `usage: go run ./bench [flags]
       bench loopback [-read-only] SRC MNT    (the pass-through baseline's daemon)
       bench table RESULT.json                (a recorded run as Markdown)
       bench fetch DIR URL...                 (figure 9's baseline copy over HTTP)

Measures the figures of docs/benchmarks.md (delta size, ingest and seal, reads, memory, apply,
history, diff kernel, end-to-end sync, tensor count, hashes, a MoE checkpoint's costs per
version), each against a baseline measured in the same run, prints a table and writes
JSON. Root is needed for cold-cache reads (drop_caches) and direct FUSE mounts.

flags:
`

func parseOptions(args []string, stderr io.Writer) (options, error) {
	o := options{}
	fl := flag.NewFlagSet("bench", flag.ContinueOnError)
	fl.SetOutput(stderr)
	fl.Usage = func() {
		fmt.Fprint(stderr, usageText)
		fl.PrintDefaults()
	}
	only := fl.String("only", "all", "figures to run, comma-separated: "+strings.Join(figureNames, ", ")+" (or 1-14)")
	fl.StringVar(&o.Out, "out", "", "write the results as JSON to this file")
	fl.StringVar(&o.Markdown, "md", "", "also write the table as Markdown to this file")
	fl.BoolVar(&o.Quick, "quick", false, "scale every size down for a check in a minute or two (not the issue's figures)")
	fl.StringVar(&o.WorkRoot, "work", os.TempDir(), "directory to create the run's work directory in (needs up to ~20 GiB free for a full run)")
	fl.StringVar(&o.Weightfs, "weightfs", "bin/weightfs", "the weightfs binary to measure (make build writes bin/weightfs)")
	fl.BoolVar(&o.Keep, "keep", false, "keep the work directory (stores, daemon logs) for inspection")
	fl.IntVar(&o.ReadReps, "read-reps", 3, "cold-cache reads of each case (the median is reported)")
	fl.IntVar(&o.WriteSize, "write-size", 4<<20, "bytes per write(2) of the checkpoint writer (at least 1 MiB)")
	fl.BoolVar(&o.Force, "force", false, "run even if the work directory seems too small")
	fl.IntVar(&o.MoETensors, "moe-tensors", 0, "tensors of figure moe's MoE checkpoint (0: 20,000 with 1 GB, as issue 29 asks; -quick: 2,500); its bytes scale with it")
	fl.StringVar(&o.ProfileDir, "profile", "", "write a CPU profile of every weightfs daemon to this directory (go tool pprof bin/weightfs FILE)")
	if err := fl.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return o, errHelp
		}
		return o, err
	}
	if fl.NArg() > 0 {
		return o, fmt.Errorf("unexpected argument %q (the loopback mode is `bench loopback SRC MNT`)", fl.Arg(0))
	}
	var err error
	if o.Figures, err = parseOnly(*only); err != nil {
		return o, err
	}
	switch {
	case o.ReadReps < 1:
		return o, fmt.Errorf("-read-reps %d: at least 1", o.ReadReps)
	case o.WriteSize < 1<<20:
		return o, fmt.Errorf("-write-size %d: at least 1 MiB (the issue measures large sequential writes)", o.WriteSize)
	case o.WriteSize > 256<<20:
		return o, fmt.Errorf("-write-size %d: at most 256 MiB", o.WriteSize)
	case o.MoETensors < 0 || (o.MoETensors > 0 && o.MoETensors < moeMinTensors):
		return o, fmt.Errorf("-moe-tensors %d: at least %d (0: the default)", o.MoETensors, moeMinTensors)
	}
	if o.ProfileDir != "" {
		// The daemons write their profiles there at exit, when an error could only be logged:
		// make it now, or say why not.
		if err := os.MkdirAll(o.ProfileDir, 0o755); err != nil {
			return o, fmt.Errorf("-profile: %w", err)
		}
	}
	return o, nil
}

const (
	miB = int64(1) << 20
	giB = int64(1) << 30
)

// sizes are the sizes of one run: the issue's, or -quick's.
type sizes struct {
	DeltaMinBytes   int64   // figure 1 and 4: the model (>= 250M bf16 params)
	ReadVersions    int     // figure 4: versions in the store; the old read is 10 deltas from both the latest and the first (an anchor)
	IngestBytes     int64   // figures 2, 3: the checkpoint written through the mount
	MemoryBytes     []int64 // figure 5: checkpoints whose ingest is sampled; the last is the goal's
	ApplyBytes      int64   // figure 6: the file patched
	HistoryBytes    int64   // figure 7: one checkpoint of the history
	HistoryVersions int
	KernelBytes     int64 // figure 8: bytes diffed per pass
	MoETensors      int   // figure moe: tensors of the MoE checkpoint (the dense one has the same bytes)
	MoEBytes        int64 // figure moe: bytes of either checkpoint, at least
}

func sizesFor(quick bool) sizes {
	if quick {
		return sizes{
			DeltaMinBytes: 40 * miB, ReadVersions: 2*readsBehind + 1,
			IngestBytes: 192 * miB, MemoryBytes: []int64{64 * miB, 192 * miB, 384 * miB},
			ApplyBytes: 96 * miB, HistoryBytes: 6 * miB, HistoryVersions: 100, KernelBytes: 64 * miB,
			MoETensors: 2_500, MoEBytes: moeBytesFor(2_500),
		}
	}
	return sizes{
		DeltaMinBytes: 500_000_000, ReadVersions: 2*readsBehind + 1,
		IngestBytes: 2 * giB, MemoryBytes: []int64{1 * giB, 2 * giB, 4 * giB},
		ApplyBytes: 1 * giB, HistoryBytes: 100_000_000, HistoryVersions: 100, KernelBytes: 256 * miB,
		MoETensors: 20_000, MoEBytes: moeBytesFor(20_000),
	}
}

// diskNeed estimates the most disk a figure holds at once (sources, store, staging, the
// materialized copy, baselines' copies), to refuse a run that cannot fit before it starts.
func (s sizes) diskNeed(figure string) int64 {
	switch figure {
	case "delta", "reads":
		return 4 * s.DeltaMinBytes
	case "ingest":
		return 6 * s.IngestBytes
	case "memory":
		return 5 * s.MemoryBytes[len(s.MemoryBytes)-1]
	case "apply":
		return 7 * s.ApplyBytes
	case "history":
		return 6 * s.HistoryBytes
	case "sync":
		return 10 * s.IngestBytes
	case "group":
		return 10 * groupBytes(s)
	case "tensors":
		return 1 * giB
	case "moe":
		return 18 * s.MoEBytes // each checkpoint's 6 versions, and the stores
	case "patchin":
		return 6 * s.IngestBytes
	}
	return 0
}
