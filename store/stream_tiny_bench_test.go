package store

import (
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"runtime/pprof"
	"strconv"
	"testing"
	"time"

	"github.com/weightfs/weightfs/delta"
	"github.com/weightfs/weightfs/internal/logtest"
)

// BenchmarkStreamTinyTensors streams version 2 of a checkpoint of many tiny tensors (20,000
// bf16 tensors of 512 bytes in 8 files by default; WEIGHTFS_BENCH_TINY_TENSORS sets the
// count) into a store holding version 1, base in memory, as BenchmarkStreamMoE does, then
// seals it. Its bytes are ~10 MB, so what it measures is what a version pays per tensor on
// the streaming path and at the seal (issue 29: a MoE's tensors), not per byte: CPU-s and
// allocations per op, divided by the tensors for the cost of one.
// WEIGHTFS_BENCH_TINY_PROFILE=FILE writes a CPU profile of each version 2 (FILE-I).
func BenchmarkStreamTinyTensors(b *testing.B) {
	tensors := 20000
	if s := os.Getenv("WEIGHTFS_BENCH_TINY_TENSORS"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil {
			b.Fatal(err)
		}
		tensors = n
	}
	const shards, elems = 8, 256
	rng := rand.New(rand.NewPCG(7, 8))
	var v1, v2 []streamBenchFile
	for f := range shards {
		var t1, t2 []testTensor
		for i := f; i < tensors; i += shards {
			name := fmt.Sprintf("model.layers.%d.mlp.experts.%d.up_proj.weight", i/384, i%384)
			data := bf16Like(rng, elems)
			t1 = append(t1, testTensor{name, delta.DTypeBF16, []int64{elems}, data})
			t2 = append(t2, testTensor{name, delta.DTypeBF16, []int64{elems}, perturb(rng, data, 2, 0.02)})
		}
		p := fmt.Sprintf("model-%05d-of-%05d.safetensors", f+1, shards)
		v1 = append(v1, streamBenchFile{p, safetensorsFile(b, t1...)})
		v2 = append(v2, streamBenchFile{p, safetensorsFile(b, t2...)})
	}
	b.ReportAllocs()
	var sealCPU, cpu time.Duration
	for i := range b.N {
		b.StopTimer()
		s, _ := newStore(b, Options{BaseMemory: 1 << 30, Logger: logtest.New(func(string, ...any) {})})
		w, err := s.NewVersion(1)
		if err != nil {
			b.Fatal(err)
		}
		for _, f := range v1 {
			streamBenchOne(b, w, f.path, f.data, 1<<20)
		}
		if _, err := w.Seal(); err != nil {
			b.Fatal(err)
		}
		s.objects.wait() // version 1's metas, behind its seal
		runtime.GC()
		if p := os.Getenv("WEIGHTFS_BENCH_TINY_PROFILE"); p != "" {
			f, err := os.Create(fmt.Sprintf("%s-%d", p, i))
			if err != nil {
				b.Fatal(err)
			}
			if err := pprof.StartCPUProfile(f); err != nil {
				b.Fatal(err)
			}
			defer f.Close()
		}
		cpu0 := processCPU()
		b.StartTimer()
		w, err = s.NewVersion(2)
		if err != nil {
			b.Fatal(err)
		}
		w.MaterializeInBackground()
		for _, f := range v2 {
			streamBenchOne(b, w, f.path, f.data, 1<<20)
		}
		cpu1 := processCPU()
		if _, err := w.Seal(); err != nil {
			b.Fatal(err)
		}
		s.objects.wait() // the metas written behind the seal: the daemon's CPU to idle
		b.StopTimer()
		cpu2 := processCPU()
		pprof.StopCPUProfile()
		sealCPU += cpu2 - cpu1
		cpu += cpu2 - cpu0
		s.mat.ensure()
		s.Close()
		b.StartTimer()
	}
	n := float64(b.N)
	b.ReportMetric(cpu.Seconds()/n, "cpu-s/op")
	b.ReportMetric(sealCPU.Seconds()/n, "seal-cpu-s/op")
	b.ReportMetric(cpu.Seconds()*1e6/n/float64(tensors), "cpu-us/tensor")
}
