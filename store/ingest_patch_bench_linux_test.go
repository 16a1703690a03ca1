package store

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime/pprof"
	"syscall"
	"testing"
	"time"

	"github.com/weightfs/weightfs/delta"
)

// BenchmarkCommitPatch: the cost of sealing a version from a patch (CommitPatch) against a
// full Commit of the same files, in the same run: a 256 MiB bf16 model in two files of four
// tensors, 1% of the elements changed, with and without the base in memory. It reports the
// process's CPU-seconds of each (steadier than wall time on a loaded machine) and their
// ratios. WFS_PATCH_PROF=FILE writes a CPU profile of the CommitPatch calls alone.
//
//	go test -run '^$' -bench BenchmarkCommitPatch -benchtime 1x ./store/
func BenchmarkCommitPatch(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	const files, perFile, elems = 2, 4, 16 << 20 // 32 MiB tensors
	v1, v2 := map[string][]byte{}, map[string][]byte{}
	for f := range files {
		var t1, t2 []testTensor
		for i := range perFile {
			d := bf16Like(rng, elems)
			name := fmt.Sprintf("layers.%d.weight", f*perFile+i)
			t1 = append(t1, testTensor{name, delta.DTypeBF16, []int64{elems / 4096, 4096}, d})
			t2 = append(t2, testTensor{name, delta.DTypeBF16, []int64{elems / 4096, 4096}, perturb(rng, d, 2, 0.01)})
		}
		p := fmt.Sprintf("model-%05d-of-%05d.safetensors", f+1, files)
		v1[p], v2[p] = safetensorsFile(b, t1...), safetensorsFile(b, t2...)
	}
	v1["config.json"], v2["config.json"] = []byte(`{"step":1}`), []byte(`{"step":2}`)
	var total int64
	for _, c := range v2 {
		total += int64(len(c))
	}
	var prof *os.File
	if p := os.Getenv("WFS_PATCH_PROF"); p != "" {
		var err error
		if prof, err = os.Create(p); err != nil {
			b.Fatal(err)
		}
		defer prof.Close()
	}
	for _, mem := range []int64{0, 1 << 30} {
		b.Run(fmt.Sprintf("base_memory=%d", mem), func(b *testing.B) {
			for range b.N {
				full, _ := newStore(b, Options{BaseMemory: mem})
				in, _ := newStore(b, Options{BaseMemory: mem})
				commitTree(b, full, 1, v1)
				commitTree(b, in, 1, v1)
				dir := writeTree(b, b.TempDir(), v2)
				fullCPU, fullWall := cpuAndWall(func() {
					if _, err := full.Commit(dir, CommitOptions{Version: 2}); err != nil {
						b.Fatal(err)
					}
				})
				var patch bytes.Buffer
				if _, err := full.WritePatch(2, &writerAtBuffer{&patch}); err != nil {
					b.Fatal(err)
				}
				if prof != nil {
					if err := pprof.StartCPUProfile(prof); err != nil {
						b.Fatal(err)
					}
				}
				patchCPU, patchWall := cpuAndWall(func() {
					if _, err := in.CommitPatch(bytes.NewReader(patch.Bytes()), int64(patch.Len()), 2); err != nil {
						b.Fatal(err)
					}
				})
				if prof != nil {
					pprof.StopCPUProfile()
					prof = nil // the first run's only
				}
				b.Logf("model %d MiB, patch %d KiB: Commit %.2f CPU-s %.2f s, CommitPatch %.2f CPU-s %.2f s: %.2fx CPU, %.2fx wall",
					total>>20, patch.Len()>>10, fullCPU, fullWall, patchCPU, patchWall, patchCPU/fullCPU, patchWall/fullWall)
				b.ReportMetric(patchCPU/fullCPU, "cpu-ratio")
				b.ReportMetric(patchWall/fullWall, "wall-ratio")
				b.ReportMetric(patchCPU, "patch-cpu-s")
			}
		})
	}
}

// cpuAndWall runs fn and returns the process's CPU-seconds (user and system) and the wall
// seconds it took.
func cpuAndWall(fn func()) (cpu, wall float64) {
	usage := func() float64 {
		var ru syscall.Rusage
		syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
	}
	c0, t0 := usage(), time.Now()
	fn()
	return usage() - c0, time.Since(t0).Seconds()
}
