package store

import (
	"fmt"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/weightfs/weightfs/gen"
	"github.com/weightfs/weightfs/internal/logtest"
)

// cpuSeconds is the user and system CPU time of this process so far.
func cpuSeconds() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}

// BenchmarkContextChain measures what the bound on chains of contexts (maxContextChain)
// trades: for each bound K (0: version-1 sections only) it commits the same generated series
// (4M parameters, lr 3e-6, 16 versions) and reports the delta bytes per changed element of
// versions 3 and later, the CPU time of their commits, and the CPU time of a cold read of the newest version from the objects
// alone (a forward replay from version 1) and of version 12 by a reader whose materialized copy
// holds the newest (a walk back over 4 deltas, whose contexts reach further back), with the
// delta blocks each decodes. Run it with -benchtime=1x; docs/design.md ("The delta codec") has
// the figures.
func BenchmarkContextChain(b *testing.B) {
	const versions, old = 16, 12
	cfg := gen.ConfigForParams(4_000_000, 3e-6, 30)
	m, err := gen.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	var trees []map[string][]byte
	for v := range versions {
		if v > 0 {
			m.Step()
		}
		files, err := m.CheckpointFiles()
		if err != nil {
			b.Fatal(err)
		}
		trees = append(trees, files)
	}
	var logical int64
	for _, b := range trees[0] {
		logical += int64(len(b))
	}
	for _, k := range []int{0, 2, 4, 8, 64} {
		b.Run(fmt.Sprintf("K=%d", k), func(b *testing.B) {
			for range b.N {
				s, root := newStore(b, Options{Logger: logtest.New(func(string, ...any) {})})
				s.objects.contextChain = k
				var ingest float64
				for i, files := range trees {
					dir := writeTree(b, b.TempDir(), files)
					start := cpuSeconds()
					if _, err := s.Commit(dir, CommitOptions{Version: uint64(i + 1)}); err != nil {
						b.Fatal(err)
					}
					if i >= 2 {
						ingest += cpuSeconds() - start
					}
				}
				var bytes, changed int64
				for v := uint64(3); v <= versions; v++ {
					ver, err := s.versions.loadVersion(v)
					if err != nil {
						b.Fatal(err)
					}
					for i := range ver.m.Files {
						for _, tn := range ver.m.Files[i].Tensors {
							if mt, err := s.objects.meta(tn.ID); err == nil && mt.Kind == kindDelta && mt.Base == tn.Base {
								bytes += mt.DeltaLen
								changed += tn.Changed
							}
						}
					}
				}
				closeStore(b, s)
				quiet := logtest.New(func(string, ...any) {})
				// CPU seconds per GB read, and delta blocks decoded per block of the version's
				// deltas (the decodes a read needs beyond its own deltas are contexts).
				read := func(r *Store, v uint64) (float64, float64) {
					start, decoded := cpuSeconds(), r.objects.bufs.decoded.Load()
					for p := range trees[v-1] {
						mustEqualBytes(b, p, readWhole(b, r, v, p), trees[v-1][p])
					}
					return (cpuSeconds() - start) / (float64(logical) / 1e9), float64(r.objects.bufs.decoded.Load() - decoded)
				}
				r := openStore(b, root, Options{ReadOnly: true, CacheDir: b.TempDir(), FileCopyBytes: -1, Logger: quiet})
				newest, newestBlocks := read(r, versions)
				closeStore(b, r)
				// A reader's copy of the newest version, built, then a fresh process on it.
				cache := filepath.Join(b.TempDir(), "cache")
				closeStore(b, openStore(b, root, Options{ReadOnly: true, Materialize: true, CacheDir: cache, FileCopyBytes: -1, Logger: quiet}))
				r = openStore(b, root, Options{ReadOnly: true, Materialize: true, CacheDir: cache, FileCopyBytes: -1, Logger: quiet})
				back, backBlocks := read(r, old)
				b.ReportMetric(float64(bytes)/float64(changed), "B/changed")
				b.ReportMetric(ingest/(float64(logical)*(versions-2)/1e9), "cpu-s/GB-commit")
				b.ReportMetric(newest, "cpu-s/GB-newest")
				b.ReportMetric(newestBlocks, "blocks-newest")
				b.ReportMetric(back, "cpu-s/GB-back4")
				b.ReportMetric(backBlocks, "blocks-back4")
			}
		})
	}
}
