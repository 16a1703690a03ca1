package store

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/weightfs/weightfs/internal/logtest"
)

// BenchmarkVerifyTensors is `verify` of a store of two versions of n tiny tensors (version 2
// changes one in a hundred), at 10,000 and 100,000 tensors: figure 11's verify in process,
// without its checkpoints' bytes. Besides the time it reports the CPU, the garbage collector's
// cycles and the heap objects at their peak during Verify (sampled every 20 ms) and after it
// (what the open store keeps): what grows faster than the tensors at 100,000 is the collector
// (docs/benchmarks.md, "Tensor count (figure 11)").
//
//	go test -run XXX -bench VerifyTensors -benchtime 3x ./store/
//
// WEIGHTFS_BENCH_VERIFY_HEAP=DIR writes DIR/verify-N.heap, a heap profile of what the store
// keeps after Verify (go tool pprof -sample_index=inuse_objects), and
// WEIGHTFS_BENCH_VERIFY_CPU=DIR writes DIR/verify-N.cpu, a CPU profile of the Verify calls alone
// (not the setup's commits).
func BenchmarkVerifyTensors(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			// Stores opened and closed here, not by newStore/openStore: their cleanups would
			// keep every store opened alive (and its caches in the heap Verify is measured on)
			// until the benchmark ends.
			quiet := logtest.New(func(string, ...any) {})
			root := filepath.Join(b.TempDir(), "store")
			if err := Init(root); err != nil {
				b.Fatal(err)
			}
			s, err := Open(root, Options{Logger: quiet})
			if err != nil {
				b.Fatal(err)
			}
			for v := uint64(1); v <= 2; v++ {
				commitTree(b, s, v, map[string][]byte{"model.safetensors": tinyTensorFile(b, n, int(v))})
			}
			if err := s.Close(); err != nil {
				b.Fatal(err)
			}
			var cpu time.Duration
			var gcs uint32
			var peak, after uint64
			b.ReportAllocs()
			b.ResetTimer() // the setup's commits count neither in the time nor in the allocations
			for range b.N {
				b.StopTimer()
				r, err := Open(root, Options{Logger: quiet})
				if err != nil {
					b.Fatal(err)
				}
				runtime.GC()
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				gc0, cpu0 := ms.NumGC, processCPU()
				stop, sampled := make(chan struct{}), make(chan uint64)
				go func() { // the peak of heap objects, live or not yet swept
					var most uint64
					var ms runtime.MemStats
					t := time.NewTicker(20 * time.Millisecond)
					defer t.Stop()
					for {
						runtime.ReadMemStats(&ms)
						most = max(most, ms.HeapObjects)
						select {
						case <-stop:
							sampled <- most
							return
						case <-t.C:
						}
					}
				}()
				stopCPU := startCPUProfile(b, os.Getenv("WEIGHTFS_BENCH_VERIFY_CPU"), fmt.Sprintf("verify-%d.cpu", n))
				b.StartTimer()
				rep, err := r.Verify(nil)
				b.StopTimer()
				stopCPU()
				cpu += processCPU() - cpu0
				close(stop)
				peak = max(peak, <-sampled)
				runtime.ReadMemStats(&ms)
				gcs += ms.NumGC - gc0
				if err != nil || len(rep.Damaged) > 0 || len(rep.Unreadable) > 0 {
					b.Fatalf("verify: %v %+v", err, rep)
				}
				runtime.GC()
				runtime.ReadMemStats(&ms)
				after = ms.HeapObjects
				if dir := os.Getenv("WEIGHTFS_BENCH_VERIFY_HEAP"); dir != "" {
					writeHeapProfile(b, filepath.Join(dir, fmt.Sprintf("verify-%d.heap", n)))
				}
				if err := r.Close(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
			b.ReportMetric(cpu.Seconds()/float64(b.N), "cpu-s/op")
			b.ReportMetric(float64(gcs)/float64(b.N), "gcs/op")
			b.ReportMetric(float64(peak), "peak-heap-objects")
			b.ReportMetric(float64(after), "heap-objects-after")
		})
	}
}

func writeHeapProfile(b *testing.B, path string) {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		b.Fatal(err)
	}
}

// startCPUProfile starts a CPU profile into dir/name (dir "": none); the function returned
// stops it. Each call overwrites the file: the last round's profile is kept.
func startCPUProfile(b *testing.B, dir, name string) func() {
	if dir == "" {
		return func() {}
	}
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		b.Fatal(err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		b.Fatal(err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}
}
