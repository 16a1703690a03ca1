package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/weightfs/weightfs/gen"
)

// Figure 11 (tensors): issue 29 item 5, the tensor count. Two DeepSeek-V3-shaped checkpoints
// (gen's `--experts 256 --deepseek`: `model.layers.L.mlp.experts.E.{gate,up,down}_proj.weight`
// in fp8 with their float32 `weight_scale_inv`, 8 shards), ~10,000 and ~100,000 tensors, of
// tiny tensors (hidden 16) so that the bytes stay small (~29 MB a version at 100,000) and the
// per-tensor costs show. For each: `weightfs commit` of versions 1 and 2 into a local store
// (version 2 is one RL step on, lr 3e-6); then, each measured (wall, CPU-s and peak RSS of the
// process): commit of version 2, `weightfs log`, `weightfs verify`; a read-only mount's RSS
// after `ls -l` of version 2 and after reading every file of both versions (SHA-256 compared
// with the sources); `weightfs gc --keep-last 1` dropping version 1, and `verify` again (it
// must pass). Each row is the 100,000 figure against the 10,000 one; its goal is the tensor
// ratio times 1.3: a ratio above it is a cost growing faster than linearly in the tensors.

// tensorsTargets are the tensor counts of the figure: the small one (the baseline) and the
// large one (the issue's).
func tensorsTargets(quick bool) [2]int {
	if quick {
		return [2]int{2_000, 20_000}
	}
	return [2]int{10_000, 100_000}
}

// tensorsSlack is how much faster than the tensor count a cost may grow before the row says so.
const tensorsSlack = 1.3

// tensorsConfig is the DeepSeek-shaped tiny model with the number of layers whose tensor
// count is nearest target.
func tensorsConfig(target int) (gen.Config, int, error) {
	var best gen.Config
	bestN := -1
	for layers := 4; layers <= 400; layers++ {
		c, err := gen.Preset("tiny", deltaHighLR, 1)
		if err != nil {
			return c, 0, err
		}
		c.Layers = layers
		c = gen.WithMoE(c, gen.MoE{Experts: 256, TopK: 8, DeepSeek: true})
		c.Shards = 8
		ts, err := c.Tensors()
		if err != nil {
			return c, 0, err
		}
		if bestN < 0 || abs(len(ts)-target) < abs(bestN-target) {
			best, bestN = c, len(ts)
		}
		if len(ts) > target {
			break
		}
	}
	if bestN < 0 {
		return best, 0, fmt.Errorf("no config near %d tensors", target)
	}
	return best, bestN, nil
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}

// procCost is what one finished command used.
type procCost struct {
	Wall   float64 `json:"wall_s"`
	CPU    float64 `json:"cpu_s"`
	MaxRSS int64   `json:"max_rss_bytes"`
}

// tensorsRun is one size's measurements.
type tensorsRun struct {
	Tensors                int
	Bytes                  int64 // one version's files
	Commit1, Commit2       procCost
	Log, Verify, GC, After procCost
	MountIdle, MountLs     memStatus
	MountRead              memStatus
	ReadSeconds            float64
	// MountCPU is the mount's CPU from its start to after ls -l (its open: the store, the
	// materialized copy), ReadCPU its CPU while both versions were read: CPU-s do not move
	// with the machine's load as wall times do.
	MountCPU, ReadCPU  float64
	Objects1, Objects2 int // files under the store's objects/ and packs/ after each commit
	LsLines            int
}

// timedWeightfs runs weightfs with args to the end and returns its cost (CPU and peak RSS
// from the kernel's accounting of the child). With -profile, the command writes a CPU profile
// named after label.
func (b *bench) timedWeightfs(ctx context.Context, label string, args ...string) (procCost, string, error) {
	cmd := exec.CommandContext(ctx, b.opts.Weightfs, args...)
	if b.opts.ProfileDir != "" {
		cmd.Env = append(os.Environ(), "WEIGHTFS_CPUPROFILE="+filepath.Join(b.opts.ProfileDir, "tensors-"+label+".prof"))
	}
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	began := time.Now()
	err := cmd.Run()
	c := procCost{Wall: time.Since(began).Seconds()}
	if cmd.ProcessState != nil {
		c.CPU = (cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()).Seconds()
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			c.MaxRSS = ru.Maxrss << 10
		}
	}
	if err != nil {
		return c, "", fmt.Errorf("weightfs %s: %v: %s", strings.Join(args, " "), err, tail(stdout.String()+stderr.String(), 2000))
	}
	return c, stdout.String(), nil
}

func tail(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}

// sha256Tree hashes every regular file under dir by its path relative to dir.
func sha256Tree(dir string) (map[string]string, int64, error) {
	files, err := treeFiles(dir)
	if err != nil {
		return nil, 0, err
	}
	out := map[string]string{}
	var total int64
	buf := make([]byte, 4<<20)
	for _, rel := range files {
		f, err := os.Open(filepath.Join(dir, rel))
		if err != nil {
			return nil, 0, err
		}
		h := sha256.New()
		n, err := io.CopyBuffer(h, f, buf)
		f.Close()
		if err != nil {
			return nil, 0, fmt.Errorf("read %s: %w", filepath.Join(dir, rel), err)
		}
		total += n
		out[rel] = hex.EncodeToString(h.Sum(nil))
	}
	return out, total, nil
}

// sameTree checks that got holds exactly want's files with want's digests.
func sameTree(where string, want, got map[string]string) error {
	for rel, d := range want {
		if got[rel] != d {
			return fmt.Errorf("%s: %s has SHA-256 %q, the source %s", where, rel, got[rel], d)
		}
	}
	for rel := range got {
		if _, ok := want[rel]; !ok {
			return fmt.Errorf("%s: %s is not in the source", where, rel)
		}
	}
	return nil
}

// countFiles counts the regular files under dir.
func countFiles(dir string) (int, error) {
	n := 0
	err := filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			n++
		}
		return err
	})
	return n, err
}

// storeFiles counts the files that hold objects: loose ones under objects/ (format 1 and 2)
// and packs under packs/ (format 3), either of which may be absent.
func storeFiles(st string) (int, error) {
	total := 0
	for _, sub := range []string{"objects", "packs"} {
		n, err := countFiles(filepath.Join(st, sub))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return 0, err
		}
		total += n
	}
	return total, nil
}

func readStatus(pid int) (memStatus, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return memStatus{}, err
	}
	return parseStatus(raw)
}

// tensorsMeasure builds, commits and measures one size.
func (b *bench) tensorsMeasure(ctx context.Context, dir string, cfg gen.Config, n int) (*tensorsRun, error) {
	r := &tensorsRun{Tensors: n}
	src := func(v int) string { return filepath.Join(dir, "src", gen.VersionDirName(v)) }
	want := map[int]map[string]string{}
	for v := 1; v <= 2; v++ {
		b.logf("  tensors: generating %d tensors, version %d", n, v)
		if err := gen.StreamCheckpoint(cfg, v-1, src(v)); err != nil {
			return nil, fmt.Errorf("generate version %d: %w", v, err)
		}
		var err error
		if want[v], r.Bytes, err = sha256Tree(src(v)); err != nil {
			return nil, err
		}
	}
	st := filepath.Join(dir, "store")
	if _, err := b.weightfsCmd(ctx, "init", st); err != nil {
		return nil, err
	}
	var err error
	label := func(what string) string { return fmt.Sprintf("%d-%s", n, what) }
	b.logf("  tensors: %d: commit version 1", n)
	if r.Commit1, _, err = b.timedWeightfs(ctx, label("commit1"), "commit", st, src(1)); err != nil {
		return nil, err
	}
	if r.Objects1, err = storeFiles(st); err != nil {
		return nil, err
	}
	warmTree(src(2))
	b.logf("  tensors: %d: commit version 2", n)
	if r.Commit2, _, err = b.timedWeightfs(ctx, label("commit2"), "commit", st, src(2)); err != nil {
		return nil, err
	}
	if r.Objects2, err = storeFiles(st); err != nil {
		return nil, err
	}
	b.logf("  tensors: %d: log", n)
	out := ""
	if r.Log, out, err = b.timedWeightfs(ctx, label("log"), "log", st); err != nil {
		return nil, err
	}
	if !strings.Contains(out, "2") {
		return nil, fmt.Errorf("weightfs log: no version 2 in %q", out)
	}
	b.logf("  tensors: %d: verify", n)
	if r.Verify, _, err = b.timedWeightfs(ctx, label("verify"), "verify", st); err != nil {
		return nil, err
	}

	mnt := filepath.Join(dir, "mnt")
	b.logf("  tensors: %d: read-only mount", n)
	d, err := b.startDaemon(ctx, fmt.Sprintf("tensors-%d", n), mnt, b.opts.Weightfs,
		"mount", "--read-only", "--cache-dir", filepath.Join(dir, "reader-cache"), st, mnt)
	if err != nil {
		return nil, err
	}
	defer d.stop()
	if r.MountIdle, err = readStatus(d.Pid()); err != nil {
		return nil, err
	}
	ls := exec.CommandContext(ctx, "ls", "-l", filepath.Join(mnt, gen.VersionDirName(2)))
	lsOut, err := ls.Output()
	if err != nil {
		return nil, fmt.Errorf("ls -l of version 2 on the mount: %w", err)
	}
	r.LsLines = strings.Count(string(lsOut), "\n")
	if r.LsLines < len(want[2]) {
		return nil, fmt.Errorf("ls -l of version 2 on the mount: %d lines for %d files:\n%s", r.LsLines, len(want[2]), lsOut)
	}
	if r.MountLs, err = readStatus(d.Pid()); err != nil {
		return nil, err
	}
	cpuLs, err := readCPU(d.Pid())
	if err != nil {
		return nil, err
	}
	r.MountCPU = cpuLs.Seconds()
	began := time.Now()
	for v := 2; v >= 1; v-- {
		got, _, err := sha256Tree(filepath.Join(mnt, gen.VersionDirName(v)))
		if err != nil {
			return nil, err
		}
		if err := sameTree(fmt.Sprintf("version %d on the read-only mount", v), want[v], got); err != nil {
			return nil, err
		}
	}
	r.ReadSeconds = time.Since(began).Seconds()
	cpuRead, err := readCPU(d.Pid())
	if err != nil {
		return nil, err
	}
	r.ReadCPU = cpuRead.sub(cpuLs).Seconds()
	if r.MountRead, err = readStatus(d.Pid()); err != nil {
		return nil, err
	}
	if err := d.stop(); err != nil {
		return nil, err
	}

	b.logf("  tensors: %d: gc --keep-last 1", n)
	if r.GC, _, err = b.timedWeightfs(ctx, label("gc"), "gc", "--keep-last", "1", st); err != nil {
		return nil, err
	}
	if r.After, _, err = b.timedWeightfs(ctx, label("verify-after-gc"), "verify", st); err != nil {
		return nil, fmt.Errorf("after gc: %w", err)
	}
	if out, err = b.weightfsCmd(ctx, "log", st); err != nil {
		return nil, err
	}
	if strings.Contains(out, gen.VersionDirName(1)) {
		return nil, fmt.Errorf("after gc --keep-last 1, log still lists version 1:\n%s", out)
	}
	return r, nil
}

func (b *bench) figTensors(ctx context.Context) ([]Row, error) {
	targets := tensorsTargets(b.opts.Quick)
	var runs [2]*tensorsRun
	var cfgs [2]gen.Config
	for i, target := range targets {
		cfg, n, err := tensorsConfig(target)
		if err != nil {
			return nil, err
		}
		cfgs[i] = cfg
		dir := filepath.Join(b.work, fmt.Sprintf("tensors-%d", n))
		r, err := b.tensorsMeasure(ctx, dir, cfg, n)
		b.discard(dir)
		if err != nil {
			return nil, fmt.Errorf("%d tensors: %w", n, err)
		}
		runs[i] = r
	}
	small, large := runs[0], runs[1]
	tr := float64(large.Tensors) / float64(small.Tensors)
	goal := ratioAtMost(math.Round(tensorsSlack*tr*100) / 100)
	base := fmt.Sprintf("%d tensors", small.Tensors)
	perTensor := func(unit string, s, l float64) string {
		scale, u := 1e6, " µs"
		switch unit {
		case "B":
			scale, u = 1, " B"
		case "objects":
			scale, u = 1, " objects"
		}
		return fmt.Sprintf("tensor ratio %.2fx; per tensor %.3g%s at %d, %.3g%s at %d", tr, s*scale/float64(small.Tensors), u, small.Tensors, l*scale/float64(large.Tensors), u, large.Tensors)
	}
	row := func(name, unit string, s, l float64) Row {
		return Row{Figure: "11", Name: name, Measured: l, Unit: unit, Baseline: s, BaselineName: base, Goal: goal,
			Note: perTensor(unit, s, l), Detail: map[string]any{"small": s, "large": l, "small_tensors": small.Tensors, "large_tensors": large.Tensors}}
	}
	rows := []Row{
		{Figure: "11", Name: fmt.Sprintf("tensors: %d vs %d in one version (DeepSeek-V3 naming, fp8 + scales, 8 shards)", large.Tensors, small.Tensors),
			Measured: float64(large.Bytes), Unit: "B", Baseline: float64(small.Bytes), BaselineName: base + ": bytes of a version",
			Note: fmt.Sprintf("gen tiny --experts 256 --top-k 8 --deepseek, %d and %d layers, lr %g; a row's goal is %.1fx the tensor ratio (%.2fx): above it a cost grows faster than linearly",
				cfgs[1].Layers, cfgs[0].Layers, deltaHighLR, tensorsSlack, tr),
			Detail: map[string]any{"small": small, "large": large}},
		row("  commit of version 2: files it added under objects/ and packs/", "objects", float64(small.Objects2-small.Objects1), float64(large.Objects2-large.Objects1)),
		row("  commit of version 2: wall", "s", small.Commit2.Wall, large.Commit2.Wall),
		row("  commit of version 2: CPU-s", "s", small.Commit2.CPU, large.Commit2.CPU),
		row("  commit of version 2: peak RSS", "B", float64(small.Commit2.MaxRSS), float64(large.Commit2.MaxRSS)),
		row("  commit of version 1 (no predecessor): wall", "s", small.Commit1.Wall, large.Commit1.Wall),
		row("  log: wall", "s", small.Log.Wall, large.Log.Wall),
		row("  log: CPU-s", "s", small.Log.CPU, large.Log.CPU),
		row("  verify: wall", "s", small.Verify.Wall, large.Verify.Wall),
		row("  verify: CPU-s", "s", small.Verify.CPU, large.Verify.CPU),
		row("  verify: peak RSS", "B", float64(small.Verify.MaxRSS), float64(large.Verify.MaxRSS)),
		row("  read-only mount: RssAnon after ls -l of version 2", "B", float64(small.MountLs.RssAnon), float64(large.MountLs.RssAnon)),
		row("  read-only mount: RssAnon after reading both versions", "B", float64(small.MountRead.RssAnon), float64(large.MountRead.RssAnon)),
		row("  read-only mount: read both versions (SHA-256 = source)", "s", small.ReadSeconds, large.ReadSeconds),
		row("  read-only mount: its CPU-s from its start to after ls -l", "s", small.MountCPU, large.MountCPU),
		row("  read-only mount: its CPU-s reading both versions", "s", small.ReadCPU, large.ReadCPU),
		row("  gc --keep-last 1 (drops version 1): wall", "s", small.GC.Wall, large.GC.Wall),
		row("  gc --keep-last 1: CPU-s", "s", small.GC.CPU, large.GC.CPU),
		row("  verify after gc: wall", "s", small.After.Wall, large.After.Wall),
	}
	for _, i := range []int{11, 12} {
		s, l := small.MountLs, large.MountLs
		if i == 12 {
			s, l = small.MountRead, large.MountRead
		}
		rows[i].Note = joinNote(rows[i].Note, fmt.Sprintf("VmRSS %s vs %s; right after mounting RssAnon %s vs %s",
			humanBytes(l.VmRSS), humanBytes(s.VmRSS), humanBytes(large.MountIdle.RssAnon), humanBytes(small.MountIdle.RssAnon)))
	}
	return rows, nil
}
