package main

import (
	"context"
	"fmt"
	"path/filepath"
)

// Figure 7: the store's size after 100 versions of lr 1e-6 steps (~1% changed each), against
// one checkpoint. The store proper is objects/ and versions/; the writer's node-local cache
// (index, materialized copy of the latest version) is reported beside it, not counted.

func (b *bench) figHistory(ctx context.Context) ([]Row, error) {
	cfg, err := configForBytes(b.sz.HistoryBytes, deltaLowLR)
	if err != nil {
		return nil, err
	}
	n := b.sz.HistoryVersions
	b.logf("  history: %d versions of %s, in memory", n, describeConfig(cfg))
	run, err := b.buildModelRun(ctx, "history", cfg, n, false, false)
	if err != nil {
		return nil, err
	}
	defer b.discard(filepath.Dir(run.StorePath))
	objects, err := treeBytes(filepath.Join(run.StorePath, "objects"))
	if err != nil {
		return nil, err
	}
	manifests, err := treeBytes(filepath.Join(run.StorePath, "versions"))
	if err != nil {
		return nil, err
	}
	cache, err := treeBytes(filepath.Join(run.StorePath, "cache"))
	if err != nil {
		return nil, err
	}
	total := objects + manifests
	var deltaBytes, changed, elements int64
	anchors := 0
	for _, rec := range run.Versions[1:] {
		deltaBytes += rec.ObjectsGrowth
		changed += rec.Info.ChangedElems
		elements += rec.Info.TotalElems
		if rec.ObjectsGrowth > run.CheckpointBytes/4 {
			anchors++ // a version that stored a large part whole (an anchor or a re-anchor)
		}
	}
	perVersion := float64(deltaBytes) / float64(len(run.Versions)-1)
	ckpt := float64(run.CheckpointBytes)
	return []Row{
		{Figure: "7", Name: fmt.Sprintf("store size after %d versions", n), Measured: float64(total) / (1 << 20), Unit: "MiB",
			Baseline: ckpt / (1 << 20), BaselineName: "one checkpoint", Goal: ratioAtMost(3),
			Note: fmt.Sprintf("%s, %.3f%% changed per step; objects %s, manifests %s; node-local cache (not counted) %s",
				describeConfig(cfg), 100*float64(changed)/float64(max(elements, 1)), humanBytes(objects), humanBytes(manifests), humanBytes(cache)),
			Detail: map[string]any{"objects_bytes": objects, "manifest_bytes": manifests, "cache_bytes": cache,
				"checkpoint_bytes": run.CheckpointBytes, "versions": n, "large_versions": anchors, "seconds": run.Seconds}},
		{Figure: "7", Name: "  stored bytes per version (v2 on)", Measured: perVersion / (1 << 20), Unit: "MiB",
			Baseline: ckpt / (1 << 20), BaselineName: "one checkpoint",
			Note: fmt.Sprintf("%d of %d versions stored more than a quarter of a checkpoint", anchors, n-1)},
	}, nil
}
