package store

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"testing"
	"time"

	"github.com/weightfs/weightfs/gen"
	"github.com/weightfs/weightfs/internal/logtest"
)

// BenchmarkCommitMoE commits version 2 (one RL step at lr 3e-6) of a mixture-of-experts
// checkpoint (128 experts, top-8, 8 shards: bench figure moe's model) and of a dense one of
// the same bytes, each on a fresh store holding version 1: where commit's per-tensor cost
// goes (`go test -run - -bench CommitMoE -benchtime 3x -cpuprofile cpu.out ./store/`).
// WEIGHTFS_BENCH_MOE_TENSORS sets the MoE tensor count (3,000 by default; bytes follow
// figure moe's 1 GB per 20,000 tensors); WEIGHTFS_BENCH_MOE_DIR keeps the generated
// checkpoints between runs; WEIGHTFS_BENCH_MOE_PROFILE=FILE writes a CPU profile of the
// version 2 commits alone (FILE-dense-I, FILE-moe-I for
// the I-th; `go tool pprof` merges them).
func BenchmarkCommitMoE(b *testing.B) {
	tensors := 3000
	if s := os.Getenv("WEIGHTFS_BENCH_MOE_TENSORS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			b.Fatal(err)
		}
		tensors = n
	}
	bytes := int64(tensors) * 50_000
	dir := os.Getenv("WEIGHTFS_BENCH_MOE_DIR")
	if dir == "" {
		dir = b.TempDir()
	}
	var moe gen.Config
	n := 0
	for layers := 1; n < tensors; layers++ {
		moe = gen.MoEConfigForParams(bytes/2, layers, gen.MoE{Experts: 128, TopK: 8}, 3e-6, 1)
		ts, err := moe.Tensors()
		if err != nil {
			b.Fatal(err)
		}
		n = len(ts)
	}
	moe.Shards = 8
	dense := gen.ConfigForParams(moe.ParamCount(), 3e-6, 1)
	for dense.ParamCount() < moe.ParamCount() {
		dense = gen.ConfigForParams(dense.ParamCount()+dense.ParamCount()/50+1, 3e-6, 1)
	}
	dense.Shards = 8
	for _, c := range []struct {
		name string
		cfg  gen.Config
	}{{"dense", dense}, {"moe", moe}} {
		var srcs [2]string
		for v := range srcs {
			srcs[v] = filepath.Join(dir, fmt.Sprintf("%s-%d-v%d", c.name, tensors, v+1))
			if _, err := os.Stat(srcs[v]); err == nil {
				continue
			}
			if err := gen.StreamCheckpoint(c.cfg, v, srcs[v]+".tmp"); err != nil {
				b.Fatal(err)
			}
			if err := os.Rename(srcs[v]+".tmp", srcs[v]); err != nil {
				b.Fatal(err)
			}
		}
		ts, _ := c.cfg.Tensors()
		b.Run(fmt.Sprintf("%s-%d", c.name, len(ts)), func(b *testing.B) {
			b.SetBytes(2 * c.cfg.ParamCount())
			var fsyncs, writes int64
			var cpu time.Duration
			profile := os.Getenv("WEIGHTFS_BENCH_MOE_PROFILE")
			for i := range b.N {
				b.StopTimer()
				s, _ := newStore(b, Options{Logger: logtest.New(func(string, ...any) {})})
				if _, err := s.Commit(srcs[0], CommitOptions{}); err != nil {
					b.Fatal(err)
				}
				before := s.Stats()
				var prof *os.File
				if profile != "" {
					f, err := os.Create(fmt.Sprintf("%s-%s-%d", profile, c.name, i))
					if err != nil {
						b.Fatal(err)
					}
					if err := pprof.StartCPUProfile(f); err != nil {
						b.Fatal(err)
					}
					prof = f
				}
				cpu0 := processCPU()
				b.StartTimer()
				if _, err := s.Commit(srcs[1], CommitOptions{}); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				cpu += processCPU() - cpu0
				if prof != nil {
					pprof.StopCPUProfile()
					prof.Close()
				}
				after := s.Stats()
				fsyncs += after.Fsyncs - before.Fsyncs
				writes += after.IndexWrites - before.IndexWrites
				s.Close()
				b.StartTimer()
			}
			b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/op")
			b.ReportMetric(float64(fsyncs)/float64(b.N), "fsyncs/op")
			b.ReportMetric(float64(writes)/float64(b.N), "indexwrites/op")
		})
	}
}
