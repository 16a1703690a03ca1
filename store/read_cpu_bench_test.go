package store

import (
	"os"
	"sort"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/weightfs/weightfs/internal/logtest"
)

// BenchmarkKeptStoreRead is figure 4 in process, on a store the bench kept (`go run ./bench
// -only reads -keep`; WEIGHTFS_BENCH_STORE=WORK/model-lr1e-06/store): each iteration opens a
// fresh reader of it (its own cache directory; the copy of the latest version built before
// the measurement, then the kernel's caches dropped when run as root), reads every file of
// the latest version and of the version ten behind it (WEIGHTFS_BENCH_BEHIND) in order, 1 MiB
// at a time through ReadSlices (the mount's path, FUSE left out), and reports the process's
// CPU (user + sys, every goroutine: builders, checks, file copies) per GB read and the delta
// blocks decoded per read. CPU, not time: the machine is shared (docs/benchmarks.md).
func BenchmarkKeptStoreRead(b *testing.B) {
	root := os.Getenv("WEIGHTFS_BENCH_STORE")
	if root == "" {
		b.Skip("WEIGHTFS_BENCH_STORE names no store")
	}
	behind := uint64(10)
	if s := os.Getenv("WEIGHTFS_BENCH_BEHIND"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			b.Fatal(err)
		}
		behind = n
	}
	var cpu = map[string]time.Duration{}
	var bytes = map[string]int64{}
	var decoded int64
	for range b.N {
		opts := Options{ReadOnly: true, Materialize: true, CacheDir: b.TempDir(), Logger: logtest.New(func(string, ...any) {})}
		if os.Getenv("WEIGHTFS_BENCH_NO_FILE_COPIES") != "" {
			opts.FileCopyBytes = -1 // reads of the old version replay, no copy written behind them
		}
		r, err := Open(root, opts)
		if err != nil {
			b.Fatal(err)
		}
		latest, ok := r.Latest()
		if !ok || latest <= behind {
			b.Fatalf("the store's latest version is %d; %d behind it is needed", latest, behind)
		}
		dropCachesIfRoot()
		for _, c := range []struct {
			name string
			v    uint64
		}{{"old", latest - behind}, {"latest", latest}} {
			d0, c0 := r.objects.bufs.decoded.Load(), processCPU()
			bytes[c.name] += readVersionSlices(b, r, c.v)
			r.objects.ra.wait()
			r.files.bg.Wait() // the file copies written behind the reads
			cpu[c.name] += processCPU() - c0
			if c.name == "old" {
				decoded += r.objects.bufs.decoded.Load() - d0
			}
		}
		if err := r.Close(); err != nil {
			b.Fatal(err)
		}
	}
	for name, d := range cpu {
		b.ReportMetric(d.Seconds()/(float64(bytes[name])/1e9), name+"-CPU-s/GB")
	}
	b.ReportMetric(float64(decoded)/float64(b.N), "blocks-decoded/old-read")
}

// readVersionSlices reads every file of version v in order of path, 1 MiB at a time through
// ReadSlices, and returns the bytes read.
func readVersionSlices(b *testing.B, r *Store, v uint64) int64 {
	ver, err := r.versions.sealedVersion(v)
	if err != nil {
		b.Fatal(err)
	}
	paths := make([]string, 0, len(ver.files))
	for p := range ver.files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	buf := make([]byte, 1<<20)
	var total int64
	for _, p := range paths {
		f, err := r.OpenFile(v, p)
		if err != nil {
			b.Fatal(err)
		}
		for off := int64(0); off < f.Size(); {
			_, release, n, err := f.(SliceReader).ReadSlices(buf, off)
			release()
			if n == 0 {
				b.Fatalf("%s of version %d at %d: %v", p, v, off, err)
			}
			off += int64(n)
		}
		total += f.Size()
		f.Close()
	}
	return total
}

// processCPU is the CPU time (user + sys) of this process so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// dropCachesIfRoot empties the kernel's page cache when the process may (root), so that the
// reads find the copy cold as a fresh mount's do.
func dropCachesIfRoot() {
	if os.Geteuid() != 0 {
		return
	}
	syscall.Sync()
	os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0)
}
