package store

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/weightfs/weightfs/internal/logtest"
)

// BenchmarkStreamMoE streams version 2 (one RL step at lr 3e-6) of the MoE and dense
// checkpoints of BenchmarkCommitMoE (moeBenchCheckpoints: same bytes, 3,000 MoE tensors of
// about 50 kB by default) into a fresh store holding version 1, as the mount does: every file
// through Writer.StreamFile in writes of 1 MiB (the mount's largest FUSE write), in file
// order, then the seal. Sub-benchmarks "mem" keep the base in memory (the figure's daemon,
// whose default budget holds the version), "copy" diff against the materialized copy.
//
// Reported: stream-s/op and stream-cpu-s/op (the writes and Close of every file: the
// pipeline), seal-s/op and seal-cpu-s/op, cpu-s/op (both), and the allocations of the whole
// (-benchmem). WEIGHTFS_BENCH_MOE_PROFILE=FILE writes a CPU profile of each version 2
// (FILE-stream-{mem,copy}-{dense,moe}-I); WEIGHTFS_BENCH_MOE_V1=stream streams version 1
// as well instead of committing it. The files are read into memory first: the
// benchmark measures the store's side of the writes, not the reads of the source.
func BenchmarkStreamMoE(b *testing.B) {
	cases := moeBenchCheckpoints(b)
	for _, mode := range []struct {
		name   string
		budget int64
	}{{"mem", 4 << 30}, {"copy", 0}} {
		for _, c := range cases {
			files := streamBenchFiles(b, c.srcs[1])
			// WEIGHTFS_BENCH_MOE_V1=stream streams version 1 too (as the mount does: its
			// tensors in the base in memory are then a stream's), else Commit stores it.
			streamV1 := os.Getenv("WEIGHTFS_BENCH_MOE_V1") == "stream"
			var files1 []streamBenchFile
			if streamV1 {
				files1 = streamBenchFiles(b, c.srcs[0])
			}
			ts, _ := c.cfg.Tensors()
			b.Run(fmt.Sprintf("%s/%s-%d", mode.name, c.name, len(ts)), func(b *testing.B) {
				b.SetBytes(2 * c.cfg.ParamCount())
				var streamWall, sealWall, streamCPU, sealCPU time.Duration
				profile := os.Getenv("WEIGHTFS_BENCH_MOE_PROFILE")
				for i := range b.N {
					b.StopTimer()
					s, _ := newStore(b, Options{BaseMemory: mode.budget, Logger: logtest.New(func(string, ...any) {})})
					if streamV1 {
						w, err := s.NewVersion(1)
						if err != nil {
							b.Fatal(err)
						}
						for _, f := range files1 {
							streamBenchOne(b, w, f.path, f.data, 1<<20)
						}
						if _, err := w.Seal(); err != nil {
							b.Fatal(err)
						}
					} else if _, err := s.Commit(c.srcs[0], CommitOptions{}); err != nil {
						b.Fatal(err)
					}
					runtime.GC()
					var prof *os.File
					if profile != "" {
						f, err := os.Create(fmt.Sprintf("%s-stream-%s-%s-%d", profile, mode.name, c.name, i))
						if err != nil {
							b.Fatal(err)
						}
						if err := pprof.StartCPUProfile(f); err != nil {
							b.Fatal(err)
						}
						prof = f
					}
					cpu0, t0 := processCPU(), time.Now()
					b.StartTimer()
					w, err := s.NewVersion(2)
					if err != nil {
						b.Fatal(err)
					}
					w.MaterializeInBackground()
					for _, f := range files {
						streamBenchOne(b, w, f.path, f.data, 1<<20)
					}
					cpu1, t1 := processCPU(), time.Now()
					if _, err := w.Seal(); err != nil {
						b.Fatal(err)
					}
					b.StopTimer()
					cpu2, t2 := processCPU(), time.Now()
					streamWall += t1.Sub(t0)
					sealWall += t2.Sub(t1)
					streamCPU += cpu1 - cpu0
					sealCPU += cpu2 - cpu1
					if prof != nil {
						pprof.StopCPUProfile()
						prof.Close()
					}
					s.mat.ensure() // outside the measurement
					s.Close()
					b.StartTimer()
				}
				n := float64(b.N)
				b.ReportMetric(streamWall.Seconds()/n, "stream-s/op")
				b.ReportMetric(streamCPU.Seconds()/n, "stream-cpu-s/op")
				b.ReportMetric(sealWall.Seconds()/n, "seal-s/op")
				b.ReportMetric(sealCPU.Seconds()/n, "seal-cpu-s/op")
				b.ReportMetric((streamCPU+sealCPU).Seconds()/n, "cpu-s/op")
			})
		}
	}
}

// streamBenchFile is one file of a checkpoint, in memory.
type streamBenchFile struct {
	path string
	data []byte
}

// streamBenchFiles reads every file under dir, in path order.
func streamBenchFiles(b *testing.B, dir string) []streamBenchFile {
	var files []streamBenchFile
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		files = append(files, streamBenchFile{path: filepath.ToSlash(rel), data: data})
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
	return files
}

// streamBenchOne streams one file into w in writes of size bytes and adds it.
func streamBenchOne(b testing.TB, w *Writer, path string, data []byte, size int) {
	st, err := w.StreamFile(path)
	if err != nil {
		b.Fatal(err)
	}
	for len(data) > 0 {
		n := min(len(data), size)
		if _, err := st.Write(data[:n]); err != nil {
			b.Fatal(err)
		}
		data = data[n:]
	}
	if err := st.Close(); err != nil {
		b.Fatal(err)
	}
	if err := w.AddStream(path, st, 0o644); err != nil {
		b.Fatal(err)
	}
}
