package store

import (
	"bytes"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"reflect"
	"runtime/pprof"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/weightfs/weightfs/delta"
)

// BenchmarkCommitPatch: the cost of sealing a version from a patch (CommitPatch) against a
// full Commit of the same files, in the same run: a 256 MiB bf16 model in two files of four
// tensors, 1% of the elements changed at each version, with and without the base in memory.
// Three stores hold v1 and v2 (full: committed whole; ref: v2 by the reference path of
// CommitPatch; fast: by its fast path); the figure is version 3. It reports the process's
// CPU-seconds of each (steadier than wall time on a loaded machine) and the ratios.
// WFS_PATCH_PROF=FILE writes a CPU profile of the first fast CommitPatch alone.
// WFS_PATCH_FILES=1 puts the eight tensors in one file (a trainer's model.safetensors) and
// WFS_PATCH_SPLIT=N makes the fast path's files on N goroutines each (ingest_patch_split.go;
// 1: one pass per file; default: cores / files - 1).
//
//	go test -run '^$' -bench BenchmarkCommitPatch -benchtime 1x ./store/
func BenchmarkCommitPatch(b *testing.B) {
	rng := rand.New(rand.NewPCG(1, 2))
	files, perFile := 2, 4
	const elems = 16 << 20 // 32 MiB tensors
	if os.Getenv("WFS_PATCH_FILES") == "1" {
		files, perFile = 1, 8
	}
	split, _ := strconv.Atoi(os.Getenv("WFS_PATCH_SPLIT"))
	versions := []map[string][]byte{{}, {}, {}}
	for f := range files {
		var ts [3][]testTensor
		for i := range perFile {
			d := bf16Like(rng, elems)
			name := fmt.Sprintf("layers.%d.weight", f*perFile+i)
			for v := range ts {
				ts[v] = append(ts[v], testTensor{name, delta.DTypeBF16, []int64{elems / 4096, 4096}, d})
				d = perturb(rng, d, 2, 0.01)
			}
		}
		p := fmt.Sprintf("model-%05d-of-%05d.safetensors", f+1, files)
		for v := range ts {
			versions[v][p] = safetensorsFile(b, ts[v]...)
		}
	}
	for v := range versions {
		versions[v]["config.json"] = []byte(fmt.Sprintf(`{"step":%d}`, v+1))
	}
	var total int64
	for _, c := range versions[2] {
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
				quiet := slog.New(slog.NewTextHandler(io.Discard, nil)) // the figures stay readable
				full, _ := newStore(b, Options{BaseMemory: mem, Logger: quiet})
				ref, _ := newStore(b, Options{BaseMemory: mem, Logger: quiet})
				fast, _ := newStore(b, Options{BaseMemory: mem, Logger: quiet})
				ref.ingest.patchReference = true
				fast.ingest.patchSplit = split
				var patches [][]byte
				var fullCPU, fullWall float64
				for i, files := range versions {
					dir := writeTree(b, b.TempDir(), files)
					fullCPU, fullWall = cpuAndWall(func() {
						if _, err := full.Commit(dir, CommitOptions{Version: uint64(i + 1)}); err != nil {
							b.Fatal(err)
						}
					})
					var patch bytes.Buffer
					if i > 0 {
						if _, err := full.WritePatch(uint64(i+1), &writerAtBuffer{&patch}); err != nil {
							b.Fatal(err)
						}
					}
					patches = append(patches, patch.Bytes())
				}
				commitTree(b, ref, 1, versions[0])
				commitTree(b, fast, 1, versions[0])
				commit := func(s *Store, v int) (cpu, wall float64) {
					return cpuAndWall(func() {
						if _, err := s.CommitPatch(bytes.NewReader(patches[v-1]), int64(len(patches[v-1])), uint64(v)); err != nil {
							b.Fatal(err)
						}
					})
				}
				commit(ref, 2)
				commit(fast, 2)
				refCPU, refWall := commit(ref, 3)
				if prof != nil {
					if err := pprof.StartCPUProfile(prof); err != nil {
						b.Fatal(err)
					}
				}
				before := fast.ingest.patchFast.Load()
				fastCPU, fastWall := commit(fast, 3)
				if prof != nil {
					pprof.StopCPUProfile()
					prof = nil // the first run's only
				}
				if n := fast.ingest.patchFast.Load() - before; n != int64(files) {
					b.Fatalf("the fast path made %d files of %d", n, files)
				}
				if mf, mr := manifestOf(b, full, 3), manifestOf(b, fast, 3); !reflect.DeepEqual(mf.Files, mr.Files) {
					b.Fatal("the patched version's manifest is not the full commit's")
				}
				b.Logf("model %d MiB, patch %d KiB: Commit %.2f CPU-s %.2f s; CommitPatch reference %.2f CPU-s %.2f s (%.2fx CPU); fast %.2f CPU-s %.2f s (%.2fx CPU, %.2fx wall of Commit; %.2fx CPU of the reference)",
					total>>20, len(patches[2])>>10, fullCPU, fullWall, refCPU, refWall, refCPU/fullCPU,
					fastCPU, fastWall, fastCPU/fullCPU, fastWall/fullWall, fastCPU/refCPU)
				b.ReportMetric(fastCPU/fullCPU, "cpu-ratio")
				b.ReportMetric(fastCPU/refCPU, "cpu-vs-ref")
				b.ReportMetric(fastCPU, "fast-cpu-s")
				b.ReportMetric(refCPU, "ref-cpu-s")
				b.ReportMetric(fullCPU, "commit-cpu-s")
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
