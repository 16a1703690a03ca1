package store

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/weightfs/weightfs/internal/logtest"
)

// BenchmarkRefreshMoE is the catch-up of a read-only store that keeps a materialized copy
// (what a read-only mount does between a seal and showing the version) with version 2 of
// BenchmarkCommitMoE's checkpoints, MoE against dense: a writer commits versions 1 and 2 on a
// fresh local store; the reader, at version 1, refreshes to version 2 (measured: its pack
// indexes, the manifest, the copy brought forward). Same environment variables as
// BenchmarkCommitMoE (WEIGHTFS_BENCH_MOE_PROFILE=FILE profiles the measured refreshes:
// FILE-refresh-dense-I, FILE-refresh-moe-I).
func BenchmarkRefreshMoE(b *testing.B) {
	cases := moeBenchCheckpoints(b)
	quiet := logtest.New(func(string, ...any) {})
	for _, c := range cases {
		srcs := c.srcs
		ts, _ := c.cfg.Tensors()
		b.Run(fmt.Sprintf("%s-%d", c.name, len(ts)), func(b *testing.B) {
			b.SetBytes(2 * c.cfg.ParamCount())
			var cpu time.Duration
			profile := os.Getenv("WEIGHTFS_BENCH_MOE_PROFILE")
			for i := range b.N {
				b.StopTimer()
				root := filepath.Join(b.TempDir(), "store")
				if err := Init(root); err != nil {
					b.Fatal(err)
				}
				w, err := Open(root, Options{Logger: quiet})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := w.Commit(srcs[0], CommitOptions{}); err != nil {
					b.Fatal(err)
				}
				r, err := Open(root, Options{Logger: quiet, ReadOnly: true, Materialize: true, CacheDir: b.TempDir()})
				if err != nil {
					b.Fatal(err)
				}
				if err := r.Refresh(); err != nil {
					b.Fatal(err)
				}
				if _, err := w.Commit(srcs[1], CommitOptions{}); err != nil {
					b.Fatal(err)
				}
				var prof *os.File
				if profile != "" {
					if prof, err = os.Create(fmt.Sprintf("%s-refresh-%s-%d", profile, c.name, i)); err != nil {
						b.Fatal(err)
					}
					if err := pprof.StartCPUProfile(prof); err != nil {
						b.Fatal(err)
					}
				}
				cpu0 := processCPU()
				b.StartTimer()
				if err := r.Refresh(); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				cpu += processCPU() - cpu0
				if prof != nil {
					pprof.StopCPUProfile()
					prof.Close()
				}
				if vs := r.Versions(); len(vs) != 2 {
					b.Fatalf("the reader sees %d versions after the refresh, want 2", len(vs))
				}
				r.Close()
				w.Close()
				b.StartTimer()
			}
			b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/op")
		})
	}
}
