package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/zeebo/xxh3"

	"github.com/weightfs/weightfs/delta"
	"github.com/weightfs/weightfs/gen"
)

// Figure 6: `weightfs apply` of the patch of one lr 1e-6 step (~1% of elements) to a ~1 GiB
// safetensors file, against rewriting the file (write + fsync). Both start with their inputs
// in the page cache, as on an inference node that just loaded the weights; the patched file
// must hash like the new version.

const weightsFile = "model.safetensors"

func (b *bench) figApply(ctx context.Context) ([]Row, error) {
	cfg, err := configForBytes(b.sz.ApplyBytes, deltaLowLR)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(b.work, "apply")
	defer b.discard(dir)
	v1, v2 := filepath.Join(dir, "v1"), filepath.Join(dir, "v2")
	b.logf("  apply: generating versions 1 and 2 (%s)", describeConfig(cfg))
	for i, d := range []string{v1, v2} {
		if err := gen.StreamCheckpoint(cfg, i, d); err != nil {
			return nil, fmt.Errorf("generate version %d: %w", i+1, err)
		}
	}
	storePath, patch := filepath.Join(dir, "store"), filepath.Join(dir, "patch.safetensors")
	for _, args := range [][]string{{"init", storePath}, {"commit", storePath, v1}, {"commit", storePath, v2},
		{"patch", "-o", patch, storePath, "2"}} {
		if _, err := b.weightfsCmd(ctx, args...); err != nil {
			return nil, err
		}
	}
	if err := os.RemoveAll(storePath); err != nil {
		return nil, err
	}
	plan, patchBytes, err := readPatchPlan(patch)
	if err != nil {
		return nil, err
	}
	wantHash, err := fileHash(filepath.Join(v2, weightsFile))
	if err != nil {
		return nil, err
	}

	target := filepath.Join(dir, "target", weightsFile)
	if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
		return nil, err
	}
	var last time.Time
	if _, err := copyOneFile(filepath.Join(v1, weightsFile), target, make([]byte, 4<<20), true, &last); err != nil {
		return nil, err
	}
	syscall.Sync()
	for _, p := range []string{target, patch} {
		if _, err := fileHash(p); err != nil { // into the page cache
			return nil, err
		}
	}
	b.logf("  apply: weightfs apply (%s patch, %.3f%% of elements)", humanBytes(patchBytes), 100*float64(plan.TotalChanged())/float64(plan.TotalElements))
	began := time.Now()
	applyOutput, err := b.weightfsCmd(ctx, "apply", patch, target)
	if err != nil {
		return nil, err
	}
	applySeconds := time.Since(began).Seconds()
	if got, err := fileHash(target); err != nil {
		return nil, err
	} else if got != wantHash {
		return nil, fmt.Errorf("the patched file differs from version 2")
	}

	b.logf("  apply: rewriting the file (write + fsync)")
	syscall.Sync()
	if _, err := fileHash(filepath.Join(v2, weightsFile)); err != nil {
		return nil, err
	}
	began = time.Now()
	n, err := copyOneFile(filepath.Join(v2, weightsFile), filepath.Join(dir, "rewrite.safetensors"), make([]byte, b.opts.WriteSize), true, &last)
	if err != nil {
		return nil, err
	}
	rewriteSeconds := time.Since(began).Seconds()
	density := float64(plan.TotalChanged()) / float64(plan.TotalElements)
	return []Row{{
		Figure: "6", Name: fmt.Sprintf("apply %.2f%% patch to a %s file", 100*density, humanBytes(n)),
		Measured: applySeconds, Unit: "s", Baseline: rewriteSeconds, BaselineName: "rewrite+fsync", Goal: ratioAtMost(0.1),
		Note: fmt.Sprintf("patch %s; wall time of the `weightfs apply` process; inputs in the page cache", humanBytes(patchBytes)),
		Detail: map[string]any{"patch_bytes": patchBytes, "changed_elements": plan.TotalChanged(),
			"total_elements": plan.TotalElements, "file_bytes": n, "model": describeConfig(cfg),
			"apply_output": applyOutput},
	}}, nil
}

// readPatchPlan opens a patch file and returns its plan and size.
func readPatchPlan(path string) (delta.PatchPlan, int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return delta.PatchPlan{}, 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return delta.PatchPlan{}, 0, err
	}
	p, err := delta.OpenPatch(f, st.Size())
	if err != nil {
		return delta.PatchPlan{}, 0, fmt.Errorf("patch %s: %w", path, err)
	}
	if p.Plan.TotalElements == 0 {
		return delta.PatchPlan{}, 0, fmt.Errorf("patch %s: no elements", path)
	}
	return p.Plan, st.Size(), nil
}

// fileHash is the xxh3-128 of a file's bytes (read sequentially, which also warms the cache).
func fileHash(path string) (xxh3.Uint128, error) {
	h := xxh3.New()
	if _, err := readOneFile(path, make([]byte, 4<<20), h); err != nil {
		return xxh3.Uint128{}, err
	}
	return h.Sum128(), nil
}
