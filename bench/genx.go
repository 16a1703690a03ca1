package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"time"

	"github.com/zeebo/xxh3"

	"github.com/weightfs/weightfs/gen"
	"github.com/weightfs/weightfs/store"
	"github.com/weightfs/weightfs/store/location"
)

// configForBytes returns the generator's config whose checkpoint holds at least minBytes of
// bf16 weights (2 bytes per parameter), growing the target until ConfigForParams's shape
// reaches it.
func configForBytes(minBytes int64, lr float64) (gen.Config, error) {
	target := max(minBytes/2, 10_000)
	for range 200 {
		c := gen.ConfigForParams(target, lr, 1)
		if 2*c.ParamCount() >= minBytes {
			return c, nil
		}
		target += target/50 + 1
	}
	return gen.Config{}, fmt.Errorf("no generator config reaches %d bytes of weights", minBytes)
}

// describeConfig is the one-line summary of a model for notes and logs.
func describeConfig(c gen.Config) string {
	return fmt.Sprintf("%.0fM params (%.2f GiB bf16), lr %g", float64(c.ParamCount())/1e6, float64(2*c.ParamCount())/(1<<30), c.LR)
}

// commitFiles stores files held in memory as version v through the store's writer API (the
// batch path `weightfs commit` takes).
func commitFiles(st *store.Store, v uint64, files map[string][]byte) (store.VersionInfo, error) {
	w, err := st.NewVersion(v)
	if err != nil {
		return store.VersionInfo{}, err
	}
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		b := files[name]
		if err := w.AddFile(name, bytes.NewReader(b), int64(len(b)), 0o644); err != nil {
			w.Abort()
			return store.VersionInfo{}, err
		}
	}
	info, err := w.Seal()
	if err != nil {
		w.Abort()
		return store.VersionInfo{}, err
	}
	return info, nil
}

// versionRecord is what a modelRun keeps of one committed version.
type versionRecord struct {
	Info          store.VersionInfo
	Changes       changeStats // against the previous version; zero for the first
	ObjectsGrowth int64       // bytes the version added under STORE/objects, as listed on disk
	Hashes        map[string]xxh3.Uint128
}

// modelRun is a store holding consecutive versions of one generated model, committed in
// process through the store API, with the figures of each version measured on the way.
type modelRun struct {
	Cfg             gen.Config
	StorePath       string
	CheckpointBytes int64 // all files of one version
	Versions        []versionRecord
	LastDir         string // the newest version as plain files, if asked for
	Seconds         float64
	Steps           stepTracker // consecutive steps' changes (with wantChanges)
}

// buildModelRun generates n versions of cfg with an in-memory model (12 bytes of RAM per
// parameter), commits each, and measures its changes against the previous one (wantChanges:
// the baselines of figure 1, which cost a diff and a zstd pass per version). With keepLast
// the newest version is also written out as plain files.
func (b *bench) buildModelRun(ctx context.Context, name string, cfg gen.Config, n int, wantChanges, keepLast bool) (*modelRun, error) {
	began := time.Now()
	dir := filepath.Join(b.work, name)
	run := &modelRun{Cfg: cfg, StorePath: filepath.Join(dir, "store")}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	if err := location.Init(run.StorePath, false, location.Options{}); err != nil {
		return nil, err
	}
	st, err := location.Open(run.StorePath, location.Options{})
	if err != nil {
		return nil, err
	}
	defer st.Close()
	model, err := gen.New(cfg)
	if err != nil {
		return nil, err
	}
	enc, err := newSlimeEncoder()
	if err != nil {
		return nil, err
	}
	defer enc.Close()
	objects := filepath.Join(run.StorePath, "objects")
	var prev map[string][]byte
	for v := 1; v <= n; v++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if v > 1 {
			model.Step()
		}
		files, err := model.CheckpointFiles()
		if err != nil {
			return nil, err
		}
		rec := versionRecord{Hashes: hashFiles(files)}
		if prev != nil && wantChanges {
			if rec.Changes, err = measureChanges(prev, files, enc); err != nil {
				return nil, fmt.Errorf("version %d: %w", v, err)
			}
			if err := run.Steps.observe(prev, files); err != nil {
				return nil, fmt.Errorf("version %d: %w", v, err)
			}
		}
		before, err := treeBytes(objects)
		if err != nil {
			return nil, err
		}
		if rec.Info, err = commitFiles(st, uint64(v), files); err != nil {
			return nil, fmt.Errorf("commit version %d of %s: %w", v, name, err)
		}
		after, err := treeBytes(objects)
		if err != nil {
			return nil, err
		}
		rec.ObjectsGrowth = after - before
		if v == 1 {
			for _, f := range files {
				run.CheckpointBytes += int64(len(f))
			}
		}
		if v == n && keepLast {
			run.LastDir = filepath.Join(dir, "latest-plain")
			if err := writeFilesTo(run.LastDir, files); err != nil {
				return nil, err
			}
		}
		run.Versions = append(run.Versions, rec)
		prev = files
		if v == 1 || v == n || v%10 == 0 {
			b.logf("  %s: version %d/%d committed (%s stored, %.3f%% changed)", name, v, n,
				humanBytes(rec.Info.StoredBytes), 100*rec.Info.ChangedFraction())
		}
	}
	run.Seconds = time.Since(began).Seconds()
	return run, nil
}

// writeFilesTo writes in-memory files into dir.
func writeFilesTo(dir string, files map[string][]byte) error {
	for name, data := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// humanBytes prints n in binary units.
func humanBytes(n int64) string {
	switch {
	case n >= 1<<30:
		return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
	case n >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	}
	return fmt.Sprintf("%d B", n)
}
