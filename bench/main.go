// Command bench is weightfs's benchmark harness (`make bench`, docs/benchmarks.md): it measures delta size,
// ingest throughput, CPU and seal latency through the mount, cold reads, daemon memory, patch
// apply, history growth, the diff kernel, the end-to-end sync time from a trainer's mount
// to a reader's over a shaped link, the costs at 100,000 tensors, the hashes that could
// name objects (BLAKE3 against SHA-256), and what a version of a mixture-of-experts
// checkpoint costs (fsyncs, S3 requests) against a dense one, each against a baseline
// measured in the same run (go-fuse's loopback file system mounted with weightfs's options,
// the local disk, TRL's and slime's delta formats, copy(), a copy of the whole checkpoint over
// the same link, the same costs at 10,000 tensors, today's two SHA-256 streams), and prints
// where each figure stands against its goal. It measures whatever the code does; it never
// asserts on timing.
//
// The same binary is the pass-through baseline: `bench loopback [-read-only] SRC MNT` serves
// a directory through go-fuse's loopback node with the mount options of fs/mount.go; and
// `bench fetch DIR URL...` is figure 9's baseline copy, run in the reader's network namespace.
//
// Everything it creates lives in one work directory (removed at the end unless -keep), and
// every mount, daemon and network namespace it starts or creates is stopped or removed at the
// end, on failure, and on SIGINT/SIGTERM.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "loopback" {
		os.Exit(runLoopback(os.Args[2:], os.Stderr))
	}
	if len(os.Args) > 1 && os.Args[1] == "fetch" {
		os.Exit(runFetch(os.Args[2:], os.Stdout, os.Stderr))
	}
	if len(os.Args) > 1 && os.Args[1] == "table" {
		os.Exit(runTable(os.Args[2:], os.Stdout, os.Stderr))
	}
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// bench is the state of one run.
type bench struct {
	opts    options
	sz      sizes
	work    string // this run's work directory
	self    string // this executable, for the loopback daemon
	clean   *cleaner
	log     io.Writer
	rows    []Row
	notes   []string
	daemons int // daemons started so far, to name their logs

	// Fixtures shared between figures, built on first use.
	runs    map[string]*modelRun
	ingest2 *ingestResult // figure 2's ingest, which is also figure 5's middle size
	machine *Machine
}

func (b *bench) logf(format string, args ...any) {
	fmt.Fprintf(b.log, "[%s] %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

func (b *bench) note(format string, args ...any) {
	b.notes = append(b.notes, fmt.Sprintf(format, args...))
}

// run executes one command line and returns the exit code: 0 when every figure was measured
// (whether or not it meets its goal), 1 when a figure could not be measured or the run could
// not start, 2 for a usage error.
func run(args []string, stdout, stderr io.Writer) int {
	opts, err := parseOptions(args, stderr)
	if errors.Is(err, errHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return 2
	}
	b := &bench{opts: opts, sz: sizesFor(opts.Quick), log: stderr, runs: map[string]*modelRun{}}
	if opts.MoETensors > 0 {
		b.sz.MoETensors, b.sz.MoEBytes = opts.MoETensors, moeBytesFor(opts.MoETensors)
	}
	b.clean = newCleaner(stderr)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stopSignals := handleSignals(cancel, b.clean)
	defer stopSignals()
	defer b.clean.runAll()

	res, err := b.start()
	if err != nil {
		fmt.Fprintf(stderr, "bench: %v\n", err)
		return 1
	}
	for _, fig := range opts.Figures {
		if ctx.Err() != nil {
			break
		}
		b.logf("figure %s: start (load %s)", fig, loadAverage())
		began := time.Now()
		b.runFigure(ctx, fig)
		b.machine.PeakLoad = max(b.machine.PeakLoad, load1())
		res.FigureSeconds[fig] = time.Since(began).Seconds()
		b.logf("figure %s: done in %.0f s", fig, res.FigureSeconds[fig])
	}
	return b.finish(res, stdout)
}

// start checks the binary and the disk, creates the work directory and describes the machine.
func (b *bench) start() (*Result, error) {
	bin, err := filepath.Abs(b.opts.Weightfs)
	if err == nil {
		_, err = os.Stat(bin)
	}
	if err != nil {
		return nil, fmt.Errorf("weightfs binary %s: %w (run `make build`, or pass -weightfs)", b.opts.Weightfs, err)
	}
	b.opts.Weightfs = bin
	if b.self, err = os.Executable(); err != nil {
		return nil, fmt.Errorf("find this executable (for the loopback daemon): %w", err)
	}
	if err := os.MkdirAll(b.opts.WorkRoot, 0o755); err != nil {
		return nil, fmt.Errorf("work directory: %w", err)
	}
	if b.work, err = os.MkdirTemp(b.opts.WorkRoot, "weightfs-bench-"); err != nil {
		return nil, fmt.Errorf("work directory: %w", err)
	}
	if b.work, err = filepath.Abs(b.work); err != nil {
		return nil, err
	}
	if !b.opts.Keep {
		work := b.work
		b.clean.add("remove "+work, func() error { return removeWorkDir(work) })
	}
	m := describeMachine(b.work, bin)
	b.machine = &m
	var need int64
	for _, fig := range b.opts.Figures {
		need = max(need, b.sz.diskNeed(fig))
	}
	b.logf("machine: %s", m)
	b.logf("work directory %s: %.1f GiB free, this run needs up to ~%.1f GiB", b.work, float64(m.WorkFree)/(1<<30), float64(need)/(1<<30))
	if m.WorkFree < need && !b.opts.Force {
		return nil, fmt.Errorf("not enough room in %s: %.1f GiB free, ~%.1f GiB needed (use -work DIR on a bigger disk, -quick, -only, or -force)",
			b.opts.WorkRoot, float64(m.WorkFree)/(1<<30), float64(need)/(1<<30))
	}
	if m.WorkFS == "tmpfs" {
		b.note("the work directory is on tmpfs: the local-disk baselines measure memory, not a disk")
	}
	if !m.Root {
		b.note("not root: caches cannot be dropped, so reads are not cold; mounts go through fusermount3")
	}
	if b.opts.Quick {
		b.note("-quick: every size is scaled down; these are not the issue's figures")
	}
	res := &Result{
		Command: "go run ./bench " + strings.Join(os.Args[1:], " "),
		Quick:   b.opts.Quick, Figures: b.opts.Figures, Started: time.Now(), WorkDir: b.work,
		FigureSeconds: map[string]float64{},
	}
	return res, nil
}

// runFigure runs one figure, turning a failure into an ERROR row so the others still run.
func (b *bench) runFigure(ctx context.Context, fig string) {
	var rows []Row
	var err error
	switch fig {
	case "kernel":
		rows, err = b.figKernel(ctx)
	case "delta":
		rows, err = b.figDelta(ctx)
	case "reads":
		rows, err = b.figReads(ctx)
	case "ingest":
		rows, err = b.figIngest(ctx)
	case "memory":
		rows, err = b.figMemory(ctx)
	case "apply":
		rows, err = b.figApply(ctx)
	case "history":
		rows, err = b.figHistory(ctx)
	case "sync":
		rows, err = b.figSync(ctx)
	case "group":
		rows, err = b.figGroup(ctx)
	case "tensors":
		rows, err = b.figTensors(ctx)
	case "hash":
		rows, err = b.figHash(ctx)
	case "moe":
		rows, err = b.figMoE(ctx)
	case "patchin":
		rows, err = b.figPatchIn(ctx)
	default:
		err = fmt.Errorf("no figure %q", fig)
	}
	if err != nil {
		b.logf("figure %s failed: %v", fig, err)
		rows = append(rows, errorRow(figureNumber(fig), fig, err))
	}
	for i := range rows {
		rows[i].finish()
	}
	b.rows = append(b.rows, rows...)
}

// figureNumber is the number of a figure ("ingest" also covers 3).
func figureNumber(fig string) string {
	for num, name := range figureAliases {
		if name == fig && num[0] >= '1' && num[0] <= '9' && (fig != "ingest" || num == "2") {
			return num
		}
	}
	return "?"
}

// finish prints the table, writes the JSON and the Markdown, and returns the exit code.
func (b *bench) finish(res *Result, stdout io.Writer) int {
	res.Finished = time.Now()
	res.Seconds = res.Finished.Sub(res.Started).Seconds()
	b.machine.LoadEnd = loadAverage()
	res.Machine = *b.machine
	res.Rows, res.Notes = b.rows, b.notes
	fmt.Fprintf(stdout, "\nweightfs benchmarks (%s, %.0f s; %s)\n\n", map[bool]string{true: "QUICK sizes", false: "full sizes"}[b.opts.Quick], res.Seconds, b.machine)
	printTable(stdout, b.rows)
	for _, n := range b.notes {
		fmt.Fprintf(stdout, "note: %s\n", n)
	}
	code := 0
	for _, r := range b.rows {
		if r.Status == StatusError {
			code = 1
		}
	}
	if b.opts.Out != "" {
		if err := writeJSON(b.opts.Out, res); err != nil {
			fmt.Fprintf(b.log, "bench: %v\n", err)
			code = 1
		} else {
			fmt.Fprintf(stdout, "\nwrote %s\n", b.opts.Out)
		}
	}
	if b.opts.Markdown != "" {
		if err := writeMarkdown(b.opts.Markdown, res); err != nil {
			fmt.Fprintf(b.log, "bench: %v\n", err)
			code = 1
		}
	}
	if b.opts.Keep {
		fmt.Fprintf(stdout, "work directory kept: %s\n", b.work)
	}
	return code
}

// writeMarkdown writes the run's table and machine as a Markdown fragment.
func writeMarkdown(path string, res *Result) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	markdownResult(f, res)
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// markdownResult writes the command, the machine, the table and the notes of a run.
func markdownResult(f io.Writer, res *Result) {
	fmt.Fprintf(f, "Command: `%s` (%.0f s, started %s)\n\n", res.Command, res.Seconds, res.Started.Format(time.RFC3339))
	fmt.Fprintf(f, "Machine: %s; load at the end %s, peak 1-min load between figures %.2f; binary: %s (git %s)\n\n",
		res.Machine, res.Machine.LoadEnd, res.Machine.PeakLoad, res.Machine.Weightfs, res.Machine.GitCommit)
	markdownTable(f, res.Rows)
	for _, n := range res.Notes {
		fmt.Fprintf(f, "\n- %s", n)
	}
	fmt.Fprintln(f)
}

// runTable is `bench table RESULT.json`: the Markdown of a recorded run (for docs/benchmarks.md).
func runTable(args []string, stdout, stderr io.Writer) int {
	if len(args) != 1 {
		fmt.Fprintln(stderr, "usage: bench table RESULT.json")
		return 2
	}
	b, err := os.ReadFile(args[0])
	if err != nil {
		fmt.Fprintf(stderr, "bench table: %v\n", err)
		return 1
	}
	var res Result
	if err := json.Unmarshal(b, &res); err != nil {
		fmt.Fprintf(stderr, "bench table: %s: %v\n", args[0], err)
		return 1
	}
	markdownResult(stdout, &res)
	return 0
}

// discard removes a figure's directory when the figure is done with it, unless -keep asked to
// keep everything for inspection. (The large ingest directories go regardless: they would not
// fit on the disk together.)
func (b *bench) discard(dir string) {
	if b.opts.Keep {
		return
	}
	if err := os.RemoveAll(dir); err != nil {
		b.logf("remove %s: %v", dir, err)
	}
}
