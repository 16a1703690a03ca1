package main

import (
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/weightfs/weightfs/gen"
)

// Figure 14 (patchin): issue 31's "What must show it". One version of figure 2's checkpoint
// (gen, lr 3e-6: ~2.5% of elements change) saved by the Python writer (weightfs.PatchWriter,
// python/weightfs/writer.py) through MNT/patches/, against a full save of the same weights
// through the mount (every file written whole in save_file's layout, then DONE), each into a
// fresh store of its own `weightfs mount` daemon (its base in memory sized to hold the checkpoint,
// baseMemoryArgs), in one run. The trainer is one Python process
// per side (patchin_driver.py): it writes version 1 whole (not measured), saves version 2 in its
// mode (not measured), then version 3, measured: the steady state of a trainer that saves a
// version a step, not the first save after a whole version (the patch side's daemon finds its
// copy deferred and the base file's digest known from the patch before). It measures the save
// (to the seal's return): wall time, its own CPU seconds and the bytes it
// wrote (/proc/self/io wchar), and the daemon's CPU seconds (/proc/PID/stat) to the seal's
// return and until it is idle again. Goals: the save <= 0.1x the full save's wall time, the
// bytes <= 0.05x. The patch save's note splits its wall into the writer's diff (on the CPU
// here; a GPU trainer's diff runs in device memory), the result's hashes (on a thread beside
// the diff), the patch's encoding, write and seal, and the commit; an INFO row gives the save
// without the diff (saveWithoutDiff), what a trainer whose diff runs on its GPU would wait for.

//go:embed patchin_driver.py
var patchinDriver []byte

const (
	// patchinVersions is the versions each side saves: 1 whole, then one step each in its
	// mode; the last is measured (a trainer's steady state, not the first save after a whole
	// version).
	patchinVersions  = 3
	patchinWallGoal  = 0.1
	patchinBytesGoal = 0.05
	benchPython      = "/usr/bin/python3" // Debian's, with numpy (and torch: `make deps`)
)

// patchinRun is one side's numbers, as the driver prints them.
type patchinRun struct {
	Mode            string  `json:"mode"`
	Torch           bool    `json:"torch"`
	Version         int     `json:"version"` // the version measured (patchinVersions)
	WallS           float64 `json:"wall_s"`
	TrainerCPUS     float64 `json:"trainer_cpu_s"`
	TrainerWchar    int64   `json:"trainer_wchar"`
	BytesSaved      int64   `json:"bytes_saved"`
	DaemonCPUS      float64 `json:"daemon_cpu_s"`
	DaemonCPUIdleS  float64 `json:"daemon_cpu_idle_s"`
	CheckpointBytes int64   `json:"checkpoint_bytes"`
	// Split is the patch save's steps (patchinSplitKeys): prepare_s (the writer's prepare:
	// diff_s, the diff's wall, with the result's hashes on a thread beside it, hash_s their own
	// time, hash_wait_s what they took after the diff), encode_s (the patch's bytes), write_s
	// (written and fsynced), seal_s (os.replace: the daemon checks and stores it), commit_s
	// (the writer's snapshot made the new version).
	Split map[string]float64 `json:"split"`
}

// pythonPackageDir finds python/ (the weightfs package's source) from the working directory up.
func pythonPackageDir() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "python", "weightfs", "writer.py")); err == nil {
			return filepath.Join(dir, "python"), nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no python/weightfs/writer.py above the working directory (run from the repository)")
		}
		dir = parent
	}
}

func (b *bench) figPatchIn(ctx context.Context) ([]Row, error) {
	pkg, err := pythonPackageDir()
	if err == nil {
		err = exec.Command(benchPython, "-c", "import numpy, xxhash").Run()
	}
	if err != nil {
		return []Row{{Figure: "14", Name: "save through patches/ vs a full save", Status: StatusSkip,
			Note: fmt.Sprintf("%s with numpy and xxhash, and python/weightfs: %v (make deps)", benchPython, err)}}, nil
	}
	cfg, err := configForBytes(b.sz.IngestBytes, deltaHighLR)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(b.work, "patchin")
	defer os.RemoveAll(dir)
	var src [patchinVersions]string
	for i := range src {
		src[i] = filepath.Join(dir, fmt.Sprintf("src-v%d", i+1))
	}
	for i, s := range src {
		b.logf("patchin: generating version %d (%s)", i+1, describeConfig(cfg))
		if err := gen.StreamCheckpoint(cfg, i, s); err != nil {
			return nil, fmt.Errorf("generate version %d: %w", i+1, err)
		}
	}
	driver := filepath.Join(dir, "patchin_driver.py")
	if err := os.WriteFile(driver, patchinDriver, 0o644); err != nil {
		return nil, err
	}
	runs := map[string]*patchinRun{}
	for _, mode := range []string{"full", "patch"} {
		if runs[mode], err = b.patchinSide(ctx, dir, pkg, driver, mode, src); err != nil {
			return nil, fmt.Errorf("%s save: %w", mode, err)
		}
	}
	full, patch := runs["full"], runs["patch"]
	trainer := "numpy"
	if patch.Torch {
		trainer = "torch (CPU)"
	}
	what := fmt.Sprintf("%s, %s checkpoint, state_dict as %s", describeConfig(cfg), humanBytes(full.CheckpointBytes), trainer)
	detail := map[string]any{"full": full, "patch": patch}
	sp := patch.Split
	return []Row{
		{Figure: "14", Name: fmt.Sprintf("save of v%d: PatchWriter through patches/ vs full save (first byte -> seal returns) (%s)", patchinVersions, what),
			Measured: patch.WallS, Unit: "s", Baseline: full.WallS, BaselineName: "full save through the mount",
			Goal: ratioAtMost(patchinWallGoal), Detail: detail,
			Note: fmt.Sprintf("writer: diff %.2f s (compare, gather, the snapshot's update, here on the CPU; a GPU trainer's runs in device memory), "+
				"hashes after the diff %.2f s (%.2f s on their own thread, beside the diff), patch encoded %.2f s, written %.2f s, "+
				"os.replace (the daemon's seal) %.2f s, commit %.2f s",
				sp["diff_s"], sp["hash_wait_s"], sp["hash_s"], sp["encode_s"], sp["write_s"], sp["seal_s"], sp["commit_s"])},
		{Figure: "14", Name: "  save without the diff (what a trainer whose diff runs on its GPU waits for)",
			Measured: saveWithoutDiff(patch), Unit: "s", Baseline: full.WallS, BaselineName: "full save",
			Note: "the save's wall less the diff's, with the result's hashes taken alone instead of beside the diff " +
				"(the host hashes the result on a GPU trainer too); an estimate, no goal of its own"},
		{Figure: "14", Name: "  bytes the trainer writes (/proc/self/io wchar during the save)",
			Measured: float64(patch.TrainerWchar), Unit: "B", Baseline: float64(full.TrainerWchar), BaselineName: "full save",
			Goal: ratioAtMost(patchinBytesGoal), Note: fmt.Sprintf("patch %s, full %s", humanBytes(patch.BytesSaved), humanBytes(full.BytesSaved))},
		{Figure: "14", Name: "  trainer's CPU during the save (diff, hashes, write)",
			Measured: patch.TrainerCPUS, Unit: "CPU-s", Baseline: full.TrainerCPUS, BaselineName: "full save"},
		{Figure: "14", Name: "  daemon's CPU, save -> seal returns",
			Measured: patch.DaemonCPUS, Unit: "CPU-s", Baseline: full.DaemonCPUS, BaselineName: "full save"},
		{Figure: "14", Name: "  daemon's CPU, save -> idle again",
			Measured: patch.DaemonCPUIdleS, Unit: "CPU-s", Baseline: full.DaemonCPUIdleS, BaselineName: "full save"},
	}, nil
}

// saveWithoutDiff is what the patch save would take if its diff cost no host time (a trainer
// whose diff runs on its GPU): the save's wall less the diff's and less the hashes' wait after
// it, plus the hashes' own time (on a GPU trainer the host still hashes the result's bytes,
// beside the device's diff; taken here as if they ran alone).
func saveWithoutDiff(r *patchinRun) float64 {
	return r.WallS - r.Split["diff_s"] - r.Split["hash_wait_s"] + r.Split["hash_s"]
}

// patchinSplitKeys are the keys of patchinRun.Split the figure reads.
var patchinSplitKeys = []string{"prepare_s", "diff_s", "hash_s", "hash_wait_s", "encode_s", "write_s", "seal_s", "commit_s"}

// patchinSide mounts a fresh store and runs the driver in mode against it.
func (b *bench) patchinSide(ctx context.Context, dir, pkg, driver, mode string, src [patchinVersions]string) (*patchinRun, error) {
	storePath, mnt := filepath.Join(dir, mode+"-store"), filepath.Join(dir, mode+"-mnt")
	if _, err := b.weightfsCmd(ctx, "init", storePath); err != nil {
		return nil, err
	}
	defer os.RemoveAll(storePath)
	d, err := b.startDaemon(ctx, "patchin-"+mode, mnt, b.opts.Weightfs, append(append([]string{"mount"}, baseMemoryArgs(b.sz.IngestBytes)...), storePath, mnt)...)
	if err != nil {
		return nil, err
	}
	defer d.stop()
	dropCaches()
	b.logf("patchin: %s saves of versions 2-%d through %s (the last measured)", mode, patchinVersions, mnt)
	cmd := exec.CommandContext(ctx, benchPython, append([]string{driver, mode, d.mnt, fmt.Sprint(d.Pid())}, src[:]...)...)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+pkg, "PYTHONDONTWRITEBYTECODE=1")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("%s: %v: %s\ndaemon log: %s", driver, err, strings.TrimSpace(stderr.String()), d.logTail())
	}
	var r patchinRun
	if err := json.Unmarshal(out, &r); err != nil {
		return nil, fmt.Errorf("driver output %q: %w", out, err)
	}
	if r.Version != patchinVersions {
		return nil, fmt.Errorf("driver output %q: it measured version %d, not %d", out, r.Version, patchinVersions)
	}
	b.logf("patchin: %s: %.2f s, trainer %.2f CPU-s and %s written, daemon %.2f CPU-s (%.2f to idle)", mode,
		r.WallS, r.TrainerCPUS, humanBytes(r.TrainerWchar), r.DaemonCPUS, r.DaemonCPUIdleS)
	return &r, d.stop()
}
