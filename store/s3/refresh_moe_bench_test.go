package s3

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/weightfs/weightfs/gen"
	"github.com/weightfs/weightfs/internal/logtest"
	"github.com/weightfs/weightfs/internal/s3test"
	"github.com/weightfs/weightfs/store"
)

// BenchmarkRefreshMoES3 is store's BenchmarkRefreshMoE over the test S3 server (versitygw on
// loopback): what a read-only S3 mount does between the writer's seal and showing the
// version, minus the poll of the change hint. A writer commits version 1 of a MoE checkpoint
// (128 experts, 8 shards, ~50 KB a tensor, as figure moe's) and of a dense one of the same
// bytes into a fresh S3 store; a read-only store that keeps a materialized copy refreshes to
// it; the writer commits version 2, and the reader's Refresh to it is measured (the listing,
// the manifest, its pack index, the pack, the copy brought forward and checked), with the
// requests it sent. Environment: WEIGHTFS_BENCH_MOE_TENSORS (default 3000),
// WEIGHTFS_BENCH_MOE_DIR (keeps the generated checkpoints between runs),
// WEIGHTFS_BENCH_MOE_PROFILE=FILE (CPU profiles of the measured refreshes,
// FILE-s3refresh-KIND-I).
func BenchmarkRefreshMoES3(b *testing.B) {
	cases := moeCheckpoints(b)
	srv := s3test.Start(b)
	setEnvB(b, srv)
	quiet := logtest.New(func(string, ...any) {})
	for _, c := range cases {
		ts, _ := c.cfg.Tensors()
		b.Run(fmt.Sprintf("%s-%d", c.name, len(ts)), func(b *testing.B) {
			b.SetBytes(2 * c.cfg.ParamCount())
			var cpu time.Duration
			var requests int64
			profile := os.Getenv("WEIGHTFS_BENCH_MOE_PROFILE")
			for i := range b.N {
				b.StopTimer()
				url := fmt.Sprintf("s3://weightfs-test/bench-refresh-%s-%d-%d", c.name, time.Now().UnixNano(), i)
				if err := Init(url, Config{}, nil); err != nil {
					b.Fatal(err)
				}
				w, err := Open(url, Config{}, store.Options{Logger: quiet, CacheDir: b.TempDir()})
				if err != nil {
					b.Fatal(err)
				}
				if _, err := w.Commit(c.srcs[0], store.CommitOptions{}); err != nil {
					b.Fatal(err)
				}
				r, err := Open(url, Config{}, store.Options{Logger: quiet, ReadOnly: true, Materialize: true, CacheDir: b.TempDir()})
				if err != nil {
					b.Fatal(err)
				}
				if err := r.Refresh(); err != nil {
					b.Fatal(err)
				}
				if _, err := w.Commit(c.srcs[1], store.CommitOptions{}); err != nil {
					b.Fatal(err)
				}
				// The writer's copy is brought forward after the seal returns: closed, the
				// writer is done with it and leaves the measured refresh alone.
				w.Close()
				var prof *os.File
				if profile != "" {
					if prof, err = os.Create(fmt.Sprintf("%s-s3refresh-%s-%d", profile, c.name, i)); err != nil {
						b.Fatal(err)
					}
					if err := pprof.StartCPUProfile(prof); err != nil {
						b.Fatal(err)
					}
				}
				before := r.Backend().(*Backend).Stats()
				cpu0 := processCPU()
				b.StartTimer()
				if err := r.Refresh(); err != nil {
					b.Fatal(err)
				}
				b.StopTimer()
				cpu += processCPU() - cpu0
				requests += r.Backend().(*Backend).Stats().Requests - before.Requests
				if prof != nil {
					pprof.StopCPUProfile()
					prof.Close()
				}
				if v, ok := r.Latest(); !ok || v != 2 {
					b.Fatalf("the reader's latest is %d after the refresh, want 2", v)
				}
				r.Close()
				b.StartTimer()
			}
			b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/op")
			b.ReportMetric(float64(requests)/float64(b.N), "requests/op")
		})
	}
}

// moeCase is a checkpoint of BenchmarkRefreshMoES3: its config and versions 1 and 2.
type moeCase struct {
	name string
	cfg  gen.Config
	srcs [2]string
}

// moeCheckpoints generates (or finds in WEIGHTFS_BENCH_MOE_DIR) the MoE and dense
// checkpoints of store's BenchmarkCommitMoE: the same configurations, so the two packages'
// benchmarks can share the directory.
func moeCheckpoints(b *testing.B) []moeCase {
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
	cases := []moeCase{{name: "dense", cfg: dense}, {name: "moe", cfg: moe}}
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

// setEnvB is Server.SetEnv for a benchmark.
func setEnvB(b *testing.B, s *s3test.Server) {
	b.Setenv("AWS_ACCESS_KEY_ID", s.Access)
	b.Setenv("AWS_SECRET_ACCESS_KEY", s.Secret)
	b.Setenv("AWS_SESSION_TOKEN", "")
	b.Setenv("AWS_REGION", "us-east-1")
	b.Setenv("AWS_ENDPOINT_URL", s.Endpoint())
	b.Setenv("AWS_ENDPOINT_URL_S3", "")
	b.Setenv("AWS_EC2_METADATA_DISABLED", "true")
}

// processCPU is the CPU time this process has used (user and system).
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
