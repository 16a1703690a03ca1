package main

import (
	"context"
	"fmt"
	"slices"
)

// Figure 1: stored bytes per changed element on the generator's RL steps, against TRL's patch,
// slime's deltas_zstd and the Shannon bound of the positions, all on the same changes; then
// the two delta body versions side by side on the same steps, with the order-0 bound and the
// bound of version 2's model (fig_delta_codec.go).
// Beside them, what consecutive steps have in common (fig_delta_context.go), against the same
// statistics of a real RL run.

// The two learning rates of figure 1; readLR's store also serves figure 4.
const (
	deltaHighLR = 3e-6 // ~2.5% of elements change per step
	deltaLowLR  = 1e-6 // ~1%
	readLR      = deltaLowLR
)

// deltaVersions is how many versions figure 1 commits. Its head row averages versions 2 and 3;
// its steady-state row averages versions steadyFirst..deltaVersions, one whole period of the
// store's context chains (version 2 has no context: its base is the whole version 1; then
// four version-2 sections, then a version-1 section again: docs/format.md Part I §5).
const (
	deltaVersions = 7
	steadyFirst   = 3
)

// modelRunFor builds (once) the store of the figure-1 model at lr: three versions, or
// ReadVersions when figure 4 needs them too.
func (b *bench) modelRunFor(ctx context.Context, lr float64) (*modelRun, error) {
	key := fmt.Sprintf("model-lr%g", lr)
	if r, ok := b.runs[key]; ok {
		return r, nil
	}
	cfg, err := configForBytes(b.sz.DeltaMinBytes, lr)
	if err != nil {
		return nil, err
	}
	n, keepLast := deltaVersions, false
	if lr == readLR && slices.Contains(b.opts.Figures, "reads") {
		n, keepLast = max(n, b.sz.ReadVersions), true
	}
	wantChanges := slices.Contains(b.opts.Figures, "delta")
	b.logf("model %s: %s, %d versions, in memory (%.1f GiB of RAM for the optimizer state)",
		key, describeConfig(cfg), n, float64(12*cfg.ParamCount())/(1<<30))
	run, err := b.buildModelRun(ctx, key, cfg, n, wantChanges, keepLast)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	b.runs[key] = run
	return run, nil
}

func (b *bench) figDelta(ctx context.Context) ([]Row, error) {
	var rows []Row
	for _, lr := range []float64{deltaHighLR, deltaLowLR} {
		run, err := b.modelRunFor(ctx, lr)
		if err != nil {
			return rows, err
		}
		rows = append(rows, deltaRows(run, lr)...)
		rows = append(rows, steadyRow(run, lr))
		rows = append(rows, codecRows(run.Steps.Codec, lr)...)
		rows = append(rows, contextRows(run.Steps.Sum, lr)...)
	}
	return rows, nil
}

// deltaRows are figure 1's rows for one model run: versions 2 and 3 (the deltas figure 1
// names), their changes summed.
func deltaRows(run *modelRun, lr float64) []Row {
	var ch changeStats
	var stored, manifestStored, storeChanged int64
	var perVersion []map[string]any
	for _, rec := range run.Versions[1:min(len(run.Versions), 3)] {
		ch.add(rec.Changes)
		stored += rec.ObjectsGrowth
		manifestStored += rec.Info.StoredBytes
		storeChanged += rec.Info.ChangedElems
		perVersion = append(perVersion, map[string]any{
			"version": rec.Info.Number, "stored_bytes_on_disk": rec.ObjectsGrowth,
			"stored_bytes_manifest": rec.Info.StoredBytes, "changes": rec.Changes,
			"store_changed_elements": rec.Info.ChangedElems,
		})
	}
	density := ch.Density()
	name := fmt.Sprintf("delta size, lr %g (%.2f%% changed)", lr, 100*density)
	if ch.Changed == 0 {
		return []Row{{Figure: "1", Name: name, Status: StatusError, Note: "no element changed between versions"}}
	}
	per := func(n int64) float64 { return float64(n) / float64(ch.Changed) }
	goal := atMost(1.15, "B/elt")
	if lr == deltaLowLR {
		goal = atMost(1.5, "B/elt")
	}
	head := Row{
		Figure: "1", Name: name, Measured: per(stored), Unit: "B/elt",
		Baseline: per(ch.SlimeZstdBytes), BaselineName: "slime deltas_zstd", Goal: goal,
		Detail: map[string]any{
			"model": describeConfig(run.Cfg), "params": run.Cfg.ParamCount(), "versions": perVersion,
			"stored_bytes": stored, "changed_elements": ch.Changed, "total_elements": ch.Total,
		},
	}
	if manifestStored != stored {
		head.Note = joinNote(head.Note, fmt.Sprintf("objects on disk grew by %d bytes, the manifests count %d: the figure uses the disk", stored, manifestStored))
	}
	if storeChanged != ch.Changed {
		head.Note = joinNote(head.Note, fmt.Sprintf("the store counts %d changed elements, the bytewise diff %d", storeChanged, ch.Changed))
	}
	bound := positionBoundBits(ch.Changed, ch.Total)
	return []Row{
		head,
		{Figure: "1", Name: "  TRL patch (I32 index + value)", Measured: per(ch.TRLBytes), Unit: "B/elt",
			Note: fmt.Sprintf("weightfs stores %.1f%% of it", 100*float64(stored)/float64(ch.TRLBytes))},
		{Figure: "1", Name: "  slime v1 deltas_zstd (u16 gap + value, zstd 1)", Measured: per(ch.SlimeZstdBytes), Unit: "B/elt",
			Note: fmt.Sprintf("%.3f B/elt before zstd", per(ch.SlimeRawBytes))},
		{Figure: "1", Name: "  Shannon bound of the positions, H(p)/p", Measured: bound / 8, Unit: "B/elt",
			Note: fmt.Sprintf("%.2f bits/elt at p = %.4f; values come on top", bound, density)},
	}
}

// steadyRow is the bytes the store keeps per changed element once context chains run: the
// versions steadyFirst..deltaVersions, version-2 sections and the version-1 section that
// restarts each chain in their real proportion. The goal, 1.00 B per changed element,
// is set at lr 3e-6.
func steadyRow(run *modelRun, lr float64) Row {
	name := fmt.Sprintf("  stored, steady state (versions %d-%d)", steadyFirst, deltaVersions)
	if len(run.Versions) < deltaVersions {
		return Row{Figure: "1", Name: name, Status: StatusSkip, Note: fmt.Sprintf("%d versions committed", len(run.Versions))}
	}
	var ch changeStats
	var stored int64
	for _, rec := range run.Versions[steadyFirst-1 : deltaVersions] {
		ch.add(rec.Changes)
		stored += rec.ObjectsGrowth
	}
	if ch.Changed == 0 {
		return Row{Figure: "1", Name: name, Status: StatusError, Note: "no element changed between versions"}
	}
	row := Row{Figure: "1", Name: name, Measured: float64(stored) / float64(ch.Changed), Unit: "B/elt",
		Note:   "objects on disk per changed element: 4 version-2 sections and 1 version-1 section per tensor",
		Detail: map[string]any{"stored_bytes": stored, "changed_elements": ch.Changed}}
	if lr == deltaHighLR {
		row.Goal = atMost(1.00, "B/elt")
	}
	return row
}
