package store

import (
	"fmt"
	"io"
	"io/fs"
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
	cases := moeBenchCheckpoints(b)
	for _, c := range cases {
		srcs := c.srcs
		ts, _ := c.cfg.Tensors()
		b.Run(fmt.Sprintf("%s-%d", c.name, len(ts)), func(b *testing.B) {
			b.SetBytes(2 * c.cfg.ParamCount())
			var fsyncs, writes int64
			var cpu time.Duration
			profile := os.Getenv("WEIGHTFS_BENCH_MOE_PROFILE")
			cold := os.Getenv("WEIGHTFS_BENCH_MOE_COLD") == "1"
			for i := range b.N {
				b.StopTimer()
				s, root := newStore(b, Options{Logger: logtest.New(func(string, ...any) {})})
				if _, err := s.Commit(srcs[0], CommitOptions{}); err != nil {
					b.Fatal(err)
				}
				if cold {
					if err := evictTree(root); err != nil {
						b.Fatal(err)
					}
					if err := warmTree(srcs[1]); err != nil {
						b.Fatal(err)
					}
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

// moeBenchCase is one checkpoint of the MoE benchmarks: its name, its generator's config, and
// its versions 1 and 2 on disk.
type moeBenchCase struct {
	name string
	cfg  gen.Config
	srcs [2]string
}

// moeBenchCheckpoints makes the dense and MoE checkpoints the MoE benchmarks measure: a MoE
// (128 experts, top-8, 8 shards) of WEIGHTFS_BENCH_MOE_TENSORS tensors (3,000 by default) at
// figure moe's 50 kB a tensor, and a dense one of at least its parameters, versions 1 and 2
// (one RL step at lr 3e-6) of each generated into WEIGHTFS_BENCH_MOE_DIR (kept between runs)
// or a temporary directory. It returns the two cases, dense first.
func moeBenchCheckpoints(b *testing.B) []moeBenchCase {
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
	for n, layers := 0, 1; n < tensors; layers++ {
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
	cases := []moeBenchCase{{name: "dense", cfg: dense}, {name: "moe", cfg: moe}}
	for i := range cases {
		c := &cases[i]
		for v := range c.srcs {
			c.srcs[v] = filepath.Join(dir, fmt.Sprintf("%s-%d-v%d", c.name, tensors, v+1))
			if _, err := os.Stat(c.srcs[v]); err == nil {
				continue
			}
			if err := gen.StreamCheckpoint(c.cfg, v, c.srcs[v]+".tmp"); err != nil {
				b.Fatal(err)
			}
			if err := os.Rename(c.srcs[v]+".tmp", c.srcs[v]); err != nil {
				b.Fatal(err)
			}
		}
	}
	return cases
}

// warmTree reads every regular file under dir once (into the page cache).
func warmTree(dir string) error {
	return eachRegularFile(dir, func(f *os.File) error {
		_, err := io.Copy(io.Discard, f)
		return err
	})
}

// eachRegularFile opens every regular file under dir in turn and hands it to do.
func eachRegularFile(dir string, do func(*os.File) error) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		return do(f)
	})
}
